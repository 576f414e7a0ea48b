/**
 * An endpoint's load as the balancer estimates it: what the server last reported (it sees every
 * sidecar's requests) corrected by what this sidecar did since (it sees its own at once).
 *
 *   estimate = max(local, reported + (local − localAtReport))
 *
 * `reported` is the server's queue depth — requests running plus waiting — from an ORCA
 * `endpoint-load-metrics` response header or a `/metrics` scrape. It already counts this
 * sidecar's requests that were in flight when it was measured (`localAtReport`); the correction
 * adds the ones this sidecar started since and removes the ones it finished. A report older than
 * `maxAgeMs` is ignored: a stale number is worse than none, because every sidecar holds the same
 * stale number and would act on it together. Without a report the estimate is the local count,
 * which is exactly what the balancer used before servers reported anything.
 */

/** Load as a model server reports it; any field may be missing (vLLM's ORCA header has no `running`). */
export interface ServerLoadReport {
  /** Requests being generated (`vllm:num_requests_running`, `sglang:num_running_reqs`). */
  running?: number | undefined;
  /** Requests queued (`vllm:num_requests_waiting`, `sglang:num_queue_reqs`). */
  waiting?: number | undefined;
  /** KV cache in use, 0..1 (`vllm:kv_cache_usage_perc`, `sglang:token_usage`). */
  kvCacheUsage?: number | undefined;
}

/**
 * Two seconds: the controller scrapes about once a second and ORCA headers come with responses,
 * so a fresh report is normally well under this; an older one means the source went quiet.
 */
export const DEFAULT_REPORT_MAX_AGE_MS = 2000;

interface Reading {
  running: number | undefined;
  waiting: number | undefined;
  kvCacheUsage: number | undefined;
  atMs: number;
  localAtReport: number;
}

/** The last report of one endpoint. */
export class ReportedLoad {
  #reading: Reading | undefined;

  /**
   * Takes a report measured at `measuredAtMs` (now for an ORCA header; a scrape relayed by the
   * controller is `ageMs` older), when this sidecar had `local` requests in flight there. Missing
   * fields keep their previous value (an ORCA header without `running` after a scrape with it).
   * A report measured before the one held is dropped: a relayed scrape must not undo a fresher
   * header.
   */
  update(report: ServerLoadReport, local: number, measuredAtMs: number): void {
    const previous = this.#reading;
    if (previous !== undefined && measuredAtMs < previous.atMs) return;
    const running = finiteCount(report.running) ?? previous?.running;
    const waiting = finiteCount(report.waiting) ?? previous?.waiting;
    const usage = report.kvCacheUsage;
    const kvCacheUsage =
      typeof usage === 'number' && usage >= 0 && usage <= 1 ? usage : previous?.kvCacheUsage;
    if (running === undefined && waiting === undefined && kvCacheUsage === undefined) return;
    this.#reading = { running, waiting, kvCacheUsage, atMs: measuredAtMs, localAtReport: local };
  }

  /** The load estimate (see the module comment). */
  estimate(local: number, nowMs: number, maxAgeMs: number): number {
    const r = this.#reading;
    if (r === undefined || !(nowMs - r.atMs <= maxAgeMs)) return local;
    if (r.running === undefined && r.waiting === undefined) return local;
    const reported = (r.running ?? 0) + (r.waiting ?? 0);
    return Math.max(local, reported + (local - r.localAtReport));
  }

  /** What was last reported, for status; undefined when nothing fresh is known. */
  last(nowMs: number, maxAgeMs: number): (ServerLoadReport & { ageMs: number }) | undefined {
    const r = this.#reading;
    if (r === undefined || !(nowMs - r.atMs <= maxAgeMs)) return undefined;
    return {
      running: r.running,
      waiting: r.waiting,
      kvCacheUsage: r.kvCacheUsage,
      ageMs: nowMs - r.atMs,
    };
  }
}

function finiteCount(value: number | undefined): number | undefined {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 ? value : undefined;
}
