/**
 * How busy the machine is with work that is not ours: the benches share a small machine, and a
 * figure taken while something else runs measures that too. They record it, and can wait for it
 * to stop first.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { machineCpuSeconds } from '../../harness/proc.ts';

/**
 * CPU used by other processes over `windowMs`, in % of one core (everything the machine ran in
 * processes minus this process); undefined when /proc/stat cannot be read.
 */
export async function otherCpuPct(windowMs: number): Promise<number | undefined> {
  const a = machineCpuSeconds();
  const ours = process.cpuUsage();
  await sleep(windowMs);
  const b = machineCpuSeconds();
  const d = process.cpuUsage(ours);
  if (a === undefined || b === undefined) return undefined;
  return Math.max(0, (b.tasks - a.tasks - (d.user + d.system) / 1e6) / (windowMs / 1000)) * 100;
}

export interface QuietOptions {
  /** Quiet is other processes below this share of one core, in %. */
  belowPct: number;
  /** ...for this many 2-second windows in a row (a lull between two compiler runs is not quiet). */
  windows: number;
  log: (line: string) => void;
}

/**
 * Waits up to `seconds` for the machine to be quiet; resolves with the last reading of other
 * processes' CPU (% of one core), quiet or not.
 */
export async function waitQuiet(
  seconds: number,
  options: QuietOptions,
): Promise<number | undefined> {
  const deadline = performance.now() + seconds * 1000;
  let quietWindows = 0;
  for (;;) {
    const other = await otherCpuPct(2000);
    if (other === undefined) return undefined;
    quietWindows = other < options.belowPct ? quietWindows + 1 : 0;
    if (quietWindows >= options.windows) return other;
    if (performance.now() >= deadline) {
      options.log(`still ${Math.round(other)} % of a core busy elsewhere; measuring anyway`);
      return other;
    }
    if (quietWindows === 0)
      options.log(
        `waiting for a quiet machine: other processes use ${Math.round(other)} % of a core`,
      );
  }
}
