import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Histogram, PER_TOKEN_LATENCY_BUCKETS_S } from './histogram.ts';

void test('counts cumulatively per upper bound, a value on a bound in that bound', () => {
  const h = new Histogram([0.1, 1, 10]);
  h.observe(0.1);
  h.observe(0.5, 3);
  h.observe(20);
  const s = h.snapshot();
  assert.deepEqual(s.cumulative, [1, 4, 4]);
  assert.equal(s.count, 5);
  assert.ok(Math.abs(s.sum - (0.1 + 1.5 + 20)) < 1e-12);
});

void test('ignores unusable observations and starts over on reset', () => {
  const h = new Histogram(PER_TOKEN_LATENCY_BUCKETS_S);
  for (const v of [NaN, -1, Infinity]) h.observe(v);
  h.observe(0.02, 0);
  assert.equal(h.snapshot().count, 0);
  h.observe(0.02, 2);
  h.reset();
  assert.deepEqual(h.snapshot(), {
    bounds: PER_TOKEN_LATENCY_BUCKETS_S,
    cumulative: PER_TOKEN_LATENCY_BUCKETS_S.map(() => 0),
    count: 0,
    sum: 0,
  });
});
