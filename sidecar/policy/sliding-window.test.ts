import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { DEFAULT_BUCKET_COUNT, SlidingWindow } from './sliding-window.ts';

type Counter = 'requests' | 'errors';
const KEYS: readonly Counter[] = ['requests', 'errors'];

describe('SlidingWindow', () => {
  test('counts events inside the window', () => {
    const w = new SlidingWindow<Counter>(10_000, KEYS);
    w.add(0, 'requests');
    w.add(500, 'requests', 2);
    w.add(9_000, 'errors');
    assert.deepEqual(w.totals(9_500), { requests: 3, errors: 1 });
  });

  test('forgets events bucket by bucket as the window slides past them', () => {
    assert.equal(DEFAULT_BUCKET_COUNT, 10);
    const w = new SlidingWindow<Counter>(10_000, KEYS);
    w.add(0, 'requests'); // bucket 0
    w.add(1_500, 'requests'); // bucket 1
    assert.equal(w.totals(9_999).requests, 2);
    assert.equal(w.totals(10_000).requests, 1); // bucket 0 left the window
    assert.equal(w.totals(10_999).requests, 1);
    assert.equal(w.totals(11_000).requests, 0);
  });

  test('never holds more than windowMs nor less than 9/10 of it', () => {
    const w = new SlidingWindow<Counter>(10_000, KEYS);
    w.add(1_000, 'requests');
    assert.equal(w.totals(10_999).requests, 1); // 9.999 s old, still in
    assert.equal(w.totals(11_000).requests, 0); // 10 s old, out
  });

  test('reuses a ring slot after a long gap without keeping its old counts', () => {
    const w = new SlidingWindow<Counter>(10_000, KEYS);
    w.add(3_000, 'errors', 5);
    w.add(103_000, 'errors'); // same slot (3), a hundred turns later
    assert.equal(w.totals(103_000).errors, 1);
  });

  test('clears every counter', () => {
    const w = new SlidingWindow<Counter>(10_000, KEYS);
    w.add(100, 'requests');
    w.add(200, 'errors');
    w.clear();
    assert.deepEqual(w.totals(300), { requests: 0, errors: 0 });
    w.add(400, 'requests');
    assert.deepEqual(w.totals(400), { requests: 1, errors: 0 });
  });

  test('counts into the newest bucket when the clock goes backwards', () => {
    const w = new SlidingWindow<Counter>(10_000, KEYS);
    w.add(50_000, 'requests');
    w.add(10_000, 'requests'); // 40 s in the past: counted as now, not lost, not negative
    assert.equal(w.totals(20_000).requests, 2);
    assert.equal(w.totals(59_999).requests, 2);
    assert.equal(w.totals(60_000).requests, 0);
  });

  test('survives NaN and infinite times without throwing or corrupting counts', () => {
    const w = new SlidingWindow<Counter>(10_000, KEYS);
    w.add(Number.NaN, 'requests');
    w.add(Infinity, 'requests');
    w.add(-Infinity, 'requests');
    assert.equal(w.totals(Number.NaN).requests, 3);
    w.add(5_000, 'errors');
    assert.deepEqual(w.totals(5_000), { requests: 3, errors: 1 });
  });

  test('ignores unknown keys and non-positive or non-finite amounts', () => {
    const w = new SlidingWindow<Counter>(10_000, KEYS);
    w.add(0, 'other' as Counter);
    w.add(0, 'requests', 0);
    w.add(0, 'requests', -2);
    w.add(0, 'requests', Number.NaN);
    w.add(0, 'requests', Infinity);
    assert.deepEqual(w.totals(0), { requests: 0, errors: 0 });
  });

  test('degrades a zero, negative or NaN length to a window that forgets almost at once', () => {
    for (const windowMs of [0, -10, Number.NaN]) {
      const w = new SlidingWindow<Counter>(windowMs, KEYS);
      w.add(0, 'requests');
      assert.equal(w.totals(0).requests, 1);
      assert.equal(w.totals(100).requests, 0, String(windowMs));
    }
  });

  test('never forgets with an infinite length', () => {
    const w = new SlidingWindow<Counter>(Infinity, KEYS);
    w.add(0, 'requests');
    assert.equal(w.totals(1e12).requests, 1);
  });

  test('falls back to one bucket for an invalid bucket count', () => {
    const w = new SlidingWindow<Counter>(1_000, KEYS, 0);
    w.add(0, 'requests');
    assert.equal(w.totals(999).requests, 1);
    assert.equal(w.totals(1_000).requests, 0);
  });

  test('property: totals match a model of clamped bucket times and are never negative', () => {
    const step = fc.record({
      dt: fc.integer({ min: -5_000, max: 6_000 }),
      key: fc.constantFrom<Counter>('requests', 'errors'),
      amount: fc.integer({ min: 1, max: 3 }),
    });
    fc.assert(
      fc.property(fc.array(step, { maxLength: 80 }), (steps) => {
        const w = new SlidingWindow<Counter>(10_000, KEYS);
        const events: { bucket: number; key: Counter; amount: number }[] = [];
        let t = 0;
        let latest = -Infinity;
        for (const { dt, key, amount } of steps) {
          t += dt;
          latest = Math.max(latest, Math.floor(t / 1_000));
          w.add(t, key, amount);
          events.push({ bucket: latest, key, amount });
          const totals = w.totals(t);
          for (const k of KEYS) {
            const expected = events
              .filter((e) => e.key === k && e.bucket > latest - 10)
              .reduce((sum, e) => sum + e.amount, 0);
            assert.equal(totals[k], expected);
            assert.ok(totals[k] >= 0);
          }
        }
      }),
    );
  });
});
