/**
 * Routing by model through the Balancer (issue 42; docs/policy.md §1 and §2): the candidate
 * filter, model discovery, adapter residency and the weighted split as the proxy shell sees them.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ADAPTER_SERVED_RECENTLY_MS } from './adapter-residency.ts';
import { Balancer, DEFAULT_SHED_RETRY_AFTER_MS } from './balancer.ts';
import { seededRng } from './rng.ts';
import { endpoint, fakeClock, testPolicy, type PolicyOverrides } from './testing.ts';
import type { EndpointSpec, PickRequest, PickResult } from './types.ts';

function balancerOf(endpoints: EndpointSpec[], overrides: PolicyOverrides = {}) {
  const clock = fakeClock(1_000);
  const policy = testPolicy({ affinity: { key: 'None' }, ...overrides });
  const balancer = new Balancer(policy, endpoints, { clock, rng: seededRng(42) });
  return { balancer, clock, policy };
}

const idOf = (result: PickResult) =>
  result.kind === 'picked' ? result.attempt.endpoint.id : `shed:${result.reason ?? 'down'}`;

/** Picks `request` and finishes the attempt at once; the endpoint id, or the shed. */
function pickAndFinish(balancer: Balancer, request: PickRequest): string {
  const result = balancer.pick(request);
  if (result.kind === 'picked')
    balancer.finish(result.attempt, { kind: 'success', streamed: true });
  return idOf(result);
}

describe('Balancer: the candidate filter by model', () => {
  it('only endpoints that serve the model; Failover looks for the first tier that serves', () => {
    const { balancer } = balancerOf(
      [
        endpoint('chat', { tier: 0, models: ['llama'] }),
        endpoint('embed', { tier: 1, models: ['bge'] }),
      ],
      { mode: 'Failover' },
    );
    assert.equal(pickAndFinish(balancer, { model: 'bge' }), 'embed');
    assert.equal(pickAndFinish(balancer, { model: 'llama' }), 'chat');
    assert.equal(pickAndFinish(balancer, {}), 'chat', 'no model: as before');
    assert.equal(pickAndFinish(balancer, { model: '' }), 'chat', 'an empty name is none');
    const shed = balancer.pick({ model: 'gpt-4o' });
    assert.deepEqual(shed, {
      kind: 'shed',
      retryAfterMs: DEFAULT_SHED_RETRY_AFTER_MS,
      reason: 'model-not-served',
    });
  });

  it('serving endpoints that are down shed as down (503), timed by them alone', () => {
    const { balancer, clock } = balancerOf([
      endpoint('a', { models: ['m'] }),
      endpoint('b', { models: ['n'] }),
    ]);
    const attempt = balancer.pick({ model: 'm' });
    assert.equal(idOf(attempt), 'a');
    if (attempt.kind !== 'picked') return;
    balancer.finish(attempt.attempt, { kind: 'rate-limited', retryAfterMs: 7_000 });
    clock.advance(1_000);
    assert.deepEqual(balancer.pick({ model: 'm' }), { kind: 'shed', retryAfterMs: 6_000 });
    assert.equal(idOf(balancer.pick({ model: 'm', exclude: new Set(['a']) })), 'shed:down');
    assert.equal(pickAndFinish(balancer, { model: 'n' }), 'b');
  });

  it('a pool with no endpoint at all sheds as down (503), not as a model it does not serve', () => {
    // Scaled to zero, or not started yet: nothing says the model is not served (404 would tell
    // the client to stop asking), and scale from zero holds such requests.
    const { balancer } = balancerOf([]);
    assert.equal(idOf(balancer.pick({ model: 'm' })), 'shed:down');
    balancer.update(testPolicy({ affinity: { key: 'None' } }), [endpoint('a', { models: ['m'] })]);
    balancer.update(testPolicy({ affinity: { key: 'None' } }), []);
    assert.equal(idOf(balancer.pick({ model: 'm' })), 'shed:down');
  });

  it('an unknown list takes any model until discovery speaks; a declared list wins', () => {
    const { balancer } = balancerOf([endpoint('u'), endpoint('d', { models: ['m'] })]);
    assert.equal(pickAndFinish(balancer, { model: 'x' }), 'u');
    balancer.reportModels('u', [{ id: 'y' }]);
    balancer.reportModels('d', [{ id: 'x' }]); // declared: the report is not used
    balancer.reportModels('gone', [{ id: 'x' }]); // not in the pool: ignored
    assert.equal(idOf(balancer.pick({ model: 'x' })), 'shed:model-not-served');
    assert.equal(pickAndFinish(balancer, { model: 'y' }), 'u');
    assert.deepEqual(
      [...balancer.modelsServed().models].sort(([a], [b]) => (a < b ? -1 : 1)),
      [
        ['m', { endpoints: 1 }],
        ['y', { endpoints: 1 }],
      ],
    );
  });

  it('a departed endpoint takes its discovered list with it', () => {
    const { balancer, policy } = balancerOf([endpoint('u')]);
    balancer.reportModels('u', [{ id: 'lora', parent: 'base' }]);
    assert.deepEqual(balancer.modelsServed(), {
      models: new Map<string, { endpoints: number; parent?: string }>([
        ['lora', { endpoints: 1, parent: 'base' }],
        ['base', { endpoints: 1 }],
      ]),
      unknownEndpoints: 0,
    });
    balancer.update(policy, []);
    balancer.update(policy, [endpoint('u')]);
    assert.deepEqual(balancer.modelsServed(), { models: new Map(), unknownEndpoints: 1 });
  });

  it('a pinned request obeys the filter', () => {
    const { balancer } = balancerOf([
      endpoint('a', { models: ['m'] }),
      endpoint('b', { models: ['n'] }),
    ]);
    assert.equal(
      idOf(balancer.pick({ model: 'n', pinnedEndpointId: 'a' })),
      'shed:model-not-served',
    );
    assert.equal(pickAndFinish(balancer, { model: 'm', pinnedEndpointId: 'a' }), 'a');
    assert.equal(idOf(balancer.pick({ model: 'm', pinnedEndpointId: 'gone' })), 'shed:down');
  });
});

describe('Balancer: LoRA residency', () => {
  const three = () => [endpoint('e0'), endpoint('e1'), endpoint('e2')];

  it('prefers the endpoint whose server reports the adapter loaded', () => {
    const { balancer } = balancerOf(three());
    balancer.reportLoad('e2', { running: 0, waiting: 0, loadedAdapters: ['sql'] });
    balancer.reportLoad('gone', { running: 0, loadedAdapters: ['sql'] });
    for (let i = 0; i < 10; i++) assert.equal(pickAndFinish(balancer, { model: 'sql' }), 'e2');
    const spread = new Set<string>();
    for (let i = 0; i < 30; i++) spread.add(pickAndFinish(balancer, { model: 'base' }));
    assert.equal(spread.size, 3, 'a base model goes anywhere');
  });

  it('not past the load bound: a busy resident endpoint gives way', () => {
    const { balancer } = balancerOf(three());
    balancer.reportLoad('e0', { running: 0, loadedAdapters: ['sql'] });
    const held: string[] = [];
    for (let i = 0; i < 8; i++) {
      const result = balancer.pick({ model: 'sql' });
      held.push(idOf(result)); // never finished: the load builds up
    }
    assert.deepEqual(held.slice(0, 4), ['e0', 'e0', 'e0', 'e0']);
    assert.ok(
      held.slice(4).some((id) => id !== 'e0'),
      held.join(),
    );
  });

  it('without adapter reports, where this sidecar sent the adapter within a minute', () => {
    const { balancer, clock } = balancerOf(three());
    for (const id of ['e0', 'e1', 'e2'])
      balancer.reportModels(id, [{ id: 'base' }, { id: 'sql', parent: 'base' }]);
    const first = pickAndFinish(balancer, { model: 'sql' });
    for (let i = 0; i < 5; i++) assert.equal(pickAndFinish(balancer, { model: 'sql' }), first);
    clock.advance(ADAPTER_SERVED_RECENTLY_MS + 1);
    const after = new Set<string>();
    for (let i = 0; i < 30; i++) {
      clock.advance(ADAPTER_SERVED_RECENTLY_MS + 1);
      after.add(pickAndFinish(balancer, { model: 'sql' }));
    }
    assert.ok(after.size > 1, 'forgotten after a minute');
  });
});

describe('Balancer: the weighted split', () => {
  it('95/5 keyless: exactly 5 of every 100 on the canary, balanced inside each share', () => {
    const { balancer } = balancerOf([
      endpoint('s0', { backend: 'stable', weight: 95 }),
      endpoint('s1', { backend: 'stable', weight: 95 }),
      endpoint('c0', { backend: 'canary', weight: 5 }),
    ]);
    const counts = new Map<string, number>();
    for (let i = 0; i < 100; i++) {
      const id = pickAndFinish(balancer, {});
      counts.set(id, (counts.get(id) ?? 0) + 1);
    }
    assert.equal(counts.get('c0'), 5);
    assert.ok((counts.get('s0') ?? 0) > 30 && (counts.get('s1') ?? 0) > 30);
  });

  it('per tier in Failover; a down backend sends its share to the others', () => {
    const { balancer } = balancerOf(
      [
        endpoint('a', { backend: 'a', tier: 0, weight: 1 }),
        endpoint('b', { backend: 'b', tier: 0, weight: 1 }),
        endpoint('z', { backend: 'z', tier: 1, weight: 0 }),
      ],
      { mode: 'Failover' },
    );
    const picks = Array.from({ length: 4 }, () => pickAndFinish(balancer, {}));
    assert.deepEqual(picks.sort(), ['a', 'a', 'b', 'b']);
    const exclude = new Set(['a']);
    assert.equal(pickAndFinish(balancer, { exclude }), 'b');
    assert.equal(pickAndFinish(balancer, { exclude: new Set(['a', 'b']) }), 'z');
  });
});
