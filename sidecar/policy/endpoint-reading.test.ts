import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Balancer } from './balancer.ts';
import { endpoint, fakeClock, testPolicy } from './testing.ts';
import type { Attempt, PickResult } from './types.ts';

function attemptOf(result: PickResult): Attempt {
  assert.equal(result.kind, 'picked');
  return result.attempt;
}

describe('endpointReading', () => {
  test('reads the breaker, EWMA and load that status() reports, for one endpoint', () => {
    const clock = fakeClock();
    const balancer = new Balancer(testPolicy({ defaultTtftMs: 400 }), [endpoint('a')], {
      clock,
      rng: { next: () => 0.5 },
    });
    assert.deepEqual(balancer.endpointReading('a'), {
      breaker: 'closed',
      ewmaTtftMs: 400,
      ewmaSeeded: true,
      load: 0,
      inFlight: 0,
    });
    const attempt = attemptOf(balancer.pick());
    const reading = balancer.endpointReading('a');
    const status = balancer.status()[0]!;
    assert.equal(reading?.inFlight, 1);
    assert.equal(reading?.load, status.load);
    assert.equal(reading?.ewmaTtftMs, status.ewmaTtftMs);
    assert.equal(reading?.breaker, status.breaker);
    balancer.finish(attempt, { kind: 'neutral' });
  });

  test('is undefined for an endpoint the pool does not have', () => {
    const balancer = new Balancer(testPolicy(), [endpoint('a')], {
      clock: fakeClock(),
      rng: { next: () => 0.5 },
    });
    assert.equal(balancer.endpointReading('gone'), undefined);
  });
});
