/**
 * Balancer.pickWithRoom (flow control, issue 43): `pick` among the endpoints that have room.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_SHED_RETRY_AFTER_MS } from './balancer.ts';
import { endpoint, OK, picked, setupBalancer, shedAfter, type Picked } from './testing.ts';
import type { RoomPickResult, SaturationRule } from './types.ts';

const byKv: SaturationRule = { kvCacheSaturation: 0.9 };
const oneEach: SaturationRule = { kvCacheSaturation: 0.9, maxInFlightPerEndpoint: 1 };

function roomy(result: RoomPickResult): Picked {
  if (result.kind !== 'picked') throw new Error(`expected a pick, got ${JSON.stringify(result)}`);
  return result;
}

function idOf(result: RoomPickResult): string {
  return result.kind === 'picked' ? result.attempt.endpoint.id : result.kind;
}

describe('Balancer.pickWithRoom', () => {
  test('picks only endpoints that are not saturated', () => {
    const { balancer } = setupBalancer();
    balancer.reportLoad('a', { kvCacheUsage: 0.95 });
    balancer.reportLoad('b', { waiting: 2 });
    for (let i = 0; i < 20; i++) {
      const result = roomy(balancer.pickWithRoom({}, byKv));
      assert.equal(result.attempt.endpoint.id, 'c');
      balancer.finish(result.attempt, OK);
    }
  });

  test('saturated when every candidate is, and nothing is started', () => {
    const { balancer, statusOf } = setupBalancer();
    const first = roomy(balancer.pickWithRoom({}, oneEach));
    const second = roomy(balancer.pickWithRoom({}, oneEach));
    const third = roomy(balancer.pickWithRoom({}, oneEach));
    assert.deepEqual(
      new Set([first, second, third].map((r) => r.attempt.endpoint.id)),
      new Set(['a', 'b', 'c']),
    );
    assert.deepEqual(balancer.pickWithRoom({}, oneEach), { kind: 'saturated' });
    assert.deepEqual(
      ['a', 'b', 'c'].map((id) => statusOf(id).inFlight),
      [1, 1, 1],
    );
    // Room again once one ends.
    balancer.finish(second.attempt, OK);
    assert.equal(idOf(balancer.pickWithRoom({}, oneEach)), second.attempt.endpoint.id);
  });

  test('pick itself is unchanged: it sends to a saturated endpoint', () => {
    const { balancer } = setupBalancer({ endpoints: [endpoint('a')] });
    balancer.reportLoad('a', { waiting: 5, kvCacheUsage: 1 });
    assert.equal(idOf(balancer.pickWithRoom({}, byKv)), 'saturated');
    assert.equal(picked(balancer.pick({})).attempt.endpoint.id, 'a');
  });

  test('Failover: a saturated first tier is saturated, not a spill to the next tier', () => {
    const endpoints = [
      endpoint('a', { tier: 0 }),
      endpoint('b', { tier: 0 }),
      endpoint('c', { tier: 1 }),
    ];
    const { balancer } = setupBalancer({ endpoints, policy: { mode: 'Failover' } });
    balancer.reportLoad('a', { waiting: 1 });
    assert.equal(idOf(balancer.pickWithRoom({}, byKv)), 'b');
    balancer.reportLoad('b', { kvCacheUsage: 0.99 });
    assert.deepEqual(balancer.pickWithRoom({}, byKv), { kind: 'saturated' });
    // Tier 1 is used only when tier 0 has no candidate at all (here: a retry excluding it).
    assert.equal(idOf(balancer.pickWithRoom({ exclude: new Set(['a', 'b']) }, byKv)), 'c');
  });

  test('sheds as pick does when nothing is live', () => {
    const { balancer } = setupBalancer();
    const exclude = new Set(['a', 'b', 'c']);
    const shed = balancer.pickWithRoom({ exclude }, oneEach);
    assert.equal(shedAfter(balancer.pick({ exclude })), DEFAULT_SHED_RETRY_AFTER_MS);
    assert.deepEqual(shed, balancer.pick({ exclude }));
  });

  test('a model no endpoint serves is answered as pick answers it', () => {
    const { balancer } = setupBalancer({ endpoints: [endpoint('a', { models: ['m'] })] });
    assert.deepEqual(balancer.pickWithRoom({ model: 'other' }, byKv), {
      kind: 'shed',
      retryAfterMs: DEFAULT_SHED_RETRY_AFTER_MS,
      reason: 'model-not-served',
    });
    balancer.reportLoad('a', { waiting: 1 });
    assert.deepEqual(balancer.pickWithRoom({ model: 'm' }, byKv), { kind: 'saturated' });
  });

  test('a pinned request waits for room on its endpoint, and sheds when it is gone', () => {
    const { balancer } = setupBalancer();
    balancer.reportLoad('b', { waiting: 1 });
    assert.deepEqual(balancer.pickWithRoom({ pinnedEndpointId: 'b' }, byKv), {
      kind: 'saturated',
    });
    assert.equal(idOf(balancer.pickWithRoom({ pinnedEndpointId: 'a' }, byKv)), 'a');
    assert.deepEqual(balancer.pickWithRoom({ pinnedEndpointId: 'gone' }, byKv), {
      kind: 'shed',
      retryAfterMs: DEFAULT_SHED_RETRY_AFTER_MS,
    });
    // pick is unchanged for pinned requests too.
    assert.equal(picked(balancer.pick({ pinnedEndpointId: 'b' })).attempt.endpoint.id, 'b');
  });
});
