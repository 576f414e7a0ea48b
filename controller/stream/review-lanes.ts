/**
 * The order TokenReviews go to the API server in: at most `limit` at once, a sidecar not let in
 * yet (`first`) before a connected sidecar's renewal (`renewal`). Why: at 10,000 sidecars the
 * renewals alone are ~34 reviews a second (one per sidecar per `--token-review-cache`), and on a
 * busy API server newcomers that queue behind them wait past their own timeout, retry at another
 * replica and are reviewed again (docs/benchmarks.md, the stalled 10,000 run). A renewal's
 * sidecar keeps its answer meanwhile (review-cache.ts, the renewal window), so it loses nothing
 * by waiting.
 */
export type ReviewLane = 'first' | 'renewal';

interface Job {
  key: string;
  start: () => void;
}

export class ReviewLanes {
  readonly #limit: number;
  #running = 0;
  readonly #first: Job[] = [];
  readonly #renewal: Job[] = [];

  constructor(limit: number) {
    this.#limit = Math.max(1, Math.floor(limit));
  }

  /** Reviews waiting for a slot, by lane (tests; the controller's debug view). */
  get waiting(): { first: number; renewal: number } {
    return { first: this.#first.length, renewal: this.#renewal.length };
  }

  /** Runs `work` when a slot is free and no earlier job of a higher lane waits. */
  run<T>(key: string, lane: ReviewLane, work: () => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const start = (): void => {
        this.#running++;
        work()
          .then(resolve, reject)
          .finally(() => {
            this.#running--;
            this.#next();
          });
      };
      (lane === 'first' ? this.#first : this.#renewal).push({ key, start });
      this.#next();
    });
  }

  /** A renewal that a sidecar now waits for (its answer ran out): it goes to the first lane. */
  promote(key: string): void {
    const i = this.#renewal.findIndex((job) => job.key === key);
    if (i < 0) return;
    this.#first.push(...this.#renewal.splice(i, 1));
  }

  #next(): void {
    while (this.#running < this.#limit) {
      const job = this.#first.shift() ?? this.#renewal.shift();
      if (job === undefined) return;
      job.start();
    }
  }
}
