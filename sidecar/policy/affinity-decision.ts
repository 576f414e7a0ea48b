/**
 * The affinity decision of one pick (docs/policy.md §3): which endpoint, if any, a request goes to
 * for the KV cache it may find there, before the balancing step would place it by load. The
 * endpoints' state is the pool's (`endpoint-pool.ts`) and the default chooser
 * (`default-chooser.ts`) hands each pick's view of it here; this module owns the rules: the holder of the longest known prefix, the walk along the key's
 * rendezvous order under the load bound, the slowdown check, and what a full home's queue is worth
 * (`prefill-exchange.ts`). `affinity.ts` reads what a request offers for the decision.
 */
import {
  AFFINITY_MAX_SLOWDOWN,
  AFFINITY_SLOWDOWN_MIN_MS,
  AFFINITY_SLOWDOWN_MIN_SAMPLES,
  AFFINITY_SLOW_RECHECK_AFTER_MS,
} from './affinity.ts';
import { affinityLoadBound, keyNumber, rendezvousWalk } from './bounded-load.ts';
import type { TtftEwmas } from './ewma.ts';
import type { PrefillExchange } from './prefill-exchange.ts';
import type { PrefixIndex } from './prefix-index.ts';
import type { PromptBlocks } from './prompt-blocks.ts';
import type { ReportedLoad } from './server-load.ts';
import { medianBySelection } from './server-speed.ts';
import type { AffinityPolicy, AffinityResult, BreakerState, PickRequest } from './types.ts';

/**
 * The share of a conversation's history its home is taken to hold when this sidecar did not route
 * its earlier turns: they went home only while it had room. 0.5 measured best of 0.5 and 1 on the
 * routing benchmark (docs/routing-history.md): 1 queued more at homes that turned out not to hold
 * it.
 */
export const HISTORY_AT_HOME_SHARE = 0.5;

/**
 * How many times what a request adds past its history (a first turn's whole user message, a later
 * turn's new message) its full home is worth as a bet: every later request with the same home
 * key, from any sidecar, goes there, and finds this text cached only if this one went there too.
 * A request that goes elsewhere leaves them all to miss: on the Mooncake trace the first request
 * of a shared document usually met a full home (82 of 138 groups), and the others went home; a
 * document that recurs comes back 1.8 more times on average (2.8 requests a group). 1 measured
 * best of the variants first, and 2 then beat 1 on hit rate in paired runs with p50 and p99
 * within the seeds' spread (docs/policy.md §3; the runs: tags explore/2026-12-03-bet-share-2 and
 * explore/2026-12-03-bet-added-text, docs/routing-history.md).
 */
export const ADDED_TEXT_AT_HOME_SHARE = 2;

/** What the decision reads of an endpoint; the balancer's per-endpoint state has all of it. */
export interface AffinityEndpoint {
  readonly id: string;
  /** Hash of the id, for rendezvous weights. */
  readonly idHash: number;
  readonly breaker: { readonly state: BreakerState };
  /** This sidecar's attempts in flight there. */
  readonly inFlight: number;
  /** What the server last said about its load. */
  readonly reported: ReportedLoad;
  /** When its latest TTFT sample came in; -Infinity before the first (the slowdown recheck). */
  readonly lastTtftSampleAtMs: number;
  /**
   * The number of the latest decision that found it a candidate: a membership test in O(1) where
   * `candidates.includes` would scan the candidates. The decider's own scratch, kept in the
   * endpoint's state: a new state starts it at 0, only `AffinityDecider.decide` writes it, and a
   * state belongs to one decider.
   */
  candidateInDecision: number;
}

/** One pick's view of the pool, as the balancer sees it at that moment. */
export interface AffinityPickView<S> {
  now: number;
  /**
   * The tier set a key's rendezvous order runs over: every non-drifted endpoint of the chosen
   * tier (Failover) or of the pool (Balance), live or not, so that a key keeps its place while
   * other endpoints come and go.
   */
  pool: readonly S[];
  /** The endpoints of `pool` that may take the request now. */
  candidates: readonly S[];
  /**
   * An endpoint's reported slowdown per token next to the other candidates', as far as this
   * sidecar's own TTFTs support it (server-speed.ts, `trustedSlowdown`; 1: none).
   */
  slowdown: (s: S) => number;
  /** This sidecar's own count, as the balancing step counts it (a slower server by its speed). */
  ownCount: (s: S) => number;
  /** `ownCount` of every candidate, in `candidates` order, computed at most once a pick. */
  allOwnCounts: () => readonly number[];
}

/** The long-lived state the decision reads, owned by the balancer. */
export interface AffinityDeps<S> {
  /** Which endpoint this sidecar sent which prompt prefixes to. */
  prefixes: PrefixIndex;
  /** What a known cached prefix is worth in queue positions, learned from the pool's attempts. */
  exchange: PrefillExchange;
  /** Each endpoint's own TTFT samples (the slowdown check). */
  ewma: TtftEwmas;
  /** How old a server's load report may be and still count. */
  reportMaxAgeMs: number;
  /** The balancer's load of an endpoint: its in-flight count corrected by the server's report. */
  load: (s: S, now: number) => number;
  /** The pool's endpoint by id (a prefix holder); undefined for one no longer in the pool. */
  stateOf: (id: string) => S | undefined;
}

/** Makes the affinity decision of every pick of one pool (`decide`). */
export class AffinityDecider<S extends AffinityEndpoint> {
  readonly #deps: AffinityDeps<S>;
  /** Decisions made so far: see AffinityEndpoint.candidateInDecision. */
  #decisions = 0;

  constructor(deps: AffinityDeps<S>) {
    this.#deps = deps;
  }

  /**
   * The affinity decision (docs/policy.md §3):
   *
   * 1. The endpoint that holds the longest known prefix of the prompt, when that prefix reaches at
   *    least the prompt's home key (a turn of a conversation this sidecar has seen), and it fits
   *    under the load bound, or its prefix is worth the queue there (`#worthQueueing`): `hit`.
   * 2. Otherwise the endpoints in the rendezvous order of the key (the matched prefix, the
   *    prompt's conversation-stable home key, or the affinity header): the first that is a
   *    closed, not-slow candidate under the load bound. The first in order is a `hit`, a later
   *    one a `spill` — the same second home from every sidecar. The walk stops at the first whose
   *    batch is known and full, which keeps the request only if what it would hold there is
   *    worth the queue (`homeWorthChars`: half its history, and at the key's first endpoint the
   *    bet on the text it adds).
   * 3. None fits: `overloaded`, and the request is balanced.
   *
   * The order is over the whole tier set (`AffinityPickView.pool`), live or not.
   */
  decide(
    affinity: AffinityPolicy,
    request: PickRequest,
    pick: AffinityPickView<S>,
  ): { endpoint?: S; result: AffinityResult } {
    const { now, pool, candidates, slowdown, ownCount, allOwnCounts } = pick;
    const prompt = affinity.key === 'Prefix' ? request.prompt : undefined;
    const header =
      affinity.key === 'Header' && request.affinityKey !== undefined && request.affinityKey !== ''
        ? request.affinityKey
        : undefined;
    if (prompt === undefined && header === undefined) return { result: 'none' };

    const decision = ++this.#decisions;
    for (const c of candidates) c.candidateInDecision = decision;
    const configured = affinity.maxSlowdown;
    const maxSlowdown = configured > 0 ? configured : AFFINITY_MAX_SLOWDOWN;
    const slowerThan = this.#slowdownLimit(candidates, maxSlowdown, now);
    // Measured slower by this sidecar's own TTFT samples, or reported slower per token by the
    // server itself: either way its cache is not worth the wait.
    const admissible = (s: S): boolean =>
      s.breaker.state === 'closed' &&
      s.candidateInDecision === decision &&
      !slowerThan(s) &&
      !(slowdown(s) > maxSlowdown);
    const withinBound = affinityLoadBound(
      candidates.map((c) => this.#deps.load(c, now)),
      affinity,
    );
    // Once a server has shown its batch (it queued requests, see ReportedLoad.freeSlots), the
    // test is a free slot there instead: a request that queues waits for a running one to
    // finish, which costs more than the prefill a cache hit saves, while a free slot costs
    // nothing however busy the home is next to the others. A full home sends the request to
    // balancing, not along the key's order: every sidecar holds the same report, and they would
    // all queue on the key's second endpoint together.
    const freeSlots = (s: S): number | undefined =>
      s.reported.freeSlots(s.inFlight, now, this.#deps.reportMaxAgeMs);
    const fits = (s: S, free: number | undefined): boolean => {
      if (free !== undefined) return free >= 1;
      return withinBound(this.#deps.load(s, now));
    };

    let key: number;
    // A prompt of one message that no earlier request is known to share: no server can hold
    // anything of it yet, so its home is only a bet on later requests sharing it (below).
    let speculative = false;
    if (prompt !== undefined) {
      // A candidate is in the pool: `stateOf` needs no filter of its own.
      const stateOf = this.#deps.stateOf;
      const match = this.#deps.prefixes.longestMatch(
        prompt.hashes,
        (id) => {
          const s = stateOf(id);
          return s !== undefined && admissible(s);
        },
        now,
      );
      if (match !== undefined && match.depth >= prompt.homeDepth) {
        // The least loaded holder; the most recently used among equals (holders come in that order).
        let best: S | undefined;
        for (const id of match.holders) {
          const s = stateOf(id) as S;
          if (best === undefined || this.#deps.load(s, now) < this.#deps.load(best, now)) best = s;
        }
        if (best !== undefined) {
          const free = freeSlots(best);
          const cachedChars = matchedChars(prompt, match.depth);
          if (fits(best, free) || this.#worthQueueing(best, free, cachedChars, candidates, now))
            return { endpoint: best, result: 'hit' };
        }
        key = prompt.hashes[match.depth - 1] as number;
      } else {
        key = prompt.hashes[prompt.homeDepth - 1] as number;
        speculative = (prompt.historyChars ?? 0) === 0;
      }
    } else {
      key = keyNumber(header as string);
    }
    // A speculative home must also be where balancing could send the request: among the fewest of
    // this sidecar's own requests in flight, as the balancing step counts them (a server reported
    // slower counts by its speed). A free slot in a report is shared by every sidecar and may be
    // taken by the time the request gets there; a bet that nothing pays for yet should not raise
    // that risk above balancing's (docs/policy.md §3, "Why a single message...").
    let leastOwn = 0;
    if (speculative) {
      leastOwn = Infinity;
      for (const count of allOwnCounts()) leastOwn = Math.min(leastOwn, count);
    }
    // Walked, not sorted: the walk nearly always stops at the first or second endpoint.
    let rank = -1;
    for (const s of rendezvousWalk(key, pool)) {
      rank += 1;
      if (!admissible(s)) continue;
      const free = freeSlots(s);
      const fitsHere =
        fits(s, free) && !(speculative && free !== undefined && ownCount(s) > leastOwn);
      if (fitsHere) return { endpoint: s, result: rank === 0 ? 'hit' : 'spill' };
      if (free === undefined) continue;
      // Its batch is known and full. What the wait may buy there (homeWorthChars): part of the
      // history, and, unless the request is speculative, what it adds for the later requests that
      // share its key — only at the key's first endpoint, the one every sidecar computes alike; an
      // endpoint further down is where this sidecar's own verdicts (slow, open) sent it, and the
      // others may look elsewhere. Otherwise balance; do not walk on (every sidecar holds the same
      // report and would queue on the next endpoint together).
      const worth = prompt === undefined ? 0 : homeWorthChars(prompt, speculative || rank > 0);
      if (this.#worthQueueing(s, free, worth, candidates, now))
        return { endpoint: s, result: rank === 0 ? 'hit' : 'spill' };
      break;
    }
    return { result: 'overloaded' };
  }

  /**
   * The slowdown check: whether an endpoint is measured clearly slower than the
   * candidates' median, so that its cache is not worth the wait. Reads each endpoint's own
   * samples (`TtftEwmas.measured`), not the seeded EWMA, counts only endpoints with
   * AFFINITY_SLOWDOWN_MIN_SAMPLES of them, and wants the excess to be both `maxSlowdown` times
   * and AFFINITY_SLOWDOWN_MIN_MS (docs/policy.md §3). A verdict lapses for a recheck: an endpoint
   * with nothing of this sidecar's in flight and no sample for AFFINITY_SLOW_RECHECK_AFTER_MS is
   * not passed over, since only a request there can show that it is fast again.
   */
  #slowdownLimit(candidates: readonly S[], maxSlowdown: number, now: number): (s: S) => boolean {
    const measured = (s: S): number | undefined => {
      const m = this.#deps.ewma.measured(s.id);
      return m !== undefined && m.samples >= AFFINITY_SLOWDOWN_MIN_SAMPLES ? m.ms : undefined;
    };
    const values: number[] = [];
    for (const c of candidates) {
      const v = measured(c);
      if (v !== undefined && !Number.isNaN(v)) values.push(v);
    }
    // By selection, not a sort: this runs on every affinity decision, over every candidate.
    const reference = medianBySelection(values);
    if (reference === undefined) return () => false;
    const limit = Math.max(maxSlowdown * reference, reference + AFFINITY_SLOWDOWN_MIN_MS);
    const dueForRecheck = (s: S): boolean =>
      s.inFlight === 0 && now - s.lastTtftSampleAtMs >= AFFINITY_SLOW_RECHECK_AFTER_MS;
    return (s) => {
      const own = measured(s);
      return own !== undefined && own > limit && !dueForRecheck(s);
    };
  }

  /**
   * Whether an endpoint whose batch is full (`free` < 1; undefined: its batch is not known, and
   * the answer is no) is worth its queue for a request of which it holds about `cachedChars`: the
   * positions the request would wait there, beyond the fewest it would wait anywhere else, cost
   * less than the prefill the cached prefix saves (`PrefillExchange`). Endpoints that never showed
   * a full batch count as free elsewhere: the endpoint must beat an empty queue then.
   */
  #worthQueueing(
    target: S,
    free: number | undefined,
    cachedChars: number,
    candidates: readonly S[],
    now: number,
  ): boolean {
    const batch = target.reported.batch(now);
    if (free === undefined || batch === undefined) return false;
    const worth = this.#deps.exchange.positionsWorth(cachedChars, batch);
    if (worth === 0) return false;
    let elsewhere = Infinity;
    for (const s of candidates) {
      if (s === target) continue;
      const f = s.reported.freeSlots(s.inFlight, now, this.#deps.reportMaxAgeMs);
      elsewhere = Math.min(elsewhere, f === undefined ? 0 : Math.max(0, 1 - f));
    }
    if (elsewhere === Infinity) elsewhere = 0;
    return 1 - free - elsewhere <= worth;
  }
}

/**
 * How much of a prompt the holder of its first `depth` blocks has: those blocks' characters, or,
 * when the match runs through every block of a prompt cut at the hashing cap, at least everything
 * before its last message (an earlier turn sent that much, and the match says it went there).
 */
function matchedChars(prompt: PromptBlocks, depth: number): number {
  const chars = prompt.ends[depth - 1] as number;
  if (prompt.cut !== true || depth < prompt.hashes.length) return chars;
  return Math.max(chars, prompt.historyChars ?? 0);
}

/**
 * How many characters of a prompt the full endpoint where the walk along its key's order stops is
 * worth, when this sidecar knows of no earlier request of it there (docs/policy.md §3):
 *
 * - HISTORY_AT_HOME_SHARE of the history: the earlier turns went home only while it had room, which
 *   this sidecar cannot know when other sidecars sent them;
 * - unless `noBet`, ADDED_TEXT_AT_HOME_SHARE times the text past the history (hashed characters, so
 *   at most the hashing cap): a bet on the later requests that share the key, which all go to its
 *   first endpoint. No bet for a speculative request (a single message nothing is known to share:
 *   most are one-off calls, and on a trace of them, Azure's, any wait for a home was lost time) or
 *   at an endpoint further down the key's order.
 */
function homeWorthChars(prompt: PromptBlocks, noBet: boolean): number {
  const history = prompt.historyChars ?? 0;
  const added = noBet ? 0 : Math.max(0, (prompt.ends.at(-1) ?? 0) - history);
  return Math.floor(HISTORY_AT_HOME_SHARE * history + ADDED_TEXT_AT_HOME_SHARE * added);
}
