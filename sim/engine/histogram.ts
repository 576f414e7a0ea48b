/**
 * A cumulative Prometheus histogram, as prometheus_client keeps one: a count per upper bound, a
 * total count and a sum. The simulator's `/metrics` prints it the way vLLM and SGLang print
 * theirs (load-report.ts); the balancer's scrapers read the `_sum` and `_count` lines.
 */

/**
 * vLLM's buckets for its per-token latency histograms (`vllm:inter_token_latency_seconds`,
 * `vllm:time_per_output_token_seconds`), in seconds; SGLang uses the same range.
 */
export const PER_TOKEN_LATENCY_BUCKETS_S: readonly number[] = [
  0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
  40.0, 80.0,
];

export interface HistogramSnapshot {
  /** Upper bounds, ascending; `+Inf` is implied and equals `count`. */
  readonly bounds: readonly number[];
  /** Cumulative: how many observations were at most each bound. */
  readonly cumulative: readonly number[];
  readonly count: number;
  readonly sum: number;
}

export class Histogram {
  readonly #bounds: readonly number[];
  /** Not cumulative: observations that fell into each bucket (the last is above every bound). */
  #perBucket: number[];
  #count = 0;
  #sum = 0;

  constructor(bounds: readonly number[]) {
    this.#bounds = bounds;
    this.#perBucket = new Array<number>(bounds.length + 1).fill(0);
  }

  /** `times` observations of `value` (a run of tokens that took the same time each). */
  observe(value: number, times = 1): void {
    if (!Number.isFinite(value) || value < 0 || !(times > 0)) return;
    let i = 0;
    while (i < this.#bounds.length && value > (this.#bounds[i] as number)) i++;
    this.#perBucket[i] = (this.#perBucket[i] as number) + times;
    this.#count += times;
    this.#sum += value * times;
  }

  reset(): void {
    this.#perBucket = this.#perBucket.map(() => 0);
    this.#count = 0;
    this.#sum = 0;
  }

  snapshot(): HistogramSnapshot {
    let running = 0;
    const cumulative = this.#bounds.map((_, i) => (running += this.#perBucket[i] as number));
    return { bounds: this.#bounds, cumulative, count: this.#count, sum: this.#sum };
  }
}
