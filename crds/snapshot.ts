/**
 * The snapshot stream: the wire contract between the controller and the sidecars (see
 * docs/snapshot-protocol.md). The controller computes a `PoolSnapshot` per pool and streams it;
 * each sidecar validates what it receives with `parseSnapshot` before applying it, and reports back
 * a `SidecarReport`. Beside the snapshots the stream carries `PoolLoad` messages: what the pool's
 * model servers report about their own load (`parseLoad`). Both sides import only this module:
 * `controller/` and `sidecar/` never import each other.
 */
import { Type, type Static } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { EndpointSpecSchema, PoolPolicySchema, PoolTimeoutsSchema } from './policy-types.ts';

/** Bumped on an incompatible change of the stream; sent as `x-switchyard-protocol`. */
export const SNAPSHOT_PROTOCOL_VERSION = 1;

/** The SSE event type of a `PoolSnapshot`. */
export const SNAPSHOT_EVENT = 'snapshot';

/**
 * The SSE event type of a `PoolLoad`. Added without bumping `SNAPSHOT_PROTOCOL_VERSION`: every
 * sidecar ignores event types it does not know, and a load event carries no `id:`, so the stream's
 * last event id stays the snapshot version.
 */
export const LOAD_EVENT = 'load';

/** Path of a pool's snapshot stream (GET, Server-Sent Events). */
export function snapshotStreamPath(namespace: string, pool: string): string {
  return `/v1/namespaces/${encodeURIComponent(namespace)}/pools/${encodeURIComponent(pool)}/snapshots`;
}

/** Path sidecars POST their reports to. */
export function reportPath(namespace: string, pool: string): string {
  return `/v1/namespaces/${encodeURIComponent(namespace)}/pools/${encodeURIComponent(pool)}/reports`;
}

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

export type PoolSnapshot = Static<typeof PoolSnapshotSchema>;

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

export const SidecarReportSchema = Type.Object({
  /** Who reports: the pod name from the token, or a name the sidecar chose (standalone tools). */
  sidecar: Type.String({ minLength: 1, maxLength: 253 }),
  /** The snapshot version the sidecar has applied (0 = none yet). */
  appliedVersion: Type.Integer({ minimum: 0 }),
  appliedHash: Type.String(),
  endpoints: Type.Array(EndpointHealthReportSchema, { maxItems: 10_000 }),
});

export type SidecarReport = Static<typeof SidecarReportSchema>;
export type EndpointHealthReport = Static<typeof EndpointHealthReportSchema>;

/**
 * One endpoint's load as its model server reported it (vLLM, SGLang or TensorRT-LLM gauges, read
 * by `parseLoadMetrics` in lib/model-server-load.ts). A field the server does not report is left
 * out; an endpoint with nothing known is not listed at all.
 */
export const EndpointLoadSchema = Type.Object({
  /** The endpoint's id in the pool's snapshot. */
  id: Type.String({ minLength: 1 }),
  /** Requests the server is generating now (summed over its engines). */
  running: Type.Optional(NonNegative),
  /** Requests queued in the server, not yet started. */
  waiting: Type.Optional(NonNegative),
  /** Fraction of its KV cache in use, 0..1 (the largest over its engines). */
  kvCacheUsage: Type.Optional(Fraction),
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

export type PoolLoad = Static<typeof PoolLoadSchema>;
export type EndpointLoad = Static<typeof EndpointLoadSchema>;

/**
 * Where the load of an endpoint is read: its base URL without the API prefix (a trailing `/v1`),
 * plus `/metrics`, the Prometheus path of vLLM and SGLang. `http://10.0.0.7:8000/v1` →
 * `http://10.0.0.7:8000/metrics`; `https://host/openai/v1` → `https://host/openai/metrics`.
 * Undefined for a URL that does not parse or is not http(s).
 */
export function metricsUrl(endpointUrl: string): string | undefined {
  const url = URL.parse(endpointUrl);
  if (url === null || (url.protocol !== 'http:' && url.protocol !== 'https:')) return undefined;
  const base = url.pathname.replace(/\/+$/, '').replace(/\/v1$/, '');
  return `${url.protocol}//${url.host}${base}/metrics`;
}

export type ParseResult<T> =
  { ok: true; value: T } | { ok: false; errors: { path: string; message: string }[] };

function parseWith<T>(schema: Parameters<typeof Value.Check>[0], value: unknown): ParseResult<T> {
  if (Value.Check(schema, value)) return { ok: true, value: value as T };
  const errors = [...Value.Errors(schema, value)]
    .slice(0, 20)
    .map((e) => ({ path: e.path || '/', message: e.message }));
  return { ok: false, errors };
}

/** Checks a snapshot received from the stream; a sidecar applies nothing that fails this. */
export function parseSnapshot(value: unknown): ParseResult<PoolSnapshot> {
  const result = parseWith<PoolSnapshot>(PoolSnapshotSchema, value);
  return result.ok ? uniqueIds(result, result.value.endpoints) : result;
}

/** `result`, unless two of `endpoints` share an id. */
function uniqueIds<T>(
  result: ParseResult<T>,
  endpoints: readonly { id: string }[],
): ParseResult<T> {
  const ids = new Set<string>();
  for (const [i, e] of endpoints.entries()) {
    if (ids.has(e.id))
      return {
        ok: false,
        errors: [{ path: `/endpoints/${i}/id`, message: `duplicate endpoint id ${e.id}` }],
      };
    ids.add(e.id);
  }
  return result;
}

/** Checks a `load` event's data; a sidecar uses nothing that fails this. */
export function parseLoad(value: unknown): ParseResult<PoolLoad> {
  const result = parseWith<PoolLoad>(PoolLoadSchema, value);
  return result.ok ? uniqueIds(result, result.value.endpoints) : result;
}

/** Checks a report a sidecar posted. */
export function parseReport(value: unknown): ParseResult<SidecarReport> {
  return parseWith<SidecarReport>(SidecarReportSchema, value);
}
