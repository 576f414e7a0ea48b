/**
 * The overhead bench's verdicts: each goal against its figure, and what noise is left in the
 * figures shown.
 */
import { isNoisy, NOISY_OTHER_PCT } from './cpu.ts';
import type { Flags } from './flags.ts';
import type { CpuShare, Goal, Results } from './report.ts';

/**
 * Notes on the noise left: cells with no quiet round, and the SSE and large-prompt cells that
 * stayed noisy after their re-runs.
 */
export function noteNoise(results: Results): void {
  const noisy: string[] = [];
  let dropped = 0;
  for (const [name, runs] of Object.entries(results.closedLoop))
    for (const [c, run] of Object.entries(runs)) {
      dropped += isNoisy(run) ? 0 : (run.noisyRounds ?? 0);
      if (isNoisy(run)) noisy.push(`closed c=${c} ${name} (${Math.round(run.cpu.other)} %)`);
    }
  for (const [name, runs] of Object.entries(results.openLoop))
    for (const [rate, run] of Object.entries(runs)) {
      dropped += isNoisy(run) ? 0 : (run.noisyRounds ?? 0);
      if (isNoisy(run)) noisy.push(`open ${rate}/s ${name} (${Math.round(run.cpu.other)} %)`);
    }
  for (const [name, run] of Object.entries(results.sse))
    if (isNoisy(run)) noisy.push(`SSE ${name} (${Math.round(run.cpu.other)} %)`);
  for (const [name, run] of Object.entries(results.largeBody?.runs ?? {}))
    if (isNoisy(run)) noisy.push(`large prompt ${name} (${Math.round(run.cpu.other)} %)`);
  if (dropped > 0)
    results.notes.push(
      `${dropped} noisy round(s) (other processes above ${NOISY_OTHER_PCT} % of a core) were left out of cells that had quiet ones`,
    );
  if (noisy.length > 0)
    results.notes.push(
      `other processes used more than ${NOISY_OTHER_PCT} % of a core during every try of: ${noisy.join(', ')}; treat those cells with care`,
    );
}

export function goals(r: Results, flags: Flags): Record<string, Goal> {
  const out: Record<string, Goal> = {};
  const noisy = (...cells: ({ cpu: CpuShare } | undefined)[]): boolean => cells.some(isNoisy);
  const ms = (x: number): string => `${x >= 0 ? '+' : ''}${x.toFixed(3)} ms`;
  const lat = r.addedLatency.sidecar?.['1000'];
  out.addedP50At1000 = {
    goal: 'added p50 ≤ 1 ms at 1,000 req/s',
    measured:
      lat === undefined
        ? 'not measured'
        : `${ms(lat.fromIntended.p50)} (from sent: ${ms(lat.fromSent.p50)})`,
    met: lat === undefined ? null : lat.fromIntended.p50 <= 1,
    noisy: noisy(r.openLoop.sidecar?.['1000'], r.openLoop.direct?.['1000']),
  };
  out.addedP99At1000 = {
    goal: 'added p99 ≤ 5 ms at 1,000 req/s',
    measured:
      lat === undefined
        ? 'not measured'
        : `${ms(lat.fromIntended.p99)} (from sent: ${ms(lat.fromSent.p99)})`,
    met: lat === undefined ? null : lat.fromIntended.p99 <= 5,
    noisy: noisy(r.openLoop.sidecar?.['1000'], r.openLoop.direct?.['1000']),
  };
  const sc = r.closedLoop.sidecar?.['64'];
  const bare = r.closedLoop.bare?.['64'];
  out.throughputVsBare = {
    goal: 'closed-loop throughput ≥ 70 % of bare http-proxy-3 (c=64, same run)',
    measured:
      sc === undefined || bare === undefined
        ? 'not measured'
        : `${Math.round((sc.rps / bare.rps) * 100)} % (${sc.rps.toLocaleString('en-US')} vs ${bare.rps.toLocaleString('en-US')} req/s)`,
    met: sc === undefined || bare === undefined ? null : sc.rps >= 0.7 * bare.rps,
    noisy: noisy(sc, bare),
  };
  out.throughputAbsolute = {
    goal: 'closed-loop throughput ≥ 5,000 req/s (c=64)',
    measured: sc === undefined ? 'not measured' : `${sc.rps.toLocaleString('en-US')} req/s`,
    met: sc === undefined ? null : sc.rps >= 5000,
    noisy: noisy(sc),
  };
  const sse = r.sseAdded.sidecar;
  out.sseAddedP99 = {
    goal: 'added inter-chunk delay p99 ≤ 1 ms',
    measured: sse === undefined ? 'not measured' : `${ms(sse.p99)} (p50 ${ms(sse.p50)})`,
    met: sse === undefined ? null : sse.p99 <= 1,
    noisy: noisy(r.sse.sidecar, r.sse.direct),
  };
  const rss = r.rss.sidecar;
  out.rssIdle = {
    goal: 'RSS ≤ 80 MB idle',
    measured:
      rss?.idleAfterWarmupMb === undefined
        ? 'not measured'
        : `${rss.idleAfterWarmupMb} MB (after load: ${rss.idleAfterLoadMb ?? '–'} MB)`,
    met: rss?.idleAfterWarmupMb === undefined ? null : rss.idleAfterWarmupMb <= 80,
  };
  out.rssStreams = {
    goal: `RSS ≤ 200 MB with ${flags.holdStreams.toLocaleString('en-US')} open streams`,
    measured:
      rss?.withStreamsMb === undefined
        ? 'not measured'
        : `${rss.withStreamsMb} MB (${rss.streams.open}/${rss.streams.requested} streams open)`,
    met:
      rss?.withStreamsMb === undefined || flags.holdStreams < 1000
        ? null
        : rss.withStreamsMb <= 200 && rss.streams.open === rss.streams.requested,
  };
  return out;
}
