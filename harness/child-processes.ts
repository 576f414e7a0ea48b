/**
 * The one record of the child processes a test, benchmark or the demo started. Each is stopped
 * by its PID (SIGTERM, then SIGKILL after a grace period), and every one still running is
 * SIGKILLed when this process exits, so a crashed test or an interrupted run leaves nothing
 * behind. Only `exit` is hooked: signals keep their default (or the caller's own) handling.
 */
import type { ChildProcess } from 'node:child_process';

export interface TrackedChild {
  /** Resolves with the exit code (or signal) when the process ends. */
  exited: Promise<number | string>;
  /** Its stderr so far, with whatever `append` added (the last 100-200 kB, for failure messages). */
  output: () => string;
  /** Adds text (e.g. the stdout lines a caller reads itself) to `output()`. */
  append: (text: string) => void;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves when it is gone. */
  stop: (graceMs?: number) => Promise<number | string>;
  /** SIGKILL at once; resolves when it is gone. */
  kill: () => Promise<number | string>;
}

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

const running = (child: ChildProcess): boolean =>
  child.exitCode === null && child.signalCode === null;

/** Records `child` until it exits, and keeps its stderr. */
export function trackChild(child: ChildProcess): TrackedChild {
  installExitHook();
  live.add(child);
  let log = '';
  const append = (text: string): void => {
    log += text;
    if (log.length > 200_000) log = log.slice(-100_000);
  };
  child.stderr?.setEncoding('utf8');
  child.stderr?.on('data', append);
  const exited = new Promise<number | string>((resolve) => {
    child.once('exit', (code, signal) => {
      live.delete(child);
      resolve(code ?? signal ?? 'unknown');
    });
  });
  const stop = async (graceMs = 5_000): Promise<number | string> => {
    if (!running(child)) return exited;
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
    const result = await exited;
    clearTimeout(timer);
    return result;
  };
  const kill = (): Promise<number | string> => {
    if (running(child)) child.kill('SIGKILL');
    return exited;
  };
  return { exited, output: () => log, append, stop, kill };
}
