/**
 * The endpoints of one pool as the balancer knows them: membership and tiers, kept apart from the
 * pick the way linkerd2-proxy keeps its endpoint pool apart from its balancer. `update` applies a
 * pool update by endpoint id (a new endpoint gets a fresh state, a kept one keeps its health, a
 * departed one is retired while its attempts still stream, and one that comes back meanwhile
 * carries them as its successor); `get`, `order` and `tierFor` are what the pick and the views read.
 * What else the pool forgets of a departed endpoint (its EWMA, its prefixes) the caller forgets.
 */
import { idHash } from './bounded-load.ts';
import { Breaker } from './breaker.ts';
import { ReportedLoad } from './server-load.ts';
import { SlidingWindow } from './sliding-window.ts';
import type { EndpointSpec, HealthPolicy, Mode } from './types.ts';

export type HealthCounter = 'requests' | 'errors' | 'rateLimited';
const HEALTH_COUNTERS: readonly HealthCounter[] = ['requests', 'errors', 'rateLimited'];

/** Everything the balancer remembers about one endpoint id. */
export interface EndpointState {
  readonly id: string;
  /** Hash of the id, for rendezvous weights (computed once). */
  readonly idHash: number;
  spec: EndpointSpec;
  readonly breaker: Breaker;
  window: SlidingWindow<HealthCounter>;
  inFlight: number;
  /** Errors in a row from the endpoint, ended by a success (the breaker's consecutive rule). */
  errorStreak: number;
  /** Lifetime counts of finished attempts that count toward health. */
  requests: number;
  errors: number;
  rateLimited: number;
  /**
   * When the endpoint last finished an attempt (one of its previous life's too, when it came back
   * while they streamed); -Infinity for a new endpoint, whose first sample is a cold start too (a
   * new pod: model loading, empty prefix cache, no warmed kernels).
   */
  lastActivityMs: number;
  /** Set when an attempt starts on an idle endpoint: its next TTFT sample is a cold start. */
  dropNextSample: boolean;
  /** When its latest TTFT sample came in; -Infinity before the first (affinity's recheck). */
  lastTtftSampleAtMs: number;
  /** When this balancer first had it: its idleness (the score's fade) counts from here at most. */
  readonly addedAtMs: number;
  /** Not a candidate before this time (an upstream 429 with Retry-After); -Infinity for none. */
  cooldownUntilMs: number;
  /** Left the pool in an update; its attempts may still finish, without effect. */
  removed: boolean;
  /**
   * The state the id got when it came back while this one still had attempts in flight: those
   * attempts are counted there too, so a re-added endpoint does not look idle while it streams.
   */
  successor: EndpointState | undefined;
  /** Responses that contradicted the endpoint's drift probe. */
  driftMismatches: number;
  /** What the server last said about its load (ORCA header or /metrics). */
  readonly reported: ReportedLoad;
  /** Written by the affinity decision (`AffinityEndpoint.candidateInDecision`). */
  candidateInDecision: number;
}

/** This sidecar's in-flight count corrected by the server's last report (server-load.ts). */
export function loadOf(state: EndpointState, now: number, reportMaxAgeMs: number): number {
  return state.reported.estimate(state.inFlight, now, reportMaxAgeMs);
}

/** Judged drifted, by the controller (`drifted`) or by this sidecar's own probe. */
export function isDrifted(spec: EndpointSpec): boolean {
  return spec.drifted === true || spec.probe?.drifted === true;
}

/** One pick's tier: the endpoints it may hash over, and those of them that may take it now. */
export interface TierChoice {
  /**
   * Every non-drifted endpoint of the chosen tier (Failover) or of the pool (Balance), live or
   * not, so that a key keeps its endpoint while others come and go, and "its endpoint is down" is
   * visible as 'unavailable'.
   */
  pool: EndpointState[];
  /** The endpoints of `pool` that pass `isCandidate`; empty when no tier has one. */
  candidates: EndpointState[];
}

export class EndpointPool {
  /** The balancer's clock reading (the last finite one): when a new endpoint was added. */
  readonly #now: () => number;
  #states = new Map<string, EndpointState>();
  /** Removed endpoints' states with attempts still in flight, by id (for a re-add). */
  readonly #retired = new Map<string, EndpointState>();
  /** Endpoints in the order of the last update (status order, P2C index order). */
  #order: EndpointState[] = [];
  /** The same endpoints grouped by tier, lowest tier (first choice) first. */
  #tiers: EndpointState[][] = [];

  constructor(now: () => number) {
    this.#now = now;
  }

  /** The endpoint in the pool with this id; undefined for one not (or no longer) in it. */
  get(id: string): EndpointState | undefined {
    return this.#states.get(id);
  }

  /** The endpoints in the order of the last update. */
  get order(): readonly EndpointState[] {
    return this.#order;
  }

  /**
   * The first tier with a candidate (Failover) or the whole pool (Balance): see `TierChoice`.
   * With no candidate anywhere, the last group looked at and no candidates. `inPool`: a filter of
   * the endpoints that may take the request at all, live or not (the request's model,
   * model-filter.ts); it applies before tiers, so Failover looks for the first tier that serves.
   */
  tierFor(
    mode: Mode,
    isCandidate: (s: EndpointState) => boolean,
    inPool?: (s: EndpointState) => boolean,
  ): TierChoice {
    let pool: EndpointState[] = [];
    let candidates: EndpointState[] = [];
    const groups = mode === 'Failover' ? this.#tiers : [this.#order];
    for (const group of groups) {
      pool = group.filter((s) => s.spec.drifted !== true && (inPool?.(s) ?? true));
      candidates = pool.filter(isCandidate);
      if (candidates.length > 0) break;
    }
    return { pool, candidates };
  }

  /**
   * Applies a pool update by endpoint id and returns the ids that left the pool. `windowChanged`:
   * the health window's length changed, so kept endpoints start their window afresh.
   */
  update(
    endpoints: readonly EndpointSpec[],
    health: HealthPolicy,
    windowChanged: boolean,
  ): string[] {
    this.#now(); // keep the last finite clock reading current for the new state
    const next = new Map<string, EndpointState>();
    for (const spec of endpoints) {
      if (next.has(spec.id)) continue; // ids are unique by contract; the first one wins
      let state = this.#states.get(spec.id);
      if (state === undefined) {
        state = this.#newState(spec, health);
      } else {
        state.spec = spec;
        state.breaker.setPolicy(health);
        // A window of another length cannot be resized bucket by bucket: start it afresh.
        if (windowChanged) state.window = new SlidingWindow(health.windowMs, HEALTH_COUNTERS);
      }
      next.set(spec.id, state);
    }
    const removed: string[] = [];
    for (const [id, state] of this.#states) {
      if (next.has(id)) continue;
      state.removed = true;
      if (state.inFlight > 0) this.#retired.set(id, state);
      removed.push(id);
    }
    this.#states = next;
    this.#order = [...next.values()];
    const tiers = new Map<number, EndpointState[]>();
    for (const state of this.#order) {
      const group = tiers.get(state.spec.tier);
      if (group === undefined) tiers.set(state.spec.tier, [state]);
      else group.push(state);
    }
    this.#tiers = [...tiers.entries()].sort(([a], [b]) => a - b).map(([, group]) => group);
    return removed;
  }

  /**
   * An attempt on a state that left the pool ended at `endedAtMs` (its own in-flight count is
   * already down): the states that succeeded it count it no more, and their idleness (the score's
   * fade) starts when the last of these ends. A retired state with nothing left in flight is
   * forgotten.
   */
  endRetiredAttempt(state: EndpointState, endedAtMs: number): void {
    for (let next = state.successor; next !== undefined; next = next.successor) {
      next.inFlight = Math.max(0, next.inFlight - 1);
      next.lastActivityMs = Math.max(next.lastActivityMs, endedAtMs);
    }
    if (state.inFlight === 0 && this.#retired.get(state.id) === state)
      this.#retired.delete(state.id);
  }

  #newState(spec: EndpointSpec, health: HealthPolicy): EndpointState {
    const state: EndpointState = {
      id: spec.id,
      idHash: idHash(spec.id),
      spec,
      breaker: new Breaker(health),
      window: new SlidingWindow(health.windowMs, HEALTH_COUNTERS),
      inFlight: 0,
      errorStreak: 0,
      requests: 0,
      errors: 0,
      rateLimited: 0,
      lastActivityMs: -Infinity,
      dropNextSample: false,
      lastTtftSampleAtMs: -Infinity,
      addedAtMs: this.#now(),
      cooldownUntilMs: -Infinity,
      removed: false,
      successor: undefined,
      candidateInDecision: 0,
      driftMismatches: 0,
      reported: new ReportedLoad(),
    };
    // Back while its previous life still streams: a fresh state (health, EWMA and prefixes
    // were forgotten), but the streams still load it.
    const previous = this.#retired.get(spec.id);
    if (previous !== undefined) {
      this.#retired.delete(spec.id);
      previous.successor = state;
      state.inFlight = previous.inFlight;
    }
    return state;
  }
}
