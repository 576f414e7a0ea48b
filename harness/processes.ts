import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { trackChild } from './child-processes.ts';

/**
 * Starts `switchyard` subcommands as child processes, the way users run them, and stops them by
 * PID. Used by the demo, the integration tests and the benchmarks. Every child is also killed when
 * this process exits (child-processes.ts), so a crashed test or an interrupted demo leaves nothing
 * behind.
 */

export const SWITCHYARD_BIN = fileURLToPath(new URL('../bin/switchyard.js', import.meta.url));

export interface RunningProcess {
  pid: number;
  /** The URL the process announced (the sim's URL line, the sidecar's proxy URL). */
  url: string;
  /** The sidecar's admin URL, when it has one. */
  adminUrl?: string | undefined;
  /** Everything it wrote to stdout and stderr so far (for failure messages). */
  output(): string;
  /** Resolves with the exit code (or signal) when the process ends. */
  exited: Promise<number | string>;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves when it is gone. */
  stop(graceMs?: number): Promise<number | string>;
  /** SIGKILL at once. */
  kill(): Promise<number | string>;
}

export interface StartOptions {
  /** Extra environment variables. */
  env?: Record<string, string>;
  /** How long to wait for the URL announcement. */
  timeoutMs?: number;
  /** Node flags for the child (e.g. --cpu-prof). */
  nodeArgs?: string[];
  /** Every line it writes to stdout, as it comes (a bench counting log lines by message). */
  onLine?: (line: string) => void;
}

type Announcement = { url: string; adminUrl?: string | undefined };

/** Recognises the line a subcommand prints once it is ready. */
function announcement(line: string): Announcement | undefined {
  if (/^https?:\/\/\S+$/.test(line.trim())) return { url: line.trim() };
  if (!line.startsWith('{')) return undefined;
  try {
    const entry = JSON.parse(line) as { msg?: string; url?: string; admin?: string };
    if (
      (entry.msg === 'sidecar listening' || entry.msg === 'controller listening') &&
      typeof entry.url === 'string'
    )
      return { url: entry.url, adminUrl: entry.admin };
  } catch {
    // not a log line
  }
  return undefined;
}

export function startSwitchyard(
  args: string[],
  options: StartOptions = {},
): Promise<RunningProcess> {
  return startNodeScript(SWITCHYARD_BIN, args, options, `switchyard ${args.join(' ')}`);
}

/**
 * Any Node script of this repository (a benchmark's helper process) started like `startSwitchyard`:
 * ready once it prints its URL on a line of its own.
 */
export function startNodeScript(
  script: string,
  args: string[],
  options: StartOptions = {},
  label = `${script} ${args.join(' ')}`,
): Promise<RunningProcess> {
  const child = spawn(process.execPath, [...(options.nodeArgs ?? []), script, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...options.env },
  });
  const { exited, output, append, stop, kill } = trackChild(child);
  return new Promise((resolve, reject) => {
    let done = false;
    const timer = setTimeout(() => {
      if (done) return;
      done = true;
      void kill();
      reject(
        new Error(`${label} did not start within ${options.timeoutMs ?? 15_000} ms:\n${output()}`),
      );
    }, options.timeoutMs ?? 15_000);
    const lines = createInterface({ input: child.stdout });
    lines.on('line', (line) => {
      append(line + '\n');
      options.onLine?.(line);
      if (done) return;
      const found = announcement(line);
      if (found === undefined) return;
      done = true;
      clearTimeout(timer);
      resolve({
        pid: child.pid!,
        url: found.url,
        adminUrl: found.adminUrl,
        output,
        exited,
        stop,
        kill,
      });
    });
    void exited.then((code) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      reject(new Error(`${label} exited (${code}) before it was ready:\n${output()}`));
    });
  });
}

/** Fast simulator defaults for tests and the soak: short prefill/decode so a stream takes tens of ms. */
export const FAST_SIM = [
  '--prefill-ms-per-token',
  '0.01',
  '--decode-ms-per-token',
  '2',
  '--slots',
  '8',
];

/** `switchyard sim` on a free port with `FAST_SIM` (later `flags` override it). */
export function startSim(name: string, flags: string[] = []): Promise<RunningProcess> {
  return startSwitchyard(['sim', '--port', '0', '--name', name, ...FAST_SIM, ...flags]);
}

/** `switchyard sidecar` on `poolFile`, proxy and admin on free loopback ports, logging at info. */
export function startSidecar(
  poolFile: string,
  flags: string[] = [],
  env: Record<string, string> = {},
): Promise<RunningProcess> {
  return startSwitchyard(
    [
      'sidecar',
      '--pool-file',
      poolFile,
      '--listen',
      '127.0.0.1:0',
      '--admin',
      '127.0.0.1:0',
      '--log-level',
      'info',
      ...flags,
    ],
    { env },
  );
}

/** A sidecar fed by the controller's snapshot stream (Kubernetes mode), as the tests start one. */
export interface ControllerSidecar {
  controllerUrl: string;
  /** The pool it follows, or several (one `--pool` each, in order: a pod's label, then annotation). */
  pool: string | readonly string[];
  namespace: string;
  tokenFile: string;
  caFile?: string | undefined;
  /** Where it keeps its last snapshot; none when undefined. */
  cacheFile?: string | undefined;
  sidecarId: string;
  listen?: string;
  admin?: string;
  /** `--report-every`, e.g. `1s`; the sidecar's default (10 s) when undefined. */
  reportEvery?: string | undefined;
}

/** The arguments of `switchyard sidecar` fed by the controller (after the subcommand name). */
export function controllerSidecarArgs(o: ControllerSidecar): string[] {
  return [
    'sidecar',
    '--controller',
    o.controllerUrl,
    ...(typeof o.pool === 'string' ? [o.pool] : o.pool).flatMap((pool) => ['--pool', pool]),
    '--namespace',
    o.namespace,
    '--token-file',
    o.tokenFile,
    ...(o.caFile === undefined ? [] : ['--ca-file', o.caFile]),
    ...(o.cacheFile === undefined ? [] : ['--cache-file', o.cacheFile]),
    '--sidecar-id',
    o.sidecarId,
    '--listen',
    o.listen ?? '127.0.0.1:0',
    '--admin',
    o.admin ?? '127.0.0.1:0',
    ...(o.reportEvery === undefined ? [] : ['--report-every', o.reportEvery]),
  ];
}

/** Stops every given process; never throws. */
export async function stopAll(processes: readonly (RunningProcess | undefined)[]): Promise<void> {
  await Promise.all(
    processes.map(async (p) => {
      await p?.stop().catch(() => undefined);
    }),
  );
}
