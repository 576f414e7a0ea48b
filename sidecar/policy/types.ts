/**
 * The contract between the pure routing policy and the I/O shell around it.
 *
 * Everything in `sidecar/policy/` decides; nothing in it does I/O. Time and randomness come in
 * through `Clock` and `Rng` so that every decision can be replayed in a test or a benchmark.
 * Durations are milliseconds (`...Ms`), rates are fractions in [0, 1].
 */

/** Monotonic milliseconds. The shell passes `performance.now`; tests pass a fake. */
export interface Clock {
  nowMs(): number;
}

/** Uniform random numbers in [0, 1). The shell passes `Math.random`; tests script or seed it. */
export interface Rng {
  next(): number;
}

export type {
  AffinityKeySource,
  AffinityPolicy,
  ColdStartPolicy,
  EndpointSpec,
  HealthPolicy,
  Mode,
  PoolPolicy,
  RetryPolicy,
} from '../../crds/policy-types.ts';
import type { EndpointSpec, PoolPolicy } from '../../crds/policy-types.ts';

import type { PromptBlocks } from './prompt-blocks.ts';
import type { ServerLoadReport } from './server-load.ts';
export type { PromptBlocks, ServerLoadReport };

export type BreakerState = 'closed' | 'open' | 'half-open';

/**
 * Why an affinity decision went the way it did (the `result` label of the affinity metric):
 * `hit` the prompt's home or the holder of its longest known prefix; `spill` a later endpoint of
 * the key's rendezvous order (the earlier ones were down, slow or over the load bound);
 * `overloaded` none fitted, so the request was balanced; `none` no key.
 */
export type AffinityResult = 'hit' | 'spill' | 'overloaded' | 'none';

/** One dispatch to one endpoint, from pick until the response ends or the client leaves. */
export interface Attempt {
  readonly endpoint: EndpointSpec;
  readonly startedAtMs: number;
  /**
   * True when this attempt is the single trial request a half-open breaker lets through (not to
   * be confused with `EndpointSpec.probe`, the drift probe's verdict).
   */
  readonly halfOpenProbe: boolean;
}

export type PickResult =
  | { kind: 'picked'; attempt: Attempt; affinity: AffinityResult }
  /**
   * Nothing is live: answer 503 at once; `retryAfterMs` is when the soonest breaker half-opens.
   * `reason: 'model-not-served'`: no endpoint of the pool serves the request's `model` at all
   * (declared or discovered), whatever their health: the shell answers 404 `model_not_found`.
   */
  | { kind: 'shed'; retryAfterMs: number; reason?: 'model-not-served' | undefined };

/**
 * What `pickWithRoom` answers: a pick or a shed as `pick` does, or `saturated`: live candidates
 * exist, but every one is saturated (flow control, issue 43); nothing was started. The shell
 * queues the request or refuses it.
 */
export type RoomPickResult = PickResult | { kind: 'saturated' };

/**
 * When an endpoint has no room (flow control, docs/flow-control.md): its server reports requests
 * waiting (or no free slot of its largest batch seen, `ReportedLoad.freeSlots`), or KV-cache use
 * at or above `kvCacheSaturation`; without a fresh report, when this sidecar has
 * `maxInFlightPerEndpoint` requests in flight there (unset: never, without reports).
 */
export interface SaturationRule {
  readonly kvCacheSaturation: number;
  readonly maxInFlightPerEndpoint?: number | undefined;
  /**
   * The part of the endpoint this request must leave free (a sheddable request leaves room for
   * the others): saturated while no more than ceil(batch × headroom) slots are free (of
   * `maxInFlightPerEndpoint` without reports), or at KV-cache use of kvCacheSaturation ×
   * (1 − headroom). Undefined or 0: up to the brim.
   */
  readonly headroom?: number | undefined;
}

export interface PickRequest {
  /** The affinity header's value (`affinity.key: Header`), or undefined for none. */
  affinityKey?: string | undefined;
  /** The prompt's blocks (`affinity.key: Prefix`, see prompt-blocks.ts), or undefined for none. */
  prompt?: PromptBlocks | undefined;
  /**
   * The one endpoint this request may go to (it holds a stored response the request refers to):
   * picked when it is a candidate, else shed; never another endpoint, never by affinity.
   */
  pinnedEndpointId?: string | undefined;
  /** Endpoints already tried for this client request: a retry never goes back to them. */
  exclude?: ReadonlySet<string> | undefined;
  /** Size of the request body in bytes: TTFT samples are normalised by it (docs/policy.md). */
  requestBytes?: number | undefined;
  /**
   * The model the request names, aliases resolved: only endpoints that serve it are candidates
   * (an endpoint whose list is not known yet counts as serving it). Undefined: any endpoint.
   */
  model?: string | undefined;
}

/**
 * One entry of an endpoint's own `/v1/models` list: its id, and for a LoRA adapter the base model
 * it applies to (vLLM's `parent`; for a base model vLLM sends none or the id itself).
 */
export interface ServedModel {
  readonly id: string;
  readonly parent?: string | undefined;
}

/** How an attempt ended, as seen by the shell. */
export type Outcome =
  /** A 2xx response. `streamed` says whether TTFT was a real first token (see docs/policy.md). */
  | { kind: 'success'; streamed: boolean }
  /** Connect error, reset, timeout, or a 5xx status. */
  | { kind: 'error' }
  /** A 429 status; `retryAfterMs` from the upstream's Retry-After header when it sent one. */
  | { kind: 'rate-limited'; retryAfterMs?: number | undefined }
  /** The client went away first, or a 4xx that is the client's fault: says nothing about health. */
  | { kind: 'neutral' };

export type PolicyEvent =
  | {
      kind: 'breaker';
      endpointId: string;
      from: BreakerState;
      to: BreakerState;
      reason:
        'errors' | 'rate-limited' | 'slow' | 'probe-failed' | 'probe-succeeded' | 'open-expired';
      openForMs?: number;
    }
  | { kind: 'cold-sample-dropped'; endpointId: string };

/** What `/debug/backends` shows per endpoint, and what metrics are read from. */
export interface EndpointStatus {
  id: string;
  backend: string;
  url: string;
  tier: number;
  /** This sidecar's attempts in flight there. */
  inFlight: number;
  /** The load the balancer works with: `inFlight` corrected by the server's report. */
  load: number;
  /** The server's last fresh load report, if any. */
  reported?: (ServerLoadReport & { ageMs: number }) | undefined;
  ewmaTtftMs: number;
  /** True when the EWMA is still the seeded value (no sample of its own yet). */
  ewmaSeeded: boolean;
  /**
   * Its TTFT from its own samples alone and how many (`TtftEwmas.measured`): what affinity's
   * slowdown check reads. Absent before the first sample.
   */
  measuredTtft?: { ms: number; samples: number } | undefined;
  /**
   * How long ago its newest TTFT sample came in; absent before the first. Affinity rechecks an
   * endpoint it judged slow once this passes AFFINITY_SLOW_RECHECK_AFTER_MS with nothing in flight.
   */
  lastTtftSampleAgeMs?: number | undefined;
  /**
   * Its server's reported time per token ÷ the median of the others' (server-speed.ts); absent
   * when it reports no speed. From SLOW_SERVER_RATIO the balancer counts it by its speed.
   */
  reportedSlowdown?: number | undefined;
  breaker: BreakerState;
  slow: boolean;
  /** Judged drifted by drift detection (excluded from picks when drift.action is Exclude). */
  drifted: boolean;
  /** The fingerprint of its last successful drift probe, when drift detection is on. */
  fingerprint?: string | undefined;
  /** Responses that contradicted that probe, since the endpoint joined. */
  driftMismatches: number;
  requests: number;
  errors: number;
  rateLimited: number;
  /** Errors in a row, ended by a success: the breaker opens at `health.consecutiveErrors`. */
  consecutiveErrors: number;
  /** Counts in the current health window. */
  window: { requests: number; errors: number; rateLimited: number };
  costPerMTok: number;
}

/**
 * What the per-endpoint metric gauges show: a few fields of `EndpointStatus`, read without the
 * rest of it (see `PoolBalancer.gauges`).
 */
export type EndpointGauges = Pick<
  EndpointStatus,
  'id' | 'backend' | 'inFlight' | 'ewmaTtftMs' | 'breaker' | 'drifted'
>;

/**
 * What a sidecar reports to the controller about each endpoint: a few fields of `EndpointStatus`,
 * read without the rest of it (see `PoolBalancer.health`).
 */
export type EndpointHealth = Pick<
  EndpointStatus,
  'id' | 'breaker' | 'inFlight' | 'ewmaTtftMs' | 'driftMismatches' | 'window'
>;

/**
 * A batch of placements other sidecars made (crds/snapshot.ts `PoolPlacements`, already checked):
 * endpoint ids listed once, each placement pointing into them, its hashes a digest of a prompt's
 * block chain (lib/placement-hashes.ts).
 */
export interface ReceivedPlacements {
  readonly endpoints: readonly string[];
  readonly placements: readonly { endpoint: number; ageMs: number; hashes: string }[];
}

/**
 * The routing policy of one pool: candidates → affinity → P2C → breaker gate, plus the retry
 * budget. Implemented by `Balancer` in `balancer.ts`; the proxy shell only talks to this.
 */
export interface PoolBalancer {
  /** Apply a new policy and endpoint list. State (EWMA, breakers, in-flight) is kept by endpoint id. */
  update(policy: PoolPolicy, endpoints: readonly EndpointSpec[]): void;
  /** Choose an endpoint and start an attempt on it (in-flight +1), or shed. */
  pick(request: PickRequest): PickResult;
  /**
   * Flow control (issue 43): `pick`, among the candidates that are not saturated by `rule` only;
   * `{ kind: 'saturated' }` (nothing started) when live candidates exist but all are saturated.
   * A shed (nothing live, model not served) is answered as `pick` answers it.
   */
  pickWithRoom(request: PickRequest, rule: SaturationRule): RoomPickResult;
  /**
   * Flow control's preemption: `pick` among the request's candidates on `freeable` only (the
   * endpoints where the sidecar can free a slot), saturation aside; `saturated` when none is one.
   */
  pickFreeable(request: PickRequest, freeable: ReadonlySet<string>): RoomPickResult;
  /**
   * The endpoint's server reported requests waiting in a report measured after `sinceMs`
   * (`Attempt.startedAtMs`'s clock): a request sent then, not yet answered, may wait there.
   */
  queuedSince(endpointId: string, sinceMs: number): boolean;
  /**
   * The server reported its load (an ORCA header, a /metrics scrape), measured `ageMs` ago
   * (default 0: just now).
   */
  reportLoad(endpointId: string, report: ServerLoadReport, ageMs?: number): void;
  /**
   * Where other sidecars placed prompts (issue 45, the controller's `placements` event): recorded
   * in the prefix index as held since `ageMs` ago. Returns how many placements were recorded.
   */
  applyPlacements(batch: ReceivedPlacements): number;
  /**
   * What the endpoint's own `/v1/models` lists now (model discovery): used for endpoints whose
   * backend declares no `models`, replacing the previous list. Unknown ids are ignored.
   */
  reportModels(endpointId: string, models: readonly ServedModel[]): void;
  /** What the pool's endpoints serve as far as this sidecar knows: pool routing, /v1/models. */
  modelsServed(): ModelsServed;
  /**
   * The first response body byte of this attempt arrived now: its TTFT. `firstToken` says the
   * shell knows it is the first token of a streamed 2xx answer: the sample is taken now, not when
   * the stream ends. Without it the sample waits for the outcome (`finish`, a streamed success).
   */
  firstByte(attempt: Attempt, firstToken?: boolean): void;
  /** The response contradicted the endpoint's drift probe (the passive check): counted. */
  noteDriftMismatch(attempt: Attempt): void;
  /** The attempt ended (in-flight −1) with this outcome. Safe to call once per attempt only. */
  finish(attempt: Attempt, outcome: Outcome): void;
  /** Count one client request (a first attempt) into the retry budget. */
  recordRequest(): void;
  /**
   * May the client request be retried after `attemptsSoFar` attempts? Checks `maxAttempts` and
   * withdraws from the retry budget when it answers true.
   */
  tryRetry(attemptsSoFar: number): RetryDecision;
  status(): EndpointStatus[];
  /**
   * `status()` in slices of `perSlice` endpoints (at least 1), each computed when it is asked for:
   * breakers are advanced and slow endpoints found once, in the first slice; each slice reads the
   * clock anew. For `/debug/backends`, which yields the proxy's loop between slices: at the
   * largest pools one `status()` blocks the loop too long (docs/benchmarks.md, "Admin scrapes at
   * the largest pool").
   */
  statusSlices(perSlice: number): Iterable<EndpointStatus[]>;
  /**
   * The gauges' fields of `status()`, the same values in the same order (breakers advanced to
   * now first), without the rest: every `/metrics` render reads them, and at the largest pools
   * `status()` (an object per endpoint, its window totals, slow detection) costs the proxy's loop
   * many times what these fields do (docs/benchmarks.md, "Admin scrapes at the largest pool").
   */
  gauges(): EndpointGauges[];
  /**
   * The fields of `status()` that a report to the controller carries, the same values in the
   * same order (breakers advanced to now first), without the rest: a sidecar in controller mode
   * reads them for every report, and at the largest pools `status()` (slow detection sorts every
   * EWMA; load estimates, server reports) costs the proxy's loop far more.
   */
  health(): EndpointHealth[];
  /** One endpoint's standing now, for a trace of why it was picked; undefined when unknown. */
  endpointReading(endpointId: string): EndpointReading | undefined;
  /**
   * What the pool has measured of prefill and slot times (`PrefillExchange`): the rate at which a
   * cached prefix buys queue positions. Undefined fields are not measured yet.
   */
  prefillExchange(): PrefillExchangeReading;
}

/** What a pool's endpoints serve, declared (`EndpointSpec.models`) or discovered. */
export interface ModelsServed {
  /**
   * Each known model id → how many endpoints (drifted ones excluded) serve it, and for a LoRA
   * adapter the base model it applies to.
   */
  readonly models: ReadonlyMap<string, { readonly endpoints: number; readonly parent?: string }>;
  /** Endpoints whose list is neither declared nor discovered yet: they may serve anything. */
  readonly unknownEndpoints: number;
}

/** The learned rates of `PrefillExchange`, for metrics. */
export interface PrefillExchangeReading {
  /** Time to first token per KiB of request, on servers with a free slot. */
  prefillMsPerKiB: number | undefined;
  /** How long a request holds its slot, start to end. */
  holdMs: number | undefined;
}

/** The part of an endpoint's status a pick weighed, read cheaply for one endpoint. */
export interface EndpointReading {
  breaker: BreakerState;
  ewmaTtftMs: number;
  /** Still the seeded EWMA: no TTFT sample of its own yet. */
  ewmaSeeded: boolean;
  /** `inFlight` corrected by the server's load report (what least-loaded compares). */
  load: number;
  inFlight: number;
}

export type RetryDecision =
  { kind: 'retry' } | { kind: 'max-attempts' } | { kind: 'budget-exhausted' };
