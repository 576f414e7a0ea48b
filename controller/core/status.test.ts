import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Value } from '@sinclair/typebox/value';
import { InferencePoolStatusSchema } from '../../crds/inference-pool.schema.ts';
import {
  FLEET_HEALTH_LIMIT,
  connectedSidecars,
  fleetHealth,
  poolStatus,
  statusEqual,
  type PoolStatusInput,
  type SidecarView,
  twoDigits,
} from './status.ts';
import { notReady, pool, ready, reconcile, service, slice } from './testing.ts';

const T0 = '2025-01-31T12:00:00Z';
const T1 = '2025-01-31T12:05:00Z';
const p = pool({ backends: [{ name: 'in-cluster', service: { name: 'vllm', port: 8000 } }] });
const healthy = reconcile(p, {
  services: [service('vllm')],
  slices: [slice('vllm', [ready('10.0.0.7'), notReady('10.0.0.8')])],
});
const down = reconcile(p, {
  services: [service('vllm')],
  slices: [slice('vllm', [notReady('10.0.0.7', '10.0.0.8')])],
});

const sidecar = (overrides: Partial<SidecarView> = {}): SidecarView => ({
  lastSeenMs: 10_000,
  appliedVersion: 3,
  appliedHash: healthy.hash,
  endpoints: [],
  ...overrides,
});
const reports = (entries: Record<string, SidecarView>) => ({
  reports: new Map(Object.entries(entries)),
  nowMs: 20_000,
  staleAfterMs: 30_000,
});
const input = (overrides: Partial<PoolStatusInput> = {}): PoolStatusInput => ({
  generation: 4,
  result: healthy,
  snapshot: { version: 3, hash: healthy.hash },
  sidecars: reports({}),
  now: T0,
  ...overrides,
});

describe('poolStatus', () => {
  test('describes the reconcile result, the served snapshot and the sidecars', () => {
    const status = poolStatus(
      input({
        sidecars: reports({
          'app-1': sidecar(),
          'app-2': sidecar({ appliedHash: 'older', appliedVersion: 2 }),
        }),
      }),
    );
    assert.deepEqual(status, {
      observedGeneration: 4,
      conditions: [
        {
          type: 'Accepted',
          status: 'True',
          observedGeneration: 4,
          lastTransitionTime: T0,
          reason: 'Accepted',
          message: 'Spec accepted',
        },
        {
          type: 'ResolvedRefs',
          status: 'True',
          observedGeneration: 4,
          lastTransitionTime: T0,
          reason: 'BackendsResolved',
          message: 'The backend resolved',
        },
        {
          type: 'Ready',
          status: 'True',
          observedGeneration: 4,
          lastTransitionTime: T0,
          reason: 'EndpointsReady',
          message: '1 of 2 endpoints ready',
        },
      ],
      endpoints: { ready: 1, total: 2, drifted: 0 },
      snapshot: { version: 3, hash: healthy.hash },
      sidecars: { connected: 2, inSync: 1 },
      endpointHealth: [],
    });
    assert.ok(Value.Check(InferencePoolStatusSchema, status), 'fits the status schema');
  });

  test('keeps the transition time of a condition whose status did not change', () => {
    const first = poolStatus(input());
    const second = poolStatus(input({ result: down, now: T1, previous: first, generation: 5 }));
    const times = Object.fromEntries(
      (second.conditions ?? []).map((c) => [c.type, c.lastTransitionTime]),
    );
    assert.deepEqual(times, { Accepted: T0, ResolvedRefs: T0, Ready: T1 });
    assert.ok((second.conditions ?? []).every((c) => c.observedGeneration === 5));
  });

  test('does not count stale sidecars, but counts one with an open stream', () => {
    const status = poolStatus(
      input({
        sidecars: reports({
          fresh: sidecar({ lastSeenMs: 20_000 - 30_000 }),
          stale: sidecar({ lastSeenMs: 20_000 - 30_001 }),
          streaming: sidecar({ lastSeenMs: 0, streaming: true, appliedHash: undefined }),
        }),
      }),
    );
    assert.deepEqual(status.sidecars, { connected: 2, inSync: 1 });
  });

  test('counts no sidecar in sync and shows no snapshot before one was served', () => {
    const status = poolStatus(input({ snapshot: undefined, sidecars: reports({ a: sidecar() }) }));
    assert.equal(status.snapshot, undefined);
    assert.deepEqual(status.sidecars, { connected: 1, inSync: 0 });
  });

  test('drops conditions of types it does not own', () => {
    const previous = {
      conditions: [
        {
          type: 'Legacy',
          status: 'True' as const,
          lastTransitionTime: T0,
          reason: 'Old',
          message: '',
        },
      ],
    };
    const status = poolStatus(input({ previous }));
    assert.deepEqual(
      (status.conditions ?? []).map((c) => c.type),
      ['Accepted', 'ResolvedRefs', 'Ready'],
    );
  });
});

describe('statusEqual', () => {
  test('ignores transition times and condition order', () => {
    const a = poolStatus(input());
    const b = poolStatus(input({ now: T1 }));
    assert.ok(statusEqual(a, b));
    assert.ok(statusEqual(a, { ...a, conditions: [...(a.conditions ?? [])].reverse() }));
  });

  test('sees every other change', () => {
    const a = poolStatus(input());
    assert.ok(!statusEqual(a, poolStatus(input({ generation: 5 }))));
    assert.ok(!statusEqual(a, poolStatus(input({ result: down }))));
    assert.ok(!statusEqual(a, poolStatus(input({ snapshot: { version: 4, hash: healthy.hash } }))));
    assert.ok(!statusEqual(a, poolStatus(input({ sidecars: reports({ x: sidecar() }) }))));
    const { conditions: _c, ...withoutConditions } = a;
    assert.ok(!statusEqual(a, withoutConditions));
    assert.ok(statusEqual(withoutConditions, { ...withoutConditions }));
  });

  test('treats a missing status as empty', () => {
    assert.ok(statusEqual(undefined, {}));
    assert.ok(!statusEqual(undefined, poolStatus(input())));
  });
});

describe('fleetHealth', () => {
  test('counts per endpoint how many connected sidecars see its breaker open or half-open', () => {
    const health = fleetHealth(
      reports({
        a: sidecar({
          endpoints: [
            { id: 'x/1', breaker: 'open' },
            { id: 'x/2', breaker: 'closed' },
            { id: 'x/3', breaker: 'half-open' },
          ],
        }),
        b: sidecar({
          endpoints: [
            { id: 'x/1', breaker: 'open' },
            { id: 'x/2', breaker: 'closed' },
            { id: 'x/3', breaker: 'open' },
          ],
        }),
        c: sidecar({ endpoints: [{ id: 'x/3', breaker: 'closed' }] }),
        gone: sidecar({ lastSeenMs: -100_000, endpoints: [{ id: 'x/2', breaker: 'open' }] }),
        silent: sidecar({ endpoints: undefined }),
      }),
    );
    // reporting: a, b and c sent reports; gone is stale, silent sent none.
    assert.deepEqual(health, [
      { id: 'x/1', breakerOpen: 2, halfOpen: 0, reporting: 3 },
      { id: 'x/3', breakerOpen: 1, halfOpen: 1, reporting: 3 },
    ]);
  });

  test('puts the worst first and keeps the list short', () => {
    const endpoints = Array.from({ length: 40 }, (_, i) => ({
      id: `x/${String(i).padStart(2, '0')}`,
      breaker: i % 2 === 0 ? ('open' as const) : ('half-open' as const),
    }));
    const health = fleetHealth(reports({ a: sidecar({ endpoints }) }));
    assert.equal(health.length, FLEET_HEALTH_LIMIT);
    assert.deepEqual(
      health.slice(0, 2).map((h) => h.id),
      ['x/00', 'x/02'],
    );
    assert.equal(health[20]?.halfOpen, 1);
    assert.equal(fleetHealth(reports({ a: sidecar({ endpoints }) }), { limit: 3 }).length, 3);
    assert.deepEqual(fleetHealth(reports({ a: sidecar({ endpoints }) }), { limit: -1 }), []);
  });

  test('leaves out endpoints that are not in the served snapshot', () => {
    const health = fleetHealth(
      reports({
        a: sidecar({
          endpoints: [
            { id: 'x/1', breaker: 'open' },
            { id: 'old/1', breaker: 'open' },
          ],
        }),
      }),
      { endpointIds: new Set(['x/1']) },
    );
    assert.deepEqual(
      health.map((h) => h.id),
      ['x/1'],
    );
  });
});

describe('connectedSidecars', () => {
  test('is every sidecar streaming or heard from recently', () => {
    const r = reports({
      a: sidecar(),
      b: sidecar({ lastSeenMs: -50_000 }),
      c: sidecar({ lastSeenMs: -50_000, streaming: true }),
    });
    assert.equal(connectedSidecars(r).length, 2);
  });
});

describe('poolStatus: the drift section', () => {
  const section = {
    expected: 'llama/fp_a/aaaaaaaaaaaa',
    endpoints: [
      { id: 'in-cluster/10.0.0.7:8000', fingerprint: 'llama/fp_a/aaaaaaaaaaaa', drifted: false },
    ],
  };
  test('writes the leader’s view, keeps the previous one when there is none, drops it when off', () => {
    assert.deepEqual(poolStatus(input({ drift: section })).drift, section);
    assert.deepEqual(poolStatus(input({ previous: { drift: section } })).drift, section);
    assert.equal(poolStatus(input({ previous: { drift: section }, drift: null })).drift, undefined);
    assert.equal(poolStatus(input()).drift, undefined);
    assert.ok(Value.Check(InferencePoolStatusSchema, poolStatus(input({ drift: section }))));
  });
});

describe('fleetHealth: rates, TTFT and drift mismatches', () => {
  const e = (id: string, over: Record<string, unknown> = {}) => ({
    id,
    breaker: 'closed' as const,
    ...over,
  });
  test('lists endpoints with errors or 429s on 5 % of requests, or drift mismatches, with the fleet’s figures', () => {
    const health = fleetHealth(
      reports({
        'app-1': sidecar({
          endpoints: [
            e('a', { errorRate: 0.5, rateLimitRate: 0, ewmaTtftMs: 1234 }),
            e('b', { errorRate: 0.01, rateLimitRate: 0.2, ewmaTtftMs: 80 }),
            e('c', { errorRate: 0, rateLimitRate: 0, ewmaTtftMs: 50 }),
            e('d', { errorRate: 0, rateLimitRate: 0, ewmaTtftMs: 50, driftMismatches: 3 }),
          ],
        }),
        'app-2': sidecar({
          endpoints: [
            e('a', { breaker: 'open', errorRate: 0.3, rateLimitRate: 0, ewmaTtftMs: 900 }),
            e('b', { errorRate: 0.03, rateLimitRate: 0, ewmaTtftMs: 90 }),
            e('c', { errorRate: 0.02, rateLimitRate: 0, ewmaTtftMs: 60 }),
            e('d', { driftMismatches: 2 }),
          ],
        }),
      }),
    );
    assert.deepEqual(health, [
      {
        id: 'a',
        breakerOpen: 1,
        halfOpen: 0,
        reporting: 2,
        errorPercent: 40,
        rateLimitPercent: 0,
        ewmaTtftMs: 900,
      },
      {
        id: 'b',
        breakerOpen: 0,
        halfOpen: 0,
        reporting: 2,
        errorPercent: 2,
        rateLimitPercent: 10,
        ewmaTtftMs: 80,
      },
      {
        id: 'd',
        breakerOpen: 0,
        halfOpen: 0,
        reporting: 2,
        errorPercent: 0,
        rateLimitPercent: 0,
        ewmaTtftMs: 50,
        driftMismatches: 5,
      },
    ]);
    assert.ok(Value.Check(InferencePoolStatusSchema, { endpointHealth: health }));
  });

  test('two significant digits keep status writes for small changes away', () => {
    assert.equal(twoDigits(1234), 1200);
    assert.equal(twoDigits(87.6), 88);
    assert.equal(twoDigits(5), 5);
    assert.equal(twoDigits(0), 0);
    assert.equal(twoDigits(NaN), 0);
  });
});

describe('poolStatus: models', () => {
  test('lists the declared models and the aliases, valid against the schema', () => {
    const withModels = reconcile(
      pool({
        backends: [
          { name: 'in-cluster', service: { name: 'vllm', port: 8000 }, models: ['llama', 'lora'] },
        ],
        aliases: [{ name: 'gpt-4o-mini', model: 'llama' }],
      }),
      { services: [service('vllm')], slices: [slice('vllm', [ready('10.0.0.7')])] },
    );
    const status = poolStatus(input({ result: withModels }));
    assert.deepEqual(status.models, [
      { name: 'llama', endpoints: 1 },
      { name: 'lora', endpoints: 1 },
      { name: 'gpt-4o-mini', endpoints: 1, aliasOf: 'llama' },
    ]);
    assert.ok(Value.Check(InferencePoolStatusSchema, status));
  });

  test('leaves models out when no backend declares any', () => {
    assert.ok(!('models' in poolStatus(input())));
  });
});

describe('poolStatus: the budgets section', () => {
  const budgets = [
    {
      id: 'pool',
      sidecars: 4,
      requestsPerMinute: { limit: 600, used: 590, wanted: 1200 },
    },
  ];
  test('shows the budgets with the fleet’s use, and nothing for a pool without', () => {
    assert.deepEqual(poolStatus(input({ budgets })).budgets, budgets);
    assert.equal(poolStatus(input({ budgets: [] })).budgets, undefined);
    assert.equal(poolStatus(input()).budgets, undefined);
    assert.ok(Value.Check(InferencePoolStatusSchema, poolStatus(input({ budgets }))));
  });
});
