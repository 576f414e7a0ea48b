/**
 * The choice step of a pick, behind one small interface: the switchyard policy (default-chooser.ts:
 * affinity, then least loaded and P2C on score) and the routing benchmark's baselines
 * (baseline-pickers.ts: round-robin, random, least-connections) are peers, and the balancer holds
 * the one its configuration names (`BalancerDeps.picker`).
 *
 * The balancer does what every chooser shares before it asks (candidates: not excluded, breaker
 * admits, no cooldown; the tier; a pinned request; the shed when no one is left) and after
 * (the half-open probe slot, in-flight +1), so a chooser only chooses.
 *
 * A new routing rule (by model, by adapter, by priority: issues 42 and 43) is a module of its own
 * and one line in `DefaultChooser.choose` (default-chooser.ts), which marks the place.
 */
import type { AffinityResult, PickRequest, PoolPolicy } from './types.ts';

/** What a chooser is given: one pick's request and the endpoints it may go to. */
export interface ChoiceInput<S> {
  now: number;
  /** The pool's policy at this pick (it changes with updates). */
  policy: PoolPolicy;
  request: PickRequest;
  /**
   * The tier set affinity hashes over: every non-drifted endpoint of the chosen tier (Failover)
   * or of the pool (Balance), live or not (endpoint-pool.ts, TierChoice).
   */
  pool: readonly S[];
  /** The endpoints of `pool` that may take the request now; never empty. */
  candidates: readonly S[];
}

/** The endpoint a chooser chose, and why as far as affinity goes (`none` for no affinity). */
export interface Choice<S> {
  endpoint: S;
  affinity: AffinityResult;
}

export interface Chooser<S> {
  choose(input: ChoiceInput<S>): Choice<S>;
}
