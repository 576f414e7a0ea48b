import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { FlowControlPolicy } from '../../crds/policy-types.ts';
import { PoolFlow } from '../config/active-pool.ts';
import type {
  Attempt,
  BudgetTicket,
  PickRequest,
  PickResult,
  RefusalReason,
  RoomPickResult,
} from '../policy/index.ts';
import { FLOW_POLL_MS, FlowGate, type GatedRequest, type Refusal } from './flow-gate.ts';

/** Manual timers: `run` fires what is due by `now`. */
class FakeTimers {
  now = 0;
  #next = 1;
  readonly timeouts = new Map<number, { at: number; fn: () => void }>();
  intervals = new Map<number, () => void>();
  immediates: (() => void)[] = [];
  setTimeout = (fn: () => void, ms: number) => {
    const id = this.#next++;
    this.timeouts.set(id, { at: this.now + ms, fn });
    return { id, unref() {} };
  };
  clearTimeout = (h: unknown) => void this.timeouts.delete((h as { id: number }).id);
  setInterval = (fn: () => void) => {
    const id = this.#next++;
    this.intervals.set(id, fn);
    return { id, unref() {} };
  };
  clearInterval = (h: unknown) => void this.intervals.delete((h as { id: number }).id);
  setImmediate = (fn: () => void) => {
    this.immediates.push(fn);
    return undefined;
  };
  advance(ms: number): void {
    this.now += ms;
    for (const [id, t] of [...this.timeouts]) {
      if (t.at <= this.now) {
        this.timeouts.delete(id);
        t.fn();
      }
    }
  }
  poll(): void {
    for (const fn of [...this.intervals.values()]) fn();
  }
  flushImmediates(): void {
    const fns = this.immediates;
    this.immediates = [];
    for (const fn of fns) fn();
  }
}

/** Read anew (after the control flow narrowed `seen.refused` to undefined). */
const refusalOf = (seen: Seen): Refusal | undefined => seen.refused;

function policy(extra: Partial<FlowControlPolicy> = {}): FlowControlPolicy {
  return {
    defaultPriority: 0,
    maxQueueWaitMs: 1000,
    maxQueuedRequests: 10,
    maxQueuedBytes: 10_000,
    kvCacheSaturation: 0.95,
    maxInFlightPerEndpoint: 1,
    budgets: [],
    ...extra,
  };
}

/** A balancer whose room the test sets. */
class FakeBalancer {
  room = true;
  picks = 0;
  /** The freeable endpoints the last preemption was offered. */
  offered: string[] = [];
  pickWithRoom(_request: PickRequest): RoomPickResult {
    if (!this.room) return { kind: 'saturated' };
    this.picks++;
    return {
      kind: 'picked',
      attempt: { endpoint: { id: 'e' } } as unknown as Attempt,
      affinity: 'none',
    };
  }
  /** The first of the freeable endpoints, in order (the real one chooses as `pick` does). */
  pickFreeable(_request: PickRequest, freeable: ReadonlySet<string>): RoomPickResult {
    this.offered = [...freeable];
    const id = this.offered.sort()[0];
    if (id === undefined) return { kind: 'saturated' };
    this.picks++;
    return {
      kind: 'picked',
      attempt: { endpoint: { id } } as unknown as Attempt,
      affinity: 'none',
    };
  }
}

interface Seen {
  started?: { pick: PickResult; ticket: BudgetTicket | undefined; waitedMs: number | undefined };
  refused?: Refusal;
  gone?: () => void;
  watching: boolean;
}

function setup(p: FlowControlPolicy = policy(), sharing: 'whole' | 'shared' = 'whole') {
  const timers = new FakeTimers();
  const flow = new PoolFlow(p, sharing, { nowMs: () => timers.now }, undefined);
  const counted = { refused: [] as RefusalReason[], left: [] as [number, number][], preempted: 0 };
  const gate = new FlowGate({
    poolName: 'chat',
    flow,
    metrics: {
      refused: (r) => counted.refused.push(r),
      leftQueue: (priority, s) => counted.left.push([priority, s]),
      preempted: () => counted.preempted++,
    },
    nowMs: () => timers.now,
    timers,
  });
  const balancer = new FakeBalancer();
  const order: string[] = [];
  const request = (
    name: string,
    priority: number,
    extra: Partial<GatedRequest> = {},
  ): { request: GatedRequest; seen: Seen } => {
    const seen: Seen = { watching: false };
    const request: GatedRequest = {
      priority,
      workload: '',
      bodyBytes: 100,
      maxTokens: undefined,
      balancer,
      pickRequest: () => ({}),
      start: (pick, ticket, waitedMs) => {
        order.push(name);
        seen.started = { pick, ticket, waitedMs };
      },
      refuse: (refusal) => (seen.refused = refusal),
      watchClient: (gone) => {
        seen.gone = gone;
        seen.watching = true;
        return () => (seen.watching = false);
      },
      ...extra,
    };
    return { request, seen };
  };
  return { timers, flow, gate, balancer, counted, order, request };
}

describe('FlowGate', () => {
  it('starts a request at once while an endpoint has room', () => {
    const { gate, request, flow } = setup();
    const r = request('a', 0);
    gate.admit(r.request);
    assert.equal(r.seen.started?.pick.kind, 'picked');
    assert.equal(r.seen.started?.waitedMs, undefined);
    assert.equal(flow.queue.size, 0);
  });

  it('queues while saturated and serves the higher priority first when room comes', () => {
    const { gate, request, balancer, flow, timers, order, counted } = setup();
    balancer.room = false;
    const low = request('low', 1);
    const high = request('high', 10);
    gate.admit(low.request);
    timers.advance(10);
    gate.admit(high.request);
    assert.equal(flow.queue.size, 2);
    assert.ok(timers.intervals.size === 1, 'the poll runs while anything waits');
    balancer.room = true;
    timers.advance(5);
    gate.kick();
    timers.flushImmediates();
    assert.deepEqual(order, ['high', 'low']);
    assert.equal(high.seen.started?.waitedMs, 5);
    assert.equal(low.seen.started?.waitedMs, 15);
    assert.equal(flow.queue.size, 0);
    assert.equal(timers.intervals.size, 0, 'the poll stops with the queue empty');
    assert.equal(timers.timeouts.size, 0, 'the wait timers are cleared');
    assert.deepEqual(counted.left, [
      [10, 0.005],
      [1, 0.015],
    ]);
    assert.equal(high.seen.watching, false);
  });

  it('keeps first come, first served: a newcomer waits behind its priority', () => {
    const { gate, request, balancer, flow, timers, order } = setup();
    balancer.room = false;
    gate.admit(request('first', 0).request);
    balancer.room = true;
    gate.admit(request('second', 0).request);
    assert.equal(flow.queue.size, 2);
    timers.poll();
    assert.deepEqual(order, ['first', 'second']);
    // A higher priority passes what waits below it.
    balancer.room = false;
    gate.admit(request('third', 0).request);
    balancer.room = true;
    gate.admit(request('urgent', 5).request);
    assert.deepEqual(order, ['first', 'second', 'urgent']);
  });

  it('refuses a sheddable request while a higher priority waits, and when saturated', () => {
    const { gate, request, balancer, counted } = setup();
    balancer.room = false;
    const shed = request('shed', -1);
    gate.admit(shed.request);
    assert.equal(shed.seen.refused?.code, 'sheddable_refused');
    assert.match(shed.seen.refused?.message ?? '', /every endpoint is saturated/);
    gate.admit(request('waits', 5).request);
    balancer.room = true;
    const shed2 = request('shed2', -1);
    gate.admit(shed2.request);
    assert.equal(shed2.seen.refused?.code, 'sheddable_refused');
    assert.match(shed2.seen.refused?.message ?? '', /higher priority wait/);
    assert.deepEqual(counted.refused, ['sheddable', 'sheddable']);
  });

  it('answers 429 queue_timeout_saturated after maxQueueWait, with Retry-After', () => {
    const { gate, request, balancer, flow, timers, counted } = setup();
    balancer.room = false;
    const r = request('a', 0);
    gate.admit(r.request);
    timers.advance(999);
    assert.equal(r.seen.refused, undefined);
    timers.advance(1);
    const refused = refusalOf(r.seen);
    assert.equal(refused?.code, 'queue_timeout_saturated');
    assert.equal(refused?.reason, 'saturated');
    assert.equal(refused?.retryAfterS, 1);
    assert.equal(refused?.waitedMs, 1000);
    assert.match(refused?.message ?? '', /pool chat/);
    assert.equal(flow.queue.size, 0);
    assert.deepEqual(counted.refused, ['saturated']);
    assert.equal(timers.intervals.size, 0);
  });

  it('takes a client that left out of the queue at once, answering nothing', () => {
    const { gate, request, balancer, flow, timers, counted } = setup();
    balancer.room = false;
    const r = request('a', 0);
    gate.admit(r.request);
    r.seen.gone!();
    assert.equal(flow.queue.size, 0);
    assert.equal(r.seen.refused, undefined);
    assert.equal(r.seen.started, undefined);
    assert.deepEqual(counted.refused, []);
    assert.equal(counted.left.length, 1);
    balancer.room = true;
    timers.poll();
    assert.equal(balancer.picks, 0, 'nothing sent for it');
    timers.advance(5000);
    assert.equal(r.seen.refused, undefined);
  });

  it('refuses queue_full past the bounds, and pushes out a lower priority for a higher', () => {
    const { gate, request, balancer, counted } = setup(
      policy({ maxQueuedRequests: 1, maxQueuedBytes: 500 }),
    );
    balancer.room = false;
    const big = request('big', 0, { bodyBytes: 501 });
    gate.admit(big.request);
    assert.equal(big.seen.refused?.code, 'queue_full');
    assert.match(big.seen.refused?.message ?? '', /bytes of held bodies, 500/);
    const low = request('low', 0);
    gate.admit(low.request);
    const same = request('same', 0);
    gate.admit(same.request);
    assert.equal(same.seen.refused?.code, 'queue_full');
    assert.match(same.seen.refused?.message ?? '', /requests, 1/);
    const high = request('high', 3);
    gate.admit(high.request);
    assert.equal(low.seen.refused?.code, 'queue_full');
    assert.match(low.seen.refused?.message ?? '', /Pushed out/);
    assert.equal(high.seen.refused, undefined);
    assert.deepEqual(counted.refused, ['queue-full', 'queue-full', 'queue-full']);
  });

  it('admits against budgets, queues what must wait, refuses what would wait too long', () => {
    const { gate, request, flow, timers, counted, order } = setup(
      policy({
        maxQueueWaitMs: 5000,
        workload: { kind: 'Header', header: 'x-team' },
        budgets: [{ id: 'workload:batch', workload: 'batch', requestsPerMinute: 60 }],
      }),
    );
    // Fill the bucket (it holds a couple of seconds of its share).
    timers.advance(60_000);
    const admitted: string[] = [];
    for (let i = 0; i < 5; i++) {
      const r = request(`b${i}`, 0, { workload: 'batch' });
      gate.admit(r.request);
      if (r.seen.started !== undefined) {
        admitted.push(r.request.workload);
        assert.ok(r.seen.started.ticket !== undefined);
      }
    }
    assert.ok(admitted.length >= 1 && admitted.length < 5, `admitted ${admitted.length}`);
    assert.ok(flow.queue.size >= 1, 'the rest wait for budget');
    // Another workload has no budget: it does not wait behind batch's.
    const other = request('other', 0, { workload: 'chat' });
    gate.admit(other.request);
    timers.flushImmediates();
    assert.ok(other.seen.started !== undefined);
    // A sheddable one is refused at once (here: higher priorities wait).
    const shed = request('shed', -1, { workload: 'batch' });
    gate.admit(shed.request);
    assert.equal(shed.seen.refused?.code, 'sheddable_refused');
    assert.deepEqual(counted.refused, ['sheddable']);
    // Budget comes back: the queue drains over time.
    const queuedBefore = flow.queue.size;
    timers.advance(1000);
    timers.poll();
    assert.ok(flow.queue.size < queuedBefore, 'one left the queue with the refill');
    assert.ok(order.length > admitted.length + 1);
  });

  it('refuses over_budget at once when the wait would pass maxQueueWait', () => {
    const { gate, request, timers } = setup(
      policy({
        maxQueueWaitMs: 100,
        budgets: [{ id: 'pool', requestsPerMinute: 1 }],
      }),
    );
    timers.advance(60_000);
    const seen = [request('a', 0), request('b', 0)];
    for (const r of seen) gate.admit(r.request);
    const refused = seen.find((r) => r.seen.refused !== undefined);
    assert.equal(refused?.seen.refused?.code, 'over_budget');
    assert.match(refused?.seen.refused?.message ?? '', /the pool's budget/);
    assert.ok((refused?.seen.refused?.retryAfterS ?? 0) > 1);
    assert.ok((refused?.seen.refused?.retryAfterS ?? 0) <= 60);
    // Sheddable and over budget, with nothing waiting: refused for the budget.
    const shed = request('shed', -1);
    gate.admit(shed.request);
    assert.equal(shed.seen.refused?.code, 'over_budget');
    assert.equal(shed.seen.refused?.reason, 'budget');
  });

  it('under a controller share, waits for budget rather than refusing on the current share', () => {
    const { gate, request, flow, timers } = setup(
      policy({ maxQueueWaitMs: 100, budgets: [{ id: 'pool', requestsPerMinute: 60 }] }),
      'shared',
    );
    flow.applyShares([{ id: 'pool', requestsPerMinute: 1 }], undefined);
    const seen = [request('a', 0), request('b', 0)];
    for (const r of seen) gate.admit(r.request);
    // One admitted; the other waits (its share may grow at the next re-split).
    assert.equal(seen.filter((r) => r.seen.refused !== undefined).length, 0);
    assert.equal(flow.queue.size, 1);
    // A bigger share comes: it starts.
    flow.applyShares([{ id: 'pool', requestsPerMinute: 6000 }], undefined);
    timers.advance(50);
    timers.poll();
    assert.equal(flow.queue.size, 0);
    assert.ok(seen.every((r) => r.seen.started !== undefined));
  });

  it('does not let one workload over its budget block another behind it', () => {
    const { gate, request, balancer, flow, timers, order } = setup(
      policy({
        maxQueueWaitMs: 60_000,
        workload: { kind: 'Header', header: 'x-team' },
        budgets: [{ id: 'workload:batch', workload: 'batch', requestsPerMinute: 1 }],
      }),
    );
    timers.advance(60_000);
    balancer.room = false;
    // The first batch request takes the budget, then waits for room; later ones wait for budget.
    gate.admit(request('batch0', 0, { workload: 'batch' }).request);
    gate.admit(request('batch1', 0, { workload: 'batch' }).request);
    gate.admit(request('chat', 0, { workload: 'chat' }).request);
    assert.equal(flow.queue.size, 3);
    balancer.room = true;
    timers.advance(FLOW_POLL_MS);
    timers.poll();
    assert.deepEqual(order, ['batch0', 'chat']);
    assert.equal(flow.queue.size, 1);
  });

  describe('preemption', () => {
    /** A sheddable request under way on `endpoint`, as admission.ts registers it. */
    function running(
      gate: FlowGate,
      endpoint: string,
      priority: number,
      startedMs: number,
      preemptable = true,
    ) {
      const entry = {
        priority,
        startedMs,
        preempted: false,
        unanswered: () => (preemptable && !entry.preempted ? endpoint : undefined),
        preempt: () => {
          if (entry.unanswered() === undefined) return false;
          entry.preempted = true;
          return true;
        },
      };
      const stop = gate.running(entry);
      return { entry, stop };
    }

    it('a higher priority that finds every endpoint saturated takes a sheddable slot', () => {
      const { gate, request, balancer, flow, counted } = setup(policy({ preemptSheddable: true }));
      balancer.room = false;
      const older = running(gate, 'e1', -1, 10);
      const newer = running(gate, 'e1', -1, 20);
      const other = running(gate, 'e2', -1, 30);
      const chat = request('chat', 10);
      gate.admit(chat.request);
      // Offered every endpoint with something to preempt; the pick chose e1.
      assert.deepEqual(balancer.offered.sort(), ['e1', 'e2']);
      const pick = chat.seen.started?.pick;
      assert.equal(pick?.kind === 'picked' ? pick.attempt.endpoint.id : undefined, 'e1');
      // The last sent of e1 (the least work lost) was preempted, nothing else.
      assert.equal(newer.entry.preempted, true);
      assert.equal(older.entry.preempted, false);
      assert.equal(other.entry.preempted, false);
      assert.equal(counted.preempted, 1);
      assert.equal(flow.queue.size, 0);
    });

    it('the lowest priority goes first, whatever was sent last', () => {
      const { gate, request, balancer } = setup(policy({ preemptSheddable: true }));
      balancer.room = false;
      const lowest = running(gate, 'e1', -5, 10);
      const low = running(gate, 'e1', -1, 20);
      gate.admit(request('chat', 0).request);
      assert.equal(lowest.entry.preempted, true);
      assert.equal(low.entry.preempted, false);
    });

    it('nothing is preempted that has answered, that is not below, or by a sheddable request', () => {
      const { gate, request, balancer, flow, counted } = setup(policy({ preemptSheddable: true }));
      balancer.room = false;
      running(gate, 'e1', -1, 10, false); // its answer reached the client
      running(gate, 'e2', -2, 10).stop(); // its response closed
      const same = running(gate, 'e3', -3, 10);
      gate.admit(request('chat', 10).request);
      assert.deepEqual(balancer.offered, ['e3']);
      assert.equal(same.entry.preempted, true);
      // A sheddable request never preempts, even a lower one: it is refused.
      const lower = running(gate, 'e4', -9, 10);
      const batch = request('batch', -1);
      gate.admit(batch.request);
      assert.equal(batch.seen.refused?.code, 'sheddable_refused');
      assert.equal(lower.entry.preempted, false);
      lower.stop();
      // Nothing left below it to preempt (priority 10 is not below 10): the chat request waits.
      running(gate, 'e5', 10, 10);
      gate.admit(request('chat2', 10).request);
      assert.equal(flow.queue.size, 1);
      assert.equal(counted.preempted, 1);
    });

    it('is off unless the pool says preemptSheddable: true', () => {
      const { gate, request, balancer, flow } = setup();
      balancer.room = false;
      const victim = running(gate, 'e1', -1, 10);
      gate.admit(request('chat', 10).request);
      assert.equal(victim.entry.preempted, false);
      assert.equal(flow.queue.size, 1);
    });

    it('a waiting request preempts too once a victim can be', () => {
      const { gate, request, balancer, flow, timers, order } = setup(
        policy({ preemptSheddable: true }),
      );
      balancer.room = false;
      gate.admit(request('chat', 10).request);
      assert.equal(flow.queue.size, 1);
      const victim = running(gate, 'e1', -1, 10);
      timers.poll();
      assert.equal(victim.entry.preempted, true);
      assert.deepEqual(order, ['chat']);
      assert.equal(flow.queue.size, 0);
    });

    it('a preempted request waits to be sent again; new sheddable ones are refused meanwhile', () => {
      const { gate, request, balancer, flow, timers, order } = setup(
        policy({ preemptSheddable: true }),
      );
      balancer.room = false;
      const batch = request('batch', -1);
      gate.readmit(batch.request);
      assert.equal(flow.queue.size, 1);
      assert.equal(batch.seen.refused, undefined);
      const later = request('later', -1);
      gate.admit(later.request);
      assert.equal(later.seen.refused?.code, 'sheddable_refused');
      assert.match(later.seen.refused?.message ?? '', /preempted requests wait/);
      balancer.room = true;
      timers.poll();
      assert.deepEqual(order, ['batch']);
      // Its budget was charged when it was first admitted: no new ticket.
      assert.equal(batch.seen.started?.ticket, undefined);
    });

    it('a preempted request still gets its answer: a 429 after maxQueueWait', () => {
      const { gate, request, balancer, timers } = setup(policy({ preemptSheddable: true }));
      balancer.room = false;
      const batch = request('batch', -1);
      gate.readmit(batch.request);
      timers.advance(1000);
      assert.equal(batch.seen.refused?.code, 'queue_timeout_saturated');
    });

    it('rescues a request its server queues: a sheddable request on that endpoint preempted, once', () => {
      const { gate, timers, counted } = setup(policy({ preemptSheddable: true }));
      const there = running(gate, 'e1', -1, 10);
      const elsewhere = running(gate, 'e2', -1, 20);
      let queued = false;
      let answered = false;
      const stop = gate.awaiting({
        priority: 10,
        unanswered: () => (answered ? undefined : 'e1'),
        queuedThere: () => queued,
      });
      timers.poll();
      assert.equal(there.entry.preempted, false, 'nothing while the server reports no queue');
      queued = true;
      timers.poll();
      assert.equal(there.entry.preempted, true);
      assert.equal(elsewhere.entry.preempted, false);
      assert.equal(counted.preempted, 1);
      // Once per request: a later queue report preempts nothing more for it.
      const again = running(gate, 'e1', -1, 30);
      timers.poll();
      assert.equal(again.entry.preempted, false);
      stop();
      // An answered request is never rescued.
      answered = true;
      gate.awaiting({ priority: 10, unanswered: () => undefined, queuedThere: () => true });
      timers.poll();
      assert.equal(again.entry.preempted, false);
      assert.equal(timers.intervals.size, 0, 'the watch stops with nothing awaited');
    });
  });
});
