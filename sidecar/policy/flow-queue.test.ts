import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { FlowQueue } from './flow-queue.ts';
import type { QueueEntry } from './flow-types.ts';

const roomy = { maxRequests: 1000, maxBytes: 1_000_000 };

function queued<T>(queue: FlowQueue<T>, priority: number, workload: string, value: T, bytes = 1) {
  const result = queue.offer(priority, workload, bytes, 0, value);
  assert.equal(result.kind, 'queued');
  return result.entry;
}

function drain<T>(queue: FlowQueue<T>): T[] {
  const out: T[] = [];
  for (let entry = queue.shift(); entry; entry = queue.shift()) out.push(entry.value);
  return out;
}

describe('FlowQueue', () => {
  test('an empty queue has nothing to peek or shift', () => {
    const queue = new FlowQueue<string>(roomy);
    assert.equal(queue.peek(), undefined);
    assert.equal(queue.shift(), undefined);
    assert.equal(queue.size, 0);
    assert.equal(queue.bytes, 0);
    assert.equal(queue.waitingAbove(-100), false);
    assert.deepEqual(queue.countsByPriority(), new Map());
  });

  test('serves higher priorities first, first come first served within one', () => {
    const queue = new FlowQueue<string>(roomy);
    queued(queue, 0, '', 'a0');
    queued(queue, 5, '', 'b5');
    queued(queue, -1, '', 'c-1');
    queued(queue, 5, '', 'd5');
    queued(queue, 2, '', 'e2');
    queued(queue, 0, '', 'f0');
    assert.equal(queue.peek()?.value, 'b5');
    assert.deepEqual(
      queue.countsByPriority(),
      new Map([
        [5, 2],
        [2, 1],
        [0, 2],
        [-1, 1],
      ]),
    );
    assert.equal(queue.waitingAbove(4), true);
    assert.equal(queue.waitingAbove(5), false);
    assert.deepEqual(drain(queue), ['b5', 'd5', 'e2', 'a0', 'f0', 'c-1']);
  });

  test('takes turns between the workloads of one priority', () => {
    const queue = new FlowQueue<string>(roomy);
    for (const value of ['a1', 'a2', 'a3', 'a4']) queued(queue, 0, 'a', value);
    for (const value of ['b1', 'b2']) queued(queue, 0, 'b', value);
    assert.equal(queue.shift()?.value, 'a1');
    // A workload that arrives joins at the end of the current round (b, a, then c).
    queued(queue, 0, 'c', 'c1');
    assert.deepEqual(drain(queue), ['b1', 'a2', 'c1', 'b2', 'a3', 'a4']);
  });

  test('records what it was offered', () => {
    const queue = new FlowQueue<number>(roomy);
    const entry = queue.offer(3, 'w', 120, 42, 7);
    assert.deepEqual(entry, {
      kind: 'queued',
      entry: { priority: 3, workload: 'w', bytes: 120, enqueuedAtMs: 42, value: 7 },
      evicted: [],
    });
    assert.equal(queue.bytes, 120);
    // Nonsense sizes count as empty bodies.
    queued(queue, 3, 'w', 8, -5);
    queued(queue, 3, 'w', 9, Number.NaN);
    assert.equal(queue.bytes, 120);
    assert.equal(queue.size, 3);
  });

  test('remove takes out any entry once, and the turn skips an emptied workload', () => {
    const queue = new FlowQueue<string>(roomy);
    const a1 = queued(queue, 0, 'a', 'a1');
    const b1 = queued(queue, 0, 'b', 'b1');
    const c1 = queued(queue, 0, 'c', 'c1');
    const a2 = queued(queue, 0, 'a', 'a2');
    const high = queued(queue, 9, 'a', 'h');
    assert.equal(queue.remove(high), true);
    assert.equal(queue.remove(high), false);
    assert.equal(queue.waitingAbove(0), false);
    // The workload whose turn it is goes away: the next one is served.
    assert.equal(queue.remove(a1), true);
    assert.equal(queue.remove(a2), true);
    assert.equal(queue.peek(), b1);
    assert.equal(queue.remove(c1), true);
    assert.equal(queue.shift(), b1);
    assert.equal(queue.size, 0);
    assert.equal(queue.remove(b1), false);
    assert.equal(queue.remove({ ...b1 }), false);
  });

  test('refuses when full of its own priority or higher, pushing nothing out', () => {
    const queue = new FlowQueue<string>({ maxRequests: 2, maxBytes: 100 });
    queued(queue, 1, '', 'x', 10);
    queued(queue, 0, '', 'y', 10);
    assert.deepEqual(queue.offer(0, '', 1, 0, 'z'), { kind: 'full', limit: 'requests' });
    assert.deepEqual(queue.offer(-1, '', 1, 0, 'z'), { kind: 'full', limit: 'requests' });
    assert.equal(queue.size, 2);
    // Too many bytes even after pushing out every lower entry.
    assert.deepEqual(queue.offer(1, '', 91, 0, 'z'), { kind: 'full', limit: 'bytes' });
    assert.deepEqual(queue.offer(5, '', 101, 0, 'z'), { kind: 'full', limit: 'bytes' });
    assert.equal(queue.size, 2);
    assert.equal(queue.bytes, 20);
  });

  test('a higher priority pushes out the newest of the lowest priority', () => {
    const queue = new FlowQueue<string>({ maxRequests: 4, maxBytes: 1000 });
    queued(queue, 0, 'a', 'old0');
    queued(queue, -1, 'a', 'old-1');
    queued(queue, -1, 'b', 'new-1');
    queued(queue, 0, 'b', 'new0');
    const first = queue.offer(3, 'c', 1, 0, 'h1');
    assert.equal(first.kind, 'queued');
    assert.deepEqual(first.kind === 'queued' && first.evicted.map((e) => e.value), ['new-1']);
    const second = queue.offer(3, 'c', 1, 0, 'h2');
    assert.deepEqual(second.kind === 'queued' && second.evicted.map((e) => e.value), ['old-1']);
    const third = queue.offer(3, 'c', 1, 0, 'h3');
    assert.deepEqual(third.kind === 'queued' && third.evicted.map((e) => e.value), ['new0']);
    assert.deepEqual(
      queue.countsByPriority(),
      new Map([
        [3, 3],
        [0, 1],
      ]),
    );
  });

  test('pushes out as many as the bytes need', () => {
    const queue = new FlowQueue<string>({ maxRequests: 10, maxBytes: 100 });
    queued(queue, 0, '', 'a', 40);
    queued(queue, 0, '', 'b', 30);
    queued(queue, 0, '', 'c', 30);
    const result = queue.offer(1, '', 60, 0, 'big');
    assert.deepEqual(result.kind === 'queued' && result.evicted.map((e) => e.value), ['c', 'b']);
    assert.equal(queue.bytes, 100);
    assert.deepEqual(drain(queue), ['big', 'a']);
  });

  test('new limits apply to later offers only', () => {
    const queue = new FlowQueue<string>({ maxRequests: 3, maxBytes: 100 });
    queued(queue, 0, '', 'a');
    queued(queue, 0, '', 'b');
    queue.setLimits({ maxRequests: 1, maxBytes: 100 });
    assert.equal(queue.size, 2);
    assert.deepEqual(queue.offer(0, '', 1, 0, 'c'), { kind: 'full', limit: 'requests' });
    queue.setLimits({ maxRequests: 3, maxBytes: 100 });
    queued(queue, 0, '', 'c');
  });
});

type Op =
  | { kind: 'offer'; priority: number; workload: string; bytes: number }
  | { kind: 'shift' }
  | { kind: 'remove'; pick: number };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.record({
      kind: fc.constant('offer' as const),
      priority: fc.integer({ min: -2, max: 2 }),
      workload: fc.constantFrom('a', 'b', 'c'),
      bytes: fc.integer({ min: 0, max: 40 }),
    }),
  },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('shift' as const) }) },
  {
    weight: 2,
    arbitrary: fc.record({ kind: fc.constant('remove' as const), pick: fc.nat({ max: 1000 }) }),
  },
);

describe('FlowQueue properties', () => {
  test('order, FIFO per workload, bounds, removals and evictions hold for any sequence', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 8 }),
        fc.integer({ min: 10, max: 150 }),
        fc.array(opArb, { maxLength: 120, size: 'max' }),
        (maxRequests, maxBytes, ops) => {
          const queue = new FlowQueue<number>({ maxRequests, maxBytes });
          // The model: every queued entry with its arrival number.
          const model: { entry: QueueEntry<number>; seq: number }[] = [];
          let seq = 0;
          for (const op of ops) {
            if (op.kind === 'offer') {
              seq += 1;
              const lowerCount = model.filter((m) => m.entry.priority < op.priority).length;
              const lowerBytes = model
                .filter((m) => m.entry.priority < op.priority)
                .reduce((sum, m) => sum + m.entry.bytes, 0);
              const bytesNow = model.reduce((sum, m) => sum + m.entry.bytes, 0);
              const result = queue.offer(op.priority, op.workload, op.bytes, seq, seq);
              const fitsRequests = model.length - lowerCount + 1 <= maxRequests;
              const fitsBytes = bytesNow - lowerBytes + op.bytes <= maxBytes;
              if (!fitsRequests || !fitsBytes) {
                assert.deepEqual(result, {
                  kind: 'full',
                  limit: fitsRequests ? 'bytes' : 'requests',
                });
              } else {
                assert.equal(result.kind, 'queued');
                if (result.kind !== 'queued') return;
                for (const gone of result.evicted) {
                  // Only strictly lower priorities, the lowest first, newest first within it.
                  assert.ok(gone.priority < op.priority);
                  const lowest = Math.min(...model.map((m) => m.entry.priority));
                  assert.equal(gone.priority, lowest);
                  const newest = model
                    .filter((m) => m.entry.priority === lowest)
                    .reduce((a, b) => (a.seq > b.seq ? a : b));
                  assert.equal(gone, newest.entry);
                  model.splice(model.indexOf(newest), 1);
                }
                model.push({ entry: result.entry, seq });
              }
            } else if (op.kind === 'shift') {
              const served = queue.shift();
              if (model.length === 0) {
                assert.equal(served, undefined);
                continue;
              }
              assert.ok(served);
              const top = Math.max(...model.map((m) => m.entry.priority));
              assert.equal(served.priority, top);
              const same = model.filter(
                (m) => m.entry.priority === top && m.entry.workload === served.workload,
              );
              // The oldest of its workload within its priority.
              assert.equal(served, same[0]?.entry);
              model.splice(
                model.findIndex((m) => m.entry === served),
                1,
              );
            } else if (model.length > 0) {
              const victim = model[op.pick % model.length] as { entry: QueueEntry<number> };
              assert.equal(queue.remove(victim.entry), true);
              assert.equal(queue.remove(victim.entry), false);
              model.splice(model.indexOf(victim as (typeof model)[number]), 1);
            }
            // Bounds and bookkeeping.
            assert.equal(queue.size, model.length);
            assert.equal(
              queue.bytes,
              model.reduce((sum, m) => sum + m.entry.bytes, 0),
            );
            assert.ok(queue.size <= maxRequests);
            assert.ok(queue.bytes <= maxBytes);
            const counts = new Map<number, number>();
            for (const m of model) {
              counts.set(m.entry.priority, (counts.get(m.entry.priority) ?? 0) + 1);
            }
            assert.deepEqual(
              [...queue.countsByPriority()].sort((x, y) => x[0] - y[0]),
              [...counts].sort((x, y) => x[0] - y[0]),
            );
            const top = model.length ? Math.max(...model.map((m) => m.entry.priority)) : undefined;
            assert.equal(queue.peek()?.priority, top);
            for (const p of [-3, -1, 0, 1, 3]) {
              assert.equal(queue.waitingAbove(p), top !== undefined && top > p);
            }
          }
        },
      ),
      { numRuns: 300 },
    );
  });

  test('two backlogged workloads of one priority are served within one of each other', () => {
    fc.assert(
      fc.property(
        fc.array(fc.constantFrom('a', 'b'), { minLength: 2, maxLength: 60, size: 'max' }),
        fc.array(fc.oneof(fc.constant('shift' as const), fc.constantFrom('a', 'b')), {
          maxLength: 60,
          size: 'max',
        }),
        (initial, later) => {
          const queue = new FlowQueue<string>(roomy);
          const waiting = { a: 0, b: 0 };
          for (const workload of initial) {
            queued(queue, 0, workload, workload);
            waiting[workload] += 1;
          }
          const served = { a: 0, b: 0 };
          // Count from the moment both are backlogged.
          let both = waiting.a > 0 && waiting.b > 0;
          for (const step of [...later, ...initial.map(() => 'shift' as const)]) {
            if (step === 'shift') {
              const entry = queue.shift();
              if (!entry) continue;
              const workload = entry.value as 'a' | 'b';
              waiting[workload] -= 1;
              if (both) served[workload] += 1;
            } else {
              queued(queue, 0, step, step);
              waiting[step] += 1;
            }
            if (both) assert.ok(Math.abs(served.a - served.b) <= 1, JSON.stringify(served));
            if (waiting.a === 0 || waiting.b === 0) {
              both = false;
              served.a = 0;
              served.b = 0;
            } else if (!both) {
              both = true;
            }
          }
        },
      ),
      { numRuns: 300 },
    );
  });
});
