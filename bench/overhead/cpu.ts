/**
 * Who used the CPU during a measurement: the bench client, the proxy under test, the backend,
 * the kernel's softirq work and everything else on the machine. A cell during which other
 * processes used much of a core is noisy: the steps re-run it or say so.
 */
import { cpuSeconds, machineCpuSeconds } from '../../harness/proc.ts';
import type { ClosedResult } from './load.ts';
import type { ClosedRun, CpuShare } from './report.ts';

/** Other processes used more than this share of a core during a cell: its figures are suspect. */
export const NOISY_OTHER_PCT = 25;
export const isNoisy = (cell: { cpu: CpuShare } | undefined): boolean =>
  cell !== undefined && cell.cpu.other > NOISY_OTHER_PCT;

/** A measured peer: its base URL and the PID whose CPU and RSS we read (none for direct). */
export interface Target {
  name: string;
  url: string;
  pid: number | undefined;
  stop?: () => Promise<unknown>;
}

export interface CpuMark {
  client: NodeJS.CpuUsage;
  target: number | undefined;
  backend: number | undefined;
  machine: { tasks: number; irq: number } | undefined;
  at: bigint;
}

export function cpuMark(target: Target, backendPid: number): CpuMark {
  return {
    client: process.cpuUsage(),
    target: target.pid === undefined ? undefined : cpuSeconds(target.pid),
    backend: cpuSeconds(backendPid),
    machine: machineCpuSeconds(),
    at: process.hrtime.bigint(),
  };
}

export function cpuShare(from: CpuMark, target: Target, backendPid: number): CpuShare {
  const to = cpuMark(target, backendPid);
  const wall = Number(to.at - from.at) / 1e9;
  const pct = (s: number | undefined): number | undefined =>
    s === undefined ? undefined : Math.round((s / wall) * 1000) / 10;
  const diff = process.cpuUsage(from.client);
  const client = (diff.user + diff.system) / 1e6;
  const proxy =
    to.target !== undefined && from.target !== undefined ? to.target - from.target : undefined;
  const backend =
    to.backend !== undefined && from.backend !== undefined ? to.backend - from.backend : 0;
  const tasks =
    to.machine !== undefined && from.machine !== undefined
      ? to.machine.tasks - from.machine.tasks
      : undefined;
  const irq =
    to.machine !== undefined && from.machine !== undefined
      ? to.machine.irq - from.machine.irq
      : undefined;
  const other =
    tasks === undefined ? undefined : Math.max(0, tasks - client - (proxy ?? 0) - backend);
  return {
    client: pct(client) ?? 0,
    target: pct(proxy),
    backend: pct(backend) ?? 0,
    kernelIrq: pct(irq) ?? 0,
    other: pct(other) ?? 0,
  };
}

/** Adds the CPU shares and the proxy's CPU cost per request to a closed-loop result. */
export function withCpu(run: ClosedResult, cpu: CpuShare): ClosedRun {
  const proxyCpuUsPerRequest =
    cpu.target === undefined || run.completed === 0
      ? undefined
      : Math.round(((cpu.target / 100) * run.seconds * 1e6) / run.completed);
  return { ...run, cpu, proxyCpuUsPerRequest };
}
