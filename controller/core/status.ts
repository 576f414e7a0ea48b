/**
 * The pool's status from a reconcile result and what the sidecars report, and the comparison
 * that lets the shell write status only when something really changed.
 */
import type { Condition, InferencePoolStatus } from '../../crds/inference-pool.schema.ts';
import type { BudgetDemand } from '../../crds/snapshot.ts';
import type { ReconcileResult } from './reconcile-result.ts';
import { canonicalJson, compareStrings } from './hash.ts';

export type BreakerState = 'closed' | 'open' | 'half-open';

/**
 * One sidecar of the pool as the status sees it (a view, not the sidecar's own state): whether
 * it streams, when the controller last heard from it, and its latest report (absent until it sent
 * one). Built from this replica's stream connections and from other replicas' summaries.
 */
export interface SidecarView {
  /** It has a snapshot stream open now: connected, however long ago it last reported. */
  streaming?: boolean | undefined;
  /** When the controller last heard from it (connect, report), monotonic ms. */
  lastSeenMs: number;
  /** Version of the snapshot it applied (0: none yet). */
  appliedVersion?: number | undefined;
  /** Hash of the snapshot it applied. */
  appliedHash?: string | undefined;
  /**
   * Each endpoint as it sees it: its breaker, and (from a full report; summaries of other
   * replicas carry breakers only) its window rates, EWMA TTFT and drift mismatches.
   */
  endpoints?:
    | readonly {
        id: string;
        breaker: BreakerState;
        errorRate?: number | undefined;
        rateLimitRate?: number | undefined;
        ewmaTtftMs?: number | undefined;
        driftMismatches?: number | undefined;
      }[]
    | undefined;
  /** Its use and demand of the pool's budgets (issue 43), from its last report on this replica. */
  budgets?: readonly BudgetDemand[] | undefined;
}

export interface SidecarReports {
  /** By sidecar id (its pod name). */
  reports: ReadonlyMap<string, SidecarView>;
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
  /** The pool's budgets with the fleet's use (`budgetStatus`); undefined or empty: none. */
  budgets?: InferencePoolStatus['budgets'] | undefined;
}

/** The sidecars that count as connected: streaming, or heard from within `staleAfterMs`. */
export function connectedSidecars(input: SidecarReports): SidecarView[] {
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
    ...(result.models === undefined ? {} : { models: result.models.map((m) => ({ ...m })) }),
    endpointHealth: fleetHealth(input.sidecars, {
      endpointIds:
        result.snapshot === undefined
          ? undefined
          : new Set(result.snapshot.endpoints.map((e) => e.id)),
    }),
    ...driftSection(input.drift, previous?.drift),
    ...(input.budgets === undefined || input.budgets.length === 0
      ? {}
      : { budgets: input.budgets.map((b) => ({ ...b })) }),
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
  /** Mean window error rate over the sidecars that reported rates for it, in whole percent. */
  errorPercent?: number;
  rateLimitPercent?: number;
  /** Median of their EWMA TTFTs, ms, two significant digits (status changes only when it moves). */
  ewmaTtftMs?: number;
  /** Sum of their passive drift mismatches. */
  driftMismatches?: number;
}

/** An endpoint with errors or 429s on at least this share of requests is listed too. */
export const FLEET_RATE_THRESHOLD = 0.05;

/** `n` rounded to two significant digits: 1234 → 1200, 87.6 → 88. */
export function twoDigits(n: number): number {
  if (!(n > 0) || !Number.isFinite(n)) return 0;
  const scale = 10 ** Math.max(0, Math.floor(Math.log10(n)) - 1);
  return Math.round(n / scale) * scale;
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
  const byId = new Map<
    string,
    EndpointFleetHealth & { rates: { e: number; r: number; t: number }[] }
  >();
  // Sidecars on other replicas publish only their non-closed breakers (controller/stream/replica-summary.ts),
  // so `reporting` counts the connected sidecars that sent a health report at all.
  const connected = connectedSidecars(sidecars);
  const reporting = connected.filter((s) => s.endpoints !== undefined).length;
  for (const sidecar of connected) {
    for (const e of sidecar.endpoints ?? []) {
      if (endpointIds !== undefined && !endpointIds.has(e.id)) continue;
      let entry = byId.get(e.id);
      if (entry === undefined) {
        entry = { id: e.id, breakerOpen: 0, halfOpen: 0, reporting, rates: [] };
        byId.set(e.id, entry);
      }
      if (e.breaker === 'open') entry.breakerOpen += 1;
      else if (e.breaker === 'half-open') entry.halfOpen += 1;
      if (e.errorRate !== undefined)
        entry.rates.push({ e: e.errorRate, r: e.rateLimitRate ?? 0, t: e.ewmaTtftMs ?? 0 });
      if ((e.driftMismatches ?? 0) > 0)
        entry.driftMismatches = (entry.driftMismatches ?? 0) + (e.driftMismatches ?? 0);
    }
  }
  const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length;
  const listed: EndpointFleetHealth[] = [];
  for (const { rates, ...entry } of byId.values()) {
    const withRates: EndpointFleetHealth = { ...entry };
    if (rates.length > 0) {
      withRates.errorPercent = Math.round(
        100 * Math.min(1, Math.max(0, mean(rates.map((x) => x.e)))),
      );
      withRates.rateLimitPercent = Math.round(
        100 * Math.min(1, Math.max(0, mean(rates.map((x) => x.r)))),
      );
      const ttfts = rates.map((x) => x.t).sort((a, b) => a - b);
      withRates.ewmaTtftMs = twoDigits(ttfts[Math.floor((ttfts.length - 1) / 2)] ?? 0);
    }
    const unhealthy =
      entry.breakerOpen + entry.halfOpen > 0 ||
      (withRates.errorPercent ?? 0) >= FLEET_RATE_THRESHOLD * 100 ||
      (withRates.rateLimitPercent ?? 0) >= FLEET_RATE_THRESHOLD * 100 ||
      (entry.driftMismatches ?? 0) > 0;
    if (unhealthy) listed.push(withRates);
  }
  return listed
    .sort(
      (a, b) =>
        b.breakerOpen - a.breakerOpen ||
        b.halfOpen - a.halfOpen ||
        (b.errorPercent ?? 0) - (a.errorPercent ?? 0) ||
        (b.rateLimitPercent ?? 0) - (a.rateLimitPercent ?? 0) ||
        compareStrings(a.id, b.id),
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
