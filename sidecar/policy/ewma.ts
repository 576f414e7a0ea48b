/**
 * Exponentially weighted moving average of time-to-first-token, per endpoint.
 *
 * TTFT is the latency signal of LLM serving: it grows with the endpoint's queue and prefill load
 * long before errors appear. An EWMA damps single outliers (one long prompt) so that the score
 * does not flap and herd traffic back and forth between endpoints.
 */
import { lowerBound, medianWithout } from './median.ts';

/**
 * Weight of the newest sample: value ← 0.8·value + 0.2·sample. About the last ten samples
 * matter (0.8^10 ≈ 0.1), which follows a real slowdown within a few seconds of traffic while one
 * outlier moves the estimate by at most a fifth of its excess.
 */
export const EWMA_NEW_SAMPLE_WEIGHT = 0.2;

/**
 * Accepted samples are raised to at least this. A TTFT of 0 ms only comes from a coarse clock,
 * and an EWMA that decays to 0 would make the score `(inFlight + 1) · ewma` zero at any queue
 * depth: the endpoint would take all traffic (the herd).
 */
export const MIN_TTFT_MS = 1;

/**
 * Used in place of `policy.defaultTtftMs` when that is not a positive finite number, so that a
 * seed is never 0, negative or NaN. The schema is expected to reject such policies anyway.
 */
export const FALLBACK_DEFAULT_TTFT_MS = 1000;

/** A measured TTFT can be used when it is a finite, non-negative number of milliseconds. */
export function isUsableTtftSample(sampleMs: number): boolean {
  return Number.isFinite(sampleMs) && sampleMs >= 0;
}

/**
 * TTFT grows with the prompt the server must prefill, so raw samples mix load with request size
 * (a 60 KB prompt is slow anywhere). A sample is scaled to what a request of REFERENCE_REQUEST_BYTES
 * would have taken: `ttft × REFERENCE / bytes` for larger requests; smaller ones count as they
 * are (their TTFT is mostly fixed cost). Without a size (the shell did not say) it is kept.
 */
export const REFERENCE_REQUEST_BYTES = 4096;

export function normalisedTtftMs(ttftMs: number, requestBytes: number | undefined): number {
  if (requestBytes === undefined || !(requestBytes > REFERENCE_REQUEST_BYTES)) return ttftMs;
  return (ttftMs * REFERENCE_REQUEST_BYTES) / requestBytes;
}

/** One EWMA step with EWMA_NEW_SAMPLE_WEIGHT on the new sample. */
export function blendEwma(previousMs: number, sampleMs: number): number {
  return (1 - EWMA_NEW_SAMPLE_WEIGHT) * previousMs + EWMA_NEW_SAMPLE_WEIGHT * sampleMs;
}

/**
 * The EWMA TTFT of every endpoint of a pool, keyed by endpoint id.
 *
 * An endpoint without samples of its own is "seeded": it reads as the pool median of the
 * endpoints that do have samples, or `defaultTtftMs` while none has. Starting at 0 would make a
 * new endpoint look infinitely fast and herd every sidecar onto it at once; starting at the
 * median makes it an average choice that P2C tries at its fair rate. The seed is not frozen at
 * creation time: until the endpoint's first sample it follows the pool median, so an endpoint
 * that stays unpicked for a while does not keep a stale guess. Its first sample is blended into
 * the seed like any other sample (the seed is the prior).
 */
export class TtftEwmas {
  readonly #own = new Map<string, number>();
  /** Per endpoint, its own latest samples alone (`measured`): no seed in them. */
  readonly #measured = new Map<string, { measured: Measured; recent: number[] }>();
  /**
   * The values of `#own`, ascending, moved with each sample: the seed is read on picks, and at
   * 4,096 endpoints a median computed afresh after every sample was a sort per pick (issue 16).
   */
  readonly #sorted: number[] = [];
  #defaultTtftMs: number;

  constructor(defaultTtftMs: number) {
    this.#defaultTtftMs = sanitizeDefault(defaultTtftMs);
  }

  setDefault(defaultTtftMs: number): void {
    this.#defaultTtftMs = sanitizeDefault(defaultTtftMs);
  }

  /**
   * Feeds one TTFT sample. Non-finite or negative samples are ignored (a clock that went
   * backwards, a NaN from a broken timer): returns false then, true when the sample was used.
   */
  observe(id: string, sampleMs: number): boolean {
    if (!isUsableTtftSample(sampleMs)) return false;
    const own = this.#own.get(id);
    const sample = Math.max(sampleMs, MIN_TTFT_MS);
    const next = blendEwma(own ?? this.seedMs(), sample);
    if (own !== undefined) this.#sorted.splice(lowerBound(this.#sorted, own), 1);
    this.#sorted.splice(lowerBound(this.#sorted, next), 0, next);
    this.#own.set(id, next);
    const entry = this.#measured.get(id) ?? { measured: { ms: 0, samples: 0 }, recent: [] };
    entry.recent.push(sample);
    if (entry.recent.length > MEASURED_WINDOW) entry.recent.shift();
    // Kept, not computed when read: it is read for every candidate of every affinity pick.
    entry.measured.ms = medianOfFew(entry.recent);
    entry.measured.samples += 1;
    this.#measured.set(id, entry);
    return true;
  }

  /**
   * What the endpoint's own samples say, without the seed: the median of its last
   * MEASURED_WINDOW samples, and how many samples it has had; undefined before the first.
   * `valueMs` starts from the seed so that a newcomer is an average choice for P2C, but the seed
   * decays only as fast as the endpoint is picked: an endpoint with a dozen samples of 10 ms
   * still read over 100 ms from a 500 ms seed. A test of whether the endpoint *is* slower than
   * its peers (affinity's slowdown check) reads this instead.
   */
  measured(id: string): Readonly<Measured> | undefined {
    return this.#measured.get(id)?.measured;
  }

  /** The endpoint's EWMA, or the seed while it has no sample of its own. */
  valueMs(id: string): number {
    return this.#own.get(id) ?? this.seedMs();
  }

  /** True once the endpoint has at least one sample of its own. */
  hasSamples(id: string): boolean {
    return this.#own.has(id);
  }

  /** The value a seeded endpoint reads as: the median over endpoints with samples, or the default. */
  seedMs(): number {
    return medianWithout(this.#sorted) ?? this.#defaultTtftMs;
  }

  /** Drops a removed endpoint, so that its last value no longer moves the pool median. */
  forget(id: string): void {
    this.#measured.delete(id);
    const own = this.#own.get(id);
    if (own === undefined) return;
    this.#own.delete(id);
    this.#sorted.splice(lowerBound(this.#sorted, own), 1);
  }
}

/**
 * How many of an endpoint's latest samples its measured TTFT is the median of. A median of five
 * follows a server that stays slow after three slow samples, and forgets a burst of slow ones (the
 * start of a run, every conversation opening at once on cold servers) after three fast ones: in
 * the routing benchmark an average needed ten samples to outlast that burst, and each sidecar kept
 * sending a 4× slower server its homed prompts until it had them (docs/routing-history.md).
 */
export const MEASURED_WINDOW = 5;

/** An endpoint's TTFT from its own samples (`TtftEwmas.measured`). */
export interface Measured {
  ms: number;
  samples: number;
}

/**
 * The median of a handful of values (MEASURED_WINDOW), by insertion into a small sorted copy: it
 * runs on every finished attempt, where the policy sorts nothing (slow-detection.test.ts).
 */
function medianOfFew(values: readonly number[]): number {
  const sorted: number[] = [];
  for (const v of values) sorted.splice(lowerBound(sorted, v), 0, v);
  return medianWithout(sorted) as number;
}

function sanitizeDefault(defaultTtftMs: number): number {
  return Number.isFinite(defaultTtftMs) && defaultTtftMs > 0
    ? defaultTtftMs
    : FALLBACK_DEFAULT_TTFT_MS;
}
