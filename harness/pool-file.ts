/**
 * A sidecar on a pool file, as the integration and reliability tests and the soak start one: the
 * pool's YAML written to a scratch directory, the sidecar started on it, both removed by `stop`.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startSidecar, type RunningProcess } from './processes.ts';

/** A scratch directory removed by `cleanup`. */
export async function scratchDir(): Promise<{ dir: string; cleanup: () => Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), 'switchyard-test-'));
  return { dir, cleanup: () => rm(dir, { recursive: true, force: true }) };
}

/** A Balance pool of `urls` (base URLs without /v1), backends named a, b, c... unless `names`. */
export function balancePool(urls: string[], extra = '', names?: string[]): string {
  return [
    'apiVersion: switchyard.dev/v1alpha1',
    'kind: InferencePool',
    'metadata: {name: test}',
    'spec:',
    '  mode: Balance',
    '  backends:',
    ...urls.map((u, i) => `  - {name: ${names?.[i] ?? String.fromCharCode(97 + i)}, url: ${u}/v1}`),
    extra,
    '',
  ].join('\n');
}

export interface SidecarOnPool {
  sidecar: RunningProcess;
  poolFile: string;
  stop: () => Promise<void>;
}

/** Writes `yaml` to a pool file and starts a sidecar on it. */
export async function sidecarOn(
  yaml: string,
  flags: string[] = [],
  env: Record<string, string> = {},
): Promise<SidecarOnPool> {
  const { dir, cleanup } = await scratchDir();
  const poolFile = join(dir, 'pool.yaml');
  await writeFile(poolFile, yaml);
  try {
    const sidecar = await startSidecar(poolFile, flags, env);
    return {
      sidecar,
      poolFile,
      async stop() {
        await sidecar.stop();
        await cleanup();
      },
    };
  } catch (err) {
    await cleanup();
    throw err;
  }
}
