/**
 * The TypeBox schemas of the snapshot stream (crds/snapshot.ts has the contract). They are the one
 * source of truth for the wire types and the checks; the checks themselves are compiled ahead of
 * time into `snapshot-checks.generated.ts` (`npm run generate`), so that a sidecar does not load
 * TypeBox (about 8 MB of its memory) to check what it receives. This module is loaded only to
 * explain a message that fails its check, and by the generator and the tests.
 */
import { Type } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { EndpointSpecSchema, PoolPolicySchema, PoolTimeoutsSchema } from './policy-types.ts';

const NonNegative = Type.Number({ minimum: 0 });
const Fraction = Type.Number({ minimum: 0, maximum: 1 });

export const PoolSnapshotSchema = Type.Object({
  /** Increases with every change of this pool's snapshot, per controller leader lineage. */
  version: Type.Integer({ minimum: 1 }),
  /** Content hash of policy, timeouts and endpoints: equal hash, equal routing. */
  hash: Type.String({ minLength: 1 }),
  pool: Type.Object({ namespace: Type.String(), name: Type.String() }),
  policy: PoolPolicySchema,
  timeouts: PoolTimeoutsSchema,
  endpoints: Type.Array(EndpointSpecSchema),
});

export const EndpointHealthReportSchema = Type.Object({
  id: Type.String(),
  breaker: Type.Union([Type.Literal('closed'), Type.Literal('open'), Type.Literal('half-open')]),
  /** Errors / requests in the sidecar's current health window. */
  errorRate: Fraction,
  rateLimitRate: Fraction,
  ewmaTtftMs: NonNegative,
  inFlight: Type.Integer({ minimum: 0 }),
  /** Responses whose model or system_fingerprint contradicted the endpoint's drift probe. */
  driftMismatches: Type.Optional(Type.Integer({ minimum: 0 })),
});

/**
 * What one sidecar used of one budget and wanted (issue 43), as rates per minute: `used` over its
 * last minute (status shows it), `wanted` over its last 2 s (what it used plus what it refused or
 * still holds for want of share), so that a share follows demand that moves between sidecars.
 * The controller re-splits the budget's shares from the wants.
 */
export const BudgetDemandSchema = Type.Object({
  /** The budget's id (`BudgetPolicy.id`). */
  id: Type.String({ minLength: 1 }),
  requests: Type.Optional(Type.Object({ used: NonNegative, wanted: NonNegative })),
  tokens: Type.Optional(Type.Object({ used: NonNegative, wanted: NonNegative })),
});

/**
 * What one sidecar sees of its pool's demand (issue 44), for the controller's autoscaling gauges:
 * rates over the sidecar's last report period, counts as they are when the report is sent.
 */
export const PoolDemandSchema = Type.Object({
  /** Requests the app sent to this pool, per second. */
  requestsPerSecond: NonNegative,
  /**
   * Requests the sidecar answered itself with a 429 or 503 (no live endpoint, queue full or timed
   * out, over budget, sheddable refused), per second.
   */
  shedPerSecond: NonNegative,
  /** Requests waiting now in the flow-control queue (for an endpoint with room or for budget). */
  queued: Type.Integer({ minimum: 0 }),
  /** Requests held now because the pool has no ready endpoint (spec.scaleFromZero). */
  held: Type.Integer({ minimum: 0 }),
});

export const SidecarReportSchema = Type.Object({
  /** Who reports: the pod name from the token, or a name the sidecar chose (standalone tools). */
  sidecar: Type.String({ minLength: 1, maxLength: 253 }),
  /** The snapshot version the sidecar has applied (0 = none yet). */
  appliedVersion: Type.Integer({ minimum: 0 }),
  appliedHash: Type.String(),
  endpoints: Type.Array(EndpointHealthReportSchema, { maxItems: 10_000 }),
  /** Budget use and demand, when the pool has budgets. Optional: older sidecars send none. */
  budgets: Type.Optional(Type.Array(BudgetDemandSchema, { maxItems: 1_000 })),
  /** The pool's demand as this sidecar sees it. Optional: older sidecars send none. */
  demand: Type.Optional(PoolDemandSchema),
});

/** One budget's share for one sidecar: what it may spend per minute until the next `shares`. */
export const BudgetShareSchema = Type.Object({
  id: Type.String({ minLength: 1 }),
  requestsPerMinute: Type.Optional(NonNegative),
  tokensPerMinute: Type.Optional(NonNegative),
});

/**
 * The `shares` event (issue 43), sent to one sidecar (not to every subscriber of the pool): its
 * shares of the pool's budgets, and the workload its pod is (from the pod its token is bound to,
 * when the pool takes workloads from a ServiceAccount or a pod label). A sidecar keeps the last
 * shares it got until new ones come, the controller down or not (static stability). Unknown
 * fields are allowed.
 */
export const PoolSharesSchema = Type.Object({
  workload: Type.Optional(Type.String({ minLength: 1 })),
  budgets: Type.Array(BudgetShareSchema, { maxItems: 1_000 }),
});

/**
 * One endpoint's load as its model server reported it (vLLM, SGLang or TensorRT-LLM gauges, read
 * by `parseLoadMetrics` in lib/model-server-load.ts). A field the server does not report is left
 * out; an endpoint with nothing known is not listed at all.
 */
/** The most LoRA adapters one endpoint's load entry names (vLLM keeps a handful resident). */
export const MAX_LOADED_ADAPTERS = 1024;

export const EndpointLoadSchema = Type.Object({
  /** The endpoint's id in the pool's snapshot. */
  id: Type.String({ minLength: 1 }),
  /** Requests the server is generating now (summed over its engines). */
  running: Type.Optional(NonNegative),
  /** Requests queued in the server, not yet started. */
  waiting: Type.Optional(NonNegative),
  /** Fraction of its KV cache in use, 0..1 (the largest over its engines). */
  kvCacheUsage: Type.Optional(Fraction),
  /**
   * The server's mean time between output tokens, ms, measured over the scrapes of the last few
   * seconds (its inter-token latency histogram): how fast it generates, next to its peers.
   */
  interTokenLatencyMs: Type.Optional(NonNegative),
  /**
   * LoRA adapters resident on the server (running and waiting ones of vLLM's
   * `vllm:lora_requests_info`). Absent: the server says nothing of adapters.
   */
  loadedAdapters: Type.Optional(
    Type.Array(Type.String({ minLength: 1 }), { maxItems: MAX_LOADED_ADAPTERS }),
  ),
  /** How old the reading was when the message was sent, ms: the signal lags by at least this. */
  ageMs: Type.Integer({ minimum: 0 }),
});

/**
 * The `load` event: the latest load of every endpoint of the pool whose server reports one. A full
 * list every time, never a diff: an endpoint missing from it has no known load (any more). It
 * changes neither the snapshot nor its version or hash. Unknown fields are allowed, so fields can
 * be added without a new protocol version.
 */
export const PoolLoadSchema = Type.Object({
  endpoints: Type.Array(EndpointLoadSchema, { maxItems: 10_000 }),
});

/**
 * One placement (issue 45, the fleet-wide view): some sidecar sent a request whose prompt had
 * these block hashes to this endpoint, `ageMs` before the batch was made. `hashes` is a digest of
 * the prompt's chain, not all of it: a few depths (`placementDepths` in lib/placement-hashes.ts),
 * each hash 7 bytes big-endian (52 bits), concatenated, base64url without padding, shallowest
 * first. Prompt text never leaves the sidecar; only these hashes do.
 */
export const PlacementSchema = Type.Object({
  /** Index into the batch's `endpoints`. */
  endpoint: Type.Integer({ minimum: 0, maximum: 9_999 }),
  ageMs: Type.Integer({ minimum: 0 }),
  /** At most 64 hashes (448 bytes, 598 base64url characters). */
  hashes: Type.String({ minLength: 10, maxLength: 598, pattern: '^[A-Za-z0-9_-]+$' }),
});

/**
 * The `placements` event, and the body a sidecar POSTs to `…/placements`: where requests of the
 * pool went lately, so that every sidecar routes as if it saw the whole fleet's prompts. Endpoint
 * ids are listed once per batch, the placements point into that list. Unknown fields are allowed.
 */
export const PoolPlacementsSchema = Type.Object({
  endpoints: Type.Array(Type.String({ minLength: 1, maxLength: 512 }), { maxItems: 10_000 }),
  placements: Type.Array(PlacementSchema, { maxItems: 10_000 }),
});

/**
 * The `endpoints` event (issue 46): what changed in the pool's endpoints since the snapshot the
 * subscriber holds (`baseVersion`, the last `snapshot` or `endpoints` event of its stream). Sent
 * only to a sidecar that asked for it (`?deltas=1`), only when policy and timeouts did not change.
 * Applying it: drop `removed`, replace `changed` in place (by id), then insert each of `added` at
 * its index `at` of the new list, in order; `endpointsHash` is the content hash (canonical JSON,
 * FNV-1a 64: crds/content-hash.ts) of the resulting list, `hash` the new snapshot's own hash (what
 * the sidecar reports). Unknown fields are allowed.
 */
export const EndpointsDeltaSchema = Type.Object({
  version: Type.Integer({ minimum: 1 }),
  baseVersion: Type.Integer({ minimum: 1 }),
  hash: Type.String({ minLength: 1 }),
  endpointsHash: Type.String({ minLength: 1 }),
  added: Type.Array(
    Type.Object({ at: Type.Integer({ minimum: 0 }), endpoint: EndpointSpecSchema }),
    { maxItems: 100_000 },
  ),
  removed: Type.Array(Type.String({ minLength: 1 }), { maxItems: 100_000 }),
  changed: Type.Array(EndpointSpecSchema, { maxItems: 100_000 }),
});

/** The checked messages of the stream, by name: what the generator compiles. */
export const SNAPSHOT_SCHEMAS = {
  PoolSnapshot: PoolSnapshotSchema,
  PoolLoad: PoolLoadSchema,
  SidecarReport: SidecarReportSchema,
  PoolShares: PoolSharesSchema,
  PoolPlacements: PoolPlacementsSchema,
  EndpointsDelta: EndpointsDeltaSchema,
} as const;

export type SnapshotMessage = keyof typeof SNAPSHOT_SCHEMAS;

/** Why `value` is not a valid `message`: its first 20 errors, by JSON pointer. */
export function explain(
  message: SnapshotMessage,
  value: unknown,
): { path: string; message: string }[] {
  return [...Value.Errors(SNAPSHOT_SCHEMAS[message], value)]
    .slice(0, 20)
    .map((e) => ({ path: e.path || '/', message: e.message }));
}
