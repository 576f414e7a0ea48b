/**
 * The chart tests' tools, built once from the Go module proxy by the scripts in scripts/ and
 * cached under ~/.cache/switchyard (each script prints the binary's path as its last line).
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { runBuildScript } from '../../harness/build-script.ts';

const run = promisify(execFile);
export const ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const CHART = join(ROOT, 'charts/switchyard');

/** Runs a build script (a no-op once built) and returns the path it prints last. */
export function buildTool(script: string, progressPrefix: string): Promise<string> {
  return runBuildScript('bash', [join(ROOT, script)], progressPrefix);
}

export const buildHelm = (): Promise<string> => buildTool('scripts/helm/build.sh', '[helm-build]');
export const buildKubeScore = (): Promise<string> =>
  buildTool('scripts/kube-score/build.sh', '[kube-score-build]');

/** helm with its config, cache and data in a temp dir of its own, never the user's. */
export interface Helm {
  path: string;
  run(args: string[], env?: Record<string, string>): Promise<string>;
  /** Removes the temp dir. */
  dispose(): void;
}

export async function helm(): Promise<Helm> {
  const path = await buildHelm();
  const home = mkdtempSync(join(tmpdir(), 'switchyard-helm-'));
  return {
    path,
    async run(args, env = {}) {
      try {
        const { stdout } = await run(path, args, {
          env: {
            ...process.env,
            HELM_CONFIG_HOME: join(home, 'config'),
            HELM_CACHE_HOME: join(home, 'cache'),
            HELM_DATA_HOME: join(home, 'data'),
            ...env,
          },
          maxBuffer: 64 * 1024 * 1024,
        });
        return stdout;
      } catch (error) {
        const e = error as { stderr?: string; stdout?: string; message: string };
        throw new Error(`helm ${args.join(' ')} failed: ${e.stderr || e.stdout || e.message}`, {
          cause: error,
        });
      }
    },
    dispose: () => rmSync(home, { recursive: true, force: true }),
  };
}
