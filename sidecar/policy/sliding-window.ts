/**
 * A bucketed sliding time window of named counters: the health window of an endpoint
 * (requests, errors, 429s) and the retry budget's window (first attempts, retries).
 *
 * Buckets instead of a timestamp per event: memory and work per event stay constant at any
 * request rate. The price is granularity: with B buckets the window covers between
 * (B − 1)/B · windowMs and windowMs of history, never more than windowMs.
 */

/** Ten buckets: the window forgets in steps of a tenth of its length. */
export const DEFAULT_BUCKET_COUNT = 10;

/**
 * Bucket length used when the window length is not a positive number, so that a bad policy
 * degrades to a window that forgets almost at once instead of throwing or counting forever.
 */
const MIN_BUCKET_MS = 1;

interface Bucket {
  /** Absolute bucket number floor(now / bucketMs); NaN while the bucket has never been used. */
  index: number;
  counts: number[];
}

export class SlidingWindow<K extends string> {
  readonly windowMs: number;
  readonly #keys: readonly K[];
  readonly #bucketMs: number;
  readonly #buckets: Bucket[];
  /**
   * The newest bucket number seen. Time never moves back behind it: the clock is monotonic by
   * contract, and if it still jumps back, events are counted into the newest bucket rather than
   * resurrecting (or double-counting into) old ones. Counts can therefore never go negative.
   */
  #latest = -Infinity;

  constructor(windowMs: number, keys: readonly K[], bucketCount: number = DEFAULT_BUCKET_COUNT) {
    const buckets = Number.isInteger(bucketCount) && bucketCount >= 1 ? bucketCount : 1;
    const bucketMs = windowMs / buckets;
    this.windowMs = windowMs;
    this.#keys = keys;
    this.#bucketMs = bucketMs > 0 ? bucketMs : MIN_BUCKET_MS;
    this.#buckets = Array.from({ length: buckets }, () => ({
      index: NaN,
      counts: keys.map(() => 0),
    }));
  }

  /** Adds `amount` (default 1) to counter `key` at time `nowMs`. */
  add(nowMs: number, key: K, amount = 1): void {
    const position = this.#keys.indexOf(key);
    if (position < 0 || !Number.isFinite(amount) || amount <= 0) return;
    const bucket = this.#bucketAt(nowMs);
    bucket.counts[position] = (bucket.counts[position] as number) + amount;
  }

  /** The sum of every counter over the window ending at `nowMs`. */
  totals(nowMs: number): Record<K, number> {
    this.#bucketAt(nowMs);
    const sums = this.#keys.map(() => 0);
    const oldest = this.#latest - this.#buckets.length;
    for (const bucket of this.#buckets) {
      if (!(bucket.index > oldest)) continue;
      for (let i = 0; i < sums.length; i++) {
        sums[i] = (sums[i] as number) + (bucket.counts[i] as number);
      }
    }
    const out = {} as Record<K, number>;
    this.#keys.forEach((key, i) => (out[key] = sums[i] as number));
    return out;
  }

  /** Forgets everything, e.g. when a breaker closes and the endpoint starts with a clean slate. */
  clear(): void {
    for (const bucket of this.#buckets) {
      bucket.index = NaN;
      bucket.counts.fill(0);
    }
  }

  /** The bucket for `nowMs`, recycled when it still holds an older turn of the ring. */
  #bucketAt(nowMs: number): Bucket {
    const raw = Math.floor(nowMs / this.#bucketMs);
    // Backwards or non-finite time: stay in the newest bucket (see #latest).
    const index = raw > this.#latest && Number.isFinite(raw) ? raw : this.#latest;
    this.#latest = Number.isFinite(index) ? index : 0;
    const n = this.#buckets.length;
    const slot = ((this.#latest % n) + n) % n;
    const bucket = this.#buckets[slot] as Bucket;
    if (bucket.index !== this.#latest) {
      bucket.index = this.#latest;
      bucket.counts.fill(0);
    }
    return bucket;
  }
}
