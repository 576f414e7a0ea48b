/**
 * The resolved routing policy of a pool and its endpoints: what a pool file or a controller
 * snapshot turns into, and what the sidecar's policy core consumes. It lives in `crds/`, the one
 * contract the controller and the sidecar share. Durations are milliseconds (`...Ms`), rates are
 * fractions in [0, 1].
 */

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
  /**
   * The sticky endpoint is also given up when it has more than this many attempts in flight
   * beyond the least busy candidate (AFFINITY_MAX_EXTRA_IN_FLIGHT by default; optional so that a
   * snapshot of an older controller still applies).
   */
  maxExtraInFlight?: number | undefined;
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
  costWeightPerMs?: number | undefined;
  /** EWMA TTFT assumed for a new endpoint when no endpoint of the pool has data yet. */
  defaultTtftMs: number;
  /** Models the pool serves; empty = any model. */
  models: string[];
  affinity: AffinityPolicy;
  health: HealthPolicy;
  retry: RetryPolicy;
  coldStart: ColdStartPolicy;
  /** Drift detection, when the pool sets `drift.probeEvery` (docs/drift.md). */
  drift?: DriftPolicy | undefined;
}

export interface DriftPolicy {
  /** How often each endpoint is probed. */
  probeEveryMs: number;
  /** `Majority`, or the exact fingerprint a healthy endpoint answers. */
  expect: string;
  /** Exclude: drifted endpoints get no traffic. Warn: reported only. */
  action: 'Exclude' | 'Warn';
  /** The probe prompt; undefined: the built-in one. */
  prompt?: string | undefined;
}

/** What the last successful drift probe of an endpoint saw. */
export interface EndpointProbe {
  fingerprint: string;
  model?: string | undefined;
  systemFingerprint?: string | undefined;
  /** The verdict, whatever the action (with Warn, a drifted endpoint still gets traffic). */
  drifted?: boolean | undefined;
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
  /** The last successful drift probe, for the sidecar's passive check (and /debug/backends). */
  probe?: EndpointProbe | undefined;
}
