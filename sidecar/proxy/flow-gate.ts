/**
 * The flow gate (issue 43; docs/sidecar.md, Flow control): every request of a pool with
 * `flowControl` passes here before its exchange starts. In order: a sheddable request while
 * something of a higher priority waits is refused; the pool's budgets (BudgetLedger) must have
 * room; then an endpoint must have room (`pickWithRoom`), and nothing of the same or a higher
 * priority may be waiting already (first come, first served). A request that finds no room or no
 * budget waits in the pool's FlowQueue, unless it is sheddable (refused at once), until room comes
 * (an attempt of the pool ends, a load report arrives, or the short poll finds it) or until
 * `maxQueueWait` (then a 429 saying why, with Retry-After). A client that leaves while it waits
 * leaves the queue at once. The queue and ledger are pure (sidecar/policy); this holds the
 * timers, the client watches and the dispatch loop.
 */
import { SHEDDABLE_HEADROOM } from '../../crds/policy-defaults.ts';
import type { FlowWaiter, PoolFlow } from '../config/active-pool.ts';
import type {
  BudgetTicket,
  PickRequest,
  PickResult,
  QueueEntry,
  RefusalReason,
  RoomPickResult,
  SaturationRule,
  WantHold,
} from '../policy/index.ts';
import type { SidecarErrorCode } from './errors.ts';

/** How often the queue is tried while it holds anything (besides attempts ending and reports). */
export const FLOW_POLL_MS = 25;
/** Most queue entries tried per dispatch round past the ones that start (head-of-line bound). */
export const FLOW_TRIES_PER_ROUND = 8;
/** The longest Retry-After a refusal names, in seconds. */
export const MAX_FLOW_RETRY_AFTER_S = 60;

/** A refusal the client gets: always a 429 with Retry-After. */
export interface Refusal {
  readonly reason: RefusalReason;
  readonly code: SidecarErrorCode;
  readonly message: string;
  readonly retryAfterS: number;
  /** How long it waited in the queue before this, when it waited. */
  readonly waitedMs?: number | undefined;
}

/** One request at the gate, as the proxy hands it over (an exchange not started yet). */
export interface GatedRequest {
  readonly priority: number;
  readonly workload: string;
  /** Bytes of the body it holds (counted against the queue's byte bound while it waits). */
  readonly bodyBytes: number;
  /** `max_tokens` / `max_completion_tokens` of the body, for the token estimate. */
  readonly maxTokens: number | undefined;
  /** The balancer of its pool. */
  readonly balancer: {
    pickWithRoom(request: PickRequest, rule: SaturationRule): RoomPickResult;
    pickFreeable(request: PickRequest, freeable: ReadonlySet<string>): RoomPickResult;
  };
  /** What the first pick asks (affinity, model, size). */
  pickRequest(): PickRequest;
  /**
   * Start the exchange on `pick` (a pick or a shed, which it answers as without flow control);
   * `ticket` is settled by the exchange when it ends. `waitedMs`: time in the queue, if queued.
   */
  start(pick: PickResult, ticket: BudgetTicket | undefined, waitedMs: number | undefined): void;
  /** Answer a 429. */
  refuse(refusal: Refusal): void;
  /** Calls `gone` once when the client leaves unanswered; returns what stops watching. */
  watchClient(gone: () => void): () => void;
}

/**
 * A sheddable request under way, as the gate may preempt it: admission.ts registers each one it
 * starts (`FlowGate.running`) until its response closes.
 */
export interface RunningSheddable {
  readonly priority: number;
  /** When it was (last) sent, monotonic ms: the latest sent has done the least work. */
  readonly startedMs: number;
  /**
   * The endpoint of its attempt while nothing of its answer has reached the client (exchange.ts
   * `unanswered`): only then may it be preempted. Undefined otherwise.
   */
  unanswered(): string | undefined;
  /** Ends its attempt and queues it again (`FlowGate.readmit`); false when it cannot be. */
  preempt(): boolean;
}

/**
 * A request of priority 0 or more under way, as the gate watches it (admission.ts registers it
 * when the pool preempts): if its server reports a queue before it has any answer, it probably
 * waits in that queue, behind what the other sidecars sent meanwhile (each sees the others' only
 * at the next report); the gate then preempts a sheddable request of its own on that endpoint,
 * so that the server has a slot to give it.
 */
export interface AwaitingAnswer {
  readonly priority: number;
  /** Where it waits for its first byte; undefined once answered (or gone). */
  unanswered(): string | undefined;
  /** Its server reported a queue since it was sent. */
  queuedThere(): boolean;
}

/** What the gate counts (metrics.ts binds these per pool). */
export interface FlowGateMetrics {
  refused(reason: RefusalReason): void;
  /** A request left the queue (started, refused, or its client left) after `seconds`. */
  leftQueue(priority: number, seconds: number): void;
  /** A sheddable request was preempted for one of a higher priority. */
  preempted(): void;
}

export interface FlowGateDeps {
  readonly poolName: string;
  readonly flow: PoolFlow;
  readonly metrics: FlowGateMetrics;
  /** Monotonic ms. */
  readonly nowMs: () => number;
  /** Timers, replaceable in unit tests. */
  readonly timers?: FlowTimers | undefined;
}

export interface FlowTimers {
  setTimeout(fn: () => void, ms: number): { unref?(): unknown };
  clearTimeout(handle: unknown): void;
  setInterval(fn: () => void, ms: number): { unref?(): unknown };
  clearInterval(handle: unknown): void;
  setImmediate(fn: () => void): unknown;
}

const NODE_TIMERS: FlowTimers = {
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout),
  setInterval: (fn, ms) => setInterval(fn, ms),
  clearInterval: (h) => clearInterval(h as NodeJS.Timeout),
  setImmediate: (fn) => setImmediate(fn),
};

function retryAfterS(ms: number): number {
  if (!Number.isFinite(ms)) return MAX_FLOW_RETRY_AFTER_S;
  return Math.min(MAX_FLOW_RETRY_AFTER_S, Math.max(1, Math.ceil(ms / 1000)));
}

function seconds(ms: number): string {
  return `${Math.round(ms) / 1000}s`;
}

/**
 * The gate of one pool's flow state: admits, queues, refuses, and dispatches the queue. One per
 * `PoolFlow` (the proxy keeps them); it lives as long as the pool's flow state.
 */
export class FlowGate {
  readonly #deps: FlowGateDeps;
  readonly #timers: FlowTimers;
  #poll: { unref?(): unknown } | undefined;
  #kickScheduled = false;
  #dispatching = false;
  /** Sheddable requests under way that a higher priority may preempt. */
  readonly #running = new Set<RunningSheddable>();
  /** Requests of priority 0 or more not answered yet, watched while sheddable ones run. */
  readonly #awaiting = new Set<AwaitingAnswer>();
  #watch: { unref?(): unknown } | undefined;

  constructor(deps: FlowGateDeps) {
    this.#deps = deps;
    this.#timers = deps.timers ?? NODE_TIMERS;
    deps.flow.onChange = () => this.kick();
  }

  get flow(): PoolFlow {
    return this.#deps.flow;
  }

  /** A request of the pool arrives: start it, queue it, or refuse it. */
  admit(request: GatedRequest): void {
    const { flow, metrics } = this.#deps;
    const { queue, ledger, policy } = flow;
    const { priority, workload } = request;
    const now = this.#deps.nowMs();
    // Never behind anything waiting, not even a preempted request of its own priority: a
    // sheddable request does not wait.
    if (priority < 0 && queue.waitingAbove(priority - 1)) {
      metrics.refused('sheddable');
      request.refuse(
        sheddable(
          flow,
          queue.waitingAbove(priority)
            ? 'while requests of a higher priority wait'
            : 'while preempted requests wait to be sent again',
        ),
      );
      return;
    }
    let ticket: BudgetTicket | undefined;
    let tokens = 0;
    if (ledger.applies(workload)) {
      tokens = ledger.estimateTokens(workload, request.bodyBytes, request.maxTokens);
      ledger.noteArrival(workload, tokens, now);
      const admission = ledger.tryAdmit(workload, tokens, now);
      if (admission.kind === 'over') {
        ledger.noteWanted(workload, tokens, now);
        // The wait is known only for a budget held whole: a controller's share may grow at the
        // next re-split (this sidecar reports its want at once), so under one the request waits
        // out maxQueueWait rather than being refused on the current share (bench:budget: demand
        // moved to a sidecar before its share did, and under-budget requests were refused).
        const known = flow.sharing === 'whole';
        if (priority < 0 || (known && admission.waitMs > policy.maxQueueWaitMs)) {
          metrics.refused('budget');
          request.refuse(overBudget(admission.budgetId, admission.waitMs, undefined));
          return;
        }
        this.#enqueue(request, { kind: 'budget', budgetId: admission.budgetId }, tokens, now, {
          waitMs: admission.waitMs,
        });
        return;
      }
      ticket = admission.ticket;
    }
    // First come, first served: nothing passes what waits at its priority or above.
    if (queue.waitingAbove(priority - 1)) {
      this.#enqueue(request, { kind: 'room', ticket }, tokens, now, undefined);
      // What waits ahead may wait for its own budget only: a round soon lets this one past it.
      this.kick();
      return;
    }
    const pick = request.balancer.pickWithRoom(request.pickRequest(), rule(flow, priority));
    if (pick.kind !== 'saturated') {
      request.start(pick, ticket, undefined);
      return;
    }
    const freed = this.preemptFor(request);
    if (freed !== undefined) {
      request.start(freed, ticket, undefined);
      return;
    }
    if (priority < 0) {
      if (ticket !== undefined) ledger.settle(ticket, 0, now);
      metrics.refused('sheddable');
      request.refuse(sheddable(flow, 'while every endpoint is saturated'));
      return;
    }
    this.#enqueue(request, { kind: 'room', ticket }, tokens, now, undefined);
  }

  /**
   * A sheddable request is under way: it may be preempted for a higher priority until the
   * returned function is called (its response closed).
   */
  running(entry: RunningSheddable): () => void {
    return this.#watched(this.#running, entry);
  }

  /**
   * A request of priority 0 or more was sent: until its answer starts, a queue its server
   * reports meanwhile preempts a sheddable request of this sidecar on that endpoint (once).
   */
  awaiting(entry: AwaitingAnswer): () => void {
    return this.#watched(this.#awaiting, entry);
  }

  /** `entry` is in `set` until the returned function is called; the rescue watch follows both. */
  #watched<T>(set: Set<T>, entry: T): () => void {
    set.add(entry);
    this.#watchWhileNeeded();
    return () => {
      set.delete(entry);
      this.#watchWhileNeeded();
    };
  }

  /** The rescue check runs every FLOW_POLL_MS while something awaits and something may be preempted. */
  #watchWhileNeeded(): void {
    const needed = this.#awaiting.size > 0 && this.#running.size > 0;
    if (needed && this.#watch === undefined) {
      this.#watch = this.#timers.setInterval(() => this.rescue(), FLOW_POLL_MS);
      this.#watch.unref?.();
    } else if (!needed && this.#watch !== undefined) {
      this.#timers.clearInterval(this.#watch);
      this.#watch = undefined;
    }
  }

  /** Internal (the watch): preempts for each awaited request whose server reports a queue. */
  rescue(): void {
    for (const entry of this.#awaiting) {
      const endpoint = entry.unanswered();
      if (endpoint === undefined) {
        this.#awaiting.delete(entry);
        continue;
      }
      if (!entry.queuedThere()) continue;
      // Once: a second preemption for the same request would only feed the server's queue.
      this.#awaiting.delete(entry);
      const victim = this.#victims(entry.priority).get(endpoint);
      if (victim === undefined) continue;
      this.#running.delete(victim);
      if (victim.preempt()) this.#deps.metrics.preempted();
    }
    this.#watchWhileNeeded();
  }

  /** Per endpoint, the sheddable request a request of `priority` would preempt there. */
  #victims(priority: number): Map<string, RunningSheddable> {
    const byEndpoint = new Map<string, RunningSheddable>();
    for (const entry of this.#running) {
      if (entry.priority >= priority || entry.priority >= 0) continue;
      const id = entry.unanswered();
      if (id === undefined) continue;
      const best = byEndpoint.get(id);
      if (
        best === undefined ||
        entry.priority < best.priority ||
        (entry.priority === best.priority && entry.startedMs > best.startedMs)
      )
        byEndpoint.set(id, entry);
    }
    return byEndpoint;
  }

  /**
   * A preempted request comes back: it waits in the queue at its priority (even a sheddable one;
   * it was accepted) for room, as long as `maxQueueWait`, and is sent again. Its budget was
   * charged when it was first admitted.
   */
  readmit(request: GatedRequest): void {
    this.#enqueue(request, { kind: 'room', ticket: undefined }, 0, this.#deps.nowMs(), undefined);
    this.kick();
  }

  /**
   * Every endpoint `request` could go to is saturated: when the pool allows it
   * (`preemptSheddable`) and the request is not sheddable itself, end a sheddable request of
   * this sidecar that has sent nothing to its client yet, on an endpoint the request may use,
   * and take its slot. The victim is of the lowest priority, and of those the last sent (it has
   * done the least work); it goes back to the queue. Returns the pick on the freed endpoint, or
   * undefined when there is nothing to preempt.
   */
  preemptFor(request: GatedRequest): PickResult | undefined {
    const { flow, metrics } = this.#deps;
    if (flow.policy.preemptSheddable !== true || request.priority < 0) return undefined;
    const byEndpoint = this.#victims(request.priority);
    if (byEndpoint.size === 0) return undefined;
    const pick = request.balancer.pickFreeable(request.pickRequest(), new Set(byEndpoint.keys()));
    if (pick.kind !== 'picked') return undefined;
    const victim = byEndpoint.get(pick.attempt.endpoint.id)!;
    this.#running.delete(victim);
    if (victim.preempt()) metrics.preempted();
    return pick;
  }

  /** Room may have come (an attempt ended, a load report, new shares): try the queue soon. */
  kick(): void {
    if (this.#kickScheduled || this.#deps.flow.queue.size === 0) return;
    this.#kickScheduled = true;
    this.#timers.setImmediate(() => {
      this.#kickScheduled = false;
      this.dispatch();
    });
  }

  /**
   * Starts what can start, in queue order: tries the entry served next; one that waits for its
   * own workload's budget (or for room only its model or pinned endpoint lacks) is set aside for
   * the round so that it blocks no one else; saturation of the whole pool or the pool's budget
   * ends the round.
   */
  dispatch(): void {
    if (this.#dispatching) return;
    this.#dispatching = true;
    const { queue } = this.#deps.flow;
    const aside: QueueEntry<FlowWaiter>[] = [];
    try {
      let tries = 0;
      while (queue.size > 0 && tries < FLOW_TRIES_PER_ROUND) {
        const entry = queue.shift()!;
        const outcome = entry.value.tryStart(this.#deps.nowMs());
        if (outcome === 'started') continue;
        aside.push(entry);
        tries++;
        if (outcome === 'saturated' && !(entry.value as Waiting).constrained) break;
        if (outcome !== 'saturated' && outcome.budgetId === 'pool') break;
      }
    } finally {
      // Back in their places' order (with their first arrival time), ahead of nothing new.
      for (const entry of aside) {
        const waiting = entry.value as Waiting;
        const again = queue.offer(
          entry.priority,
          entry.workload,
          entry.bytes,
          entry.enqueuedAtMs,
          waiting,
        );
        if (again.kind === 'full') waiting.pushedOut();
        else {
          waiting.entry = again.entry;
          for (const e of again.evicted) e.value.evicted();
        }
      }
      this.#dispatching = false;
      this.#pollWhileQueued();
    }
  }

  #enqueue(
    request: GatedRequest,
    waitingFor: WaitingFor,
    tokens: number,
    now: number,
    budget: { waitMs: number } | undefined,
  ): void {
    const { flow, metrics } = this.#deps;
    const waiting = new Waiting(this, request, waitingFor, tokens, now);
    if (budget !== undefined) waiting.budgetWaitMs = budget.waitMs;
    const offered = flow.queue.offer(
      request.priority,
      request.workload,
      request.bodyBytes,
      now,
      waiting,
    );
    if (offered.kind === 'full') {
      waiting.release(now);
      metrics.refused('queue-full');
      request.refuse({
        reason: 'queue-full',
        code: 'queue_full',
        message: `The flow-control queue of this sidecar is full (its most ${offered.limit === 'requests' ? `requests, ${flow.policy.maxQueuedRequests}` : `bytes of held bodies, ${flow.policy.maxQueuedBytes}`}; flowControl.queue) and nothing of a lower priority could make room. Retry after the Retry-After, send at a higher priority, or raise the pool's queue bounds.`,
        retryAfterS: 1,
      });
      return;
    }
    waiting.entry = offered.entry;
    waiting.arm(flow.policy.maxQueueWaitMs);
    for (const e of offered.evicted) e.value.evicted();
    this.#pollWhileQueued();
  }

  /** The short poll runs while anything waits, and stops when the queue empties. */
  #pollWhileQueued(): void {
    const size = this.#deps.flow.queue.size;
    if (size > 0 && this.#poll === undefined) {
      this.#poll = this.#timers.setInterval(() => this.dispatch(), FLOW_POLL_MS);
      this.#poll.unref?.();
    } else if (size === 0 && this.#poll !== undefined) {
      this.#timers.clearInterval(this.#poll);
      this.#poll = undefined;
    }
  }

  /** Internal to `Waiting`. */
  get deps(): FlowGateDeps {
    return this.#deps;
  }

  get timers(): FlowTimers {
    return this.#timers;
  }

  /** Internal to `Waiting`: an entry left the queue (not through dispatch). */
  removed(): void {
    this.#pollWhileQueued();
  }
}

type WaitingFor =
  { kind: 'budget'; budgetId: string } | { kind: 'room'; ticket: BudgetTicket | undefined };

/** One queued request: its timer, its client watch, and what it waits for. */
class Waiting implements FlowWaiter {
  readonly #gate: FlowGate;
  readonly request: GatedRequest;
  #for: WaitingFor;
  readonly #tokens: number;
  readonly #since: number;
  /** While waiting for budget: what the ledger counts as wanted for it. */
  #hold: WantHold | undefined;
  entry: QueueEntry<FlowWaiter> | undefined;
  budgetWaitMs = 0;
  #timer: unknown;
  readonly #unwatch: () => void;
  #done = false;
  /** Its pick is narrower than the pool's (a model, a pinned endpoint): others may have room. */
  readonly constrained: boolean;

  constructor(
    gate: FlowGate,
    request: GatedRequest,
    waitingFor: WaitingFor,
    tokens: number,
    now: number,
  ) {
    this.#gate = gate;
    this.request = request;
    this.#for = waitingFor;
    this.#tokens = tokens;
    this.#since = now;
    const pick = request.pickRequest();
    this.constrained = pick.model !== undefined || pick.pinnedEndpointId !== undefined;
    this.#unwatch = request.watchClient(() => this.#clientGone());
    // Waiting for budget: wanted in every report while it waits (BudgetLedgerApi.holdWant).
    if (waitingFor.kind === 'budget')
      this.#hold = gate.deps.flow.ledger.holdWant(request.workload, tokens, now);
  }

  arm(maxWaitMs: number): void {
    const timers = this.#gate.timers;
    const handle = timers.setTimeout(() => this.#timedOut(), maxWaitMs);
    handle.unref?.();
    this.#timer = handle;
  }

  tryStart(nowMs: number): 'started' | 'saturated' | { budgetId: string } {
    const { flow } = this.#gate.deps;
    const { ledger } = flow;
    const request = this.request;
    if (this.#for.kind === 'budget') {
      const admission = ledger.tryAdmit(request.workload, this.#tokens, nowMs);
      if (admission.kind === 'over') {
        this.budgetWaitMs = admission.waitMs;
        this.#for = { kind: 'budget', budgetId: admission.budgetId };
        return { budgetId: admission.budgetId };
      }
      this.#releaseHold();
      this.#for = { kind: 'room', ticket: admission.ticket };
    }
    let pick = request.balancer.pickWithRoom(request.pickRequest(), rule(flow, request.priority));
    if (pick.kind === 'saturated') pick = this.#gate.preemptFor(request) ?? pick;
    if (pick.kind === 'saturated') return 'saturated';
    const waited = this.#leave(nowMs);
    request.start(pick, this.#for.ticket, waited);
    return 'started';
  }

  evicted(): void {
    const now = this.#gate.deps.nowMs();
    const waited = this.#leave(now);
    this.release(now);
    this.#gate.deps.metrics.refused('queue-full');
    this.request.refuse({
      reason: 'queue-full',
      code: 'queue_full',
      message:
        'Pushed out of the flow-control queue by requests of a higher priority (the queue was full). Retry after the Retry-After, or send at a higher priority.',
      retryAfterS: 1,
      waitedMs: waited,
    });
  }

  /** Could not be put back in the queue after a dispatch round (its bounds shrank). */
  pushedOut(): void {
    this.entry = undefined;
    this.evicted();
  }

  /** Gives its reserved budget back (nothing was sent). */
  release(now: number): void {
    if (this.#for.kind === 'room' && this.#for.ticket !== undefined) {
      this.#gate.deps.flow.ledger.settle(this.#for.ticket, 0, now);
    }
  }

  #timedOut(): void {
    if (this.#done) return;
    const { flow, metrics, nowMs } = this.#gate.deps;
    const now = nowMs();
    this.#removeFromQueue();
    const waited = this.#leave(now);
    this.release(now);
    const maxWait = seconds(flow.policy.maxQueueWaitMs);
    if (this.#for.kind === 'budget') {
      metrics.refused('budget');
      this.request.refuse(overBudget(this.#for.budgetId, this.budgetWaitMs, waited, maxWait));
      return;
    }
    metrics.refused('saturated');
    this.request.refuse({
      reason: 'saturated',
      code: 'queue_timeout_saturated',
      message: `Waited ${maxWait} (flowControl.maxQueueWait) in the flow-control queue of pool ${this.#gate.deps.poolName} and no endpoint had room: every server of the pool is saturated. Retry after the Retry-After, lower this workload's rate, or add capacity.`,
      retryAfterS: 1,
      waitedMs: waited,
    });
  }

  #clientGone(): void {
    if (this.#done) return;
    const now = this.#gate.deps.nowMs();
    this.#removeFromQueue();
    this.#leave(now);
    this.release(now);
  }

  #removeFromQueue(): void {
    if (this.entry !== undefined) this.#gate.deps.flow.queue.remove(this.entry);
    this.entry = undefined;
    this.#gate.removed();
  }

  #releaseHold(): void {
    if (this.#hold === undefined) return;
    this.#gate.deps.flow.ledger.releaseWant(this.#hold);
    this.#hold = undefined;
  }

  /** Out of the queue for good: timer and watch stopped, wait observed; returns the wait. */
  #leave(now: number): number {
    this.#done = true;
    this.#releaseHold();
    this.entry = undefined;
    if (this.#timer !== undefined) this.#gate.timers.clearTimeout(this.#timer);
    this.#unwatch();
    const waited = Math.max(0, now - this.#since);
    this.#gate.deps.metrics.leftQueue(this.request.priority, waited / 1000);
    return waited;
  }
}

/**
 * The saturation rule of a request: a sheddable one leaves the pool's headroom free for the
 * others (SaturationRule.headroom); the others may fill an endpoint.
 */
function rule(flow: PoolFlow, priority: number): SaturationRule {
  if (priority >= 0) return flow.policy;
  return { ...flow.policy, headroom: flow.policy.sheddableHeadroom ?? SHEDDABLE_HEADROOM };
}

function sheddable(flow: PoolFlow, why: string): Refusal {
  return {
    reason: 'sheddable',
    code: 'sheddable_refused',
    message: `Refused at once: this request is sheddable (negative priority, x-switchyard-priority) and is not queued ${why}. Retry after the Retry-After, or send it at priority 0 or more to wait up to ${seconds(flow.policy.maxQueueWaitMs)}.`,
    retryAfterS: 1,
  };
}

function overBudget(
  budgetId: string,
  waitMs: number,
  waitedMs: number | undefined,
  maxWait?: string,
): Refusal {
  const which =
    budgetId === 'pool'
      ? "the pool's budget"
      : `the budget of workload ${JSON.stringify(budgetId.slice('workload:'.length))}`;
  const after = Number.isFinite(waitMs)
    ? `room comes in about ${seconds(waitMs)}`
    : "this sidecar's share of it is 0 until the controller sends another";
  return {
    reason: 'budget',
    code: 'over_budget',
    message: `Over ${which} (requests or tokens per minute, flowControl.budgets): ${after}${maxWait === undefined ? '' : `; waited ${maxWait}`}. Retry after the Retry-After, or ask for a larger budget.`,
    retryAfterS: retryAfterS(waitMs),
    waitedMs,
  };
}
