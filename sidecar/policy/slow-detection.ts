/**
 * Slow detection (docs/policy.md, "The median rule for slow detection"): whether an endpoint's
 * EWMA TTFT is clearly above its peers' median, which trips its breaker with reason `slow`. The
 * balancer asks on every finished attempt and for every endpoint on each status read, so the
 * peers' EWMAs are kept sorted per group and moved in place as samples come in, not sorted per
 * question (most of the policy's time at 4,096 endpoints when they were).
 */
import type { TtftEwmas } from './ewma.ts';
import { lowerBound, medianWithout } from './median.ts';
import type { BreakerState } from './types.ts';

/** What slow detection reads of an endpoint; the balancer's per-endpoint state has all of it. */
export interface SlowCandidate {
  readonly id: string;
  readonly spec: { readonly drifted?: boolean | undefined };
  readonly breaker: { readonly state: BreakerState };
}

/** What slow detection reads of the pool, owned by the balancer. */
export interface SlowDetectionDeps<S> {
  /** Each endpoint's EWMA TTFT. */
  ewma: TtftEwmas;
  /** The pool's endpoints, in its order. */
  endpoints: () => readonly S[];
  /**
   * The group of peers an endpoint is compared with: its tier in Failover mode, one group for
   * the whole pool in Balance mode (a backup tier is often a slower provider by design).
   */
  groupOf: (s: S) => number;
  /** `health.maxTtftSlowdown`: how many times the peers' median is slow. */
  maxSlowdown: () => number;
}

/** One group of peers for slow detection (see `SlowDetection.#references`). */
interface SlowReference {
  /** Its serving endpoints (not drifted, breaker not open) whose breaker is closed. */
  closed: number;
  /** The EWMAs of its serving endpoints that have samples, ascending. */
  sorted: number[];
}

/** The slow verdicts of one pool's endpoints. */
export class SlowDetection<S extends SlowCandidate> {
  readonly #deps: SlowDetectionDeps<S>;
  /** What `isSlow` compares with, per group of peers; undefined until asked. */
  #refs: Map<number, SlowReference> | undefined;

  constructor(deps: SlowDetectionDeps<S>) {
    this.#deps = deps;
  }

  /**
   * Forgets the sorted references: after a pool update (endpoints, tiers, drift, mode) or a
   * breaker transition (who serves and who is closed); built again when next asked.
   */
  invalidate(): void {
    this.#refs = undefined;
  }

  /**
   * The endpoints `isSlow` calls slow, all at once, for `status()` (every /debug/backends): one
   * lookup and a median read each (issue 16: at 4,096 endpoints a sort per endpoint took seconds).
   */
  slowOfAll(): Set<S> {
    const slow = new Set<S>();
    for (const state of this.#deps.endpoints()) if (this.isSlow(state)) slow.add(state);
    return slow;
  }

  /**
   * Slow: own EWMA above maxTtftSlowdown × the median EWMA of the other endpoints that have
   * samples. "Others" are the endpoints that compete for the same traffic: the whole pool in
   * Balance mode, the endpoint's own tier in Failover mode (a backup tier is often a slower
   * provider by design, and must not be ejected for being slower than the primary it replaces).
   * Drifted endpoints are no reference, nor are endpoints whose breaker is open (their EWMA is
   * from before, when they were not carrying the load that has moved to the others since). An
   * endpoint without samples is never slow, and neither is the last closed one of its group:
   * slower is better than nothing (the pool would shed every request with 503 while this one
   * could answer).
   *
   * Asked on every finished attempt: the median comes from the group's EWMAs kept sorted
   * (`#references`), so this is a lookup and a binary search, not a sort of the pool.
   */
  isSlow(state: S): boolean {
    if (!this.#deps.ewma.hasSamples(state.id)) return false;
    const group = this.#references().get(this.#deps.groupOf(state));
    if (group === undefined) return false; // nobody of its group serves: no reference
    const own = this.#deps.ewma.valueMs(state.id);
    // Serving, it is one of the group's counts and values; the reference is the others'.
    const serving = isSlowReference(state);
    if (state.breaker.state === 'closed' && group.closed - (serving ? 1 : 0) === 0) return false;
    const reference = medianWithout(
      group.sorted,
      serving ? lowerBound(group.sorted, own) : undefined,
    );
    return reference !== undefined && own > this.#deps.maxSlowdown() * reference;
  }

  /**
   * Per group (`SlowDetectionDeps.groupOf`), what `isSlow` compares with: how many of its
   * serving endpoints (not drifted, breaker not open) have a closed breaker, and the EWMAs of
   * those with samples, ascending. Built on first use; an EWMA sample moves its value in place
   * (`moved`); a breaker change or a pool update (endpoints, tiers, drift, mode) drops it
   * (`invalidate`), to be built again. Those are rare next to finished attempts, which used to
   * sort every EWMA of the pool each (most of the policy's time at 4,096 endpoints).
   */
  #references(): Map<number, SlowReference> {
    if (this.#refs !== undefined) return this.#refs;
    const groups = new Map<number, SlowReference>();
    for (const p of this.#deps.endpoints()) {
      if (!isSlowReference(p)) continue;
      const key = this.#deps.groupOf(p);
      let group = groups.get(key);
      if (group === undefined) groups.set(key, (group = { closed: 0, sorted: [] }));
      if (p.breaker.state === 'closed') group.closed += 1;
      if (this.#deps.ewma.hasSamples(p.id)) group.sorted.push(this.#deps.ewma.valueMs(p.id));
    }
    for (const group of groups.values()) group.sorted.sort((a, b) => a - b);
    this.#refs = groups;
    return groups;
  }

  /** `state`'s EWMA went from `from` (undefined: no sample before) to `to`. */
  moved(state: S, from: number | undefined, to: number): void {
    if (this.#refs === undefined) return; // built afresh when next asked
    if (!isSlowReference(state)) return;
    const sorted = (this.#refs.get(this.#deps.groupOf(state)) as SlowReference).sorted;
    if (from !== undefined) sorted.splice(lowerBound(sorted, from), 1);
    sorted.splice(lowerBound(sorted, to), 0, to);
  }
}

/** Whether slow detection counts `state` among its group's peers: serving, not drifted, not open. */
function isSlowReference(state: SlowCandidate): boolean {
  return state.spec.drifted !== true && state.breaker.state !== 'open';
}
