/**
 * The snapshot stream: the wire contract between the controller and the sidecars (see
 * docs/snapshot-protocol.md). The controller computes a `PoolSnapshot` per pool and streams it;
 * each sidecar validates what it receives with `parseSnapshot` before applying it, and reports back
 * a `SidecarReport`. Both sides import only this module: `controller/` and `sidecar/` never import
 * each other.
 */
import { Type, type Static } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { EndpointSpecSchema, PoolPolicySchema, PoolTimeoutsSchema } from './policy-types.ts';

/** Bumped on an incompatible change of the stream; sent as `x-switchyard-protocol`. */
export const SNAPSHOT_PROTOCOL_VERSION = 1;

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
  if (!result.ok) return result;
  const ids = new Set<string>();
  for (const [i, e] of result.value.endpoints.entries()) {
    if (ids.has(e.id))
      return {
        ok: false,
        errors: [{ path: `/endpoints/${i}/id`, message: `duplicate endpoint id ${e.id}` }],
      };
    ids.add(e.id);
  }
  return result;
}

/** Checks a report a sidecar posted. */
export function parseReport(value: unknown): ParseResult<SidecarReport> {
  return parseWith<SidecarReport>(SidecarReportSchema, value);
}
