/**
 * The pool's status from a reconcile result and what the sidecars report, and the comparison
 * that lets the shell write status only when something really changed.
 */
import type { Condition, InferencePoolStatus } from '../../crds/inference-pool.schema.ts';
import type { ReconcileResult } from './desired-snapshot.ts';
import { canonicalJson, compareStrings } from './hash.ts';

export type BreakerState = 'closed' | 'open' | 'half-open';

/**
 * What the controller knows of one sidecar of the pool: whether it streams, when it was last
 * heard from, and its latest report (absent until it sent one).
 */
export interface SidecarState {
  /** It has a snapshot stream open now: connected, however long ago it last reported. */
  streaming?: boolean | undefined;
  /** When the controller last heard from it (connect, report), monotonic ms. */
  lastSeenMs: number;
  /** Version of the snapshot it applied (0: none yet). */
  appliedVersion?: number | undefined;
  /** Hash of the snapshot it applied. */
  appliedHash?: string | undefined;
  /** The breaker of each endpoint, as it sees it. */
  endpoints?: readonly { id: string; breaker: BreakerState }[] | undefined;
}

export interface SidecarReports {
  /** By sidecar id (its pod name). */
  reports: ReadonlyMap<string, SidecarState>;
  nowMs: number;
  /** A sidecar not streaming and not heard from for longer than this is not connected. */
  staleAfterMs: number;
}

export interface PoolStatusInput {
  /** `metadata.generation` of the pool the result was computed from. */
  generation: number;
  result: ReconcileResult;
  /**
   * The snapshot the controller serves for this pool (its version and hash), or undefined when it
   * has served none yet. Usually `result.snapshot` stamped with its version, but it is also the
   * last good one while `result.snapshot` is undefined, and sidecars are in sync with THAT one.
   */
  snapshot: { version: number; hash: string } | undefined;
  sidecars: SidecarReports;
  /** The time to put into `lastTransitionTime` of a condition that changed (RFC 3339). */
  now: string;
  /** The status as the API has it now; transition times of unchanged conditions are kept. */
  previous?: InferencePoolStatus | undefined;
  /**
   * Drift detection's view (the leader's probes), or undefined to keep what `previous` says (a
   * leader that has not probed yet must not erase its predecessor's verdicts). `null`: drift
   * detection is off, the section goes.
   */
  drift?: InferencePoolStatus['drift'] | null;
}

/** The sidecars that count as connected: streaming, or heard from within `staleAfterMs`. */
export function connectedSidecars(input: SidecarReports): SidecarState[] {
  return [...input.reports.values()].filter(
    (s) => s.streaming === true || input.nowMs - s.lastSeenMs <= input.staleAfterMs,
  );
}

/**
 * The status to write. The controller owns the whole status: conditions of other types (from an
 * older controller) are not carried over.
 */
export function poolStatus(input: PoolStatusInput): InferencePoolStatus {
  const { generation, result, snapshot, now, previous } = input;
  const conditions = result.conditions.map((c): Condition => {
    const before = previous?.conditions?.find((p) => p.type === c.type);
    return {
      type: c.type,
      status: c.status,
      observedGeneration: generation,
      lastTransitionTime:
        before !== undefined && before.status === c.status ? before.lastTransitionTime : now,
      reason: c.reason,
      message: c.message,
    };
  });
  const live = connectedSidecars(input.sidecars);
  return {
    observedGeneration: generation,
    conditions,
    endpoints: {
      ready: result.endpoints.ready,
      total: result.endpoints.total,
      drifted: result.endpoints.drifted,
    },
    ...(snapshot === undefined
      ? {}
      : { snapshot: { version: snapshot.version, hash: snapshot.hash } }),
    sidecars: {
      connected: live.length,
      inSync:
        snapshot === undefined ? 0 : live.filter((s) => s.appliedHash === snapshot.hash).length,
    },
    endpointHealth: fleetHealth(input.sidecars, {
      endpointIds:
        result.snapshot === undefined
          ? undefined
          : new Set(result.snapshot.endpoints.map((e) => e.id)),
    }),
    ...driftSection(input.drift, previous?.drift),
  };
}

function driftSection(
  drift: InferencePoolStatus['drift'] | null | undefined,
  previous: InferencePoolStatus['drift'] | undefined,
): { drift?: NonNullable<InferencePoolStatus['drift']> } {
  if (drift === null) return {};
  const section = drift ?? previous;
  return section === undefined ? {} : { drift: section };
}

/** How the connected sidecars see one endpoint. */
export interface EndpointFleetHealth {
  id: string;
  /** Sidecars that report its breaker open. */
  breakerOpen: number;
  /** Sidecars that report its breaker half-open (probing). */
  halfOpen: number;
  /** Sidecars that report on it at all. */
  reporting: number;
}

/** Entries of `fleetHealth` by default: status stays small however large the pool. */
export const FLEET_HEALTH_LIMIT = 32;

/**
 * The endpoints that at least one connected sidecar sees as broken (breaker open or half-open),
 * worst first (most open, then most half-open, then by id), at most `limit`. Endpoints outside
 * `endpointIds` (those of the served snapshot) are left out: a sidecar on an older snapshot may
 * still report endpoints that are gone.
 */
export function fleetHealth(
  sidecars: SidecarReports,
  options: { endpointIds?: ReadonlySet<string> | undefined; limit?: number } = {},
): EndpointFleetHealth[] {
  const { endpointIds, limit = FLEET_HEALTH_LIMIT } = options;
  const byId = new Map<string, EndpointFleetHealth>();
  // Sidecars on other replicas publish only their non-closed breakers (controller/replica-summary.ts),
  // so `reporting` counts the connected sidecars that sent a health report at all.
  const connected = connectedSidecars(sidecars);
  const reporting = connected.filter((s) => s.endpoints !== undefined).length;
  for (const sidecar of connected) {
    for (const { id, breaker } of sidecar.endpoints ?? []) {
      if (endpointIds !== undefined && !endpointIds.has(id)) continue;
      if (breaker === 'closed') continue;
      let entry = byId.get(id);
      if (entry === undefined) {
        entry = { id, breakerOpen: 0, halfOpen: 0, reporting };
        byId.set(id, entry);
      }
      if (breaker === 'open') entry.breakerOpen += 1;
      else entry.halfOpen += 1;
    }
  }
  return [...byId.values()]
    .filter((e) => e.breakerOpen + e.halfOpen > 0)
    .sort(
      (a, b) =>
        b.breakerOpen - a.breakerOpen || b.halfOpen - a.halfOpen || compareStrings(a.id, b.id),
    )
    .slice(0, Math.max(0, limit));
}

/**
 * Equal statuses up to timestamps (`lastTransitionTime`) and condition order: when this says
 * equal, writing `b` over `a` would change nothing a reader cares about.
 */
export function statusEqual(
  a: InferencePoolStatus | undefined,
  b: InferencePoolStatus | undefined,
): boolean {
  return canonicalJson(comparable(a)) === canonicalJson(comparable(b));
}

function comparable(status: InferencePoolStatus | undefined): unknown {
  if (status === undefined) return {};
  const { conditions, ...rest } = status;
  if (conditions === undefined) return rest;
  return {
    ...rest,
    conditions: conditions
      .map(({ lastTransitionTime: _time, ...c }) => c)
      .sort((x, y) => compareStrings(x.type, y.type)),
  };
}
