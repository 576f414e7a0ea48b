/**
 * The circuit breaker of one endpoint, as a pure state machine:
 *
 *   closed ──(window trips)──► open ──(open period over)──► half-open ──(one probe)──► closed
 *                                ▲                               │
 *                                └─────(probe failed / 429)──────┘
 *
 * Why not the `opossum` library: it reads `Date.now()` and schedules its own `setTimeout`
 * for the reset, so it cannot run on an injected clock (no deterministic tests, no replayable
 * benchmark, and the lint rules of this folder forbid both); it wraps a promise-returning action,
 * while our outcome is only known mid-stream, long after the call that picked the endpoint
 * returned; and its reset period is fixed, with neither growth on consecutive openings nor
 * jitter, which is exactly what stops a fleet of sidecars from probing a sick backend in
 * lock-step. The state machine below has none of those problems and fits in one screenful of logic.
 *
 * Transitions happen when the owner calls in (`advance`, `evaluate`, `settleProbe`): there are no
 * timers, an open breaker becomes half-open the first time it is looked at after its period.
 */
import { HEALTH_CONSECUTIVE_ERRORS } from '../../crds/policy-defaults.ts';
import type { BreakerState, HealthPolicy, Rng } from './types.ts';

/**
 * Each open period is stretched or shrunk by up to ±20 %, drawn from the Rng. Without it, every
 * sidecar that saw the same outage opens at the same moment and probes at the same moment.
 */
export const OPEN_JITTER_FRACTION = 0.2;

/** Above 2^52 doubling stops mattering: any sane cap is far below, and 0 · 2^1024 would be NaN. */
const MAX_DOUBLINGS = 52;

/** Why a closed breaker opened. */
export type TripReason = 'errors' | 'rate-limited' | 'slow';

/** A state change, to be reported as a `PolicyEvent` by the owner (who knows the endpoint id). */
export interface BreakerTransition {
  from: BreakerState;
  to: BreakerState;
  reason: TripReason | 'probe-failed' | 'probe-succeeded' | 'open-expired';
  /** The drawn open period, when `to` is 'open'. */
  openForMs?: number;
}

/** What the health window says about an endpoint right now. */
export interface HealthReading {
  /** Finished requests that count toward health (successes, errors, 429s) in the window. */
  requests: number;
  errors: number;
  rateLimited: number;
  /** The endpoint's EWMA TTFT is above `maxTtftSlowdown` × the median of its peers. */
  slow: boolean;
  /** Errors in a row, ended by a success (429s and neutral outcomes leave it); 0 when unknown. */
  consecutiveErrors?: number;
}

/**
 * Whether a closed breaker should open, and why. A run of `consecutiveErrors` errors opens it
 * whatever the window holds: a sidecar with little traffic may never reach `minRequests`, and an
 * endpoint that fails at once holds nothing in flight, so it would keep looking the least loaded
 * (policy-defaults.ts, HEALTH_CONSECUTIVE_ERRORS). Then the `minRequests` gate: with few
 * requests a rate is noise (1 error in 2 requests is 50 %). A rate rule only fires when at least
 * one such event happened, so a threshold of 0 cannot open a breaker on a spotless window.
 * NaN thresholds compare false and never trip: a broken policy must not eject healthy endpoints.
 */
export function tripReason(reading: HealthReading, policy: HealthPolicy): TripReason | undefined {
  const { requests, errors, rateLimited } = reading;
  const streakLimit = policy.consecutiveErrors ?? HEALTH_CONSECUTIVE_ERRORS;
  if (streakLimit >= 1 && (reading.consecutiveErrors ?? 0) >= streakLimit) return 'errors';
  if (!(requests >= Math.max(1, policy.minRequests))) return undefined;
  if (errors > 0 && errors / requests >= policy.maxErrorRate) return 'errors';
  if (rateLimited > 0 && rateLimited / requests >= policy.max429Rate) return 'rate-limited';
  if (reading.slow) return 'slow';
  return undefined;
}

/**
 * The open period after `consecutiveOpenings` earlier openings without a successful probe:
 * min(openForMs · 2^consecutiveOpenings, maxOpenForMs) · (1 ± OPEN_JITTER_FRACTION), the result
 * again capped at maxOpenForMs (so the cap is a real bound; at the cap the jitter only shortens).
 * Consumes exactly one draw from `rng`.
 */
export function openDurationMs(
  policy: HealthPolicy,
  consecutiveOpenings: number,
  rng: Rng,
): number {
  const base = nonNegative(policy.openForMs);
  const cap = nonNegative(policy.maxOpenForMs);
  const doublings = Math.min(Math.max(0, consecutiveOpenings), MAX_DOUBLINGS);
  const nominal = Math.min(base * 2 ** doublings, cap);
  const draw = rng.next();
  const unit = draw >= 0 && draw <= 1 ? draw : 0.5; // a broken Rng means no jitter, not NaN
  const jittered = nominal * (1 + OPEN_JITTER_FRACTION * (2 * unit - 1));
  return Math.min(jittered, cap);
}

function nonNegative(ms: number): number {
  return ms >= 0 ? ms : 0; // NaN and negatives become 0
}

export class Breaker {
  #policy: HealthPolicy;
  #state: BreakerState = 'closed';
  #halfOpenAtMs = 0;
  /** Openings since the last successful probe: the exponent of the open period. */
  #consecutiveOpenings = 0;
  /** Token of the probe in flight while half-open; undefined when the slot is free. */
  #probe: number | undefined;
  #nextProbe = 1;

  constructor(policy: HealthPolicy) {
    this.#policy = policy;
  }

  /** Takes effect at the next opening; a running open period keeps its end. */
  setPolicy(policy: HealthPolicy): void {
    this.#policy = policy;
  }

  get state(): BreakerState {
    return this.#state;
  }

  /**
   * When the breaker admits a request again, as far as it knows: `nowMs` when it admits now,
   * the end of the open period when open, Infinity when half-open with its probe in flight
   * (that depends on how long the probe takes).
   */
  availableAtMs(nowMs: number): number {
    if (this.#state === 'open') return this.#halfOpenAtMs;
    return this.admits() ? nowMs : Infinity;
  }

  get probeInFlight(): boolean {
    return this.#probe !== undefined;
  }

  get consecutiveOpenings(): number {
    return this.#consecutiveOpenings;
  }

  /** May a request be sent now: closed, or half-open with the probe slot free. Call `advance` first. */
  admits(): boolean {
    return this.#state === 'closed' || (this.#state === 'half-open' && this.#probe === undefined);
  }

  /** Open → half-open once the open period is over. */
  advance(nowMs: number): BreakerTransition | undefined {
    if (this.#state !== 'open' || !(nowMs >= this.#halfOpenAtMs)) return undefined;
    this.#state = 'half-open';
    this.#probe = undefined;
    return { from: 'open', to: 'half-open', reason: 'open-expired' };
  }

  /** Closed → open when the health reading trips (see `tripReason`). No-op in other states. */
  evaluate(nowMs: number, reading: HealthReading, rng: Rng): BreakerTransition | undefined {
    if (this.#state !== 'closed') return undefined;
    const reason = tripReason(reading, this.#policy);
    return reason === undefined ? undefined : this.#open(nowMs, reason, rng);
  }

  /** Claims the single probe slot of a half-open breaker; undefined when there is none free. */
  takeProbe(): number | undefined {
    if (this.#state !== 'half-open' || this.#probe !== undefined) return undefined;
    this.#probe = this.#nextProbe++;
    return this.#probe;
  }

  /**
   * The probe holding `token` ended. 'succeeded' closes the breaker and resets the doubling;
   * 'failed' opens it again for a longer period; 'released' (the client left, a 4xx) frees the
   * slot without a verdict, so the next request probes instead. A stale token (the breaker moved
   * on meanwhile) is ignored.
   */
  settleProbe(
    token: number,
    verdict: 'succeeded' | 'failed' | 'released',
    nowMs: number,
    rng: Rng,
  ): BreakerTransition | undefined {
    if (this.#state !== 'half-open' || this.#probe !== token) return undefined;
    this.#probe = undefined;
    if (verdict === 'released') return undefined;
    if (verdict === 'failed') return this.#open(nowMs, 'probe-failed', rng);
    this.#state = 'closed';
    this.#consecutiveOpenings = 0;
    return { from: 'half-open', to: 'closed', reason: 'probe-succeeded' };
  }

  #open(nowMs: number, reason: BreakerTransition['reason'], rng: Rng): BreakerTransition {
    const from = this.#state;
    const openForMs = openDurationMs(this.#policy, this.#consecutiveOpenings, rng);
    this.#consecutiveOpenings += 1;
    this.#state = 'open';
    this.#halfOpenAtMs = nowMs + openForMs;
    this.#probe = undefined;
    return { from, to: 'open', reason, openForMs };
  }
}
