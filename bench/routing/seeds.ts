/**
 * Honest statistics: every policy runs once per seed (prompts, fault draws and the gateways'
 * randomness differ), and one run's p99 is the tenth-slowest of a thousand requests, which moves
 * between runs by more than the gaps between good routers. results.json keeps each figure's
 * median over the seeds where one run's figure used to be, and every seed's own figures beside it.
 * Pure: unit-tested in seeds.test.ts.
 */
import type { ConversationAffinity } from './conversations.ts';
import type { PolicyResult, Quantiles } from './metrics.ts';

/** One run's figures, kept beside the medians. */
export interface SeedFigures {
  seed: number;
  ttftMs: Quantiles;
  e2eMs: Quantiles;
  cacheHitRate: number;
  errorRate: number;
  errors: number;
  throughputRps: number;
  costPer1k: number;
  machineCpuPercent: number | null;
  /** Wall seconds from starting the routers to having stopped them. */
  wallS: number;
  conversations?: ConversationAffinity | undefined;
  adapterLoadsPer1k?: number | undefined;
  routerCpuMsPerRequest?: number | undefined;
  auxCpuMsPerRequest?: number | undefined;
  placementBytesPerInstancePerSecond?: number | undefined;
}

/** One policy's result over every seed: each figure the median over them; `seeds` holds each. */
export interface SeededResult extends PolicyResult {
  machineCpuPercent: number | null;
  seeds: SeedFigures[];
}

export interface SeedRun {
  seed: number;
  result: PolicyResult & { machineCpuPercent: number | null };
  wallS: number;
}

/** The median of the finite values (the mean of the middle two for an even count); NaN for none. */
export function median(values: readonly number[]): number {
  const sorted = values.filter((v) => Number.isFinite(v)).sort((a, b) => a - b);
  const n = sorted.length;
  if (n === 0) return NaN;
  const mid = Math.floor(n / 2);
  return n % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** The smallest and largest finite value, or undefined when there is none. */
export function range(values: readonly number[]): { min: number; max: number } | undefined {
  const finite = values.filter((v) => Number.isFinite(v));
  return finite.length === 0 ? undefined : { min: Math.min(...finite), max: Math.max(...finite) };
}

const medianQuantiles = (qs: readonly Quantiles[]): Quantiles => ({
  p50: median(qs.map((q) => q.p50)),
  p90: median(qs.map((q) => q.p90)),
  p99: median(qs.map((q) => q.p99)),
});

function medianAffinity(
  all: readonly (ConversationAffinity | undefined)[],
): ConversationAffinity | undefined {
  const known = all.filter((a): a is ConversationAffinity => a !== undefined);
  if (known.length === 0) return undefined;
  const m = (f: (a: ConversationAffinity) => number): number => median(known.map(f));
  return {
    conversations: m((a) => a.conversations),
    laterTurns: m((a) => a.laterTurns),
    laterTurnsHome: m((a) => a.laterTurnsHome),
    maxHomeShare: m((a) => a.maxHomeShare),
    unknownBackend: m((a) => a.unknownBackend),
  };
}

/**
 * Every figure's median over the runs. Two are not medians: `errorKinds` counts the errors of
 * every run (what kinds occurred at all), and `share` is each backend's mean share (so the shares
 * still add up to 1).
 */
export function aggregateSeeds(runs: readonly SeedRun[]): SeededResult {
  if (runs.length === 0) throw new Error('aggregateSeeds needs at least one run');
  const results = runs.map((r) => r.result);
  const errorKinds: Record<string, number> = {};
  for (const r of results)
    for (const [kind, n] of Object.entries(r.errorKinds))
      errorKinds[kind] = (errorKinds[kind] ?? 0) + n;
  const backends = [...new Set(results.flatMap((r) => Object.keys(r.share)))];
  const cpu = median(
    results.flatMap((r) => (r.machineCpuPercent === null ? [] : [r.machineCpuPercent])),
  );
  const conversations = medianAffinity(results.map((r) => r.conversations));
  const loads = results.flatMap((r) =>
    r.adapterLoadsPer1k === undefined ? [] : [r.adapterLoadsPer1k],
  );
  const optionalMedian = <K extends keyof PolicyResult>(key: K): Partial<PolicyResult> => {
    const values = results.flatMap((r) => (typeof r[key] === 'number' ? [r[key]] : []));
    return values.length === 0 ? {} : { [key]: median(values) };
  };
  return {
    requests: median(results.map((r) => r.requests)),
    errors: median(results.map((r) => r.errors)),
    errorRate: median(results.map((r) => r.errorRate)),
    errorKinds,
    ttftMs: medianQuantiles(results.map((r) => r.ttftMs)),
    e2eMs: medianQuantiles(results.map((r) => r.e2eMs)),
    cacheHitRate: median(results.map((r) => r.cacheHitRate)),
    throughputRps: median(results.map((r) => r.throughputRps)),
    costPer1k: median(results.map((r) => r.costPer1k)),
    share: Object.fromEntries(
      backends.map((b) => [
        b,
        results.reduce((sum, r) => sum + (r.share[b] ?? 0), 0) / results.length,
      ]),
    ),
    ...(conversations === undefined ? {} : { conversations }),
    ...(loads.length === 0 ? {} : { adapterLoadsPer1k: median(loads) }),
    ...optionalMedian('routerCpuMsPerRequest'),
    ...optionalMedian('auxCpuMsPerRequest'),
    ...optionalMedian('placementBytesPerInstancePerSecond'),
    machineCpuPercent: Number.isFinite(cpu) ? Math.round(cpu) : null,
    seeds: runs.map((r) => ({
      seed: r.seed,
      ttftMs: r.result.ttftMs,
      e2eMs: r.result.e2eMs,
      cacheHitRate: r.result.cacheHitRate,
      errorRate: r.result.errorRate,
      errors: r.result.errors,
      throughputRps: r.result.throughputRps,
      costPer1k: r.result.costPer1k,
      machineCpuPercent: r.result.machineCpuPercent,
      wallS: Math.round(r.wallS * 10) / 10,
      ...(r.result.conversations === undefined ? {} : { conversations: r.result.conversations }),
      ...(r.result.adapterLoadsPer1k === undefined
        ? {}
        : { adapterLoadsPer1k: r.result.adapterLoadsPer1k }),
      ...(r.result.routerCpuMsPerRequest === undefined
        ? {}
        : { routerCpuMsPerRequest: r.result.routerCpuMsPerRequest }),
      ...(r.result.auxCpuMsPerRequest === undefined
        ? {}
        : { auxCpuMsPerRequest: r.result.auxCpuMsPerRequest }),
      ...(r.result.placementBytesPerInstancePerSecond === undefined
        ? {}
        : { placementBytesPerInstancePerSecond: r.result.placementBytesPerInstancePerSecond }),
    })),
  };
}
