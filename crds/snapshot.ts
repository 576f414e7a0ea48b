/**
 * The snapshot stream: the wire contract between the controller and the sidecars (see
 * docs/snapshot-protocol.md). The controller computes a `PoolSnapshot` per pool and streams it;
 * each sidecar validates what it receives with `parseSnapshot` before applying it, and reports back
 * a `SidecarReport`. Beside the snapshots the stream carries `PoolLoad` messages: what the pool's
 * model servers report about their own load (`parseLoad`). Both sides import only this module:
 * `controller/` and `sidecar/` never import each other.
 *
 * The schemas are in `snapshot.schema.ts`; the checks here are compiled from them ahead of time
 * (`snapshot-checks.generated.ts`, `npm run generate`), so that a sidecar does not load TypeBox to
 * check a snapshot. The schemas, and TypeBox with them, are loaded only to explain a failure.
 */
// Module loading, not I/O the contract depends on: the schemas are loaded only to explain a failure.
// eslint-disable-next-line no-restricted-imports
import { createRequire } from 'node:module';
import type { Static } from '@sinclair/typebox';
import {
  checkEndpointsDelta,
  checkPoolLoad,
  checkPoolPlacements,
  checkPoolShares,
  checkPoolSnapshot,
  checkSidecarReport,
} from './snapshot-checks.generated.ts';
import type {
  EndpointsDeltaSchema,
  EndpointHealthReportSchema,
  EndpointLoadSchema,
  BudgetDemandSchema,
  BudgetShareSchema,
  PoolLoadSchema,
  PoolPlacementsSchema,
  PlacementSchema,
  PoolSharesSchema,
  PoolSnapshotSchema,
  SidecarReportSchema,
  PoolDemandSchema,
  SnapshotMessage,
} from './snapshot.schema.ts';

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

/**
 * The SSE event type of a `PoolShares`: one sidecar's shares of the pool's budgets (issue 43).
 * Added without bumping `SNAPSHOT_PROTOCOL_VERSION`, like `load`.
 */
export const SHARES_EVENT = 'shares';

/**
 * The SSE event type of a `PoolPlacements` (issue 45): where the pool's sidecars sent which
 * prompt prefixes lately, batched by the controller about every 100 ms. Added without bumping
 * `SNAPSHOT_PROTOCOL_VERSION`, like `load`; no `id:` line.
 */
export const PLACEMENTS_EVENT = 'placements';

/**
 * The SSE event type of an `EndpointsDelta` (issue 46): the change of the pool's endpoint list
 * since the subscriber's last snapshot. Sent only to a sidecar that subscribed with
 * `?deltas=1` (`DELTAS_QUERY`): one that ignored it would keep a stale endpoint list. Its `id:` is
 * the new snapshot version, as a `snapshot` event's.
 */
export const ENDPOINTS_EVENT = 'endpoints';

/** The query parameter by which a sidecar asks for `endpoints` events: `?deltas=1`. */
export const DELTAS_QUERY = 'deltas';

/** Response header of the snapshot stream when it will send this subscriber deltas: `1`. */
export const DELTAS_HEADER = 'x-switchyard-deltas';

/**
 * Response header of the snapshot stream when the controller relays placements: the most bytes
 * per second of `placements` events it sends this subscriber. A sidecar uploads its own
 * placements (`placementsPath`) only to a controller that sends this header.
 */
export const PLACEMENTS_HEADER = 'x-switchyard-placements';

/**
 * Response header on the controller's answers to an authenticated sidecar: a review ticket, what
 * the controller's TokenReview said about the sidecar's token, signed (controller/stream/
 * review-ticket.ts). The sidecar sends it back as a request header with the same token: any
 * replica then lets it in without another TokenReview. Opaque to the sidecar.
 */
export const REVIEW_TICKET_HEADER = 'x-switchyard-review-ticket';

/** Path sidecars POST their placements to (a `PoolPlacements`; 204). */
export function placementsPath(namespace: string, pool: string): string {
  return `/v1/namespaces/${encodeURIComponent(namespace)}/pools/${encodeURIComponent(pool)}/placements`;
}

/** Path of a pool's snapshot stream (GET, Server-Sent Events). */
export function snapshotStreamPath(namespace: string, pool: string): string {
  return `/v1/namespaces/${encodeURIComponent(namespace)}/pools/${encodeURIComponent(pool)}/snapshots`;
}

/** Path sidecars POST their reports to. */
export function reportPath(namespace: string, pool: string): string {
  return `/v1/namespaces/${encodeURIComponent(namespace)}/pools/${encodeURIComponent(pool)}/reports`;
}

export type PoolSnapshot = Static<typeof PoolSnapshotSchema>;
export type SidecarReport = Static<typeof SidecarReportSchema>;
export type EndpointHealthReport = Static<typeof EndpointHealthReportSchema>;
export type PoolLoad = Static<typeof PoolLoadSchema>;
export type PoolPlacements = Static<typeof PoolPlacementsSchema>;
export type Placement = Static<typeof PlacementSchema>;
export type EndpointLoad = Static<typeof EndpointLoadSchema>;
export type BudgetDemand = Static<typeof BudgetDemandSchema>;
export type PoolDemand = Static<typeof PoolDemandSchema>;
export type BudgetShare = Static<typeof BudgetShareSchema>;
export type PoolShares = Static<typeof PoolSharesSchema>;
export type EndpointsDelta = Static<typeof EndpointsDeltaSchema>;

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

const require = createRequire(import.meta.url);

function parseWith<T>(
  message: SnapshotMessage,
  check: (value: unknown) => boolean,
  value: unknown,
): ParseResult<T> {
  if (check(value)) return { ok: true, value: value as T };
  // Only now the schemas and TypeBox: the same module name as this one's (.ts from source, .js
  // compiled), loaded synchronously.
  const schemas = require(
    `./snapshot.schema${import.meta.url.endsWith('.ts') ? '.ts' : '.js'}`,
  ) as typeof import('./snapshot.schema.ts');
  return { ok: false, errors: schemas.explain(message, value) };
}

/** Checks a snapshot received from the stream; a sidecar applies nothing that fails this. */
export function parseSnapshot(value: unknown): ParseResult<PoolSnapshot> {
  const result = parseWith<PoolSnapshot>('PoolSnapshot', checkPoolSnapshot, value);
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
  const result = parseWith<PoolLoad>('PoolLoad', checkPoolLoad, value);
  return result.ok ? uniqueIds(result, result.value.endpoints) : result;
}

/**
 * Checks a `placements` event's data (sidecar) or upload (controller): the schema, and every
 * placement's endpoint index inside the batch's list and its hashes whole 7-byte units.
 */
export function parsePlacements(value: unknown): ParseResult<PoolPlacements> {
  const result = parseWith<PoolPlacements>('PoolPlacements', checkPoolPlacements, value);
  if (!result.ok) return result;
  const { endpoints, placements } = result.value;
  for (const [i, p] of placements.entries()) {
    if (p.endpoint >= endpoints.length)
      return {
        ok: false,
        errors: [
          {
            path: `/placements/${i}/endpoint`,
            message: `index ${p.endpoint} is past the ${endpoints.length} endpoints listed`,
          },
        ],
      };
    // 7 bytes are 9⅓ base64url characters: whole hashes make a length of 10, 19, 28, … (mod 28: 0, 10, 19).
    if (![0, 10, 19].includes(p.hashes.length % 28))
      return {
        ok: false,
        errors: [
          { path: `/placements/${i}/hashes`, message: 'not a whole number of 7-byte hashes' },
        ],
      };
  }
  return result;
}

/**
 * Checks an `endpoints` event's data: the schema, and no endpoint id twice among `added`, nor
 * twice among `changed` (whether it applies to the snapshot held is `applyEndpointsDelta`'s).
 */
export function parseEndpointsDelta(value: unknown): ParseResult<EndpointsDelta> {
  const result = parseWith<EndpointsDelta>('EndpointsDelta', checkEndpointsDelta, value);
  if (!result.ok) return result;
  const added = uniqueIds(
    result,
    result.value.added.map((a) => a.endpoint),
  );
  return added.ok ? uniqueIds(result, result.value.changed) : added;
}

/** Checks a `shares` event's data; a sidecar uses nothing that fails this. */
export function parseShares(value: unknown): ParseResult<PoolShares> {
  return parseWith<PoolShares>('PoolShares', checkPoolShares, value);
}

/** Checks a report a sidecar posted. */
export function parseReport(value: unknown): ParseResult<SidecarReport> {
  return parseWith<SidecarReport>('SidecarReport', checkSidecarReport, value);
}
