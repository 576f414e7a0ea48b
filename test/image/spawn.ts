import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';

export interface Spawned {
  /** The first stdout line that matched. */
  line: string;
  stop(): Promise<void>;
}

/** Starts a process and waits for a stdout line matching `ready`; stopped by PID. */
export function spawnAndWait(
  command: string,
  args: string[],
  ready: RegExp,
  cwd: string,
  timeoutMs = 15_000,
): Promise<Spawned> {
  const child = spawn(command, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = async (): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    await exited;
  };
  let output = '';
  child.stderr.on('data', (c: Buffer) => (output += c.toString()));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      void stop();
      reject(new Error(`${args.join(' ')} was not ready within ${timeoutMs} ms:\n${output}`));
    }, timeoutMs);
    createInterface({ input: child.stdout }).on('line', (line) => {
      output += line + '\n';
      if (!ready.test(line)) return;
      clearTimeout(timer);
      resolve({ line: line.trim(), stop });
    });
    void exited.then(() => {
      clearTimeout(timer);
      reject(new Error(`${args.join(' ')} exited before it was ready:\n${output}`));
    });
  });
}
