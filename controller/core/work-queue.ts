/**
 * The controller's work queue: pool keys waiting to be reconciled, with the guarantees of
 * client-go's rate-limited work queue.
 *
 * - De-duplicated: a key queued twice is processed once.
 * - Never concurrent per key: a key handed out by `get` is not handed out again until `done`;
 *   an `add` meanwhile marks it dirty and queues it again at `done`, so no change is lost.
 * - Backoff per key: `retry` re-adds after `baseDelayMs × 2^failures`, capped at `maxDelayMs`,
 *   until `forget` (after a successful reconcile) resets the count.
 * - An overall token bucket (`ratePerSec`, `burst`) spaces retries of many keys out, so a
 *   cluster-wide failure (API server down) does not turn into a retry storm. Like client-go's
 *   default controller rate limiter, the delay of a retry is the larger of the two, and plain
 *   `add`s are not rate-limited (events are already de-duplicated by key).
 *
 * Pure: time comes in as `nowMs` arguments and nothing is scheduled here. The shell runs one
 * timer for `nextDueAt()`, and calls `get(now)` (which takes the due keys) whenever it has a free
 * worker: after an `add`, a `done`, or when that timer fires.
 */

export interface WorkQueueOptions {
  /** Delay of the first retry of a key; doubles with each further failure. Default 5 ms. */
  baseDelayMs?: number;
  /** Longest per-key delay. Default 1000 s. */
  maxDelayMs?: number;
  /** Retries per second over all keys, sustained. Default 10. */
  ratePerSec?: number;
  /** Retries allowed at once before the rate applies. Default 100. */
  burst?: number;
}

export const WORK_QUEUE_DEFAULTS: Readonly<Required<WorkQueueOptions>> = {
  baseDelayMs: 5,
  maxDelayMs: 1_000_000,
  ratePerSec: 10,
  burst: 100,
};

/**
 * A token bucket with the semantics of Go's `rate.Limiter.Reserve`: every request takes a token
 * at once, the balance may go negative, and the wait is the time until it is back at zero. So
 * reservations queue up fairly instead of failing.
 */
export class TokenBucket {
  readonly #ratePerMs: number;
  readonly #burst: number;
  #tokens: number;
  #atMs: number | undefined;

  constructor(ratePerSec: number, burst: number) {
    if (!(Number.isFinite(ratePerSec) && ratePerSec > 0)) {
      throw new RangeError(`ratePerSec must be a finite number above 0, not ${ratePerSec}`);
    }
    if (!(Number.isInteger(burst) && burst >= 1)) {
      throw new RangeError(`burst must be a whole number of at least 1, not ${burst}`);
    }
    this.#ratePerMs = ratePerSec / 1000;
    this.#burst = burst;
    this.#tokens = burst;
  }

  /** Takes a token; returns how long (ms from `nowMs`) the caller must wait for it. */
  reserve(nowMs: number): number {
    if (this.#atMs !== undefined && nowMs > this.#atMs) {
      this.#tokens = Math.min(this.#burst, this.#tokens + (nowMs - this.#atMs) * this.#ratePerMs);
    }
    // Time never runs backwards for the bucket: an earlier `nowMs` counts as the last one.
    this.#atMs = Math.max(nowMs, this.#atMs ?? nowMs);
    this.#tokens -= 1;
    return this.#tokens >= 0 ? 0 : -this.#tokens / this.#ratePerMs;
  }
}

interface Waiting {
  dueAtMs: number;
  /** Insertion order, so keys due at the same time come out in the order they were added. */
  seq: number;
}

export class WorkQueue<K extends string = string> {
  readonly #baseDelayMs: number;
  readonly #maxDelayMs: number;
  readonly #bucket: TokenBucket;

  /** Keys ready to hand out, in order. Every key in it is dirty and not processing. */
  #queue: K[] = [];
  #head = 0;
  /** Keys that need processing (queued, or re-added while processing). */
  readonly #dirty = new Set<K>();
  /** Keys handed out by `get` and not yet `done`. */
  readonly #processing = new Set<K>();
  /** Keys to add later, by `addAfter` or `retry`. */
  readonly #waiting = new Map<K, Waiting>();
  #seq = 0;
  /** Consecutive failures per key, for the backoff. */
  readonly #failures = new Map<K, number>();
  #shutDown = false;

  constructor(options: WorkQueueOptions = {}) {
    const o = { ...WORK_QUEUE_DEFAULTS, ...options };
    if (!(Number.isFinite(o.baseDelayMs) && o.baseDelayMs >= 0)) {
      throw new RangeError(
        `baseDelayMs must be a finite number of at least 0, not ${o.baseDelayMs}`,
      );
    }
    if (!(Number.isFinite(o.maxDelayMs) && o.maxDelayMs >= o.baseDelayMs)) {
      throw new RangeError(
        `maxDelayMs must be a finite number of at least baseDelayMs (${o.baseDelayMs}), not ${o.maxDelayMs}`,
      );
    }
    this.#baseDelayMs = o.baseDelayMs;
    this.#maxDelayMs = o.maxDelayMs;
    this.#bucket = new TokenBucket(o.ratePerSec, o.burst);
  }

  /** Queue `key` now (a no-op if it is already queued, or after `shutDown`). */
  add(key: K): void {
    if (this.#shutDown || this.#dirty.has(key)) return;
    this.#dirty.add(key);
    if (!this.#processing.has(key)) this.#queue.push(key);
  }

  /**
   * Queue `key` once `delayMs` have passed since `nowMs` (at once when `delayMs` <= 0). When the
   * key is already waiting, the earlier due time wins.
   */
  addAfter(key: K, delayMs: number, nowMs: number): void {
    if (this.#shutDown) return;
    if (!(delayMs > 0)) {
      this.add(key);
      return;
    }
    const dueAtMs = nowMs + delayMs;
    const waiting = this.#waiting.get(key);
    if (waiting !== undefined && waiting.dueAtMs <= dueAtMs) return;
    this.#waiting.set(key, { dueAtMs, seq: this.#seq++ });
  }

  /** When the earliest waiting key is due, or undefined when none is waiting. */
  nextDueAt(): number | undefined {
    let earliest: number | undefined;
    for (const w of this.#waiting.values()) {
      if (earliest === undefined || w.dueAtMs < earliest) earliest = w.dueAtMs;
    }
    return earliest;
  }

  /** Queues every waiting key due at `nowMs`, earliest first; returns them. */
  takeDue(nowMs: number): K[] {
    const due = [...this.#waiting]
      .filter(([, w]) => w.dueAtMs <= nowMs)
      .sort(([, a], [, b]) => a.dueAtMs - b.dueAtMs || a.seq - b.seq)
      .map(([key]) => key);
    for (const key of due) {
      this.#waiting.delete(key);
      this.add(key);
    }
    return due;
  }

  /**
   * The next key to process, or undefined when none is ready. With `nowMs`, waiting keys due by
   * then are queued first (`takeDue`). The caller must call `done(key)` when finished, whatever
   * the outcome.
   */
  get(nowMs?: number): K | undefined {
    if (nowMs !== undefined) this.takeDue(nowMs);
    if (this.#head >= this.#queue.length) return undefined;
    const key = this.#queue[this.#head] as K;
    this.#head += 1;
    if (this.#head > 1024 && this.#head * 2 > this.#queue.length) {
      this.#queue = this.#queue.slice(this.#head);
      this.#head = 0;
    }
    this.#dirty.delete(key);
    this.#processing.add(key);
    return key;
  }

  /** Marks `key` as finished; if it was added again meanwhile, it is queued now. */
  done(key: K): void {
    if (!this.#processing.delete(key)) return;
    if (this.#dirty.has(key)) this.#queue.push(key);
  }

  /**
   * Queue `key` again after its backoff (a failed reconcile); returns the delay in ms. The delay
   * is the larger of the key's exponential backoff and the overall token bucket's wait.
   */
  retry(key: K, nowMs: number): number {
    const failures = this.#failures.get(key) ?? 0;
    this.#failures.set(key, failures + 1);
    // 2 ** failures is Infinity past 1023 failures; min() caps it all the same.
    const backoffMs = Math.min(this.#maxDelayMs, this.#baseDelayMs * 2 ** failures);
    const delayMs = Math.max(backoffMs, this.#bucket.reserve(nowMs));
    this.addAfter(key, delayMs, nowMs);
    return delayMs;
  }

  /** Resets the backoff of `key` (after a successful reconcile, or when the key is gone). */
  forget(key: K): void {
    this.#failures.delete(key);
  }

  /** How many times `key` was retried since it was last forgotten. */
  failures(key: K): number {
    return this.#failures.get(key) ?? 0;
  }

  /** Keys ready to hand out (not the waiting or processing ones). */
  len(): number {
    return this.#queue.length - this.#head;
  }

  /** Keys waiting for their due time. */
  waitingLen(): number {
    return this.#waiting.size;
  }

  /** Keys handed out and not yet done. */
  processingLen(): number {
    return this.#processing.size;
  }

  /**
   * Stops taking keys: `add`, `addAfter` and `retry` do nothing from now on, waiting keys are
   * dropped. Queued keys can still be drained with `get`; `isIdle` says when workers are done.
   */
  shutDown(): void {
    this.#shutDown = true;
    this.#waiting.clear();
  }

  isShutDown(): boolean {
    return this.#shutDown;
  }

  /** Nothing queued and nothing processing. */
  isIdle(): boolean {
    return this.len() === 0 && this.#processing.size === 0;
  }
}
