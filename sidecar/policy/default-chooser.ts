/**
 * The switchyard policy's choice (docs/policy.md §3 and §4), one `Chooser` (chooser.ts):
 *
 *   the weighted split between the tier's backends (weighted-split.ts)
 *   → for a LoRA adapter, the endpoints where it is resident (adapter-residency.ts)
 *   → affinity (affinity-decision.ts: the endpoint holding the longest known prefix, else the
 *   prompt's home by rendezvous hashing, spilling along that order past endpoints over their load
 *   bound; a full server keeps a request whose cached prefix is worth the wait)
 *   → least loaded, then P2C on score (load: this sidecar's in-flight, corrected by what the
 *   servers report; a server reported clearly slower counted by its speed)
 *   → the chosen endpoint now holds the prompt's prefix.
 */
import type { AdapterResidency } from './adapter-residency.ts';
import { AffinityDecider } from './affinity-decision.ts';
import type { Choice, ChoiceInput, Chooser } from './chooser.ts';
import { loadOf, type EndpointState } from './endpoint-pool.ts';
import { reportedSlowdowns } from './endpoint-views.ts';
import type { TtftEwmas } from './ewma.ts';
import { pickLeastLoaded } from './p2c.ts';
import type { PrefillExchange } from './prefill-exchange.ts';
import type { PrefixIndex } from './prefix-index.ts';
import type { PromptBlocks } from './prompt-blocks.ts';
import { costTermMs, idleFade, score } from './score.ts';
import { BALANCE_REPORT_MAX_AGE_MS } from './server-load.ts';
import { prefillPositions, speedWeightedCount } from './server-speed.ts';
import { requestedModel } from './model-filter.ts';
import { isWeighted, splitKey, WeightedSplit } from './weighted-split.ts';
import type { PoolPolicy, Rng } from './types.ts';

/** The pool's long-lived state the choice reads (and, for prefixes, writes); the balancer's. */
export interface DefaultChooserDeps {
  rng: Rng;
  /** Each endpoint's TTFT EWMA (the score, the slowdown check). */
  ewma: TtftEwmas;
  /** Which endpoint this sidecar sent which prompt prefixes to. */
  prefixes: PrefixIndex;
  /** What a known cached prefix is worth in queue positions, learned from the pool's attempts. */
  exchange: PrefillExchange;
  /** How old a server's load report may be and still count. */
  reportMaxAgeMs: number;
  /** The pool's endpoint by id (a prefix holder); undefined for one no longer in the pool. */
  stateOf: (id: string) => EndpointState | undefined;
  /** Where LoRA adapters are resident; without it, no preference (a chooser tested alone). */
  residency?: AdapterResidency | undefined;
  /**
   * Every placement recorded in `prefixes` is told here too (issue 45: the balancer's
   * `onPlacement`, which queues it for the fleet). Must not throw.
   */
  onPlacement?: ((endpointId: string, prompt: PromptBlocks, nowMs: number) => void) | undefined;
}

export class DefaultChooser implements Chooser<EndpointState> {
  readonly #deps: DefaultChooserDeps;
  /** The affinity step of every pick (affinity-decision.ts). */
  readonly #affinity: AffinityDecider<EndpointState>;
  /** The weighted split of every pick (its round-robin is this pool's). */
  readonly #split = new WeightedSplit();

  constructor(deps: DefaultChooserDeps) {
    this.#deps = deps;
    this.#affinity = new AffinityDecider({
      prefixes: deps.prefixes,
      exchange: deps.exchange,
      ewma: deps.ewma,
      reportMaxAgeMs: deps.reportMaxAgeMs,
      load: (s, now) => this.#load(s, now),
      stateOf: deps.stateOf,
    });
  }

  choose(input: ChoiceInput<EndpointState>): Choice<EndpointState> {
    const { now, policy, request } = input;
    const { rng, exchange, reportMaxAgeMs, residency } = this.#deps;
    // A new routing rule (by model, by adapter, by priority) plugs in here, as a module of its own
    // and one line: a rule that narrows who may take the request filters `candidates` and `pool`
    // before the steps below; one that decides outright returns its Choice here, before affinity,
    // as affinity decides before the balancing step. The model filter ran before the tier
    // (model-filter.ts, in the balancer): it binds every chooser, the baselines too.
    // Most pools set no weight and name no model: no key hashed, nothing allocated for those.
    const split = isWeighted(input.pool)
      ? this.#split.narrow(input.pool, input.candidates, splitKey(policy.affinity, request))
      : input;
    const pool = split.pool;
    const model = requestedModel(request.model);
    const candidates =
      model === undefined || residency === undefined
        ? split.candidates
        : residency.prefer(split.candidates, model, {
            nowMs: now,
            reportMaxAgeMs,
            affinity: policy.affinity,
            load: (s) => this.#load(s, now),
          });
    const slowdown = reportedSlowdowns(candidates, now, this.#deps, 'as trusted');
    // The request's prefill in holds of a typical request; each server's count weighs it in that
    // server's queue positions (server-speed.ts, prefillPositions).
    const ownPrefill =
      slowdown === undefined ? undefined : exchange.prefillInHolds(request.requestBytes);
    // This sidecar's own counts, always current and shared with no one. Affinity's check of a
    // speculative home compares them; the balancing step counts them unless every server
    // reported its queue within half a second (#balanceCount, docs/policy.md §4). A server that
    // reports generating clearly slower than its peers counts by the time its queue (when its
    // batch is full) and this request's prefill would take there (server-speed.ts).
    const ownCount: (s: EndpointState) => number =
      slowdown === undefined
        ? (s) => s.inFlight
        : (s) =>
            speedWeightedCount(
              s.inFlight,
              slowdown(s),
              prefillPositions(ownPrefill, s.reported.batch(now)),
              s.reported.freeSlots(s.inFlight, now, reportMaxAgeMs),
            );
    // Every candidate's count, once a step needs them all (a single message's home check, then
    // perhaps the balancing step): at thousands of endpoints a second pass is a measurable share.
    let ownCounts: number[] | undefined;
    const allOwnCounts = (): readonly number[] => (ownCounts ??= candidates.map(ownCount));
    const affinity = this.#affinity.decide(policy.affinity, request, {
      now,
      pool,
      candidates,
      slowdown: slowdown ?? (() => 1),
      ownCount,
      allOwnCounts,
    });
    const counted = ownCounts;
    const chosen =
      affinity.endpoint ??
      pickLeastLoaded(
        candidates,
        rng,
        this.#balanceCount(candidates, now, ownCount, counted, slowdown, ownPrefill),
        (s) => this.#score(s, now, policy),
        (s) => costTermMs(s.spec.costPerMTok, policy.costWeightPerMs),
      );
    // Wherever it went, that endpoint now holds this prompt's prefix, and its adapter.
    if (request.prompt !== undefined && policy.affinity.key === 'Prefix') {
      this.#deps.prefixes.record(request.prompt.hashes, chosen.id, now);
      this.#deps.onPlacement?.(chosen.id, request.prompt, now);
    }
    if (model !== undefined) residency?.served(chosen.id, model, now);
    return { endpoint: chosen, affinity: affinity.result };
  }

  /**
   * What the least-loaded step counts. When every candidate's server reported its queue within
   * `BALANCE_REPORT_MAX_AGE_MS`, the load estimate: it counts every sidecar's requests, and is
   * recent enough that sidecars holding the same report do not pile onto its emptiest server
   * (each adds its own requests to it at once, and the next report comes within a tenth of
   * a second). Otherwise this sidecar's own counts, which are always current and shared with no
   * one: an older report herds, and a candidate without one (an external provider, a server whose
   * scrape failed) would look emptier than every server whose report counts everyone's requests.
   * A server reported clearly slower counts by its speed either way (server-speed.ts).
   */
  #balanceCount(
    candidates: readonly EndpointState[],
    now: number,
    ownCount: (s: EndpointState) => number,
    ownCounts: readonly number[] | undefined,
    slowdown: ((s: EndpointState) => number) | undefined,
    ownPrefill: number | undefined,
  ): (s: EndpointState, i: number) => number {
    const maxAgeMs = Math.min(BALANCE_REPORT_MAX_AGE_MS, this.#deps.reportMaxAgeMs);
    if (!candidates.every((s) => s.reported.countsEveryone(now, maxAgeMs)))
      return ownCounts === undefined ? ownCount : (_, i) => ownCounts[i] as number;
    if (slowdown === undefined) return (s) => this.#load(s, now);
    return (s) =>
      speedWeightedCount(
        this.#load(s, now),
        slowdown(s),
        prefillPositions(ownPrefill, s.reported.batch(now)),
        s.reported.freeSlots(s.inFlight, now, this.#deps.reportMaxAgeMs),
      );
  }

  #load(state: EndpointState, now: number): number {
    return loadOf(state, now, this.#deps.reportMaxAgeMs);
  }

  #score(state: EndpointState, now: number, policy: PoolPolicy): number {
    const full = score(
      {
        inFlight: this.#load(state, now),
        ewmaTtftMs: this.#deps.ewma.valueMs(state.id),
        costPerMTok: state.spec.costPerMTok,
      },
      policy.costWeightPerMs,
    );
    return full * this.#idleFade(state, now);
  }

  /**
   * What the score is multiplied by (`idleFade`, docs/policy.md §4): less the longer this sidecar
   * has had nothing on the endpoint, so that an endpoint that lost every pick while idle is tried
   * again. Idleness counts from its last finished attempt, or from when this balancer got it (a
   * newcomer, whose seed would otherwise lose every tie to its fading peers). One with an attempt
   * in flight is not idle: its sample is coming, or its first token is late. Each error in a row
   * halves the pace, since a failed attempt ends before the retry that follows it, and the failing
   * endpoint would otherwise look the longest idle at the next pick: a backoff, not a stop.
   */
  #idleFade(state: EndpointState, now: number): number {
    if (state.inFlight > 0) return 1;
    const idleForMs = now - Math.max(state.lastActivityMs, state.addedAtMs);
    return idleFade(idleForMs / 2 ** state.errorStreak);
  }
}
