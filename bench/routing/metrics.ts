/**
 * The routing benchmark's figures for one policy in one scenario, from what the clients saw and
 * what the simulators counted. Pure: unit-tested in metrics.test.ts.
 */
import type { ConversationAffinity } from './conversations.ts';

/** One client request as the load generator saw it. Times in simulated ms (wall × speed). */
export interface ClientResult {
  ok: boolean;
  status: number;
  ttftMs: number | undefined;
  e2eMs: number;
  /** When it was sent and when it ended, wall ms since the run started. */
  sentAtMs: number;
  endedAtMs: number;
  /** The backend that answered, when the response says (replay.ts, servedBy). */
  backend?: string | undefined;
  /** How a switchyard sidecar's affinity placed it (`x-switchyard-affinity`); other routers: none. */
  affinity?: string | undefined;
}

/** A simulator's counters at the end of a run (GET /admin/stats, after a reset at the start). */
export interface BackendCounters {
  name: string;
  requests: number;
  cacheHitBlocks: number;
  cacheMissBlocks: number;
  promptTokens: number;
  completionTokens: number;
  /** $ per million tokens (prompt + completion) of this backend. */
  costPerMTok: number;
  /** LoRA adapters it loaded (`sim:lora_adapter_loads_total`). */
  loraAdapterLoads?: number;
}

export interface Quantiles {
  p50: number;
  p90: number;
  p99: number;
}

export interface PolicyResult {
  requests: number;
  errors: number;
  errorRate: number;
  /** What the errors were: an HTTP status, `incomplete` (a 2xx stream cut short), `no-response`. */
  errorKinds: Record<string, number>;
  ttftMs: Quantiles;
  e2eMs: Quantiles;
  cacheHitRate: number;
  throughputRps: number;
  costPer1k: number;
  share: Record<string, number>;
  /** Chat-shaped workloads: how well conversations stayed on their first turn's backend. */
  conversations?: ConversationAffinity;
  /** The lora scenario: adapters the backends loaded, per 1,000 client requests. */
  adapterLoadsPer1k?: number;
  /** CPU the router instances spent during the replay, ms per client request (all instances). */
  routerCpuMsPerRequest?: number;
  /** CPU of the processes beside them (switchyard's relay), ms per client request. */
  auxCpuMsPerRequest?: number;
  /** Placements received per router instance per second of replay, bytes (issue 45). */
  placementBytesPerInstancePerSecond?: number;
}

/** Nearest-rank percentile of sorted values (NaN for none). */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank]!;
}

export function quantiles(values: readonly number[]): Quantiles {
  const sorted = [...values].sort((a, b) => a - b);
  return { p50: percentile(sorted, 50), p90: percentile(sorted, 90), p99: percentile(sorted, 99) };
}

/**
 * The figures of one run. TTFT and end-to-end latency are over successful requests; the error
 * rate counts every request that did not complete; throughput is completed requests per second
 * of (wall) time from the first send to the last end, scaled to simulated seconds by `speed`; the
 * cache hit rate is over the simulators' prompt blocks; cost is what the tokens the backends
 * processed cost, per 1,000 client requests; the share is each backend's part of the requests the
 * simulators received (retries included).
 */
export function summarise(
  results: readonly ClientResult[],
  backends: readonly BackendCounters[],
  speed: number,
  options: { lora?: boolean } = {},
): PolicyResult {
  const ok = results.filter((r) => r.ok);
  const errors = results.length - ok.length;
  const ttft = ok.flatMap((r) => (r.ttftMs === undefined ? [] : [r.ttftMs]));
  const first = Math.min(...results.map((r) => r.sentAtMs));
  const last = Math.max(...results.map((r) => r.endedAtMs));
  const spanSimulatedS = results.length === 0 ? 0 : ((last - first) * speed) / 1000;
  const hits = backends.reduce((n, b) => n + b.cacheHitBlocks, 0);
  const lookups = backends.reduce((n, b) => n + b.cacheHitBlocks + b.cacheMissBlocks, 0);
  const cost = backends.reduce(
    (sum, b) => sum + ((b.promptTokens + b.completionTokens) / 1e6) * b.costPerMTok,
    0,
  );
  const received = backends.reduce((n, b) => n + b.requests, 0);
  const errorKinds: Record<string, number> = {};
  for (const r of results) {
    if (r.ok) continue;
    const kind = r.status === 0 ? 'no-response' : r.status < 300 ? 'incomplete' : String(r.status);
    errorKinds[kind] = (errorKinds[kind] ?? 0) + 1;
  }
  return {
    requests: results.length,
    errors,
    errorRate: results.length === 0 ? 0 : errors / results.length,
    errorKinds,
    ttftMs: quantiles(ttft),
    e2eMs: quantiles(ok.map((r) => r.e2eMs)),
    cacheHitRate: lookups === 0 ? 0 : hits / lookups,
    throughputRps: spanSimulatedS > 0 ? ok.length / spanSimulatedS : 0,
    costPer1k: results.length === 0 ? 0 : (cost / results.length) * 1000,
    share: Object.fromEntries(
      backends.map((b) => [b.name, received === 0 ? 0 : b.requests / received]),
    ),
    ...(options.lora === true
      ? {
          adapterLoadsPer1k:
            results.length === 0
              ? 0
              : (backends.reduce((n, b) => n + (b.loraAdapterLoads ?? 0), 0) / results.length) *
                1000,
        }
      : {}),
  };
}

/** Points of the empirical CDF of `values`, thinned to at most `points` (for plots). */
export function cdf(values: readonly number[], points = 200): { x: number; p: number }[] {
  const sorted = [...values].sort((a, b) => a - b);
  if (sorted.length === 0) return [];
  const step = Math.max(1, Math.floor(sorted.length / points));
  const out: { x: number; p: number }[] = [];
  for (let i = 0; i < sorted.length; i += step)
    out.push({ x: sorted[i]!, p: (i + 1) / sorted.length });
  const lastPoint = out[out.length - 1];
  if (lastPoint === undefined || lastPoint.p < 1) out.push({ x: sorted[sorted.length - 1]!, p: 1 });
  return out;
}

/** One point of a backend's share of the requests sent in one time window. */
export interface SharePoint {
  /** Middle of the window, seconds since the run started (wall). */
  tS: number;
  backend: string;
  share: number;
}

/**
 * Each backend's share of the requests sent in each of `windows` equal windows of the run (by
 * send time; requests whose backend is unknown left out): a router that herds shows as shares
 * swinging between windows, one that spreads as flat lines near 1/K.
 */
export function shareOverTime(results: readonly ClientResult[], windows = 15): SharePoint[] {
  const known = results.filter(
    (r): r is ClientResult & { backend: string } => r.backend !== undefined,
  );
  if (known.length === 0) return [];
  const start = Math.min(...known.map((r) => r.sentAtMs));
  const end = Math.max(...known.map((r) => r.sentAtMs));
  const width = Math.max(1, (end - start) / windows);
  const backends = [...new Set(known.map((r) => r.backend))].sort();
  const counts = Array.from({ length: windows }, () => new Map<string, number>());
  for (const r of known) {
    const w = Math.min(windows - 1, Math.floor((r.sentAtMs - start) / width));
    counts[w]!.set(r.backend, (counts[w]!.get(r.backend) ?? 0) + 1);
  }
  const points: SharePoint[] = [];
  counts.forEach((byBackend, w) => {
    const total = [...byBackend.values()].reduce((a, b) => a + b, 0);
    if (total === 0) return;
    for (const backend of backends)
      points.push({
        tS: Math.round((start + (w + 0.5) * width) / 10) / 100,
        backend,
        share: (byBackend.get(backend) ?? 0) / total,
      });
  });
  return points;
}
