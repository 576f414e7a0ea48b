/**
 * When to scrape each model server's `/metrics` for its load, and what the last scrape said
 * (docs/controller.md, "Server-reported load"). The shell (monitor.ts) asks which targets
 * are due, scrapes them, and records each outcome here; it then builds each pool's `load` message
 * from the samples with `poolLoad`.
 *
 * - A target is scraped about once a `periodMs`, each period drawn from ±10 % of it (measured
 *   from the start of the previous scrape), so the targets keep the random phases they got when
 *   they were added and never scrape in step.
 * - A server that answers without load metrics (404, 401, 403, a body that is not a Prometheus
 *   exposition with the gauges: an external provider) is left alone for `noMetricsBackoffMs`
 *   (±10 %). The verdict outlives the target for that long, so a pool whose last sidecar leaves
 *   and comes back does not ask again at once.
 * - A failed scrape (connection refused, timeout, 5xx) backs off per target: period × 2^failures,
 *   at most `maxFailureBackoffMs`, with equal jitter (between half and all of it). Its last sample
 *   is kept until it is `staleAfterMs` old, so a server too busy to answer for a moment does not
 *   look idle.
 * - `record` returns a transition only when a target changes between reporting, failing and
 *   having no metrics: the shell logs those (at debug), never every scrape.
 * - How fast a server generates is measured between scrapes: its inter-token latency histogram's
 *   sum and count are cumulative, so the mean time per token since an earlier scrape is the change
 *   of the sum over the change of the count. It is measured once at least
 *   `MIN_TOKENS_FOR_INTER_TOKEN_LATENCY` tokens were generated since the last measurement (a
 *   quieter server keeps its last one for up to `INTER_TOKEN_LATENCY_MAX_AGE_MS`), and starts
 *   over when the counts go backwards (the server restarted).
 *
 * Pure: time comes in as `nowMs`, randomness as an `Rng`; nothing is scheduled here.
 */
import { MAX_LOADED_ADAPTERS } from '../../crds/snapshot.schema.ts';
import type { EndpointLoad, PoolLoad } from '../../crds/snapshot.ts';
import type { ModelServerLoad } from '../model-server-load.ts';
import type { RandomFn } from '../rng.ts';

export interface ScrapeScheduleOptions {
  /** How often each target is scraped. */
  periodMs: number;
  /** How long a server that answered without load metrics is left alone. Default 10 min. */
  noMetricsBackoffMs?: number;
  /** The longest wait after failed scrapes. Default 30 s (at least `periodMs`). */
  maxFailureBackoffMs?: number;
  /** A sample older than this is not sent. Default 5 × `periodMs`. */
  staleAfterMs?: number;
}

export const SCRAPE_SCHEDULE_DEFAULTS = {
  noMetricsBackoffMs: 10 * 60_000,
  maxFailureBackoffMs: 30_000,
  staleAfterPeriods: 5,
} as const;

/** Each wait is drawn from ±this fraction of its nominal length. */
const JITTER = 0.1;

/**
 * Tokens a server must generate between two measurements of its inter-token latency: fewer are
 * one request's few steps, which say more about that request than about the server.
 */
export const MIN_TOKENS_FOR_INTER_TOKEN_LATENCY = 16;

/**
 * How long a measured inter-token latency is sent while the server generates too little to
 * measure a new one. An idle server is not slow; a latency measured under yesterday's load must
 * not keep it looking so.
 */
export const INTER_TOKEN_LATENCY_MAX_AGE_MS = 30_000;

/**
 * The bytes of page a target may cost per `periodMs`: a larger page is scraped that much less
 * often (its period stretched by its size over this, and its sample kept as much longer). A real
 * vLLM page is 26 KB for one engine (test/engine/fixtures/metrics.txt), so four data-parallel
 * engines still fit; a valid page just under the 4 MiB cap, read every 100 ms, made the proxy's
 * serial requests 16× slower (issue 40), and is read every 3.2 s instead. Reading a page costs a
 * scan of its bytes however it is parsed (and the garbage of its socket buffers): a server must
 * not buy more of the sidecar's time than that by writing more.
 */
export const PAGE_BYTES_PER_PERIOD = 128 * 1024;

/** What one scrape found; `bytes`: the size of the page read, when one was. */
export type ScrapeOutcome =
  | { kind: 'load'; load: ModelServerLoad; bytes?: number | undefined }
  /** The server answered, but not with load metrics (`reason` for the log, e.g. `HTTP 404`). */
  | { kind: 'no-metrics'; reason: string; bytes?: number | undefined }
  /** No usable answer: worth asking again soon. */
  | { kind: 'failed'; cause: 'timeout' | 'error'; reason: string };

/** How a target stands, from the scrapes so far. */
export type TargetHealth =
  | { kind: 'new' }
  | { kind: 'reporting' }
  | { kind: 'no-metrics' }
  | { kind: 'failing'; failures: number };

/** A change worth one log line. */
export type ScrapeTransition =
  | { kind: 'no-metrics'; reason: string; retryInMs: number }
  | { kind: 'failing'; reason: string }
  | { kind: 'reporting'; after: 'failing' | 'no-metrics' };

interface Target {
  health: TargetHealth;
  /** Waiting for `dueAtMs`, or being scraped since `startedAtMs`. */
  phase: { kind: 'waiting'; dueAtMs: number } | { kind: 'scraping'; startedAtMs: number };
  sample: { load: ModelServerLoad; atMs: number } | undefined;
  /** The histogram totals the next measurement starts from, and the last measurement. */
  generation: Generation | undefined;
  /** False once no pool lists it: kept only to remember a no-metrics verdict until it is due. */
  wanted: boolean;
  /** Its period over `periodMs`: above 1 for a page over PAGE_BYTES_PER_PERIOD. */
  stretch: number;
}

interface Generation {
  baseSeconds: number;
  baseTokens: number;
  interTokenLatencyMs: number | undefined;
  measuredAtMs: number;
}

/**
 * The generation record after a scrape that read `seconds` and `tokens` (cumulative) at `nowMs`.
 */
function nextGeneration(
  previous: Generation | undefined,
  seconds: number | undefined,
  tokens: number | undefined,
  nowMs: number,
): Generation | undefined {
  if (seconds === undefined || tokens === undefined) return undefined;
  const restarted =
    previous === undefined || tokens < previous.baseTokens || seconds < previous.baseSeconds;
  if (restarted)
    return {
      baseSeconds: seconds,
      baseTokens: tokens,
      interTokenLatencyMs: undefined,
      measuredAtMs: nowMs,
    };
  const newTokens = tokens - previous.baseTokens;
  if (newTokens < MIN_TOKENS_FOR_INTER_TOKEN_LATENCY) return previous;
  return {
    baseSeconds: seconds,
    baseTokens: tokens,
    interTokenLatencyMs: ((seconds - previous.baseSeconds) * 1000) / newTokens,
    measuredAtMs: nowMs,
  };
}

function positive(name: string, value: number): number {
  if (!(Number.isFinite(value) && value > 0))
    throw new RangeError(`${name} must be a finite number above 0, not ${value}`);
  return value;
}

export class ScrapeSchedule {
  readonly periodMs: number;
  readonly #noMetricsBackoffMs: number;
  readonly #maxFailureBackoffMs: number;
  readonly #staleAfterMs: number;
  readonly #rng: RandomFn;
  readonly #targets = new Map<string, Target>();

  constructor(options: ScrapeScheduleOptions, rng: RandomFn) {
    this.periodMs = positive('periodMs', options.periodMs);
    this.#noMetricsBackoffMs = positive(
      'noMetricsBackoffMs',
      options.noMetricsBackoffMs ?? SCRAPE_SCHEDULE_DEFAULTS.noMetricsBackoffMs,
    );
    this.#maxFailureBackoffMs = Math.max(
      this.periodMs,
      positive(
        'maxFailureBackoffMs',
        options.maxFailureBackoffMs ?? SCRAPE_SCHEDULE_DEFAULTS.maxFailureBackoffMs,
      ),
    );
    this.#staleAfterMs = positive(
      'staleAfterMs',
      options.staleAfterMs ?? SCRAPE_SCHEDULE_DEFAULTS.staleAfterPeriods * this.periodMs,
    );
    this.#rng = rng;
  }

  /**
   * The targets to scrape from now on (metrics URLs). A new one is first due at a random point
   * of the next period, so targets added together (a pool's first subscriber) spread out.
   */
  setTargets(targets: Iterable<string>, nowMs: number): void {
    const wanted = new Set(targets);
    for (const [key, target] of this.#targets) {
      if (wanted.has(key)) continue;
      const remembers =
        target.health.kind === 'no-metrics' &&
        target.phase.kind === 'waiting' &&
        target.phase.dueAtMs > nowMs;
      if (remembers) target.wanted = false;
      else this.#targets.delete(key);
    }
    for (const key of wanted) {
      const known = this.#targets.get(key);
      if (known !== undefined) {
        known.wanted = true;
        continue;
      }
      this.#targets.set(key, {
        health: { kind: 'new' },
        phase: { kind: 'waiting', dueAtMs: nowMs + this.#rng() * this.periodMs },
        sample: undefined,
        generation: undefined,
        wanted: true,
        stretch: 1,
      });
    }
  }

  /**
   * Up to `limit` targets due at `nowMs`, the longest overdue first, now marked as being scraped:
   * each must come back through `record`.
   */
  takeDue(nowMs: number, limit: number): string[] {
    if (limit <= 0) return [];
    const due: [string, number][] = [];
    for (const [key, t] of this.#targets)
      if (t.wanted && t.phase.kind === 'waiting' && t.phase.dueAtMs <= nowMs)
        due.push([key, t.phase.dueAtMs]);
    due.sort((a, b) => a[1] - b[1]);
    const taken = due.slice(0, limit).map(([key]) => key);
    for (const key of taken)
      this.#targets.get(key)!.phase = { kind: 'scraping', startedAtMs: nowMs };
    return taken;
  }

  /** When the next target is due (undefined: none is waiting). */
  nextDueAtMs(): number | undefined {
    let next: number | undefined;
    for (const t of this.#targets.values())
      if (t.wanted && t.phase.kind === 'waiting' && (next === undefined || t.phase.dueAtMs < next))
        next = t.phase.dueAtMs;
    return next;
  }

  /** The outcome of a scrape handed out by `takeDue`; a target removed meanwhile is ignored. */
  record(key: string, outcome: ScrapeOutcome, nowMs: number): ScrapeTransition | undefined {
    const target = this.#targets.get(key);
    if (target === undefined || target.phase.kind !== 'scraping') return undefined;
    const startedAtMs = target.phase.startedAtMs;
    const before = target.health;
    let transition: ScrapeTransition | undefined;
    let waitMs: number;
    switch (outcome.kind) {
      case 'load':
        target.health = { kind: 'reporting' };
        target.sample = { load: outcome.load, atMs: nowMs };
        target.generation = nextGeneration(
          target.generation,
          outcome.load.interTokenSeconds,
          outcome.load.interTokens,
          nowMs,
        );
        target.stretch = Math.max(1, (outcome.bytes ?? 0) / PAGE_BYTES_PER_PERIOD);
        waitMs = this.#jittered(this.periodMs * target.stretch);
        if (before.kind === 'failing' || before.kind === 'no-metrics')
          transition = { kind: 'reporting', after: before.kind };
        break;
      case 'no-metrics':
        target.health = { kind: 'no-metrics' };
        target.sample = undefined;
        target.generation = undefined;
        waitMs = this.#jittered(this.#noMetricsBackoffMs);
        if (before.kind !== 'no-metrics')
          transition = { kind: 'no-metrics', reason: outcome.reason, retryInMs: waitMs };
        break;
      case 'failed': {
        const failures = before.kind === 'failing' ? before.failures + 1 : 1;
        target.health = { kind: 'failing', failures };
        const ceilingMs = Math.min(this.#maxFailureBackoffMs, this.periodMs * 2 ** failures);
        waitMs = ceilingMs * (0.5 + 0.5 * this.#rng());
        if (before.kind !== 'failing') transition = { kind: 'failing', reason: outcome.reason };
        break;
      }
    }
    target.phase = { kind: 'waiting', dueAtMs: Math.max(nowMs, startedAtMs + waitMs) };
    return transition;
  }

  /** How a target stands (undefined: not known). */
  health(key: string): TargetHealth | undefined {
    return this.#targets.get(key)?.health;
  }

  /** The targets wanted now, by how they stand (for a gauge). */
  counts(): Record<TargetHealth['kind'], number> {
    const counts = { new: 0, reporting: 0, 'no-metrics': 0, failing: 0 };
    for (const t of this.#targets.values()) if (t.wanted) counts[t.health.kind]++;
    return counts;
  }

  /**
   * The `load` message of a pool: each endpoint (its snapshot id and metrics URL) with a sample
   * younger than `staleAfterMs`, in the order given.
   */
  poolLoad(endpoints: readonly { id: string; target: string }[], nowMs: number): PoolLoad {
    const entries: EndpointLoad[] = [];
    for (const { id, target } of endpoints) {
      const known = this.#targets.get(target);
      const sample = known?.sample;
      if (sample === undefined) continue;
      const ageMs = Math.max(0, Math.round(nowMs - sample.atMs));
      // A page scraped less often for its size (PAGE_BYTES_PER_PERIOD) stays fresh as much longer.
      if (ageMs > this.#staleAfterMs * known!.stretch) continue;
      const { running, waiting, kvCacheUsage, loadedAdapters } = sample.load;
      entries.push({
        id,
        ...(running === undefined ? {} : { running }),
        ...(waiting === undefined ? {} : { waiting }),
        ...(kvCacheUsage === undefined ? {} : { kvCacheUsage }),
        // More adapters than the stream's schema carries: say nothing of them rather than lose the load.
        ...(loadedAdapters === undefined || loadedAdapters.length > MAX_LOADED_ADAPTERS
          ? {}
          : { loadedAdapters: [...loadedAdapters] }),
        ...this.#interTokenLatency(known?.generation, nowMs),
        ageMs,
      });
    }
    return { endpoints: entries };
  }

  /** The measured inter-token latency of a target, while it is recent enough to send. */
  #interTokenLatency(
    generation: Generation | undefined,
    nowMs: number,
  ): { interTokenLatencyMs?: number } {
    const ms = generation?.interTokenLatencyMs;
    if (ms === undefined || nowMs - generation!.measuredAtMs > INTER_TOKEN_LATENCY_MAX_AGE_MS)
      return {};
    return { interTokenLatencyMs: Math.round(ms * 1000) / 1000 };
  }

  #jittered(ms: number): number {
    return ms * (1 - JITTER + 2 * JITTER * this.#rng());
  }
}
