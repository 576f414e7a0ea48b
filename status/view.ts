/**
 * What `switchyard status` shows, as data: built from an InferencePool object (its status) or
 * from a sidecar's admin API, judged (`exitCode`, `problems`), then rendered by `render.ts` or
 * printed as JSON (`--output json`). Pure: no I/O, so every rule here is unit-tested.
 *
 * The JSON shape is documented in docs/status.md; add fields, never rename or remove them.
 */
import type { InferencePool, InferencePoolStatus } from '../crds/inference-pool.schema.ts';

/** 0: healthy. 1: something is unhealthy. (2, for usage errors and unreadable sources, is the CLI's.) */
export type HealthExitCode = 0 | 1;

export const CONDITION_TYPES = ['Ready', 'Accepted', 'ResolvedRefs'] as const;

export interface ConditionView {
  type: (typeof CONDITION_TYPES)[number];
  /** null: the status has no condition of this type (the controller never wrote it). */
  status: 'True' | 'False' | 'Unknown' | null;
  reason: string | null;
  message: string | null;
}

/** One endpoint of a pool: the union of status.drift.endpoints and status.endpointHealth. */
export interface PoolEndpointRow {
  id: string;
  /** From status.endpointHealth; all null when the endpoint is not listed there. */
  breakerOpen: number | null;
  halfOpen: number | null;
  reporting: number | null;
  errorPercent: number | null;
  rateLimitPercent: number | null;
  ewmaTtftMs: number | null;
  driftMismatches: number | null;
  /** From status.drift.endpoints; null when the endpoint has not been probed. */
  drifted: boolean | null;
  fingerprint: string | null;
  probedAt: string | null;
  probeError: string | null;
}

/** One model of a pool: from status.models. */
export interface PoolModelRow {
  name: string;
  /** Ready endpoints that declare it (for an alias: that declare its model). */
  endpoints: number;
  /** For an alias: the served model it stands for; null for a served model. */
  aliasOf: string | null;
}

/** One budget of a pool and one of its units: from status.budgets. */
export interface PoolBudgetRow {
  id: string;
  unit: 'requests' | 'tokens';
  /** Per minute: the budget, and what the fleet used and wanted over its last minute. */
  limit: number;
  used: number | null;
  wanted: number | null;
  /** Sidecars sharing it. */
  sidecars: number | null;
}

export interface PoolStatusView {
  source: 'kubernetes';
  pool: string;
  namespace: string;
  mode: string | null;
  generation: number | null;
  observedGeneration: number | null;
  /** Always Ready, Accepted, ResolvedRefs, in this order. */
  conditions: ConditionView[];
  snapshot: { version: number | null; hash: string | null } | null;
  sidecars: { connected: number; inSync: number } | null;
  endpoints: { ready: number; total: number; drifted: number } | null;
  drift: { expected: string | null } | null;
  /** Worst first: breaker open, half-open, drifted, errors; then by id. */
  rows: PoolEndpointRow[];
  /** endpoints.total minus the rows: endpoints no sidecar reports a problem with. */
  unlistedEndpoints: number;
  /**
   * status.models: the models the backends declare, then the aliases. Empty when the status has
   * none (no backend declares models, or an older controller wrote it).
   */
  models: PoolModelRow[];
  /** status.budgets, one row per budget and unit. Empty when the pool has none. */
  budgets: PoolBudgetRow[];
  exitCode: HealthExitCode;
  /** Why exitCode is 1, one line each; empty when it is 0. */
  problems: string[];
}

export interface SidecarEndpointRow {
  id: string;
  backend: string;
  url: string;
  tier: number;
  breaker: string;
  slow: boolean;
  inFlight: number;
  /** Counts in the current health window. */
  window: { requests: number; errors: number; rateLimited: number };
  /** Lifetime counts. */
  requests: number;
  errors: number;
  rateLimited: number;
  ewmaTtftMs: number;
  /** Still the seeded value: no TTFT sample of its own yet. */
  ewmaSeeded: boolean;
  drifted: boolean;
  fingerprint: string | null;
  driftMismatches: number;
}

export interface SidecarStatusView {
  source: 'sidecar';
  admin: string;
  /** /readyz answered 200. */
  ready: boolean;
  /** What /readyz said: ready, draining, no configuration applied yet. */
  readyStatus: string;
  pool: string | null;
  mode: string | null;
  snapshotVersion: number | null;
  snapshotHash: string | null;
  /** Worst first (open, half-open, drifted), then in the sidecar's order. */
  rows: SidecarEndpointRow[];
  exitCode: HealthExitCode;
  problems: string[];
}

export type StatusView = PoolStatusView | SidecarStatusView;

// ---------------------------------------------------------------------------------------------
// Kubernetes
// ---------------------------------------------------------------------------------------------

const num = (value: unknown): number | null =>
  typeof value === 'number' && Number.isFinite(value) ? value : null;
const str = (value: unknown): string | null => (typeof value === 'string' ? value : null);

/** "open on 2/3 sidecars": the pool's breaker counts in words, or undefined when none is open. */
export function breakerSummary(row: PoolEndpointRow): string | undefined {
  const of = row.reporting ?? 0;
  const parts: string[] = [];
  if ((row.breakerOpen ?? 0) > 0) parts.push(`open on ${row.breakerOpen}/${of} sidecars`);
  if ((row.halfOpen ?? 0) > 0) parts.push(`half-open on ${row.halfOpen}/${of}`);
  return parts.length === 0 ? undefined : parts.join(', ');
}

function poolRowRank(row: PoolEndpointRow): number {
  if ((row.breakerOpen ?? 0) > 0) return 0;
  if ((row.halfOpen ?? 0) > 0) return 1;
  if (row.drifted === true) return 2;
  if ((row.errorPercent ?? 0) > 0 || (row.rateLimitPercent ?? 0) > 0) return 3;
  if ((row.driftMismatches ?? 0) > 0 || row.probeError !== null) return 4;
  return 5;
}

/** Natural order, so that a/10.0.0.2:8000 comes before a/10.0.0.10:8000. */
const collator = new Intl.Collator('en', { numeric: true });
const byId = (a: { id: string }, b: { id: string }): number => collator.compare(a.id, b.id);

/**
 * The view of one InferencePool as read from the API server. `object` is the resource as the
 * server answered (read defensively: a status written by an older controller may lack fields).
 */
export function poolView(object: unknown, namespace: string): PoolStatusView {
  const pool = (object ?? {}) as Partial<InferencePool> & {
    metadata?: { name?: string; generation?: number };
  };
  const status = pool.status ?? {};
  const conditions = CONDITION_TYPES.map((type): ConditionView => {
    const c = (status.conditions ?? []).find((x) => x.type === type);
    return {
      type,
      status: c?.status ?? null,
      reason: str(c?.reason),
      message: str(c?.message),
    };
  });

  const rows = new Map<string, PoolEndpointRow>();
  const row = (id: string): PoolEndpointRow => {
    let r = rows.get(id);
    if (r === undefined) {
      r = {
        id,
        breakerOpen: null,
        halfOpen: null,
        reporting: null,
        errorPercent: null,
        rateLimitPercent: null,
        ewmaTtftMs: null,
        driftMismatches: null,
        drifted: null,
        fingerprint: null,
        probedAt: null,
        probeError: null,
      };
      rows.set(id, r);
    }
    return r;
  };
  for (const h of status.endpointHealth ?? []) {
    if (typeof h.id !== 'string') continue;
    const r = row(h.id);
    r.breakerOpen = num(h.breakerOpen) ?? 0;
    r.halfOpen = num(h.halfOpen) ?? 0;
    r.reporting = num(h.reporting) ?? 0;
    r.errorPercent = num(h.errorPercent);
    r.rateLimitPercent = num(h.rateLimitPercent);
    r.ewmaTtftMs = num(h.ewmaTtftMs);
    r.driftMismatches = num(h.driftMismatches);
  }
  for (const d of status.drift?.endpoints ?? []) {
    if (typeof d.id !== 'string') continue;
    const r = row(d.id);
    r.drifted = d.drifted === true;
    r.fingerprint = str(d.fingerprint);
    r.probedAt = str(d.probedAt);
    r.probeError = str(d.error);
  }
  const sorted = [...rows.values()].sort((a, b) => poolRowRank(a) - poolRowRank(b) || byId(a, b));

  const counts = status.endpoints;
  const endpoints =
    counts === undefined
      ? null
      : {
          ready: num(counts.ready) ?? 0,
          total: num(counts.total) ?? 0,
          drifted: num(counts.drifted) ?? 0,
        };

  const view: PoolStatusView = {
    source: 'kubernetes',
    pool: pool.metadata?.name ?? '',
    namespace,
    mode: str(pool.spec?.mode),
    generation: num(pool.metadata?.generation),
    observedGeneration: num(status.observedGeneration),
    conditions,
    snapshot:
      status.snapshot === undefined
        ? null
        : { version: num(status.snapshot.version), hash: str(status.snapshot.hash) },
    sidecars:
      status.sidecars === undefined
        ? null
        : {
            connected: num(status.sidecars.connected) ?? 0,
            inSync: num(status.sidecars.inSync) ?? 0,
          },
    endpoints,
    drift: status.drift === undefined ? null : { expected: str(status.drift.expected) },
    rows: sorted,
    unlistedEndpoints: Math.max(0, (endpoints?.total ?? 0) - sorted.length),
    models: (status.models ?? [])
      .filter((m) => typeof m?.name === 'string')
      .map((m) => ({ name: m.name, endpoints: num(m.endpoints) ?? 0, aliasOf: str(m.aliasOf) })),
    budgets: budgetRows(status.budgets),
    exitCode: 0,
    problems: [],
  };
  view.problems = poolProblems(view);
  view.exitCode = view.problems.length === 0 ? 0 : 1;
  return view;
}

function budgetRows(budgets: InferencePoolStatus['budgets']): PoolBudgetRow[] {
  const rows: PoolBudgetRow[] = [];
  for (const b of budgets ?? []) {
    if (typeof b?.id !== 'string') continue;
    for (const [unit, rates] of [
      ['requests', b.requestsPerMinute],
      ['tokens', b.tokensPerMinute],
    ] as const) {
      const limit = num(rates?.limit);
      if (limit === null) continue;
      rows.push({
        id: b.id,
        unit,
        limit,
        used: num(rates?.used),
        wanted: num(rates?.wanted),
        sidecars: num(b.sidecars),
      });
    }
  }
  return rows;
}

/**
 * Why a pool is unhealthy: a condition that is not True, an endpoint whose breaker is open or
 * half-open in any sidecar, a drifted endpoint, a model a backend declares with no ready endpoint
 * (requests for it, and for its aliases, find nowhere to go). Empty: healthy (exit code 0).
 */
export function poolProblems(view: PoolStatusView): string[] {
  const problems: string[] = [];
  if (view.conditions.every((c) => c.status === null))
    problems.push('no status: the controller has not written one (is it running?)');
  else
    for (const c of view.conditions) {
      if (c.status === 'True') continue;
      if (c.status === null) problems.push(`${c.type} is missing from the status`);
      else problems.push(`${c.type} is ${c.status}${c.reason === null ? '' : ` (${c.reason})`}`);
    }
  let driftedRows = 0;
  for (const r of view.rows) {
    const breaker = breakerSummary(r);
    if (breaker !== undefined) problems.push(`${r.id}: breaker ${breaker}`);
    if (r.drifted === true) {
      driftedRows++;
      problems.push(`${r.id}: drifted${r.fingerprint === null ? '' : ` (${r.fingerprint})`}`);
    }
  }
  for (const m of view.models) {
    if (m.aliasOf !== null || m.endpoints > 0) continue;
    const aliases = view.models.filter((a) => a.aliasOf === m.name).map((a) => a.name);
    problems.push(
      `model ${m.name}: no ready endpoint declares it${aliases.length === 0 ? '' : `; ${aliases.length === 1 ? 'alias' : 'aliases'} ${aliases.join(', ')} point${aliases.length === 1 ? 's' : ''} at it`}`,
    );
  }
  // status.drift lists at most 256 endpoints: the count may know of more.
  const drifted = view.endpoints?.drifted ?? 0;
  if (drifted > driftedRows)
    problems.push(
      driftedRows === 0
        ? `${drifted} endpoint${drifted === 1 ? '' : 's'} drifted`
        : `${drifted - driftedRows} more endpoint${drifted - driftedRows === 1 ? '' : 's'} drifted`,
    );
  return problems;
}

// ---------------------------------------------------------------------------------------------
// A sidecar's admin API
// ---------------------------------------------------------------------------------------------

/** What /debug/backends answers (sidecar/admin/admin-server.ts `describeBackends`), as far as it is read. */
interface DebugBackends {
  pool?: unknown;
  mode?: unknown;
  snapshotVersion?: unknown;
  snapshotHash?: unknown;
  endpoints?: unknown;
}

function sidecarRowRank(row: SidecarEndpointRow): number {
  if (row.breaker === 'open') return 0;
  if (row.breaker === 'half-open') return 1;
  if (row.drifted) return 2;
  return 3;
}

/**
 * The view of one sidecar: `readyz` is /readyz's HTTP status and body, `debug` the body of
 * /debug/backends. Only the fields below are copied, so nothing else the sidecar might add to
 * its debug answer can reach the output.
 */
export function sidecarView(
  admin: string,
  readyz: { httpStatus: number; body: unknown },
  debug: unknown,
): SidecarStatusView {
  const d = (debug ?? {}) as DebugBackends;
  const list = Array.isArray(d.endpoints) ? (d.endpoints as Record<string, unknown>[]) : [];
  const rows = list
    .filter((e) => typeof e?.id === 'string')
    .map((e): SidecarEndpointRow => {
      const w = (e.window ?? {}) as Record<string, unknown>;
      return {
        id: e.id as string,
        backend: str(e.backend) ?? '',
        url: str(e.url) ?? '',
        tier: num(e.tier) ?? 0,
        breaker: str(e.breaker) ?? 'unknown',
        slow: e.slow === true,
        inFlight: num(e.inFlight) ?? 0,
        window: {
          requests: num(w.requests) ?? 0,
          errors: num(w.errors) ?? 0,
          rateLimited: num(w.rateLimited) ?? 0,
        },
        requests: num(e.requests) ?? 0,
        errors: num(e.errors) ?? 0,
        rateLimited: num(e.rateLimited) ?? 0,
        ewmaTtftMs: num(e.ewmaTtftMs) ?? 0,
        ewmaSeeded: e.ewmaSeeded === true,
        drifted: e.drifted === true,
        fingerprint: str(e.fingerprint),
        driftMismatches: num(e.driftMismatches) ?? 0,
      };
    });
  // A stable sort: endpoints of equal rank keep the sidecar's (failover) order.
  rows.sort((a, b) => sidecarRowRank(a) - sidecarRowRank(b));
  const body = (readyz.body ?? {}) as { status?: unknown };
  const view: SidecarStatusView = {
    source: 'sidecar',
    admin,
    ready: readyz.httpStatus === 200,
    readyStatus: str(body.status) ?? `HTTP ${readyz.httpStatus}`,
    pool: str(d.pool),
    mode: str(d.mode),
    snapshotVersion: num(d.snapshotVersion),
    snapshotHash: str(d.snapshotHash),
    rows,
    exitCode: 0,
    problems: [],
  };
  view.problems = sidecarProblems(view);
  view.exitCode = view.problems.length === 0 ? 0 : 1;
  return view;
}

/** Why a sidecar is unhealthy: not ready, no endpoints, a breaker not closed, a drifted endpoint. */
export function sidecarProblems(view: SidecarStatusView): string[] {
  const problems: string[] = [];
  if (!view.ready) problems.push(`not ready: ${view.readyStatus}`);
  else if (view.rows.length === 0) problems.push('the pool has no endpoints');
  for (const r of view.rows) {
    if (r.breaker !== 'closed') problems.push(`${r.id}: breaker ${r.breaker}`);
    if (r.drifted)
      problems.push(`${r.id}: drifted${r.fingerprint === null ? '' : ` (${r.fingerprint})`}`);
  }
  return problems;
}
