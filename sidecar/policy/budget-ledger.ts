/**
 * The budgets of one pool in one sidecar (issue 43): per budget and unit (requests, tokens) a
 * token bucket refilled at this sidecar's share per minute. A request of workload `w` is subject
 * to the pool-wide budgets (no `workload`) and to `w`'s own; it is admitted only when every one of
 * them has room, reserves one request and its estimated tokens from each, and is settled to its
 * actual tokens when it ends (a bucket may go into debt, which later requests wait out).
 *
 * Use and demand are counted in sliding windows per budget. Over the last minute, for status and
 * the report's `used`: `used` (tokens once settled, requests once admitted) and `wanted` (used plus
 * what `noteWanted` counted: waiting or refused for want of budget). The report's `wanted`, which
 * the controller splits the budget by, is what arrived over the last DEMAND_WINDOW_MS plus what
 * still waits from before (see there).
 */
import { blendEwma } from './ewma.ts';
import type {
  BudgetAdmission,
  BudgetDemand,
  BudgetLedgerApi,
  BudgetPolicy,
  BudgetShare,
  BudgetStatus,
  BudgetTicket,
  WantHold,
} from './flow-types.ts';
import { SlidingWindow } from './sliding-window.ts';

/**
 * A bucket holds at most BURST_MS worth of its share. Over any minute a bucket admits at most its
 * share plus what it held at the start (its capacity), so a fleet of sidecars whose shares add
 * up to the budget spends at most budget + Σ capacities = budget × (1 + BURST_MS / 60 s): 2 s
 * keeps that within 3.3 % of the budget whatever the shares do, while still letting a burst of a
 * couple of seconds' worth through at once instead of spacing every request out.
 */
export const BURST_MS = 2_000;

/** Tokens assumed for the completion of a request that names no `max_tokens`, until learned. */
export const DEFAULT_COMPLETION_TOKENS = 256;

/** Prompt bytes per token, for the estimate before any request of the workload was settled. */
export const BYTES_PER_TOKEN = 4;

const MINUTE_MS = 60_000;

/**
 * The report's `wanted` is the rate of the last 2 s (as a rate per minute), not of the last
 * minute: the controller splits a budget by it, and demand that moved to another sidecar must
 * move its share within seconds. Measured (bench:budget, demand moving between 16 sidecars every
 * 10 s): with the minute's want about 13 sidecars wanted at any time, so the 4 busy ones held
 * about 4/13 of the budget and the fleet spent only half of it; with the last 5 s, 89–92 % of it
 * (a share took about 5 s to follow its demand).
 *
 * Within the window a request counts once, when it arrives; one still waiting after the window
 * counts as long as it waits. Counting admissions instead (as the first build did) made a
 * sidecar that had just drained its queue, with no request arriving any more, want what it
 * drained for 2 s more, and hold that share unspent: in bench:budget's traces a third of each
 * budget sat on the sidecars the demand had left, and the fleet spent 89–94 % of it.
 */
export const DEMAND_WINDOW_MS = 2_000;

/** Tokens (or requests) of floating-point error forgiven when checking for room. */
const ROUNDING = 1e-6;

type Unit = 'requests' | 'tokens';
/** Over the last minute, for status and the report's `used`. */
type Counter = 'usedRequests' | 'usedTokens' | 'wantedRequests' | 'wantedTokens';
const COUNTERS: readonly Counter[] = [
  'usedRequests',
  'usedTokens',
  'wantedRequests',
  'wantedTokens',
];
/** Over DEMAND_WINDOW_MS, for the report's `wanted`. */
type Arrival = 'requests' | 'tokens';
const ARRIVALS: readonly Arrival[] = ['requests', 'tokens'];

/** One budget in one unit. */
class Bucket {
  /** Per minute; undefined while a shared budget has had no share yet. */
  share: number | undefined;
  balance = 0;
  #lastMs: number;

  constructor(nowMs: number) {
    this.#lastMs = nowMs;
  }

  get capacity(): number {
    return ((this.share ?? 0) * BURST_MS) / MINUTE_MS;
  }

  get ratePerMs(): number {
    return (this.share ?? 0) / MINUTE_MS;
  }

  refill(nowMs: number): void {
    const elapsed = nowMs - this.#lastMs;
    if (elapsed > 0) {
      this.balance = Math.min(this.capacity, this.balance + elapsed * this.ratePerMs);
      this.#lastMs = nowMs;
    }
  }

  /** A new share: the balance is kept (clamped to the new capacity); a first share starts full. */
  setShare(share: number | undefined, nowMs: number): void {
    this.refill(nowMs);
    const first = this.share === undefined;
    this.share = share;
    this.balance = first ? this.capacity : Math.min(this.balance, this.capacity);
  }

  /** How long until `cost` fits: 0 now, Infinity with no share. */
  waitMs(cost: number): number {
    if (this.share === undefined || !(this.share > 0)) return Infinity;
    const need = Math.min(cost, this.capacity);
    // A hair of slack: a refill that should land exactly on `need` may fall short by rounding.
    return this.balance >= need - ROUNDING ? 0 : (need - this.balance) / this.ratePerMs;
  }
}

interface Budget {
  policy: BudgetPolicy;
  buckets: Partial<Record<Unit, Bucket>>;
  window: SlidingWindow<Counter>;
  /** What arrived over DEMAND_WINDOW_MS (`noteArrival`), for the report's `wanted`. */
  arrived: SlidingWindow<Arrival>;
  /** Requests waiting in the queue for this budget now (`holdWant`). */
  held: Set<WantHold>;
}

const UNITS: readonly { unit: Unit; limit: 'requestsPerMinute' | 'tokensPerMinute' }[] = [
  { unit: 'requests', limit: 'requestsPerMinute' },
  { unit: 'tokens', limit: 'tokensPerMinute' },
];

export class BudgetLedger implements BudgetLedgerApi {
  readonly #budgets = new Map<string, Budget>();
  #sharing: 'whole' | 'shared' = 'whole';
  /** Mean actual tokens per request, per workload ('' for none). */
  readonly #meanTokens = new Map<string, number>();
  /** The workload of each unsettled ticket (a ticket is settled once). */
  readonly #open = new WeakMap<BudgetTicket, string | undefined>();
  /** The budgets each held want was counted in (a budget removed meanwhile is simply gone). */
  readonly #holds = new WeakMap<WantHold, Budget[]>();

  configure(budgets: readonly BudgetPolicy[], sharing: 'whole' | 'shared', nowMs: number): void {
    const modeChanged = sharing !== this.#sharing;
    this.#sharing = sharing;
    const ids = new Set(budgets.map((b) => b.id));
    for (const id of this.#budgets.keys()) if (!ids.has(id)) this.#budgets.delete(id);
    for (const policy of budgets) {
      let budget = this.#budgets.get(policy.id);
      if (budget === undefined) {
        budget = {
          policy,
          buckets: {},
          window: new SlidingWindow(MINUTE_MS, COUNTERS),
          arrived: new SlidingWindow(DEMAND_WINDOW_MS, ARRIVALS, 4),
          held: new Set(),
        };
        this.#budgets.set(policy.id, budget);
      }
      budget.policy = policy;
      for (const { unit, limit } of UNITS) {
        const perMinute = policy[limit];
        if (perMinute === undefined) {
          delete budget.buckets[unit];
          continue;
        }
        let bucket = budget.buckets[unit];
        if (bucket === undefined) {
          bucket = new Bucket(nowMs);
          budget.buckets[unit] = bucket;
        } else if (modeChanged) {
          // Shares of a controller do not carry over to enforcing whole, nor back.
          bucket.refill(nowMs);
          bucket.share = undefined;
        }
        if (sharing === 'whole') bucket.setShare(perMinute, nowMs);
      }
    }
  }

  /** Budgets the shares do not name, or units they leave out, keep the share they had. */
  applyShares(shares: readonly BudgetShare[], nowMs: number): void {
    if (this.#sharing !== 'shared') return;
    for (const share of shares) {
      const budget = this.#budgets.get(share.id);
      if (budget === undefined) continue;
      for (const { unit, limit } of UNITS) {
        const perMinute = share[limit];
        const bucket = budget.buckets[unit];
        if (perMinute !== undefined && bucket !== undefined) bucket.setShare(perMinute, nowMs);
      }
    }
  }

  applies(workload: string | undefined): boolean {
    return this.#applicable(workload).length > 0;
  }

  tryAdmit(workload: string | undefined, estimatedTokens: number, nowMs: number): BudgetAdmission {
    const tokens = nonNegative(estimatedTokens);
    const budgets = this.#applicable(workload);
    let worst: { budgetId: string; waitMs: number } | undefined;
    for (const budget of budgets) {
      for (const { unit } of UNITS) {
        const bucket = budget.buckets[unit];
        if (bucket === undefined) continue;
        bucket.refill(nowMs);
        const waitMs = bucket.waitMs(unit === 'requests' ? 1 : tokens);
        if (waitMs > 0 && (worst === undefined || waitMs > worst.waitMs)) {
          worst = { budgetId: budget.policy.id, waitMs };
        }
      }
    }
    if (worst !== undefined) return { kind: 'over', ...worst };
    for (const budget of budgets) {
      if (budget.buckets.requests) budget.buckets.requests.balance -= 1;
      if (budget.buckets.tokens) budget.buckets.tokens.balance -= tokens;
      count(budget, nowMs, 'usedRequests', 1);
    }
    const ticket: BudgetTicket = Object.freeze({
      budgetIds: budgets.map((b) => b.policy.id),
      reservedTokens: tokens,
    });
    this.#open.set(ticket, workload);
    return { kind: 'admitted', ticket };
  }

  noteWanted(workload: string | undefined, estimatedTokens: number, nowMs: number): void {
    for (const budget of this.#applicable(workload)) {
      count(budget, nowMs, 'wantedRequests', 1);
      count(budget, nowMs, 'wantedTokens', nonNegative(estimatedTokens));
    }
  }

  noteArrival(workload: string | undefined, estimatedTokens: number, nowMs: number): void {
    for (const budget of this.#applicable(workload)) {
      budget.arrived.add(nowMs, 'requests', 1);
      budget.arrived.add(nowMs, 'tokens', nonNegative(estimatedTokens));
    }
  }

  holdWant(workload: string | undefined, estimatedTokens: number, sinceMs: number): WantHold {
    const hold: WantHold = Object.freeze({ sinceMs, tokens: nonNegative(estimatedTokens) });
    const budgets = this.#applicable(workload);
    for (const budget of budgets) budget.held.add(hold);
    this.#holds.set(hold, budgets);
    return hold;
  }

  releaseWant(hold: WantHold): void {
    for (const budget of this.#holds.get(hold) ?? []) budget.held.delete(hold);
    this.#holds.delete(hold);
  }

  settle(ticket: BudgetTicket, tokens: number | undefined, nowMs: number): void {
    if (!this.#open.has(ticket)) return;
    const workload = this.#open.get(ticket);
    this.#open.delete(ticket);
    const known = tokens !== undefined && Number.isFinite(tokens) && tokens >= 0;
    const actual = known ? tokens : ticket.reservedTokens;
    if (known) {
      const key = workload ?? '';
      const mean = this.#meanTokens.get(key);
      this.#meanTokens.set(key, mean === undefined ? actual : blendEwma(mean, actual));
    }
    for (const id of ticket.budgetIds) {
      const budget = this.#budgets.get(id);
      if (budget === undefined) continue;
      count(budget, nowMs, 'usedTokens', actual);
      const bucket = budget.buckets.tokens;
      if (bucket === undefined) continue;
      bucket.refill(nowMs);
      bucket.balance = Math.min(bucket.capacity, bucket.balance - (actual - ticket.reservedTokens));
    }
  }

  estimateTokens(workload: string | undefined, promptBytes: number, maxTokens?: number): number {
    const mean = this.#meanTokens.get(workload ?? '');
    if (mean !== undefined) return Math.ceil(mean);
    const completion =
      maxTokens !== undefined && Number.isFinite(maxTokens) && maxTokens >= 0
        ? maxTokens
        : DEFAULT_COMPLETION_TOKENS;
    return Math.ceil(nonNegative(promptBytes) / BYTES_PER_TOKEN) + completion;
  }

  demand(nowMs: number): BudgetDemand[] {
    const perMinute = MINUTE_MS / DEMAND_WINDOW_MS;
    return [...this.#budgets.values()].map((budget) => {
      const totals = budget.window.totals(nowMs);
      const arrived = budget.arrived.totals(nowMs);
      const out: BudgetDemand = { id: budget.policy.id };
      // What still waits in the queue for this budget is wanted now, however long ago it came:
      // else a sidecar whose demand moved away would lose the share its queued requests need.
      // (Those that arrived within the window are in `arrived` already.)
      let olderRequests = 0;
      let olderTokens = 0;
      for (const hold of budget.held) {
        if (hold.sinceMs > nowMs - DEMAND_WINDOW_MS) continue;
        olderRequests++;
        olderTokens += hold.tokens;
      }
      if (budget.buckets.requests) {
        out.requests = {
          used: totals.usedRequests,
          wanted: (arrived.requests + olderRequests) * perMinute,
        };
      }
      if (budget.buckets.tokens) {
        out.tokens = {
          used: totals.usedTokens,
          wanted: (arrived.tokens + olderTokens) * perMinute,
        };
      }
      return out;
    });
  }

  status(nowMs: number): BudgetStatus[] {
    return [...this.#budgets.values()].map((budget) => {
      const totals = budget.window.totals(nowMs);
      const { policy, buckets } = budget;
      return {
        id: policy.id,
        workload: policy.workload,
        limit: {
          requestsPerMinute: policy.requestsPerMinute,
          tokensPerMinute: policy.tokensPerMinute,
        },
        share: {
          requestsPerMinute: buckets.requests?.share,
          tokensPerMinute: buckets.tokens?.share,
        },
        used: { requests: totals.usedRequests, tokens: totals.usedTokens },
        wanted: {
          requests: totals.usedRequests + totals.wantedRequests,
          tokens: totals.usedTokens + totals.wantedTokens,
        },
      };
    });
  }

  #applicable(workload: string | undefined): Budget[] {
    const out: Budget[] = [];
    for (const budget of this.#budgets.values()) {
      const own = budget.policy.workload;
      if (own === undefined || own === workload) out.push(budget);
    }
    return out;
  }
}

function nonNegative(value: number): number {
  return Number.isFinite(value) && value > 0 ? value : 0;
}

/** Counts into the budget's minute. */
function count(budget: Budget, nowMs: number, key: Counter, n: number): void {
  budget.window.add(nowMs, key, n);
}
