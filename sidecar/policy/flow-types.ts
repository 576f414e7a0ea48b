/**
 * The contract of flow control's pure parts (issue 43, docs/flow-control.md): the sidecar's queue
 * of requests that wait for room or for budget, and the ledger of the pool's budgets. Both are
 * pure (time passed in); the shell around them (sidecar/proxy/flow-gate.ts) holds the exchanges,
 * the timers and the client sockets.
 *
 * The request's priority: an integer, higher first; negative = sheddable (refused at once while
 * anything of a higher priority waits, or when nothing has room). `workload`: the value the
 * pool's `flowControl.workload` names for the request ('' when none).
 */
import type { BudgetPolicy } from '../../crds/policy-types.ts';
import type { BudgetDemand, BudgetShare } from '../../crds/snapshot.ts';

export type { BudgetDemand, BudgetPolicy, BudgetShare };
/** `budgetId(workload)`: 'pool', or 'workload:<value>' (crds/policy-defaults.ts). */
export { budgetId } from '../../crds/policy-defaults.ts';

/** Why flow control refused a request (the `reason` label of the refusals metric, and the span). */
export type RefusalReason =
  /** It waited `maxQueueWait` and no endpoint had room. */
  | 'saturated'
  /** Over a budget: waiting would pass `maxQueueWait`, or it is sheddable. */
  | 'budget'
  /** The queue held its most requests or bytes (or a higher priority pushed it out). */
  | 'queue-full'
  /** Sheddable (negative priority) while a higher priority waits or nothing has room. */
  | 'sheddable';

/** One waiting request. `value` is the shell's (its exchange). */
export interface QueueEntry<T> {
  readonly priority: number;
  readonly workload: string;
  /** The bytes of the request body it holds. */
  readonly bytes: number;
  readonly enqueuedAtMs: number;
  readonly value: T;
}

export interface FlowQueueLimits {
  maxRequests: number;
  maxBytes: number;
}

export type OfferResult<T> =
  /**
   * Queued. `evicted`: entries of a lower priority pushed out to make room for it (newest first
   * among the lowest); the shell answers each with a 429 `queue_full`.
   */
  | { kind: 'queued'; entry: QueueEntry<T>; evicted: QueueEntry<T>[] }
  /** Not queued: no room, and nothing of a lower priority to push out. */
  | { kind: 'full'; limit: 'requests' | 'bytes' };

/**
 * The queue of one pool in one sidecar: ordered by priority (higher first); within a priority,
 * fair between workloads (each workload with entries takes its turn) and first come first served
 * within a workload. Bounded in count and in bytes.
 */
export interface FlowQueueApi<T> {
  setLimits(limits: FlowQueueLimits): void;
  offer(priority: number, workload: string, bytes: number, nowMs: number, value: T): OfferResult<T>;
  /** Takes an entry out (client gone, timed out, served); false when it was not queued. */
  remove(entry: QueueEntry<T>): boolean;
  /** The entry that is served next, without taking it. */
  peek(): QueueEntry<T> | undefined;
  /** Takes the entry `peek` names and advances the fair turn. */
  shift(): QueueEntry<T> | undefined;
  /** Whether anything waits with a priority above `priority`. */
  waitingAbove(priority: number): boolean;
  readonly size: number;
  readonly bytes: number;
  /** Entries waiting per priority, for the queue-length gauge. */
  countsByPriority(): Map<number, number>;
}

/** A request admitted against the budgets: settled once when it ends. */
export interface BudgetTicket {
  readonly budgetIds: readonly string[];
  /** Tokens reserved at admission (the estimate); `settle` corrects them to the actual count. */
  readonly reservedTokens: number;
}

export type BudgetAdmission =
  | { kind: 'admitted'; ticket: BudgetTicket }
  /**
   * No room in `budgetId` now: room comes in about `waitMs` at this sidecar's current share
   * (Infinity when its share is 0 until the controller sends another).
   */
  | { kind: 'over'; budgetId: string; waitMs: number };

/** One budget as the sidecar holds it, for metrics, `/debug/flow` and `switchyard status`. */
export interface BudgetStatus {
  id: string;
  workload?: string | undefined;
  /** The pool's budget for the whole fleet. */
  limit: { requestsPerMinute?: number | undefined; tokensPerMinute?: number | undefined };
  /** This sidecar's share now (standalone: the whole limit). */
  share: { requestsPerMinute?: number | undefined; tokensPerMinute?: number | undefined };
  /** Used over the last minute by this sidecar. */
  used: { requests: number; tokens: number };
  /** Used plus refused and waiting, over the last minute. */
  wanted: { requests: number; tokens: number };
}

/** A request waiting for budget, as `holdWant` counts it (opaque to the gate). */
export interface WantHold {
  readonly sinceMs: number;
  readonly tokens: number;
}

/**
 * The budgets of one pool in one sidecar. Each budget and unit is a token bucket refilled at the
 * sidecar's share per minute, holding at most a few seconds of it (so that the fleet's total over
 * any minute stays within a few per cent of the budget, whatever the shares do); a request
 * reserves its estimated tokens when admitted and is settled to its actual usage when it ends
 * (the bucket may go into debt).
 */
export interface BudgetLedgerApi {
  /**
   * The pool's budgets. `sharing: 'whole'`: this sidecar enforces every budget whole
   * (standalone); `'shared'`: it enforces the shares the controller sends (none until the first
   * `applyShares`: requests wait for it). State is kept by budget id.
   */
  configure(budgets: readonly BudgetPolicy[], sharing: 'whole' | 'shared', nowMs: number): void;
  applyShares(shares: readonly BudgetShare[], nowMs: number): void;
  /** Whether any budget applies to a request of this workload (no budget: no admission needed). */
  applies(workload: string | undefined): boolean;
  /** Room for this request in every budget that applies (the pool's, the workload's)? */
  tryAdmit(workload: string | undefined, estimatedTokens: number, nowMs: number): BudgetAdmission;
  /**
   * A request subject to budgets arrived (whatever becomes of it): counted once, at arrival, into
   * the demand the report's `wanted` is made of.
   */
  noteArrival(workload: string | undefined, estimatedTokens: number, nowMs: number): void;
  /**
   * A request that waits or was refused for want of budget: counted once into the minute's
   * `wanted` that status shows (the report's `wanted` is `noteArrival`'s).
   */
  noteWanted(workload: string | undefined, estimatedTokens: number, nowMs: number): void;
  /**
   * A request that arrived at `sinceMs` now waits in the queue for budget: wanted in every report
   * until `releaseWant` (admitted, refused, gone), so that its sidecar keeps the share it needs.
   */
  holdWant(workload: string | undefined, estimatedTokens: number, sinceMs: number): WantHold;
  /** The held request left the queue; releasing twice is harmless. */
  releaseWant(hold: WantHold): void;
  /** The admitted request ended: its actual tokens (undefined: unknown, the estimate stands). */
  settle(ticket: BudgetTicket, tokens: number | undefined, nowMs: number): void;
  /** Tokens to reserve for a request: a learned mean per workload, or from the prompt's size. */
  estimateTokens(workload: string | undefined, promptBytes: number, maxTokens?: number): number;
  /** Per-minute use and demand per budget, for the report to the controller. */
  demand(nowMs: number): BudgetDemand[];
  status(nowMs: number): BudgetStatus[];
}
