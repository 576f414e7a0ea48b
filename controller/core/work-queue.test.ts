import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { TokenBucket, WORK_QUEUE_DEFAULTS, WorkQueue } from './work-queue.ts';

/** A queue whose token bucket never gets in the way, to see the per-key backoff alone. */
const unlimited = () => new WorkQueue({ ratePerSec: 1e9, burst: 1_000_000 });

const drain = (q: WorkQueue): string[] => {
  const out: string[] = [];
  for (let key = q.get(); key !== undefined; key = q.get()) {
    out.push(key);
    q.done(key);
  }
  return out;
};

describe('WorkQueue: de-duplication and processing', () => {
  test('hands out keys in the order they were added, each once', () => {
    const q = new WorkQueue();
    q.add('a');
    q.add('b');
    q.add('a');
    assert.equal(q.len(), 2);
    assert.deepEqual(drain(q), ['a', 'b']);
    assert.equal(q.get(), undefined);
  });

  test('never hands out a key that is being processed', () => {
    const q = new WorkQueue();
    q.add('a');
    assert.equal(q.get(), 'a');
    q.add('a');
    assert.equal(q.len(), 0, 'a re-add while processing waits for done');
    assert.equal(q.get(), undefined);
    assert.equal(q.processingLen(), 1);
    q.done('a');
    assert.equal(q.get(), 'a', 'the re-add is not lost');
    q.done('a');
    assert.equal(q.get(), undefined);
    assert.ok(q.isIdle());
  });

  test('folds several re-adds during processing into one', () => {
    const q = new WorkQueue();
    q.add('a');
    q.get();
    q.add('a');
    q.add('a');
    q.done('a');
    assert.deepEqual(drain(q), ['a']);
  });

  test('ignores done for a key that is not processing', () => {
    const q = new WorkQueue();
    q.add('a');
    q.done('a');
    q.done('b');
    assert.deepEqual(drain(q), ['a']);
  });

  test('keeps order and memory in check over many keys', () => {
    const q = new WorkQueue();
    const keys = Array.from({ length: 5000 }, (_, i) => `k${i}`);
    for (const k of keys) q.add(k);
    assert.deepEqual(drain(q), keys);
    q.add('again');
    assert.deepEqual(drain(q), ['again']);
  });

  test('keeps its guarantees under any sequence of operations', () => {
    const op = fc.oneof(
      fc.record({ kind: fc.constant('add' as const), key: fc.constantFrom('a', 'b', 'c') }),
      fc.record({ kind: fc.constant('get' as const) }),
      fc.record({ kind: fc.constant('done' as const), key: fc.constantFrom('a', 'b', 'c') }),
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 60 }), (ops) => {
        const q = new WorkQueue();
        const processing = new Set<string>();
        const pending = new Set<string>(); // added since last handed out
        for (const o of ops) {
          if (o.kind === 'add') {
            q.add(o.key);
            pending.add(o.key);
          } else if (o.kind === 'get') {
            const key = q.get();
            if (key === undefined) {
              // Nothing is handed out only when every pending key is being processed.
              for (const p of pending) assert.ok(processing.has(p));
              continue;
            }
            assert.ok(!processing.has(key), `${key} handed out twice at once`);
            assert.ok(pending.has(key), `${key} handed out without an add`);
            processing.add(key);
            pending.delete(key);
          } else if (processing.has(o.key)) {
            q.done(o.key);
            processing.delete(o.key);
          }
        }
        assert.equal(q.processingLen(), processing.size);
        assert.equal(q.len(), [...pending].filter((k) => !processing.has(k)).length);
      }),
    );
  });
});

describe('WorkQueue: delays', () => {
  test('queues a key added with a delay once it is due', () => {
    const q = new WorkQueue();
    q.addAfter('a', 100, 1000);
    assert.equal(q.get(1099), undefined);
    assert.equal(q.nextDueAt(), 1100);
    assert.equal(q.waitingLen(), 1);
    assert.equal(q.get(1100), 'a');
    assert.equal(q.nextDueAt(), undefined);
  });

  test('adds at once for a delay of zero or less', () => {
    const q = new WorkQueue();
    q.addAfter('a', 0, 1000);
    q.addAfter('b', -5, 1000);
    q.addAfter('c', Number.NaN, 1000);
    assert.deepEqual(drain(q), ['a', 'b', 'c']);
  });

  test('keeps the earlier due time when a waiting key is delayed again', () => {
    const q = new WorkQueue();
    q.addAfter('a', 500, 0);
    q.addAfter('a', 100, 0);
    q.addAfter('a', 900, 0);
    assert.equal(q.nextDueAt(), 100);
    assert.deepEqual(q.takeDue(100), ['a']);
    assert.equal(q.waitingLen(), 0);
  });

  test('takes due keys earliest first, in insertion order at equal times', () => {
    const q = new WorkQueue();
    q.addAfter('late', 30, 0);
    q.addAfter('x', 10, 0);
    q.addAfter('y', 10, 0);
    q.addAfter('never', 99, 0);
    assert.equal(q.nextDueAt(), 10);
    assert.deepEqual(q.takeDue(50), ['x', 'y', 'late']);
    assert.deepEqual(drain(q), ['x', 'y', 'late']);
    assert.equal(q.nextDueAt(), 99);
  });

  test('a due key that is already queued is handed out once', () => {
    const q = new WorkQueue();
    q.addAfter('a', 10, 0);
    q.add('a');
    assert.deepEqual(drain(q), ['a']);
    assert.deepEqual(drain(q), []);
    q.takeDue(10);
    assert.deepEqual(drain(q), ['a'], 'the delayed add still happens: level-triggered is safe');
  });
});

describe('WorkQueue: retries', () => {
  test('backs off 5 ms doubling per failure, up to 1000 s', () => {
    const q = unlimited();
    const delays = Array.from({ length: 20 }, () => q.retry('a', 0));
    assert.deepEqual(delays.slice(0, 5), [5, 10, 20, 40, 80]);
    assert.equal(delays[17], 5 * 2 ** 17);
    assert.equal(delays[18], 1_000_000);
    assert.equal(delays[19], 1_000_000);
    assert.equal(q.failures('a'), 20);
  });

  test('caps the backoff even after very many failures', () => {
    const q = unlimited();
    for (let i = 0; i < 1100; i++) q.retry('a', 0);
    assert.equal(q.retry('a', 0), 1_000_000);
  });

  test('starts over after forget', () => {
    const q = unlimited();
    q.retry('a', 0);
    q.retry('a', 0);
    q.forget('a');
    assert.equal(q.failures('a'), 0);
    assert.equal(q.retry('a', 0), 5);
  });

  test('backs off each key on its own', () => {
    const q = unlimited();
    q.retry('a', 0);
    q.retry('a', 0);
    assert.equal(q.retry('b', 0), 5);
  });

  test('queues the retried key when its backoff is over', () => {
    const q = unlimited();
    q.add('a');
    assert.equal(q.get(0), 'a');
    q.retry('a', 0);
    q.done('a');
    assert.equal(q.get(4), undefined);
    assert.equal(q.get(5), 'a');
  });

  test('honours custom backoff settings', () => {
    const q = new WorkQueue({ baseDelayMs: 100, maxDelayMs: 250, ratePerSec: 1e9, burst: 1000 });
    assert.deepEqual([q.retry('a', 0), q.retry('a', 0), q.retry('a', 0)], [100, 200, 250]);
  });

  test('spaces retries of many keys out by the overall rate once the burst is spent', () => {
    const q = new WorkQueue({ ratePerSec: 10, burst: 2 });
    assert.equal(q.retry('a', 0), 5);
    assert.equal(q.retry('b', 0), 5);
    assert.equal(q.retry('c', 0), 100);
    assert.equal(q.retry('d', 0), 200);
    // 1 s later, 10 tokens have come back: 2 were owed, the burst caps the rest.
    assert.equal(q.retry('e', 1000), 5);
  });

  test('uses client-go defaults: 5 ms to 1000 s per key, 10 per second with a burst of 100', () => {
    assert.deepEqual(WORK_QUEUE_DEFAULTS, {
      baseDelayMs: 5,
      maxDelayMs: 1_000_000,
      ratePerSec: 10,
      burst: 100,
    });
    const q = new WorkQueue();
    for (let i = 0; i < 100; i++) assert.equal(q.retry(`k${i}`, 0), 5);
    assert.equal(q.retry('k100', 0), 100);
  });

  test('refuses settings that cannot work', () => {
    assert.throws(() => new WorkQueue({ baseDelayMs: -1 }), /baseDelayMs/);
    assert.throws(() => new WorkQueue({ baseDelayMs: Number.NaN }), /baseDelayMs/);
    assert.throws(() => new WorkQueue({ baseDelayMs: 10, maxDelayMs: 5 }), /maxDelayMs/);
    assert.throws(() => new WorkQueue({ maxDelayMs: Infinity }), /maxDelayMs/);
    assert.throws(() => new WorkQueue({ ratePerSec: 0 }), /ratePerSec/);
    assert.throws(() => new WorkQueue({ burst: 0.5 }), /burst/);
  });
});

describe('WorkQueue: shutdown', () => {
  test('takes no new keys but lets the queued ones drain', () => {
    const q = new WorkQueue();
    q.add('a');
    q.add('b');
    q.addAfter('c', 10, 0);
    assert.equal(q.get(), 'a');
    q.shutDown();
    assert.ok(q.isShutDown());
    q.add('d');
    q.addAfter('e', 10, 0);
    q.retry('a', 0);
    assert.equal(q.nextDueAt(), undefined);
    assert.ok(!q.isIdle());
    q.done('a');
    assert.deepEqual(drain(q), ['b']);
    assert.ok(q.isIdle());
  });
});

describe('TokenBucket', () => {
  test('lets a burst through, then one per 1/rate', () => {
    const b = new TokenBucket(2, 3);
    assert.deepEqual(
      [b.reserve(0), b.reserve(0), b.reserve(0), b.reserve(0), b.reserve(0)],
      [0, 0, 0, 500, 1000],
    );
  });

  test('refills with time, up to the burst', () => {
    const b = new TokenBucket(10, 2);
    b.reserve(0);
    b.reserve(0);
    assert.equal(b.reserve(50), 50);
    assert.equal(b.reserve(10_000), 0);
    assert.equal(b.reserve(10_000), 0);
    assert.equal(b.reserve(10_000), 100);
  });

  test('does not refill when time seems to run backwards', () => {
    const b = new TokenBucket(1, 1);
    assert.equal(b.reserve(5000), 0);
    assert.equal(b.reserve(1000), 1000);
  });
});
