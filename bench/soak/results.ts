/**
 * The soak's results: slopes of RSS and heap (all samples, and after the warm-up), event-loop
 * delay, client latency, CPU shares, breaker openings and the state after the load, written to
 * bench/results/soak.json and summed up on stdout.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { dirname } from 'node:path';
import { gitCommit } from '../common/repo.ts';
import { percentile } from '../routing/metrics.ts';
import type { Flags } from './flags.ts';
import { LOOP_RESOLUTION_MS, round, type Sample } from './samples.ts';
import type { AfterLoad, BreakerOpenings } from './settle.ts';
import type { Workload } from './workload.ts';

/** Least-squares slope of y over x. */
function slope(points: readonly { x: number; y: number }[]): number {
  const n = points.length;
  if (n < 2) return NaN;
  const mx = points.reduce((s, p) => s + p.x, 0) / n;
  const my = points.reduce((s, p) => s + p.y, 0) / n;
  const sxy = points.reduce((s, p) => s + (p.x - mx) * (p.y - my), 0);
  const sxx = points.reduce((s, p) => s + (p.x - mx) ** 2, 0);
  return sxx === 0 ? NaN : sxy / sxx;
}

/** Nearest-rank quantile (q from 0 to 1) of unsorted values; NaN for none. */
const quantile = (values: readonly number[], q: number): number =>
  percentile(
    [...values].sort((a, b) => a - b),
    q * 100,
  );

export type SoakResults = ReturnType<typeof assembleResults>;

export function assembleResults(
  flags: Flags,
  workload: Workload,
  samples: Sample[],
  loadMs: number,
  after: AfterLoad,
  breakerOpenings: BreakerOpenings,
) {
  const { counts, failures, e2eMs } = workload;
  const { byReason: breakers, first: firstOpenings } = breakerOpenings;
  const warm = samples.filter((s) => s.minute * 60_000 >= flags.warmupMs);
  const series = (list: Sample[], key: 'rssMb' | 'heapUsedMb') =>
    round(slope(list.map((s) => ({ x: s.minute, y: s[key] }))), 3);
  const lag = (key: 'loopP50Ms' | 'loopP99Ms') =>
    samples.map((s) => Math.max(0, s[key] - LOOP_RESOLUTION_MS));
  const commit = gitCommit();
  const results = {
    generatedAt: new Date().toISOString(),
    command: `npm run bench:soak -- ${process.argv.slice(2).join(' ')}`.trim(),
    commit,
    machine: { cpus: os.cpus().length, model: os.cpus()[0]?.model, node: process.version },
    settings: { ...flags, out: undefined },
    durationSeconds: round(loadMs / 1000, 1),
    requests: {
      ...counts,
      achievedRate: round(counts.offered / (loadMs / 1000), 1),
      failures,
    },
    rss: {
      startMb: round(samples[0]?.rssMb ?? NaN, 1),
      endMb: round(samples.at(-1)?.rssMb ?? NaN, 1),
      maxMb: round(Math.max(...samples.map((s) => s.rssMb)), 1),
      slopeMbPerMin: series(samples, 'rssMb'),
      slopeAfterWarmupMbPerMin: series(warm, 'rssMb'),
    },
    heapUsed: {
      startMb: round(samples[0]?.heapUsedMb ?? NaN, 1),
      endMb: round(samples.at(-1)?.heapUsedMb ?? NaN, 1),
      slopeMbPerMin: series(samples, 'heapUsedMb'),
      slopeAfterWarmupMbPerMin: series(warm, 'heapUsedMb'),
    },
    eventLoopDelayMs: {
      note: `per sampling interval, above prom-client's ${LOOP_RESOLUTION_MS} ms resolution`,
      p50: round(quantile(lag('loopP50Ms'), 0.5), 3),
      p99: round(quantile(lag('loopP99Ms'), 0.5), 3),
      worstIntervalP99: round(Math.max(...lag('loopP99Ms')), 3),
      max: round(Math.max(...samples.map((s) => s.loopMaxMs - LOOP_RESOLUTION_MS)), 3),
    },
    clientE2eMs: {
      p50: round(quantile(e2eMs, 0.5), 1),
      p99: round(quantile(e2eMs, 0.99), 1),
      note: 'whole streams (one in ten sampled), the simulator decoding 2 ms per token',
    },
    cpu: {
      note: 'percent of one core, median over the samples',
      sidecar: quantile(
        samples.map((s) => s.sidecarCpuPct),
        0.5,
      ),
      simulatorsAndLoad: quantile(
        samples.map((s) => s.harnessCpuPct),
        0.5,
      ),
      otherWorkOnTheMachine: quantile(
        samples.map((s) => s.otherCpuPct),
        0.5,
      ),
    },
    breakerOpenings: { byReason: breakers, first: firstOpenings },
    after,
    samples: samples.map((s) => ({
      ...s,
      minute: round(s.minute, 3),
      rssMb: round(s.rssMb, 1),
      heapUsedMb: round(s.heapUsedMb, 1),
      loopP50Ms: round(s.loopP50Ms, 3),
      loopP99Ms: round(s.loopP99Ms, 3),
      loopMaxMs: round(s.loopMaxMs, 3),
    })),
  };
  return results;
}

/** Writes the results JSON and prints the summary. */
export function writeResults(flags: Flags, results: SoakResults): void {
  mkdirSync(dirname(flags.out), { recursive: true });
  writeFileSync(flags.out, `${JSON.stringify(results, null, 2)}\n`);
  const { after } = results;
  process.stdout.write(
    [
      `soak: ${results.durationSeconds} s at ${results.requests.achievedRate} req/s offered`,
      `  requests: ${results.requests.completed} completed, ${results.requests.aborted} aborted by the client, ${results.requests.failed} failed`,
      `  RSS: ${results.rss.startMb} → ${results.rss.endMb} MB (max ${results.rss.maxMb}); slope ${results.rss.slopeMbPerMin} MB/min, after warm-up ${results.rss.slopeAfterWarmupMbPerMin} MB/min`,
      `  heap used: ${results.heapUsed.startMb} → ${results.heapUsed.endMb} MB; slope ${results.heapUsed.slopeMbPerMin} MB/min, after warm-up ${results.heapUsed.slopeAfterWarmupMbPerMin} MB/min`,
      `  event-loop delay: p50 ${results.eventLoopDelayMs.p50} ms, p99 ${results.eventLoopDelayMs.p99} ms (worst interval ${results.eventLoopDelayMs.worstIntervalP99} ms, max ${results.eventLoopDelayMs.max} ms)`,
      `  after: ${after.settled ? 'nothing in flight' : `${after.inFlight} still in flight`} after ${after.settleMs} ms, ${after.clientConnections} client connections, ${after.fds} file handles`,
      `  breaker openings: ${JSON.stringify(results.breakerOpenings.byReason)}`,
      `  CPU (% of a core): sidecar ${results.cpu.sidecar}, simulators and load ${results.cpu.simulatorsAndLoad}, other work ${results.cpu.otherWorkOnTheMachine}`,
      `  written to ${flags.out}`,
      '',
    ].join('\n'),
  );
}
