/**
 * What one sidecar sees of its pool's demand, for the controller's autoscaling gauges (issue 44,
 * `SidecarReport.demand`): how many requests the app sent to the pool, and how many of them the
 * sidecar answered itself with a 429 or 503 (shed), as rates over the time since the previous
 * report. The counts now (queued, held) are read by the report itself.
 *
 * Pure: the clock is injected.
 */
import type { Clock } from './types.ts';

/**
 * Shortest window a rate is measured over. A report follows every applied snapshot and, with
 * budgets, may come 250 ms after the last one: one request over 5 ms would read as 200 a second.
 * A report sooner than this repeats the last rates and leaves the window open.
 */
export const DEMAND_MIN_WINDOW_MS = 1_000;

export interface DemandRates {
  /** Requests the app sent to the pool, per second. */
  requestsPerSecond: number;
  /** Requests the sidecar answered itself with a 429 or 503, per second. */
  shedPerSecond: number;
}

/** Rates are sent with three decimals: enough for one request in 10 minutes, and short JSON. */
function rounded(perSecond: number): number {
  return Math.round(perSecond * 1000) / 1000;
}

/** Counts a pool's requests and sheds; `take()` turns them into rates, once per report. */
export class DemandMeter {
  readonly #clock: Clock;
  #requests = 0;
  #shed = 0;
  #sinceMs: number;
  #last: DemandRates | undefined;

  constructor(clock: Clock) {
    this.#clock = clock;
    this.#sinceMs = clock.nowMs();
  }

  /** A request of the app for this pool (counted once, whatever its attempts). */
  request(): void {
    this.#requests++;
  }

  /** A request answered by the sidecar itself with a 429 or 503 (no endpoint, queue, budget…). */
  shed(): void {
    this.#shed++;
  }

  /**
   * The rates since the previous `take` (the previous report), and a new window from now. Sooner
   * than `DEMAND_MIN_WINDOW_MS` after it, the previous rates again (the window stays open); the
   * first window, when that short, is measured as if it were that long.
   */
  take(): DemandRates {
    const nowMs = this.#clock.nowMs();
    const elapsedMs = nowMs - this.#sinceMs;
    const short = elapsedMs < DEMAND_MIN_WINDOW_MS;
    if (short && this.#last !== undefined) return this.#last;
    const seconds = Math.max(elapsedMs, DEMAND_MIN_WINDOW_MS) / 1000;
    const rates: DemandRates = {
      requestsPerSecond: rounded(this.#requests / seconds),
      shedPerSecond: rounded(this.#shed / seconds),
    };
    if (short) return rates;
    this.#requests = 0;
    this.#shed = 0;
    this.#sinceMs = nowMs;
    this.#last = rates;
    return rates;
  }
}
