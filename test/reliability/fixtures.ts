/**
 * Set-ups shared by the reliability tests: a pool document, a helper script started as its own
 * process, and the sidecar's view of one endpoint (a sidecar on a pool file is
 * harness/pool-file.ts's `sidecarOn`, which the soak uses too).
 */
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import type { RunningProcess } from '../../harness/processes.ts';
import { debugBackends, type DebugEndpoint } from '../helpers.ts';

/** A pool document; `backends` are YAML flow mappings, `extra` more lines of `spec`. */
export function poolYaml(backends: string[], extra: string[] = []): string {
  return [
    'apiVersion: switchyard.dev/v1alpha1',
    'kind: InferencePool',
    'metadata: {name: reliability}',
    'spec:',
    '  backends:',
    ...backends.map((b) => `  - ${b}`),
    ...extra.map((line) => `  ${line}`),
    '',
  ].join('\n');
}

/** The endpoint of `backend` as the sidecar sees it. */
export async function endpointOf(
  sidecar: RunningProcess,
  backend: string,
): Promise<DebugEndpoint | undefined> {
  return (await debugBackends(sidecar)).endpoints.find((e) => e.backend === backend);
}

export interface ScriptProcess {
  pid: number;
  url: string;
  /** Resolves with the first output line matching `pattern`. */
  line(pattern: RegExp): Promise<string>;
  stop(): Promise<void>;
}

/** Starts `node <script> <args>` and waits for the URL line it prints first. */
export function startScript(script: string, args: string[] = []): Promise<ScriptProcess> {
  const child = spawn(process.execPath, [script, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  const lines: string[] = [];
  const waiters: { pattern: RegExp; resolve: (line: string) => void }[] = [];
  createInterface({ input: child.stdout }).on('line', (line) => {
    lines.push(line);
    for (const w of [...waiters]) {
      if (!w.pattern.test(line)) continue;
      waiters.splice(waiters.indexOf(w), 1);
      w.resolve(line);
    }
  });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const line = (pattern: RegExp): Promise<string> => {
    const seen = lines.find((l) => pattern.test(l));
    if (seen !== undefined) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      waiters.push({ pattern, resolve });
      void exited.then(() => reject(new Error(`${script} exited before ${pattern}: ${stderr}`)));
    });
  };
  return line(/^http:\/\/\S+$/).then((url) => ({
    pid: child.pid!,
    url,
    line,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
  }));
}
