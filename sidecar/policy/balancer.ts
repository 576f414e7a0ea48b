/**
 * The routing policy of one pool: the request lifecycle, composed from the pure pieces of this
 * folder (docs/policy.md):
 *
 *   pick: candidates (not drifted, not excluded, breaker admits, no Retry-After cooldown)
 *     → tier (endpoint-pool.ts; Failover: the first tier with a candidate; Balance: all)
 *     → the chooser (chooser.ts; by default default-chooser.ts: affinity, then least loaded and
 *       P2C on score; a baseline picker for the benchmark) → half-open probe slot, in-flight +1
 *   first byte, finish: the health bookkeeping that feeds the next pick: EWMA TTFT, the sliding
 *     health window, breakers, cooldowns; retry: the retry budget.
 *
 * Membership and tiers are endpoint-pool.ts's, the views of the endpoints endpoint-views.ts's.
 * Everything is driven by the injected Clock and Rng; there is no timer. An open breaker turns
 * half-open the first time the balancer looks at it after its period (pick, finish, status).
 */
import { baselineChooser, type Picker } from './baseline-pickers.ts';
import type { BreakerTransition } from './breaker.ts';
import type { Chooser } from './chooser.ts';
import { DefaultChooser } from './default-chooser.ts';
import { EndpointPool, type EndpointState, type HealthCounter } from './endpoint-pool.ts';
import {
  gaugesOf,
  healthOf,
  readingOf,
  readyAtMs,
  soonestReturnMs,
  statusContext,
  statusOf,
  type ViewContext,
} from './endpoint-views.ts';
import { isUsableTtftSample, normalisedTtftMs, TtftEwmas } from './ewma.ts';
import { MIN_SAMPLE_BYTES, PrefillExchange } from './prefill-exchange.ts';
import {
  DEFAULT_BLOCKS_PER_ENDPOINT,
  DEFAULT_PREFIX_MAX_AGE_MS,
  PrefixIndex,
} from './prefix-index.ts';
import { AdapterResidency } from './adapter-residency.ts';
import { decodeHashes } from '../../lib/placement-hashes.ts';
import type { PromptBlocks } from './prompt-blocks.ts';
import { ModelLists, modelNotServed, servedAnywhere } from './model-filter.ts';
import { RetryBudget } from './retry-budget.ts';
import { DEFAULT_REPORT_MAX_AGE_MS, type ServerLoadReport } from './server-load.ts';
import { isSaturated } from './saturation.ts';
import { SlowDetection } from './slow-detection.ts';
import type {
  Attempt,
  Clock,
  EndpointGauges,
  EndpointHealth,
  EndpointReading,
  EndpointSpec,
  EndpointStatus,
  Outcome,
  PickRequest,
  PickResult,
  PolicyEvent,
  PoolBalancer,
  PoolPolicy,
  PrefillExchangeReading,
  ReceivedPlacements,
  RetryDecision,
  ModelsServed,
  RoomPickResult,
  SaturationRule,
  ServedModel,
  Rng,
} from './types.ts';

/** `retryAfterMs` of a shed when no endpoint has a known time of return (drifted, probing). */
export const DEFAULT_SHED_RETRY_AFTER_MS = 1000;

/**
 * An upstream's Retry-After is honoured for at most a minute. A provider that answers
 * "Retry-After: 3600" (or a garbled date) must not take an endpoint out for an hour on one
 * response; if it is still limiting after a minute, the next 429 extends the cooldown.
 */
export const MAX_RETRY_AFTER_COOLDOWN_MS = 60_000;

// The TTFT sample rule moved to ewma.ts; importers of balancer.ts keep reading it here.
export { normalisedTtftMs, REFERENCE_REQUEST_BYTES } from './ewma.ts';

export interface BalancerDeps {
  clock: Clock;
  rng: Rng;
  /** Breaker changes and dropped cold samples, for logs and metrics. Must not throw. */
  onEvent?: ((event: PolicyEvent) => void) | undefined;
  /** A baseline picker instead of affinity + P2C (benchmarks only); default `p2c`. */
  picker?: Picker | undefined;
  /** How old a server's load report may be and still count (DEFAULT_REPORT_MAX_AGE_MS). */
  reportMaxAgeMs?: number | undefined;
  /**
   * Every prompt placement the chooser records in its prefix index, for the fleet (issue 45: a
   * `PlacementOutbox`); `nowMs` is this balancer's clock. Only the default chooser records
   * placements: the baseline pickers keep no prefix index. Must not throw.
   */
  onPlacement?: ((endpointId: string, prompt: PromptBlocks, nowMs: number) => void) | undefined;
}

/** What the balancer knows about an attempt it handed out. */
interface AttemptRecord {
  readonly state: EndpointState;
  readonly halfOpenProbeToken: number | undefined;
  /** Size of the request body, when the shell told: TTFT samples are normalised by it. */
  readonly requestBytes: number | undefined;
  /**
   * Its endpoint had a free slot when it started, or never showed a full batch: no queue in its
   * TTFT. Asked only of requests large enough to feed the prefill exchange (true for the rest).
   */
  readonly startedWithFreeSlot: boolean;
  ttftMs: number | undefined;
  /** Its TTFT has been fed to the EWMA (`#sampleTtft`), at its first token or its finish. */
  sampled: boolean;
  finished: boolean;
}

export class Balancer implements PoolBalancer {
  #policy: PoolPolicy;
  readonly #clock: Clock;
  readonly #rng: Rng;
  readonly #onEvent: ((event: PolicyEvent) => void) | undefined;
  /** The choice step of every pick (chooser.ts), the one `deps.picker` names. */
  readonly #chooser: Chooser<EndpointState>;
  readonly #ewma: TtftEwmas;
  readonly #budget: RetryBudget;
  /** The pool's endpoints: membership, tiers, order (endpoint-pool.ts). */
  readonly #pool = new EndpointPool(() => this.#now());
  /** Keyed by the Attempt object itself: the shell cannot forge or mutate this bookkeeping. */
  readonly #attempts = new WeakMap<Attempt, AttemptRecord>();
  /** Which endpoint this sidecar sent which prompt prefixes to. */
  readonly #prefixes = new PrefixIndex({
    blocksPerEndpoint: DEFAULT_BLOCKS_PER_ENDPOINT,
    maxAgeMs: DEFAULT_PREFIX_MAX_AGE_MS,
  });
  readonly #reportMaxAgeMs: number;
  /** What a known cached prefix is worth in queue positions, learned from this pool's attempts. */
  readonly #exchange = new PrefillExchange();
  /** What the endpoint views (endpoint-views.ts) read beside the endpoints' own state. */
  readonly #views: ViewContext;
  #lastNowMs = 0;
  /** Which endpoints are slow next to their peers (slow-detection.ts), for the breakers. */
  readonly #slow: SlowDetection<EndpointState>;
  /** What each endpoint serves (model-filter.ts) and where adapters are (adapter-residency.ts). */
  readonly #models = new ModelLists();
  readonly #adapters = new AdapterResidency((model) => this.#models.parentOf(model) !== undefined);

  constructor(policy: PoolPolicy, endpoints: readonly EndpointSpec[], deps: BalancerDeps) {
    this.#policy = policy;
    this.#clock = deps.clock;
    this.#rng = deps.rng;
    this.#onEvent = deps.onEvent;
    this.#reportMaxAgeMs = deps.reportMaxAgeMs ?? DEFAULT_REPORT_MAX_AGE_MS;
    this.#ewma = new TtftEwmas(policy.defaultTtftMs);
    this.#budget = new RetryBudget(policy.retry, deps.clock);
    this.#views = { ewma: this.#ewma, reportMaxAgeMs: this.#reportMaxAgeMs };
    this.#slow = new SlowDetection({
      ewma: this.#ewma,
      endpoints: () => this.#pool.order,
      groupOf: (s) => (this.#policy.mode === 'Failover' ? s.spec.tier : 0),
      maxSlowdown: () => this.#policy.health.maxTtftSlowdown,
    });
    const picker = deps.picker ?? 'p2c';
    this.#chooser =
      picker === 'p2c'
        ? new DefaultChooser({
            rng: deps.rng,
            ewma: this.#ewma,
            prefixes: this.#prefixes,
            exchange: this.#exchange,
            reportMaxAgeMs: this.#reportMaxAgeMs,
            stateOf: (id) => this.#pool.get(id),
            residency: this.#adapters,
            onPlacement: deps.onPlacement,
          })
        : baselineChooser(picker, deps.rng);
    this.#setEndpoints(endpoints, false);
  }

  update(policy: PoolPolicy, endpoints: readonly EndpointSpec[]): void {
    const windowChanged = !Object.is(policy.health.windowMs, this.#policy.health.windowMs);
    this.#policy = policy;
    this.#ewma.setDefault(policy.defaultTtftMs);
    this.#budget.setPolicy(policy.retry);
    this.#setEndpoints(endpoints, windowChanged);
  }

  pick(request: PickRequest = {}): PickResult {
    return this.#pick(request, undefined) as PickResult;
  }

  pickWithRoom(request: PickRequest, rule: SaturationRule): RoomPickResult {
    return this.#pick(request, rule);
  }

  /**
   * Whether the endpoint's server reported requests waiting in its own queue in a report
   * measured after `sinceMs` (this balancer's clock, as `Attempt.startedAtMs`): a request sent
   * there at `sinceMs` that has no answer yet is probably among them (flow-gate.ts, rescue).
   */
  queuedSince(endpointId: string, sinceMs: number): boolean {
    const state = this.#pool.get(endpointId);
    if (state === undefined) return false;
    const now = this.#now();
    const last = state.reported.last(now, this.#reportMaxAgeMs);
    return last !== undefined && (last.waiting ?? 0) > 0 && now - last.ageMs > sinceMs;
  }

  /**
   * Flow control's preemption (flow-gate.ts): every endpoint the request could go to is
   * saturated, and the sidecar can free a slot on each endpoint of `freeable` by ending a
   * sheddable request of its own there. Picks among the request's candidates (its tier, its
   * model) on those endpoints as `pick` would; `saturated` when none of them is one. A request
   * pinned to one endpoint only takes that one.
   */
  pickFreeable(request: PickRequest, freeable: ReadonlySet<string>): RoomPickResult {
    return this.#pick(request, undefined, freeable);
  }

  /**
   * `pick`, and with a saturation rule only among the chosen tier's candidates that have room
   * (saturation.ts): the tier is chosen as without it, so a saturated first tier queues rather
   * than spills to a later (dearer) one.
   */
  #pick(
    request: PickRequest,
    rule: SaturationRule | undefined,
    freeable?: ReadonlySet<string>,
  ): RoomPickResult {
    const now = this.#now();
    this.#advanceBreakers(now);
    const { exclude, pinnedEndpointId: pinned } = request;
    // Only endpoints that serve the request's model, before the tier (model-filter.ts).
    const serves = this.#models.servesFilter<EndpointState>(request.model);
    // A pool with no endpoint at all (scaled to zero, not started) knows of no model it lacks:
    // it sheds as down (503, or held by scale from zero), never 404.
    if (
      this.#pool.order.length > 0 &&
      !servedAnywhere(serves, this.#pool.order, pinned, (id) => this.#pool.get(id))
    )
      return modelNotServed(DEFAULT_SHED_RETRY_AFTER_MS);
    const isCandidate = (s: EndpointState): boolean =>
      !(exclude?.has(s.id) ?? false) && s.breaker.admits() && !(s.cooldownUntilMs > now);

    // `pool` is the tier set affinity hashes over (endpoint-pool.ts, TierChoice).
    const { pool, candidates } = this.#pool.tierFor(this.#policy.mode, isCandidate, serves);
    if (pinned !== undefined) {
      if (freeable !== undefined && !freeable.has(pinned)) return { kind: 'saturated' };
      return this.#pickPinned(pinned, isCandidate, now, request.requestBytes, rule);
    }
    if (candidates.length === 0) {
      const soonestMs = soonestReturnMs(this.#pool.order, now, exclude, serves);
      return { kind: 'shed', retryAfterMs: soonestMs ?? DEFAULT_SHED_RETRY_AFTER_MS };
    }

    let roomy = candidates;
    if (freeable !== undefined) {
      roomy = candidates.filter((s) => freeable.has(s.id));
      if (roomy.length === 0) return { kind: 'saturated' };
    } else if (rule !== undefined) {
      const maxAge = this.#reportMaxAgeMs;
      roomy = candidates.filter((s) => !isSaturated(s.reported, s.inFlight, rule, now, maxAge));
      if (roomy.length === 0) return { kind: 'saturated' };
    }
    const input = { now, policy: this.#policy, request, pool, candidates: roomy };
    const chosen = this.#chooser.choose(input);
    return {
      kind: 'picked',
      attempt: this.#start(chosen.endpoint, now, request.requestBytes),
      affinity: chosen.affinity,
    };
  }

  /**
   * A request that must reach one endpoint (it holds the stored response the request refers to):
   * that endpoint if it is a candidate, else a shed with the time it comes back. Never another
   * endpoint, which would only answer 404; a drifted or departed one sheds too (the shell says
   * why before it asks). With a saturation rule, a saturated pinned endpoint is `saturated`: the
   * request waits in the sidecar's queue for room there, like any other.
   */
  #pickPinned(
    endpointId: string,
    isCandidate: (s: EndpointState) => boolean,
    now: number,
    requestBytes: number | undefined,
    rule: SaturationRule | undefined,
  ): RoomPickResult {
    const state = this.#pool.get(endpointId);
    if (state === undefined || state.spec.drifted === true || !isCandidate(state)) {
      const readyAt = state === undefined ? now : readyAtMs(state, now);
      return {
        kind: 'shed',
        retryAfterMs: readyAt > now ? readyAt - now : DEFAULT_SHED_RETRY_AFTER_MS,
      };
    }
    if (
      rule !== undefined &&
      isSaturated(state.reported, state.inFlight, rule, now, this.#reportMaxAgeMs)
    )
      return { kind: 'saturated' };
    return { kind: 'picked', attempt: this.#start(state, now, requestBytes), affinity: 'hit' };
  }

  reportLoad(endpointId: string, report: ServerLoadReport, ageMs = 0): void {
    const state = this.#pool.get(endpointId);
    if (state === undefined) return;
    const measuredAtMs = this.#now() - Math.max(0, ageMs);
    state.reported.update(report, state.inFlight, measuredAtMs);
    this.#adapters.report(endpointId, report.loadedAdapters, measuredAtMs);
  }

  reportModels(endpointId: string, models: readonly ServedModel[]): void {
    if (this.#pool.get(endpointId) !== undefined) this.#models.report(endpointId, models);
  }

  modelsServed(): ModelsServed {
    return this.#models.modelsServed(this.#pool.order);
  }

  firstByte(attempt: Attempt, firstToken = false): void {
    const record = this.#attempts.get(attempt);
    if (record === undefined || record.finished || record.ttftMs !== undefined) return;
    record.ttftMs = this.#now() - attempt.startedAtMs;
    // A first token is a sample as soon as it arrives. Held until the stream ends, it reached the
    // EWMA a whole generation late: seconds on the routing benchmark, minutes for a reasoning
    // model, and latest from the slowest endpoint, the one it should warn about (policy.md §5).
    if (firstToken && !record.state.removed) this.#sampleTtft(record);
  }

  /** Feeds the attempt's TTFT to its endpoint's EWMA: once, at its first token or its finish. */
  #sampleTtft(record: AttemptRecord): void {
    if (record.sampled || record.ttftMs === undefined) return;
    record.sampled = true;
    this.#feedEwma(record.state, normalisedTtftMs(record.ttftMs, record.requestBytes));
  }

  noteDriftMismatch(attempt: Attempt): void {
    const record = this.#attempts.get(attempt);
    if (record !== undefined && !record.state.removed) record.state.driftMismatches += 1;
  }

  finish(attempt: Attempt, outcome: Outcome): void {
    const record = this.#attempts.get(attempt);
    if (record === undefined || record.finished) return;
    record.finished = true;
    const state = record.state;
    state.inFlight = Math.max(0, state.inFlight - 1);
    if (state.removed) {
      this.#pool.endRetiredAttempt(state, this.#now());
      return;
    }

    const now = this.#now();
    state.lastActivityMs = now;
    this.#emit(state, state.breaker.advance(now));

    // An unknown kind (a JS caller) is treated as neutral: it says nothing about health.
    const kind = (outcome as Partial<Outcome> | undefined)?.kind;
    if (kind === 'success') {
      state.errorStreak = 0;
      this.#count(state, now, 'requests');
      // Only streamed first tokens are TTFTs: a non-streamed body's first byte arrives after the
      // whole generation and would make long answers look like a slow endpoint (docs/policy.md).
      if ((outcome as { streamed?: unknown }).streamed === true && record.ttftMs !== undefined) {
        this.#sampleTtft(record);
        if (record.startedWithFreeSlot && record.requestBytes !== undefined)
          this.#exchange.observe(record.ttftMs, now - attempt.startedAtMs, record.requestBytes);
      }
    } else if (kind === 'error') {
      state.errorStreak += 1;
      this.#count(state, now, 'errors');
    } else if (kind === 'rate-limited') {
      this.#count(state, now, 'rateLimited');
      this.#coolDown(state, now, (outcome as { retryAfterMs?: unknown }).retryAfterMs);
    }

    if (record.halfOpenProbeToken !== undefined) {
      const verdict =
        kind === 'success'
          ? 'succeeded'
          : kind === 'error' || kind === 'rate-limited'
            ? 'failed'
            : 'released';
      const settled = state.breaker.settleProbe(record.halfOpenProbeToken, verdict, now, this.#rng);
      if (settled?.to === 'closed') state.window.clear(); // a clean slate after recovery
      this.#emit(state, settled);
    }
    const reading = {
      ...state.window.totals(now),
      slow: this.#slow.isSlow(state),
      consecutiveErrors: state.errorStreak,
    };
    this.#emit(state, state.breaker.evaluate(now, reading, this.#rng));
  }

  recordRequest(): void {
    this.#budget.recordRequest();
  }

  tryRetry(attemptsSoFar: number): RetryDecision {
    if (!(attemptsSoFar < this.#policy.retry.maxAttempts)) return { kind: 'max-attempts' };
    return this.#budget.tryWithdraw() ? { kind: 'retry' } : { kind: 'budget-exhausted' };
  }

  prefillExchange(): PrefillExchangeReading {
    return this.#exchange.snapshot();
  }

  /** The retry budget's window, for a metrics gauge (not part of PoolBalancer). */
  retryBudget(): { firstAttempts: number; retries: number; allowance: number } {
    return this.#budget.snapshot();
  }

  status(): EndpointStatus[] {
    const now = this.#now();
    this.#advanceBreakers(now);
    const slow = this.#slow.slowOfAll();
    const context = statusContext(this.#pool.order, now, this.#views, slow);
    return this.#pool.order.map((s) => statusOf(s, now, context));
  }

  *statusSlices(perSlice: number): Generator<EndpointStatus[]> {
    const size = Math.max(1, Math.floor(perSlice) || 1);
    this.#advanceBreakers(this.#now());
    const slow = this.#slow.slowOfAll();
    const order = this.#pool.order;
    const context = statusContext(order, this.#now(), this.#views, slow);
    for (let start = 0; start < order.length; start += size) {
      const now = this.#now();
      yield order.slice(start, start + size).map((s) => statusOf(s, now, context));
    }
  }

  gauges(): EndpointGauges[] {
    this.#advanceBreakers(this.#now());
    return this.#pool.order.map((s) => gaugesOf(s, this.#ewma));
  }

  health(): EndpointHealth[] {
    const now = this.#now();
    this.#advanceBreakers(now);
    return this.#pool.order.map((s) => healthOf(s, now, this.#ewma));
  }

  /**
   * Placements other sidecars made (issue 45, a `placements` event): each endpoint of this pool
   * named holds the placement's hashes since `ageMs` ago. Endpoints this pool does not have,
   * undecodable digests and placements older than the index keeps are skipped. Returns how many
   * were recorded. This sidecar's own placements echoed back are harmless (never made older).
   */
  applyPlacements(batch: ReceivedPlacements): number {
    const now = this.#now();
    let applied = 0;
    for (const p of batch.placements) {
      const id = batch.endpoints[p.endpoint];
      if (id === undefined || this.#pool.get(id) === undefined) continue;
      if (!(p.ageMs >= 0) || p.ageMs >= DEFAULT_PREFIX_MAX_AGE_MS) continue;
      const hashes = decodeHashes(p.hashes);
      if (hashes === undefined || hashes.length === 0) continue;
      this.#prefixes.recordAt(hashes, id, now - p.ageMs);
      applied += 1;
    }
    return applied;
  }

  endpointReading(endpointId: string): EndpointReading | undefined {
    const state = this.#pool.get(endpointId);
    return state === undefined ? undefined : readingOf(state, this.#now(), this.#views);
  }

  /**
   * The clock's reading, or the last finite one when it returns NaN or ±Infinity: a broken clock
   * must not leave a breaker open forever (NaN never compares ≥) or poison the window.
   */
  #now(): number {
    const reading = this.#clock.nowMs();
    if (Number.isFinite(reading)) this.#lastNowMs = reading;
    return this.#lastNowMs;
  }

  #setEndpoints(endpoints: readonly EndpointSpec[], windowChanged: boolean): void {
    for (const id of this.#pool.update(endpoints, this.#policy.health, windowChanged)) {
      this.#ewma.forget(id);
      this.#prefixes.forget(id);
      this.#models.forget(id);
      this.#adapters.forget(id);
    }
    this.#slow.invalidate(); // endpoints, tiers, drift or mode may have changed
    this.#prefixes.setEndpointCount(this.#pool.order.length);
  }

  #advanceBreakers(now: number): void {
    for (const state of this.#pool.order) this.#emit(state, state.breaker.advance(now));
  }

  #start(state: EndpointState, now: number, requestBytes?: number): Attempt {
    const idleAfterMs = this.#policy.coldStart.idleAfterMs;
    // Idle = nothing in flight and nothing finished for idleAfterMs. Checked when the attempt
    // starts, not when it ends, so that a long stream is not mistaken for idleness.
    if (state.inFlight === 0 && idleAfterMs > 0 && now - state.lastActivityMs >= idleAfterMs) {
      state.dropNextSample = true;
    }
    const halfOpenProbeToken = state.breaker.takeProbe();
    const attempt: Attempt = Object.freeze({
      endpoint: state.spec,
      startedAtMs: now,
      halfOpenProbe: halfOpenProbeToken !== undefined,
    });
    // Only an attempt large enough to feed the prefill exchange needs to know whether it queued.
    const free =
      requestBytes !== undefined && requestBytes >= MIN_SAMPLE_BYTES
        ? state.reported.freeSlots(state.inFlight, now, this.#reportMaxAgeMs)
        : undefined;
    state.inFlight += 1;
    this.#attempts.set(attempt, {
      state,
      halfOpenProbeToken,
      requestBytes,
      startedWithFreeSlot: free === undefined || free >= 1,
      ttftMs: undefined,
      sampled: false,
      finished: false,
    });
    return attempt;
  }

  #count(state: EndpointState, now: number, counter: HealthCounter): void {
    state.window.add(now, 'requests');
    state.requests += 1;
    if (counter === 'errors') {
      state.window.add(now, 'errors');
      state.errors += 1;
    } else if (counter === 'rateLimited') {
      state.window.add(now, 'rateLimited');
      state.rateLimited += 1;
    }
  }

  #coolDown(state: EndpointState, now: number, retryAfterMs: unknown): void {
    if (typeof retryAfterMs !== 'number' || !(retryAfterMs > 0)) return;
    const until = now + Math.min(retryAfterMs, MAX_RETRY_AFTER_COOLDOWN_MS);
    state.cooldownUntilMs = Math.max(state.cooldownUntilMs, until);
  }

  #feedEwma(state: EndpointState, ttftMs: number): void {
    if (!isUsableTtftSample(ttftMs)) return; // a garbage sample must not use up the cold drop
    const before = this.#ewma.hasSamples(state.id) ? this.#ewma.valueMs(state.id) : undefined;
    if (state.dropNextSample) {
      state.dropNextSample = false;
      // A cold start only makes a first token slower: a cold sample faster than the endpoint's
      // own EWMA is news that it got faster (a slow endpoint tried again after a long idle, the
      // idle fade's retry), and is kept. A newcomer's has no EWMA of its own to beat: dropped.
      if (before === undefined || ttftMs >= before) {
        this.#onEvent?.({ kind: 'cold-sample-dropped', endpointId: state.id });
        return;
      }
    }
    this.#ewma.observe(state.id, ttftMs);
    state.lastTtftSampleAtMs = this.#now();
    this.#slow.moved(state, before, this.#ewma.valueMs(state.id));
  }

  #emit(state: EndpointState, transition: BreakerTransition | undefined): void {
    if (transition === undefined) return;
    this.#slow.invalidate(); // who serves and who is closed changed (every transition does)
    if (this.#onEvent === undefined) return;
    const event: PolicyEvent = {
      kind: 'breaker',
      endpointId: state.id,
      from: transition.from,
      to: transition.to,
      reason: transition.reason,
    };
    if (transition.openForMs !== undefined) event.openForMs = transition.openForMs;
    this.#onEvent(event);
  }
}
