/**
 * What the soak samples every few seconds: the sidecar's RSS and heap (for their slope: a leak
 * shows as a steady climb), its event-loop delay from its own /metrics (prom-client's
 * monitorEventLoopDelay histogram, which resets at every scrape, so each sample is the
 * distribution over that interval), and who used the CPU.
 */
import { readdirSync } from 'node:fs';
import { cpuSeconds, machineCpuSeconds, rssMb } from '../../harness/proc.ts';
import type { RunningProcess } from '../../harness/processes.ts';
import type { Flags } from './flags.ts';
import type { Workload } from './workload.ts';

/** Rounds to `digits` decimals. */
export const round = (x: number, digits = 2): number => Math.round(x * 10 ** digits) / 10 ** digits;

/** One gauge (summed over its series) from Prometheus text. */
export function gauge(text: string, name: string): number {
  let sum = 0;
  let found = false;
  for (const m of text.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'gm'))) {
    sum += Number(m[1]);
    found = true;
  }
  return found ? sum : NaN;
}

export interface Sample {
  /** Minutes since the load started. */
  minute: number;
  rssMb: number;
  heapUsedMb: number;
  /** prom-client's readings (ms): the delay histogram includes its 10 ms sampling interval. */
  loopP50Ms: number;
  loopP99Ms: number;
  loopMaxMs: number;
  inFlight: number;
  clientInFlight: number;
  fds: number;
  sidecarCpuPct: number;
  /** The simulators and this load generator. */
  harnessCpuPct: number;
  /** Everything else on the machine (other work disturbs the delay figures). */
  otherCpuPct: number;
}

export /** prom-client samples the loop every 10 ms and records the whole interval: subtract it. */
const LOOP_RESOLUTION_MS = 10;

export interface Sampling {
  samples: Sample[];
  /** `performance.now()` when the load started (minute 0 of the samples). */
  loadStarted: number;
  stop: () => void;
}

/** Starts sampling every `--sample-every`, with a progress line each time. */
export async function startSampling(
  flags: Flags,
  sims: readonly RunningProcess[],
  sidecar: RunningProcess,
  workload: Workload,
): Promise<Sampling> {
  const { pid } = sidecar;
  const adminUrl = sidecar.adminUrl!;
  const samples: Sample[] = [];
  const harnessCpu = (): number =>
    sims.reduce((n, sim) => n + (cpuSeconds(sim.pid) ?? 0), 0) +
    (process.cpuUsage().user + process.cpuUsage().system) / 1e6;
  const readCpu = () => {
    const machine = machineCpuSeconds();
    return {
      at: performance.now(),
      sidecar: cpuSeconds(pid) ?? 0,
      harness: harnessCpu(),
      // With irq: loopback TCP is processed in softirq, which /proc/stat counts apart from
      // tasks while the processes' own stime includes much of it.
      machine: (machine?.tasks ?? 0) + (machine?.irq ?? 0),
    };
  };
  let lastCpu = readCpu();
  const loadStarted = performance.now();
  const sample = async (): Promise<void> => {
    const text = await (await fetch(`${adminUrl}/metrics`)).text();
    const cpu = readCpu();
    const now = cpu.at;
    const wall = (cpu.at - lastCpu.at) / 1000;
    const before = lastCpu;
    const share = (key: 'sidecar' | 'harness' | 'machine'): number =>
      (cpu[key] - before[key]) / wall;
    lastCpu = cpu;
    samples.push({
      minute: (now - loadStarted) / 60_000,
      rssMb: rssMb(pid) ?? NaN,
      heapUsedMb: gauge(text, 'switchyard_process_nodejs_heap_size_used_bytes') / 2 ** 20,
      loopP50Ms: gauge(text, 'switchyard_process_nodejs_eventloop_lag_p50_seconds') * 1000,
      loopP99Ms: gauge(text, 'switchyard_process_nodejs_eventloop_lag_p99_seconds') * 1000,
      loopMaxMs: gauge(text, 'switchyard_process_nodejs_eventloop_lag_max_seconds') * 1000,
      inFlight: gauge(text, 'switchyard_inflight'),
      clientInFlight: workload.clientInFlight,
      fds: readdirSync(`/proc/${pid}/fd`).length,
      sidecarCpuPct: round(share('sidecar') * 100, 1),
      harnessCpuPct: round(share('harness') * 100, 1),
      otherCpuPct: round((share('machine') - share('sidecar') - share('harness')) * 100, 1),
    });
  };
  await sample(); // resets the loop histogram: the first interval starts with the load
  samples.length = 0;
  const { counts } = workload;
  const timer = setInterval(() => {
    void sample().then(() => {
      const s = samples.at(-1)!;
      process.stderr.write(
        `  ${s.minute.toFixed(1)} min: rss ${s.rssMb.toFixed(0)} MB, heap ${s.heapUsedMb.toFixed(0)} MB, loop p99 ${s.loopP99Ms.toFixed(1)} ms, in flight ${s.inFlight}, ${counts.completed} ok, ${counts.aborted} aborted, ${counts.failed} failed\n`,
      );
    });
  }, flags.sampleEveryMs);
  return { samples, loadStarted, stop: () => clearInterval(timer) };
}
