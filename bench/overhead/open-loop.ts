/**
 * (b) Latency added at fixed offered rates: an open loop per target and rate, in rounds, each
 * cell the median over its quiet rounds of each percentile; then each proxy's percentiles minus
 * direct's at the same rate.
 */
import { cpuMark, cpuShare, isNoisy, type Target } from './cpu.ts';
import { openLoop, percentiles, type Percentiles } from './load.ts';
import { added, label, type OpenRun } from './report.ts';
import { log, type OverheadRun } from './setup.ts';

export async function measureOpenLoop(run: OverheadRun): Promise<void> {
  const { flags, results, targets, proxies, backend } = run;
  // Rounds again, noisy ones re-run as above; a cell reports the median over its quiet rounds
  // of each percentile (one stall elsewhere on the machine does not decide a p99), and the
  // pooled percentiles too.
  const openCell = async (t: Target, rate: number, label_: string): Promise<OpenRun> => {
    await openLoop(t.url, rate, flags.quick ? 200 : 300, flags.pacer);
    const mark = cpuMark(t, backend.pid);
    const cell = await openLoop(t.url, rate, flags.openSeconds * 1000, flags.pacer);
    const result: OpenRun = { ...cell, cpu: cpuShare(mark, t, backend.pid) };
    log(
      `open ${rate}/s ${label(t.name)} (${label_}): p50 ${cell.fromIntendedMs.p50} p99 ${cell.fromIntendedMs.p99} ms (from sent: ${cell.fromSentMs.p50} / ${cell.fromSentMs.p99})` +
        (isNoisy(result) ? `, noisy (other processes ${Math.round(result.cpu.other)} %)` : '') +
        (cell.errors > 0 ? `, ${cell.errors} errors (${cell.firstError ?? ''})` : ''),
    );
    return result;
  };
  const openRounds = new Map<string, OpenRun[]>();
  const openKey = (t: Target, rate: number): string => `${t.name} ${rate}`;
  for (let round = 1; round <= flags.rounds; round++) {
    for (const rate of flags.rates) {
      for (const t of targets) {
        const result = await openCell(t, rate, `round ${round}`);
        openRounds.set(openKey(t, rate), [...(openRounds.get(openKey(t, rate)) ?? []), result]);
      }
    }
  }
  for (let retry = 1; retry <= flags.retries; retry++) {
    for (const rate of flags.rates) {
      for (const t of targets) {
        const rounds = openRounds.get(openKey(t, rate)) ?? [];
        if (rounds.some((r) => !isNoisy(r))) continue;
        rounds.push(await openCell(t, rate, `retry ${retry}`));
      }
    }
  }
  for (const rate of flags.rates) {
    for (const t of targets) {
      const rounds = openRounds.get(`${t.name} ${rate}`);
      if (rounds === undefined || rounds.length === 0) continue;
      const quiet = rounds.filter((r) => !isNoisy(r));
      (results.openLoop[t.name] ??= {})[String(rate)] = {
        ...poolOpen(quiet.length > 0 ? quiet : rounds),
        noisyRounds: rounds.length - quiet.length,
      };
    }
    const direct = results.openLoop.direct?.[String(rate)];
    if (direct === undefined) continue;
    for (const t of proxies) {
      const cell = results.openLoop[t.name]?.[String(rate)];
      if (cell === undefined) continue;
      (results.addedLatency[t.name] ??= {})[String(rate)] = {
        fromIntended: added(cell.fromIntendedMs, direct.fromIntendedMs),
        fromSent: added(cell.fromSentMs, direct.fromSentMs),
      };
    }
  }
}

/** The median over rounds of each percentile (the lower middle one for an even count). */
function medianPercentiles(all: Percentiles[]): Percentiles {
  const med = (pick: (p: Percentiles) => number): number => {
    const sorted = all.map(pick).sort((a, b) => a - b);
    return sorted[Math.floor((sorted.length - 1) / 2)] ?? NaN;
  };
  return {
    n: all.reduce((n, p) => n + p.n, 0),
    p50: med((p) => p.p50),
    p90: med((p) => p.p90),
    p99: med((p) => p.p99),
    max: Math.max(...all.map((p) => p.max)),
    mean: med((p) => p.mean),
  };
}

/**
 * One open-loop cell from its rounds: the median over rounds of each percentile, the pooled
 * percentiles over every sample, sums and means.
 */
function poolOpen(rounds: OpenRun[]): OpenRun {
  const all = (pick: (r: OpenRun) => number[] | undefined): number[] =>
    rounds.flatMap((r) => pick(r) ?? []);
  const mean = (pick: (r: OpenRun) => number): number =>
    Math.round((rounds.reduce((n, r) => n + pick(r), 0) / rounds.length) * 10) / 10;
  const first = rounds[0]!;
  return {
    rate: first.rate,
    seconds: rounds.reduce((n, r) => n + r.seconds, 0),
    pacer: first.pacer,
    rounds: rounds.length,
    sent: rounds.reduce((n, r) => n + r.sent, 0),
    completed: rounds.reduce((n, r) => n + r.completed, 0),
    errors: rounds.reduce((n, r) => n + r.errors, 0),
    firstError: rounds.find((r) => r.firstError !== undefined)?.firstError,
    achievedRate: Math.round(mean((r) => r.achievedRate)),
    maxInFlight: Math.max(...rounds.map((r) => r.maxInFlight)),
    fromIntendedMs: medianPercentiles(rounds.map((r) => r.fromIntendedMs)),
    fromSentMs: medianPercentiles(rounds.map((r) => r.fromSentMs)),
    sendLagMs: medianPercentiles(rounds.map((r) => r.sendLagMs)),
    pooled: {
      fromIntendedMs: percentiles(all((r) => r.samples?.fromIntended)),
      fromSentMs: percentiles(all((r) => r.samples?.fromSent)),
    },
    p99ByRound: rounds.map((r) => r.fromIntendedMs.p99),
    cpu: {
      client: mean((r) => r.cpu.client),
      target: first.cpu.target === undefined ? undefined : mean((r) => r.cpu.target ?? 0),
      backend: mean((r) => r.cpu.backend),
      kernelIrq: mean((r) => r.cpu.kernelIrq),
      other: mean((r) => r.cpu.other),
    },
  };
}
