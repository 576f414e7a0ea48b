import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as policy from './index.ts';
import { endpoint, fakeClock, scriptedRng, testPolicy } from './testing.ts';

describe('public API', () => {
  test('exports the balancer and the named constants the shell and the schema use', () => {
    assert.equal(typeof policy.Balancer, 'function');
    assert.equal(policy.AFFINITY_MAX_SLOWDOWN, 2.5);
    assert.equal(policy.MIN_PREFIX_CHARS_FOR_AFFINITY, 64);
    assert.equal(policy.EWMA_NEW_SAMPLE_WEIGHT, 0.2);
    assert.equal(policy.OPEN_JITTER_FRACTION, 0.2);
    assert.equal(policy.RETRY_BUDGET_WINDOW_MS, 10_000);
    assert.equal(policy.MAX_RETRY_AFTER_COOLDOWN_MS, 60_000);
    assert.equal(policy.DEFAULT_SHED_RETRY_AFTER_MS, 1_000);
    for (const fn of [
      policy.affinityFor,
      policy.affinityKeyFor,
      policy.promptBlocks,
      policy.rendezvousOrder,
      policy.seededRng,
      policy.score,
    ]) {
      assert.equal(typeof fn, 'function');
    }
  });

  test('runs a request through the exported pieces end to end', () => {
    const p = testPolicy({ affinity: { key: 'Prefix' } });
    const balancer: policy.PoolBalancer = new policy.Balancer(p, [endpoint('a'), endpoint('b')], {
      clock: fakeClock(),
      rng: policy.seededRng(1),
    });
    const body = {
      messages: [
        { role: 'system', content: 'x'.repeat(100) },
        { role: 'user', content: 'hi' },
      ],
    };
    const affinity = policy.affinityFor({ headers: {}, body }, p.affinity);
    balancer.recordRequest();
    const result = balancer.pick(affinity);
    assert.equal(result.kind, 'picked');
    assert.equal(result.affinity, 'hit');
    balancer.firstByte(result.attempt);
    balancer.finish(result.attempt, { kind: 'success', streamed: true });
    assert.equal(balancer.tryRetry(1).kind, 'retry');
  });
});

describe('test helpers', () => {
  test('fakeClock moves by hand, forwards and backwards', () => {
    const clock = fakeClock(10);
    clock.advance(5);
    assert.equal(clock.nowMs(), 15);
    clock.set(3);
    assert.equal(clock.nowMs(), 3);
    assert.equal(fakeClock().nowMs(), 0);
  });

  test('scriptedRng throws once its script is used up', () => {
    const rng = scriptedRng([0.25]);
    assert.equal(rng.next(), 0.25);
    assert.throws(() => rng.next(), /used up/);
  });

  test('endpoint derives its backend from the tier unless given', () => {
    assert.equal(endpoint('a').backend, 'backend-0');
    assert.equal(endpoint('a', { tier: 2 }).backend, 'backend-2');
    assert.equal(endpoint('a', { backend: 'named' }).backend, 'named');
  });

  test('testPolicy applies overrides over complete defaults', () => {
    const p = testPolicy({ models: ['m'], health: { minRequests: 3 } });
    assert.deepEqual(p.models, ['m']);
    assert.equal(p.health.minRequests, 3);
    assert.equal(p.health.windowMs, 10_000);
    assert.equal(testPolicy().costWeightPerMs, undefined);
  });
});
