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

export type Mode = 'Balance' | 'Failover';

/** Where the affinity key comes from. */
export type AffinityKeySource = 'Prefix' | 'Header' | 'None';

export interface AffinityPolicy {
  key: AffinityKeySource;
  /** Header that carries the key when `key` is `Header` (lower case). */
  header: string;
  /** How many characters of the stable prompt prefix are hashed when `key` is `Prefix`. */
  prefixChars: number;
  /**
   * The sticky endpoint is kept unless its EWMA TTFT exceeds this multiple of the pool median
   * (see AFFINITY_MAX_SLOWDOWN for the default).
   */
  maxSlowdown: number;
}

export interface HealthPolicy {
  /** Length of the sliding window over which error and 429 rates are computed. */
  windowMs: number;
  /** A breaker may only open once the window holds at least this many finished requests. */
  minRequests: number;
  /** Open when errors / requests in the window reach this fraction. */
  maxErrorRate: number;
  /** Open when 429s / requests in the window reach this fraction. */
  max429Rate: number;
  /** Open ("slow") when the endpoint's EWMA TTFT exceeds this multiple of the others' median. */
  maxTtftSlowdown: number;
  /** First open period; it doubles with each consecutive opening, up to `maxOpenForMs`. */
  openForMs: number;
  maxOpenForMs: number;
}

export interface RetryPolicy {
  /** Retries may add at most this percentage of the recent first attempts... */
  budgetPercent: number;
  /** ...plus this many retries per second as a reserve for low traffic. */
  minPerSecond: number;
  /** Attempts per client request, the first one included. */
  maxAttempts: number;
}

export interface ColdStartPolicy {
  /** An endpoint that finished no request for this long is "cold": its next TTFT sample is dropped. */
  idleAfterMs: number;
}

/** The resolved policy of one pool: every default applied, every duration in ms. */
export interface PoolPolicy {
  mode: Mode;
  /**
   * The money↔latency exchange rate: how many $/Mtok are worth one millisecond of TTFT.
   * `undefined` means pure latency routing (cost is ignored).
   */
  costWeightPerMs: number | undefined;
  /** EWMA TTFT assumed for a new endpoint when no endpoint of the pool has data yet. */
  defaultTtftMs: number;
  /** Models the pool serves; empty = any model. */
  models: string[];
  affinity: AffinityPolicy;
  health: HealthPolicy;
  retry: RetryPolicy;
  coldStart: ColdStartPolicy;
}

/** One concrete address requests can be sent to. A backend has one or more endpoints. */
export interface EndpointSpec {
  /** Stable and unique within the pool, e.g. `primary/10.0.0.7:8000`. State is kept by this id. */
  id: string;
  /** Name of the backend this endpoint belongs to. */
  backend: string;
  /** Position of the backend in the pool's list: the failover order (0 = first choice). */
  tier: number;
  /** Base URL including the API prefix, e.g. `http://10.0.0.7:8000/v1`. */
  url: string;
  /** Price of this backend in $ per million tokens (0 when unknown). */
  costPerMTok: number;
  /** Model name to put into the request instead of the client's, if set. */
  model?: string | undefined;
  /** Bearer token for this backend, if it has one. Never logged. */
  apiKey?: string | undefined;
  /** Marked by drift detection: excluded from picks while true. */
  drifted?: boolean | undefined;
}

export type BreakerState = 'closed' | 'open' | 'half-open';

/** Why an affinity decision went the way it did (the `result` label of the affinity metric). */
export type AffinityResult = 'hit' | 'slow' | 'unavailable' | 'none';

/** One dispatch to one endpoint, from pick until the response ends or the client leaves. */
export interface Attempt {
  readonly endpoint: EndpointSpec;
  readonly startedAtMs: number;
  /** True when this attempt is the single probe of a half-open breaker. */
  readonly probe: boolean;
}

export type PickResult =
  | { kind: 'picked'; attempt: Attempt; affinity: AffinityResult }
  /** Nothing is live: answer 503 at once; `retryAfterMs` is when the soonest breaker half-opens. */
  | { kind: 'shed'; retryAfterMs: number };

export interface PickRequest {
  /** Affinity key (already hashed or raw), or undefined for none. */
  affinityKey?: string | undefined;
  /** Endpoints already tried for this client request: a retry never goes back to them. */
  exclude?: ReadonlySet<string> | undefined;
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
  inFlight: number;
  ewmaTtftMs: number;
  /** True when the EWMA is still the seeded value (no sample of its own yet). */
  ewmaSeeded: boolean;
  breaker: BreakerState;
  slow: boolean;
  drifted: boolean;
  requests: number;
  errors: number;
  rateLimited: number;
  /** Counts in the current health window. */
  window: { requests: number; errors: number; rateLimited: number };
  costPerMTok: number;
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
  /** The first response body byte of this attempt arrived now: its TTFT sample. */
  firstByte(attempt: Attempt): void;
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
}

export type RetryDecision =
  { kind: 'retry' } | { kind: 'max-attempts' } | { kind: 'budget-exhausted' };
