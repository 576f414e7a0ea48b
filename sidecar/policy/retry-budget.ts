/**
 * The retry budget of a pool, after Finagle's and linkerd's RetryBudget: retries draw from a
 * budget that first attempts fill, so retries can add at most a fixed fraction of load.
 *
 * Without it, an overloaded backend that fails half its requests receives 1.5×, then 2×, ... its
 * traffic as every client retries: the retry storm that turns a slowdown into an outage. A plain
 * per-request `maxAttempts` does not prevent that; a budget shared by all requests does.
 */
import { SlidingWindow } from './sliding-window.ts';
import type { Clock, RetryPolicy } from './types.ts';

/** Retries and first attempts are counted over the last 10 s, as in Finagle's default TTL. */
export const RETRY_BUDGET_WINDOW_MS = 10_000;

type BudgetCounter = 'firstAttempts' | 'retries';

/**
 * How many retries the window may hold: budgetPercent/100 · firstAttempts + minPerSecond ·
 * windowSeconds. The second term is a reserve so that a quiet pool (a few requests a minute)
 * can still retry at all. Negative or NaN parameters count as 0; Infinity means unlimited.
 */
export function retryAllowance(policy: RetryPolicy, firstAttemptsInWindow: number): number {
  const percent = policy.budgetPercent >= 0 ? policy.budgetPercent : 0;
  const perSecond = policy.minPerSecond >= 0 ? policy.minPerSecond : 0;
  const proportional = firstAttemptsInWindow > 0 ? (percent / 100) * firstAttemptsInWindow : 0;
  return proportional + perSecond * (RETRY_BUDGET_WINDOW_MS / 1000);
}

export class RetryBudget {
  #policy: RetryPolicy;
  readonly #clock: Clock;
  readonly #window = new SlidingWindow<BudgetCounter>(RETRY_BUDGET_WINDOW_MS, [
    'firstAttempts',
    'retries',
  ]);

  constructor(policy: RetryPolicy, clock: Clock) {
    this.#policy = policy;
    this.#clock = clock;
  }

  /** A new policy applies at once; the counts of the window are kept. */
  setPolicy(policy: RetryPolicy): void {
    this.#policy = policy;
  }

  /** Counts one first attempt (a client request) into the window: it earns retry credit. */
  recordRequest(): void {
    this.#window.add(this.#clock.nowMs(), 'firstAttempts');
  }

  /**
   * Takes one retry from the budget if the window still allows one: retriesInWindow <
   * retryAllowance(...). Returns false, and counts nothing, when the budget is spent.
   */
  tryWithdraw(): boolean {
    const now = this.#clock.nowMs();
    const { firstAttempts, retries } = this.#window.totals(now);
    if (!(retries < retryAllowance(this.#policy, firstAttempts))) return false;
    this.#window.add(now, 'retries');
    return true;
  }

  /** Counts in the current window, for status pages and tests. */
  snapshot(): { firstAttempts: number; retries: number; allowance: number } {
    const { firstAttempts, retries } = this.#window.totals(this.#clock.nowMs());
    return { firstAttempts, retries, allowance: retryAllowance(this.#policy, firstAttempts) };
  }
}
