import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

/**
 * Starts `switchyard` subcommands as child processes, the way users run them, and stops them by
 * PID. Used by the demo, the integration tests and the benchmarks. Every child is also killed when
 * this process exits, so a crashed test or an interrupted demo leaves nothing behind.
 */

export const SWITCHYARD_BIN = fileURLToPath(new URL('../bin/switchyard.js', import.meta.url));

const live = new Set<ChildProcess>();
let exitHookInstalled = false;

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.once('exit', () => {
    for (const child of live) {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
  });
}

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
  installExitHook();
  const child = spawn(process.execPath, [...(options.nodeArgs ?? []), SWITCHYARD_BIN, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...options.env },
  });
  live.add(child);
  let log = '';
  const keep = (text: string): void => {
    log += text;
    if (log.length > 200_000) log = log.slice(-100_000);
  };
  const exited = new Promise<number | string>((resolve) => {
    child.once('exit', (code, signal) => {
      live.delete(child);
      resolve(code ?? signal ?? 'unknown');
    });
  });
  const stop = async (graceMs = 5_000): Promise<number | string> => {
    if (child.exitCode !== null || child.signalCode !== null) return exited;
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
    const result = await exited;
    clearTimeout(timer);
    return result;
  };
  const kill = (): Promise<number | string> => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    return exited;
  };
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', keep);
  return new Promise((resolve, reject) => {
    let done = false;
    const timer = setTimeout(() => {
      if (done) return;
      done = true;
      void kill();
      reject(
        new Error(
          `switchyard ${args.join(' ')} did not start within ${options.timeoutMs ?? 15_000} ms:\n${log}`,
        ),
      );
    }, options.timeoutMs ?? 15_000);
    const lines = createInterface({ input: child.stdout });
    lines.on('line', (line) => {
      keep(line + '\n');
      if (done) return;
      const found = announcement(line);
      if (found === undefined) return;
      done = true;
      clearTimeout(timer);
      resolve({
        pid: child.pid!,
        url: found.url,
        adminUrl: found.adminUrl,
        output: () => log,
        exited,
        stop,
        kill,
      });
    });
    void exited.then((code) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      reject(
        new Error(`switchyard ${args.join(' ')} exited (${code}) before it was ready:\n${log}`),
      );
    });
  });
}

/** Stops every given process; never throws. */
export async function stopAll(processes: readonly (RunningProcess | undefined)[]): Promise<void> {
  await Promise.all(
    processes.map(async (p) => {
      await p?.stop().catch(() => undefined);
    }),
  );
}
