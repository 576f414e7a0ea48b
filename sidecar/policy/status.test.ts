import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Balancer } from './balancer.ts';
import { endpoint, fakeClock, gaugesOf, healthOf, testPolicy } from './testing.ts';
import type { Attempt, PickResult } from './types.ts';

function attemptOf(result: PickResult): Attempt {
  assert.equal(result.kind, 'picked');
  return result.attempt;
}

/** Three endpoints: `a` with its breaker open, `b` drifted, `c` with a request in flight. */
function setup() {
  const clock = fakeClock();
  const balancer = new Balancer(
    testPolicy({ defaultTtftMs: 400 }),
    [endpoint('a'), endpoint('b', { drifted: true }), endpoint('c')],
    { clock, rng: { next: () => 0.5 } },
  );
  while (balancer.endpointReading('a')?.breaker === 'closed')
    balancer.finish(attemptOf(balancer.pick({ exclude: new Set(['c']) })), { kind: 'error' });
  const held = attemptOf(balancer.pick({ exclude: new Set(['a']) }));
  return { clock, balancer, held };
}

describe('reading every endpoint', () => {
  test('gauges() are the fields of status(), breakers advanced to now', () => {
    const { clock, balancer } = setup();
    // Past a's open period: the first read after it finds a half-open.
    clock.advance(10 * 60_000);
    const gauges = balancer.gauges();
    assert.deepEqual(
      gauges.map((g) => [g.id, g.breaker, g.drifted, g.inFlight]),
      [
        ['a', 'half-open', false, 0],
        ['b', 'closed', true, 0],
        ['c', 'closed', false, 1],
      ],
    );
    assert.deepEqual(gauges, gaugesOf(balancer.status()));
  });

  test('health() is the reported fields of status(), breakers advanced to now', () => {
    const { clock, balancer, held } = setup();
    balancer.noteDriftMismatch(held);
    clock.advance(10 * 60_000);
    const health = balancer.health();
    assert.deepEqual(
      health.map((h) => [h.id, h.breaker, h.inFlight, h.driftMismatches]),
      [
        ['a', 'half-open', 0, 0],
        ['b', 'closed', 0, 0],
        ['c', 'closed', 1, 1],
      ],
    );
    assert.deepEqual(health, healthOf(balancer.status()));
  });

  test('health() counts the current health window, as status() does', () => {
    const { clock, balancer } = setup();
    // a's errors that opened its breaker are in the window until it slides past them.
    assert.ok(balancer.health()[0]!.window.errors > 0);
    assert.deepEqual(balancer.health()[0]!.window, balancer.status()[0]!.window);
    clock.advance(10 * 60_000);
    assert.deepEqual(balancer.health()[0]!.window, { requests: 0, errors: 0, rateLimited: 0 });
  });

  test('statusSlices() is status() in slices, breakers advanced in the first', () => {
    const { clock, balancer } = setup();
    clock.advance(10 * 60_000);
    const slices = [...balancer.statusSlices(2)];
    assert.deepEqual(
      slices.map((slice) => slice.map((s) => s.id)),
      [['a', 'b'], ['c']],
    );
    assert.equal(slices[0]![0]!.breaker, 'half-open');
    assert.deepEqual(slices.flat(), balancer.status());
  });

  test('statusSlices() takes any slice size as at least one endpoint', () => {
    const { balancer } = setup();
    for (const perSlice of [0, -3, Number.NaN, 1.5])
      assert.equal([...balancer.statusSlices(perSlice)].length, 3, `${perSlice}`);
    assert.equal([...balancer.statusSlices(Number.POSITIVE_INFINITY)].length, 1);
  });

  test('statusSlices() computes nothing until a slice is asked for', () => {
    const { clock, balancer } = setup();
    const slices = balancer.statusSlices(10)[Symbol.iterator]();
    clock.advance(10 * 60_000);
    const first = slices.next();
    assert.ok(first.done !== true);
    assert.equal(first.value[0]!.breaker, 'half-open');
  });
});
