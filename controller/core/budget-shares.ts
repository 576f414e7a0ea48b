/**
 * How one budget's rate is split across those who spend it (issue 43): the sidecars of a pool,
 * and, one level up, the controller replicas that serve them. Pure: wants in, shares out.
 *
 * The shape follows Google's Doorman (github.com/youtube/doorman, its `FairShare` and
 * `ProportionalShare` algorithms): every client says what it wants, and the server hands out
 * capacity so that the sum never passes the limit. Two cases:
 *
 * - Σ wanted ≤ limit: everyone gets what it wants plus a part of the spare (limit − Σ wanted):
 *   half of it in equal parts, so that demand moving from one sidecar to another finds room there
 *   before the next re-split, and half in proportion to the wants, so that a busy sidecar has room
 *   for its bursts (bench:budget: with the spare in equal parts alone, 16 sidecars and a workload
 *   at half its budget, the 4 busy sidecars' requests waited out maxQueueWait 36 times in 5 min).
 * - Σ wanted > limit: max-min fair (water-filling) over the wants: those that want less than an
 *   equal part get what they want, the rest is split equally among the others.
 *
 * A client that has not said what it wants yet (a sidecar subscribed but not yet reported, a
 * replica whose summary is not yet read) counts as wanting an equal part (limit / n).
 */

import type { BudgetPolicy } from '../../crds/policy-types.ts';
import type { BudgetDemand, BudgetShare } from '../../crds/snapshot.ts';

/** One client of a budget: `wanted` per minute, undefined while unknown. */
export interface BudgetWant {
  id: string;
  wanted: number | undefined;
}

/**
 * Shares are cut to this many per minute, downwards, so that rounding never lets their sum pass
 * the limit (they are rates; a thousandth of a request per minute is nothing).
 */
const GRAIN = 1e-3;

function floorGrain(x: number): number {
  return Math.max(0, Math.floor(x / GRAIN) * GRAIN);
}

/**
 * Each client's share of `limit` (per minute), by id. Σ shares ≤ limit; nobody gets less than
 * min(wanted, limit / n); when Σ wanted ≤ limit, everyone gets at least what it wants.
 */
export function splitBudget(limit: number, wants: readonly BudgetWant[]): Map<string, number> {
  const shares = splitWants(
    limit,
    wants.map((w) => w.wanted),
  );
  return new Map(wants.map((w, i) => [w.id, shares[i]!]));
}

/** `splitBudget` by position: the share of each want, in order (NaN stands for unknown). */
function splitWants(limit: number, wants: ArrayLike<number | undefined>): Float64Array {
  const n = wants.length;
  const shares = new Float64Array(n);
  if (n === 0) return shares;
  const cap = Number.isFinite(limit) && limit > 0 ? limit : 0;
  const equal = cap / n;
  let total = 0;
  for (let i = 0; i < n; i++) {
    const v = wants[i];
    const w = v === undefined || !Number.isFinite(v) || v < 0 ? equal : Math.min(v, cap);
    shares[i] = w;
    total += w;
  }
  if (total <= cap) {
    const spare = cap - total;
    // All of it in equal parts while nobody wants anything.
    const proportional = total > 0 ? spare / 2 : 0;
    const equalPart = (spare - proportional) / n;
    for (let i = 0; i < n; i++) {
      // The ratio first: it is at most 1, where proportional * share could underflow (a want of
      // 1e-323 gave its sidecar twice the spare, past the limit; fast-check found it).
      const extra = total > 0 ? proportional * (shares[i]! / total) : 0;
      shares[i] = floorGrain(shares[i]! + equalPart + extra);
    }
    return shares;
  }
  // Water-filling: the level λ where Σ min(wanted, λ) = limit, found over the wants in order
  // (a native numeric sort: 10,000 sidecars in about a millisecond); each gets min(want, λ).
  const sorted = Float64Array.from(shares).sort();
  let left = cap;
  let k = n;
  let level = cap;
  for (const v of sorted) {
    if (v > left / k) {
      level = left / k;
      break;
    }
    left -= v;
    k--;
  }
  for (let i = 0; i < n; i++) shares[i] = floorGrain(Math.min(shares[i]!, level));
  return shares;
}

export type BudgetUnit = 'requests' | 'tokens';
export const BUDGET_UNITS: readonly BudgetUnit[] = ['requests', 'tokens'];

/** The limit of `budget` in `unit`, per minute; undefined when the budget has no such rate. */
export function budgetLimit(budget: BudgetPolicy, unit: BudgetUnit): number | undefined {
  return unit === 'requests' ? budget.requestsPerMinute : budget.tokensPerMinute;
}

/** One sidecar subscribed on this replica: its workload, and its last report's budgets. */
export interface SidecarBudgets {
  id: string;
  /** Named by the controller from the sidecar's pod, when the pool takes per-sidecar workloads. */
  workload?: string | undefined;
  /** Undefined until it reported (or it reported no budgets): counts as an equal part. */
  budgets?: readonly BudgetDemand[] | undefined;
}

/** What one replica's sidecars want of one budget and unit: what replicas publish to each other. */
export interface ReplicaDemand {
  /** Σ wanted of the sidecars that reported. */
  wanted: number;
  /** Σ used of the sidecars that reported (for status: the fleet's use). */
  used?: number | undefined;
  /** Sidecars of the budget subscribed on the replica. */
  sidecars: number;
  /** Of them, those that have not reported yet. */
  unknown: number;
}

/** Whether `sidecar` spends `budget`: a workload's budget only the sidecars of that workload. */
function spends(
  budget: BudgetPolicy,
  perSidecarWorkload: boolean,
  sidecar: SidecarBudgets,
): boolean {
  return (
    !perSidecarWorkload || budget.workload === undefined || budget.workload === sidecar.workload
  );
}

export interface PoolSplitInput {
  budgets: readonly BudgetPolicy[];
  /** The pool names workloads per sidecar (ServiceAccount, PodLabel), not per request. */
  perSidecarWorkload: boolean;
  /** This replica's subscribed sidecars of the pool. */
  sidecars: readonly SidecarBudgets[];
  /**
   * The other live replicas' demand of a budget and unit (those with sidecars of the pool); an
   * entry undefined for a replica with sidecars of the pool whose demand is not known.
   */
  remote(budget: string, unit: BudgetUnit): readonly (ReplicaDemand | undefined)[];
}

export interface PoolSplit {
  /** Each local sidecar's shares, by sidecar id (only the budgets it spends). */
  shares: Map<string, BudgetShare[]>;
  /** This replica's demand per budget id and unit (`<id>\u0000<unit>`), to publish. */
  demand: Map<string, ReplicaDemand>;
  /** This replica's part of each budget and unit, same keys. */
  replicaLimits: Map<string, number>;
}

export function demandKey(budget: string, unit: BudgetUnit): string {
  return `${budget}\u0000${unit}`;
}

/**
 * The shares of one pool's budgets for the sidecars subscribed on this replica: first the
 * budget's limit is split across the replicas by their demand (`splitBudget` again, an unknown
 * replica an equal part), then this replica's part across its sidecars.
 */
export function splitPool(input: PoolSplitInput): PoolSplit {
  const lists = input.sidecars.map((): BudgetShare[] => []);
  const shares = new Map<string, BudgetShare[]>(input.sidecars.map((s, i) => [s.id, lists[i]!]));
  const demand = new Map<string, ReplicaDemand>();
  const replicaLimits = new Map<string, number>();
  // Each sidecar's report by budget id, once (not a search per budget and unit).
  const reports = input.sidecars.map((s) =>
    s.budgets === undefined ? undefined : new Map(s.budgets.map((b) => [b.id, b])),
  );
  for (const budget of input.budgets) {
    const spenders: number[] = [];
    for (let i = 0; i < input.sidecars.length; i++)
      if (spends(budget, input.perSidecarWorkload, input.sidecars[i]!)) spenders.push(i);
    const perUnit: Partial<Record<BudgetUnit, Float64Array>> = {};
    for (const unit of BUDGET_UNITS) {
      const limit = budgetLimit(budget, unit);
      if (limit === undefined) continue;
      const mine: ReplicaDemand = { wanted: 0, used: 0, sidecars: spenders.length, unknown: 0 };
      const wants = new Array<number | undefined>(spenders.length);
      for (let j = 0; j < spenders.length; j++) {
        const report = reports[spenders[j]!];
        if (report === undefined) {
          mine.unknown++;
          continue;
        }
        // Reported, but not this budget (a new one): it has wanted nothing of it yet.
        const rates = report.get(budget.id)?.[unit];
        const wanted = rates?.wanted ?? 0;
        wants[j] = wanted;
        mine.wanted += wanted;
        mine.used! += rates?.used ?? 0;
      }
      const key = demandKey(budget.id, unit);
      demand.set(key, mine);
      if (spenders.length === 0) continue;
      const remote = input.remote(budget.id, unit);
      let fleet = mine.sidecars;
      for (const r of remote) fleet += r?.sidecars ?? 0;
      // An unreported sidecar wants an equal part of the whole fleet's budget.
      const replicaWant = (d: ReplicaDemand): number => d.wanted + (d.unknown * limit) / fleet;
      const part =
        remote.length === 0
          ? limit
          : splitWants(limit, [
              replicaWant(mine),
              ...remote.map((r) => (r === undefined ? undefined : replicaWant(r))),
            ])[0]!;
      replicaLimits.set(key, part);
      perUnit[unit] = splitWants(part, wants);
    }
    const { requests, tokens } = perUnit;
    for (let j = 0; j < spenders.length; j++) {
      const share: BudgetShare =
        requests === undefined
          ? { id: budget.id, tokensPerMinute: tokens![j]! }
          : tokens === undefined
            ? { id: budget.id, requestsPerMinute: requests[j]! }
            : { id: budget.id, requestsPerMinute: requests[j]!, tokensPerMinute: tokens[j]! };
      lists[spenders[j]!]!.push(share);
    }
  }
  return { shares, demand, replicaLimits };
}

/**
 * Whether `next` differs from `last` enough to send: a budget added or gone, or a rate that moved
 * by more than `relative` (2 % by default) of the larger of the two.
 */
export function sharesChanged(
  last: readonly BudgetShare[] | undefined,
  next: readonly BudgetShare[],
  relative = 0.02,
): boolean {
  if (last === undefined || last.length !== next.length) return true;
  const before = new Map(last.map((s) => [s.id, s]));
  for (const s of next) {
    const b = before.get(s.id);
    if (b === undefined) return true;
    for (const field of ['requestsPerMinute', 'tokensPerMinute'] as const) {
      const x = b[field];
      const y = s[field];
      if (x === undefined || y === undefined) {
        if (x !== y) return true;
        continue;
      }
      if (Math.abs(x - y) > relative * Math.max(x, y)) return true;
    }
  }
  return false;
}

/** One budget of a pool as its status shows it: the fleet's use and demand beside the limit. */
export interface BudgetStatusRow {
  id: string;
  workload?: string;
  /** Sidecars that share it (subscribed on any live replica). */
  sidecars: number;
  requestsPerMinute?: { limit: number; used: number; wanted: number };
  tokensPerMinute?: { limit: number; used: number; wanted: number };
}

/**
 * The pool's budgets for its status: per budget and unit, the limit and the fleet's use and
 * demand per minute, summed over this replica's demand and the other replicas'.
 */
export function budgetStatus(
  budgets: readonly BudgetPolicy[],
  local: ReadonlyMap<string, ReplicaDemand>,
  remote: (budget: string, unit: BudgetUnit) => readonly (ReplicaDemand | undefined)[],
): BudgetStatusRow[] {
  return budgets.map((budget) => {
    const row: BudgetStatusRow = {
      id: budget.id,
      ...(budget.workload === undefined ? {} : { workload: budget.workload }),
      sidecars: 0,
    };
    for (const unit of BUDGET_UNITS) {
      const limit = budgetLimit(budget, unit);
      if (limit === undefined) continue;
      const all = [local.get(demandKey(budget.id, unit)), ...remote(budget.id, unit)];
      let used = 0;
      let wanted = 0;
      let sidecars = 0;
      for (const d of all) {
        used += d?.used ?? 0;
        wanted += d?.wanted ?? 0;
        sidecars += d?.sidecars ?? 0;
      }
      row.sidecars = Math.max(row.sidecars, sidecars);
      const rates = { limit, used: round(used), wanted: round(wanted) };
      if (unit === 'requests') row.requestsPerMinute = rates;
      else row.tokensPerMinute = rates;
    }
    return row;
  });
}

/**
 * Two significant digits: the status shows the use at a glance, and a write per report of a
 * number that moved by 0.1 % would cost an API write a second for nothing.
 */
function round(x: number): number {
  return Number(x.toPrecision(2));
}
