/**
 * The resolved routing policy of a pool, its endpoints and its upstream timeouts: what a pool file
 * or a controller snapshot turns into, and what the sidecar's policy core consumes. It lives in
 * `crds/`, the one contract the controller and the sidecar share. Durations are milliseconds
 * (`...Ms`), rates are fractions in [0, 1].
 *
 * The schemas are the single source: the snapshot stream validates with them (`snapshot.ts`), and
 * every TypeScript type here is inferred from them (`Static<…>`), so the wire format and the
 * policy core's types cannot drift apart. The policy core imports these types with `import type`
 * only, so it never loads the schema library at run time.
 */
import { Type, type Static } from '@sinclair/typebox';

const NonNegative = Type.Number({ minimum: 0 });
const Fraction = Type.Number({ minimum: 0, maximum: 1 });
const PositiveMs = Type.Number({ exclusiveMinimum: 0 });

export const ModeSchema = Type.Union([Type.Literal('Balance'), Type.Literal('Failover')]);

/** Where the affinity key comes from. */
export const AffinityKeySourceSchema = Type.Union([
  Type.Literal('Prefix'),
  Type.Literal('Header'),
  Type.Literal('None'),
]);

export const AffinityPolicySchema = Type.Object({
  key: AffinityKeySourceSchema,
  /** Header that carries the key when `key` is `Header` (lower case). */
  header: Type.String(),
  /** How many characters of the stable prompt prefix are hashed when `key` is `Prefix`. */
  prefixChars: Type.Integer({ minimum: 1 }),
  /**
   * The sticky endpoint is kept unless its EWMA TTFT exceeds this multiple of the pool median
   * (see AFFINITY_MAX_SLOWDOWN for the default).
   */
  maxSlowdown: Type.Number({ minimum: 1 }),
  /**
   * The sticky endpoint is also given up when it has more than this many attempts in flight
   * beyond the least busy candidate (AFFINITY_MAX_EXTRA_IN_FLIGHT by default; optional so that a
   * snapshot of an older controller still applies).
   */
  maxExtraInFlight: Type.Optional(Type.Integer({ minimum: 0 })),
  /**
   * The load bound of consistent hashing with bounded loads: a key's endpoint takes a request
   * while its load is under loadFactor × the average (DEFAULT_LOAD_FACTOR when unset, so that a
   * snapshot of an older controller still applies).
   */
  loadFactor: Type.Optional(Type.Number({ minimum: 1 })),
});

export const HealthPolicySchema = Type.Object({
  /** Length of the sliding window over which error and 429 rates are computed. */
  windowMs: PositiveMs,
  /** A breaker may only open once the window holds at least this many finished requests. */
  minRequests: Type.Integer({ minimum: 0 }),
  /** Open when errors / requests in the window reach this fraction. */
  maxErrorRate: Fraction,
  /**
   * Open after this many errors in a row, whatever the window holds; 0 is off. Optional, so that a
   * snapshot of an older controller still applies (HEALTH_CONSECUTIVE_ERRORS when unset).
   */
  consecutiveErrors: Type.Optional(Type.Integer({ minimum: 0 })),
  /** Open when 429s / requests in the window reach this fraction. */
  max429Rate: Fraction,
  /** Open ("slow") when the endpoint's EWMA TTFT exceeds this multiple of the others' median. */
  maxTtftSlowdown: Type.Number({ minimum: 1 }),
  /** First open period; it doubles with each consecutive opening, up to `maxOpenForMs`. */
  openForMs: PositiveMs,
  maxOpenForMs: PositiveMs,
});

export const RetryPolicySchema = Type.Object({
  /** Retries may add at most this percentage of the recent first attempts... */
  budgetPercent: Type.Number({ minimum: 0, maximum: 100 }),
  /** ...plus this many retries per second as a reserve for low traffic. */
  minPerSecond: NonNegative,
  /** Attempts per client request, the first one included. */
  maxAttempts: Type.Integer({ minimum: 1 }),
});

export const ColdStartPolicySchema = Type.Object({
  /**
   * An endpoint that finished no request for this long is "cold": its next TTFT sample is dropped,
   * unless it is faster than the endpoint's EWMA (a cold start only slows a first token).
   */
  idleAfterMs: NonNegative,
});

export const DriftPolicySchema = Type.Object({
  /** How often each endpoint is probed. */
  probeEveryMs: PositiveMs,
  /** `Majority`, or the exact fingerprint a healthy endpoint answers. */
  expect: Type.String({ minLength: 1 }),
  /** Exclude: drifted endpoints get no traffic. Warn: reported only. */
  action: Type.Union([Type.Literal('Exclude'), Type.Literal('Warn')]),
  /** The probe prompt; undefined: the built-in one. */
  prompt: Type.Optional(Type.String()),
});

/** One alias: a client-facing model name and the served name it stands for. */
export const ModelAliasSchema = Type.Object({
  name: Type.String({ minLength: 1 }),
  model: Type.String({ minLength: 1 }),
});

/**
 * Where a request's workload (the unit per-workload budgets count) comes from (issue 43):
 * `ServiceAccount` the app pod's service account, `PodLabel` the value of one label of the app
 * pod, `Header` a request header's value (lower-case name; the header is forwarded as is).
 * For the first two every request of a sidecar is one workload: the controller names it in the
 * `shares` event (it reads the pod a sidecar's token is bound to); standalone, `--workload`.
 */
export const WorkloadSourceSchema = Type.Union([
  Type.Object({ kind: Type.Literal('ServiceAccount') }),
  Type.Object({ kind: Type.Literal('PodLabel'), label: Type.String({ minLength: 1 }) }),
  Type.Object({ kind: Type.Literal('Header'), header: Type.String({ minLength: 1 }) }),
]);

/**
 * One budget of a pool: a rate per minute for the whole pool (`workload` unset) or for one
 * workload. At least one of the two rates is set. Tokens are prompt + completion, from `usage`.
 */
export const BudgetPolicySchema = Type.Object({
  /**
   * Stable within the pool, the key of shares, reports and metrics: `pool` for the pool-wide
   * budget, `workload:<value>` for a workload's (budgetId() in flow-types.ts makes it).
   */
  id: Type.String({ minLength: 1 }),
  /** The workload value this budget applies to; unset: every request of the pool. */
  workload: Type.Optional(Type.String({ minLength: 1 })),
  requestsPerMinute: Type.Optional(Type.Number({ exclusiveMinimum: 0 })),
  tokensPerMinute: Type.Optional(Type.Number({ exclusiveMinimum: 0 })),
});

/**
 * Flow control (issue 43), resolved: priorities, the sidecar's bounded queue while every candidate
 * endpoint is saturated, and budgets. Absent from a policy: no queue, no budgets (as before).
 */
export const FlowControlPolicySchema = Type.Object({
  /** Priority of a request with no `x-switchyard-priority` header and no pod default. */
  defaultPriority: Type.Integer(),
  /** Longest a request waits in the queue (saturation or budget) before a 429. */
  maxQueueWaitMs: PositiveMs,
  /** Most requests waiting in one sidecar's queue of this pool; past it a 429 `queue_full`. */
  maxQueuedRequests: Type.Integer({ minimum: 0 }),
  /** Most bytes of request bodies held by that queue; past it a 429 `queue_full`. */
  maxQueuedBytes: Type.Integer({ minimum: 0 }),
  /** A server reporting its KV cache at least this full is saturated. */
  kvCacheSaturation: Fraction,
  /**
   * The part of an endpoint sheddable requests leave free for the others (`SaturationRule.headroom`).
   * Optional, so that a snapshot of an older controller still applies (0.25 then).
   */
  sheddableHeadroom: Type.Optional(Fraction),
  /**
   * A request of priority 0 or more that finds every endpoint saturated may end a sheddable
   * request of the same sidecar that has sent nothing to its client yet, take its slot, and
   * queue it again. Optional (an older controller's snapshot): unset means off, the default.
   */
  preemptSheddable: Type.Optional(Type.Boolean()),
  /**
   * An endpoint whose server reports no load is saturated with this many of this sidecar's
   * requests in flight there. Unset: never saturated without reports.
   */
  maxInFlightPerEndpoint: Type.Optional(Type.Integer({ minimum: 1 })),
  /** Where a request's workload comes from; unset: no per-workload budgets apply. */
  workload: Type.Optional(WorkloadSourceSchema),
  budgets: Type.Array(BudgetPolicySchema),
});

/**
 * Scale from zero (issue 44), resolved: while the pool has no ready endpoint, each sidecar holds
 * requests up to these bounds and reports them (`PoolDemand.held`). Absent from a policy: off, a
 * pool with no endpoint answers 503 at once (as before).
 */
export const ScaleFromZeroPolicySchema = Type.Object({
  /** Longest a request is held before a 503 with Retry-After. */
  maxWaitMs: PositiveMs,
  /** Most requests one sidecar holds for this pool; one more gets the 503 at once. */
  maxRequests: Type.Integer({ minimum: 1 }),
  /** Most bytes of request bodies one sidecar holds for this pool. */
  maxBytes: Type.Integer({ minimum: 0 }),
});

/** The resolved policy of one pool: every default applied, every duration in ms. */
export const PoolPolicySchema = Type.Object({
  mode: ModeSchema,
  /**
   * The money↔latency exchange rate: how many $/Mtok are worth one millisecond of TTFT.
   * `undefined` means pure latency routing (cost is ignored).
   */
  costWeightPerMs: Type.Optional(Type.Number({ exclusiveMinimum: 0 })),
  /** EWMA TTFT assumed for a new endpoint when no endpoint of the pool has data yet. */
  defaultTtftMs: PositiveMs,
  /** Models the pool serves; empty = any model. */
  models: Type.Array(Type.String()),
  /**
   * Client-facing model names and the served name each stands for (`spec.aliases`): a request for
   * `name` is sent as `model`. Optional, so that a snapshot of an older controller still applies.
   */
  aliases: Type.Optional(Type.Array(ModelAliasSchema)),
  affinity: AffinityPolicySchema,
  health: HealthPolicySchema,
  retry: RetryPolicySchema,
  coldStart: ColdStartPolicySchema,
  /** Drift detection, when the pool sets `drift.probeEvery` (docs/drift.md). */
  drift: Type.Optional(DriftPolicySchema),
  /**
   * Flow control, when the pool sets `spec.flowControl` (docs/flow-control.md). Optional, so that
   * a snapshot of an older controller still applies.
   */
  flowControl: Type.Optional(FlowControlPolicySchema),
  /**
   * Scale from zero, when the pool sets `spec.scaleFromZero` (docs/autoscaling.md). Optional, so
   * that a snapshot of an older controller still applies.
   */
  scaleFromZero: Type.Optional(ScaleFromZeroPolicySchema),
});

/** What the last successful drift probe of an endpoint saw. */
export const EndpointProbeSchema = Type.Object({
  fingerprint: Type.String({ minLength: 1 }),
  model: Type.Optional(Type.String()),
  systemFingerprint: Type.Optional(Type.String()),
  /** The verdict, whatever the action (with Warn, a drifted endpoint still gets traffic). */
  drifted: Type.Optional(Type.Boolean()),
});

/**
 * How an https endpoint's certificate is checked (the backend's `tls`, its CA resolved): unset
 * fields mean Node's defaults (the system CAs, the URL's host, verification on).
 */
export const EndpointTlsSchema = Type.Object({
  /** PEM certificates of the CAs to trust instead of the system's. */
  caBundle: Type.Optional(Type.String({ minLength: 1 })),
  /** The name the certificate must carry, also sent as SNI; unset: the URL's host. */
  serverName: Type.Optional(Type.String({ minLength: 1 })),
  /** Accept any certificate (encrypted, not authenticated). */
  insecureSkipVerify: Type.Optional(Type.Boolean()),
});

/** One concrete address requests can be sent to. A backend has one or more endpoints. */
export const EndpointSpecSchema = Type.Object({
  /** Stable and unique within the pool, e.g. `primary/10.0.0.7:8000`. State is kept by this id. */
  id: Type.String({ minLength: 1 }),
  /** Name of the backend this endpoint belongs to. */
  backend: Type.String({ minLength: 1 }),
  /** Position of the backend in the pool's list: the failover order (0 = first choice). */
  tier: Type.Integer({ minimum: 0 }),
  /** Base URL including the API prefix, e.g. `http://10.0.0.7:8000/v1`. */
  url: Type.String({ pattern: '^https?://' }),
  /** Price of this backend in $ per million tokens (0 when unknown). */
  costPerMTok: NonNegative,
  /** Model name to put into the request instead of the client's, if set. */
  model: Type.Optional(Type.String()),
  /**
   * The model names this endpoint serves, as requests name them once aliases are resolved (its
   * backend's `models`: base models and LoRA adapters). Undefined: not declared; the sidecar
   * learns them from the endpoint's own `/v1/models`, and until it has, any model may go there.
   * Optional, so that a snapshot of an older controller still applies.
   */
  models: Type.Optional(Type.Array(Type.String({ minLength: 1 }))),
  /**
   * Its backend's share of the traffic of the tier it is in (a weighted split: canaries). Within
   * a tier, backends are picked in proportion to their weights, then load-aware balancing picks
   * among the chosen backend's endpoints. Undefined on every backend of a tier: no split.
   */
  weight: Type.Optional(NonNegative),
  /** API key for this backend, if it has one. Never logged. */
  apiKey: Type.Optional(Type.String()),
  /**
   * The header the key goes in: `x-api-key` (Anthropic-style providers) or, when unset,
   * `Authorization: Bearer <key>`. Optional so that a snapshot of an older controller applies.
   */
  apiKeyHeader: Type.Optional(Type.Literal('x-api-key')),
  /**
   * Certificate checks of an https endpoint, when its backend sets any. Optional: an older
   * sidecar ignores it (and checks against the system CAs).
   */
  tls: Type.Optional(EndpointTlsSchema),
  /** Marked by drift detection: excluded from picks while true. */
  drifted: Type.Optional(Type.Boolean()),
  /** The last successful drift probe, for the sidecar's passive check (and /debug/backends). */
  probe: Type.Optional(EndpointProbeSchema),
});

/**
 * Upstream timeouts of every attempt, and the client's, in ms. Not part of PoolPolicy: the proxy applies them, the
 * policy core never sees them.
 */
export const PoolTimeoutsSchema = Type.Object({
  /** TCP (and TLS) connect. */
  connectMs: PositiveMs,
  /** From dispatch to the first response body byte: a stall past it is an error and may be retried. */
  firstByteMs: PositiveMs,
  /** Longest silence between two body chunks once the response is flowing. */
  idleMs: PositiveMs,
  /**
   * Longest time the client's connection may stay full (no drain since the write that filled
   * it) before the sidecar closes it. Optional so that a snapshot of an older controller (or one
   * an older sidecar cached on disk) still applies: CLIENT_STALL_MS then.
   */
  clientStallMs: Type.Optional(PositiveMs),
});

export type Mode = Static<typeof ModeSchema>;
export type AffinityKeySource = Static<typeof AffinityKeySourceSchema>;
export type AffinityPolicy = Static<typeof AffinityPolicySchema>;
export type HealthPolicy = Static<typeof HealthPolicySchema>;
export type RetryPolicy = Static<typeof RetryPolicySchema>;
export type ColdStartPolicy = Static<typeof ColdStartPolicySchema>;
export type DriftPolicy = Static<typeof DriftPolicySchema>;
export type WorkloadSource = Static<typeof WorkloadSourceSchema>;
export type BudgetPolicy = Static<typeof BudgetPolicySchema>;
export type FlowControlPolicy = Static<typeof FlowControlPolicySchema>;
export type ScaleFromZeroPolicy = Static<typeof ScaleFromZeroPolicySchema>;
export type ModelAlias = Static<typeof ModelAliasSchema>;
export type PoolPolicy = Static<typeof PoolPolicySchema>;
export type EndpointProbe = Static<typeof EndpointProbeSchema>;
export type EndpointSpec = Static<typeof EndpointSpecSchema>;
export type EndpointTls = Static<typeof EndpointTlsSchema>;
export type PoolTimeouts = Static<typeof PoolTimeoutsSchema>;
