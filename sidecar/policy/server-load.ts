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
  /**
   * The server's mean time between output tokens over the last scrapes, ms (its
   * `inter_token_latency_seconds` histogram): how fast its hardware runs its batch.
   */
  interTokenLatencyMs?: number | undefined;
  /**
   * LoRA adapters resident on the server now: running and waiting ones of vLLM's
   * `vllm:lora_requests_info` gauge. Undefined: the server says nothing of adapters.
   */
  loadedAdapters?: readonly string[] | undefined;
}

/**
 * Two seconds: the controller (or a standalone sidecar) scrapes every 100 ms by default and ORCA
 * headers come with responses, so a fresh report is normally well under this; an older one means
 * the source went quiet.
 */
export const DEFAULT_REPORT_MAX_AGE_MS = 2000;

/**
 * Half a second: how recent every candidate's report must be for the balancing step to count
 * the estimate instead of this sidecar's own attempts (docs/policy.md §4). Five default scrape
 * periods (100 ms), so a late answer or two do not switch rules; with scrapes a second apart
 * most reports are older, and the step falls back to the own counts, which cannot herd: on the
 * routing benchmark balancing on a one-second report was worse than the own counts, and on a
 * quarter-second one better (docs/policy.md §4 has the figures).
 */
export const BALANCE_REPORT_MAX_AGE_MS = 500;

/**
 * Five minutes: how long a report of waiting requests makes the largest batch seen count as the
 * server's batch. A batch changes only when the server is restarted or reconfigured; and a
 * momentary queue at light load (vLLM holds a new request until its next scheduler step) that
 * fixes too small a batch corrects itself as soon as more than that runs there.
 */
export const BATCH_KNOWN_FOR_MS = 300_000;

interface Reading {
  running: number | undefined;
  waiting: number | undefined;
  kvCacheUsage: number | undefined;
  /** With the time it was measured: a speed ages on its own (below), not with the queue's report. */
  interTokenLatency: { ms: number; atMs: number } | undefined;
  atMs: number;
  localAtReport: number;
}

/** The last report of one endpoint. */
export class ReportedLoad {
  #reading: Reading | undefined;
  /**
   * The most requests the server has ever reported running at once: its batch size as far as
   * this sidecar has seen (vLLM's `max_num_seqs`, or fewer when its KV cache fills first).
   */
  #maxRunning = 0;
  /** When the server last reported requests waiting: its batch was full then. */
  #fullAtMs: number | undefined;

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
    // A report without a speed (an ORCA header) keeps the last one, which ages from when it was
    // measured: the scraper leaves the speed out of an idle server's reports on purpose (an idle
    // server is not slow), and those reports must not keep an old slow reading alive.
    const itl = report.interTokenLatencyMs;
    const interTokenLatency =
      typeof itl === 'number' && Number.isFinite(itl) && itl > 0
        ? { ms: itl, atMs: measuredAtMs }
        : previous?.interTokenLatency;
    if (
      running === undefined &&
      waiting === undefined &&
      kvCacheUsage === undefined &&
      interTokenLatency === undefined
    )
      return;
    if (running !== undefined && running > this.#maxRunning) this.#maxRunning = running;
    if ((finiteCount(report.waiting) ?? 0) > 0) this.#fullAtMs = measuredAtMs;
    this.#reading = {
      running,
      waiting,
      kvCacheUsage,
      interTokenLatency,
      atMs: measuredAtMs,
      localAtReport: local,
    };
  }

  /**
   * Whether the server reported its queue (running or waiting) within `maxAgeMs`: then the
   * estimate counts every sidecar's requests there, not only this one's.
   */
  countsEveryone(nowMs: number, maxAgeMs: number): boolean {
    const r = this.#reading;
    return (
      r !== undefined &&
      nowMs - r.atMs <= maxAgeMs &&
      (r.running !== undefined || r.waiting !== undefined)
    );
  }

  /** The load estimate (see the module comment). */
  estimate(local: number, nowMs: number, maxAgeMs: number): number {
    const r = this.#reading;
    if (r === undefined || !(nowMs - r.atMs <= maxAgeMs)) return local;
    if (r.running === undefined && r.waiting === undefined) return local;
    const reported = (r.running ?? 0) + (r.waiting ?? 0);
    return Math.max(local, reported + (local - r.localAtReport));
  }

  /**
   * How many more requests the server can start at once without queueing them, as far as this
   * sidecar can tell: its largest batch seen (`maxRunning`) minus the load estimate, and no more
   * than its reported waiting queue allows (a server whose KV cache is full queues requests below
   * its largest batch). Negative: that many would wait. Undefined unless the server has reported a
   * running count (an ORCA header alone says nothing of slots) and, within `BATCH_KNOWN_FOR_MS`,
   * a waiting queue.
   */
  freeSlots(local: number, nowMs: number, maxAgeMs: number): number | undefined {
    const batch = this.batch(nowMs);
    if (batch === undefined) return undefined;
    const free = batch - this.estimate(local, nowMs, maxAgeMs);
    const r = this.#reading;
    // Without a fresh report the batch size still holds: this sidecar's own requests fill it.
    if (r === undefined || !(nowMs - r.atMs <= maxAgeMs)) return free;
    const waiting = r.waiting ?? 0;
    // Requests this sidecar started since the report queue behind the waiting ones; those it
    // finished hand their slots to them.
    return waiting > 0 ? Math.min(free, -waiting - (local - r.localAtReport)) : free;
  }

  /**
   * How many more of this sidecar's requests are in flight there than when the fresh report (at
   * most `maxAgeMs` old) was measured (started minus finished since); undefined without one.
   */
  addedSinceReport(local: number, nowMs: number, maxAgeMs: number): number | undefined {
    const r = this.#reading;
    if (r === undefined || !(nowMs - r.atMs <= maxAgeMs)) return undefined;
    return local - r.localAtReport;
  }

  /**
   * The server's batch as this sidecar knows it: the most requests it has reported running at
   * once, while it has reported a waiting queue within `BATCH_KNOWN_FOR_MS`; else undefined.
   */
  batch(nowMs: number): number | undefined {
    return this.#maxRunning === 0 || !this.#fullRecently(nowMs) ? undefined : this.#maxRunning;
  }

  /**
   * Whether the server queued requests within the last `BATCH_KNOWN_FOR_MS`. Only then is the
   * largest batch seen its batch: a server that never queued has run at most what it was given,
   * and counting that as its batch would turn a conversation away from a home with room.
   */
  #fullRecently(nowMs: number): boolean {
    return this.#fullAtMs !== undefined && nowMs - this.#fullAtMs <= BATCH_KNOWN_FOR_MS;
  }

  /**
   * The server's reported inter-token latency, ms, while the report that carried it is at most
   * `maxAgeMs` old (later reports without one do not refresh it); else undefined.
   */
  interTokenLatencyMs(nowMs: number, maxAgeMs: number): number | undefined {
    const itl = this.#reading?.interTokenLatency;
    return itl === undefined || !(nowMs - itl.atMs <= maxAgeMs) ? undefined : itl.ms;
  }

  /** What was last reported, for status; undefined when nothing fresh is known. */
  last(nowMs: number, maxAgeMs: number): (ServerLoadReport & { ageMs: number }) | undefined {
    const r = this.#reading;
    if (r === undefined || !(nowMs - r.atMs <= maxAgeMs)) return undefined;
    const speed = this.interTokenLatencyMs(nowMs, maxAgeMs);
    return {
      running: r.running,
      waiting: r.waiting,
      kvCacheUsage: r.kvCacheUsage,
      ...(speed === undefined ? {} : { interTokenLatencyMs: speed }),
      ageMs: nowMs - r.atMs,
    };
  }
}

/**
 * A count as the server reported it, rounded to a whole request: queues hold whole requests, and
 * a lying or broken page's 5e-324 "waiting" would otherwise mark a batch full while adding no
 * load (a property test found it moving two thirds of the traffic to such a server).
 */
function finiteCount(value: number | undefined): number | undefined {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0
    ? Math.round(value)
    : undefined;
}
