import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  HEALTHY_CONDITIONS as healthyConditions,
  HEALTHY_STATUS,
  READY,
  condition,
  debugBackends as debug,
  debugEndpoint,
  pool,
} from './testing.ts';
import { breakerSummary, poolView, sidecarView, type PoolEndpointRow } from './view.ts';

describe('poolView', () => {
  it('is healthy (exit code 0) when the conditions are True and nothing is open or drifted', () => {
    const view = poolView(pool(HEALTHY_STATUS), 'apps');
    assert.equal(view.exitCode, 0);
    assert.deepEqual(view.problems, []);
    assert.equal(view.pool, 'chat');
    assert.equal(view.namespace, 'apps');
    assert.equal(view.mode, 'Balance');
    assert.deepEqual(
      view.conditions.map((c) => `${c.type}=${c.status}`),
      ['Ready=True', 'Accepted=True', 'ResolvedRefs=True'],
    );
    assert.deepEqual(view.snapshot, { version: 4, hash: 'abcdef0123456789' });
    assert.deepEqual(view.sidecars, { connected: 3, inSync: 3 });
    assert.deepEqual(view.endpoints, { ready: 3, total: 3, drifted: 0 });
    assert.deepEqual(view.drift, { expected: 'llama/fp_a/0123456789ab' });
    assert.equal(view.rows.length, 2);
    assert.equal(view.unlistedEndpoints, 1);
  });

  it('lists the union of drift.endpoints and endpointHealth, worst first', () => {
    const view = poolView(
      pool({
        ...HEALTHY_STATUS,
        endpoints: { ready: 4, total: 6, drifted: 1 },
        drift: {
          expected: 'llama/fp_a/0123456789ab',
          endpoints: [
            { id: 'b/10.0.0.9:8000', fingerprint: 'llama/fp_x/ffffffffffff', drifted: true },
            { id: 'a/10.0.0.1:8000', fingerprint: 'llama/fp_a/0123456789ab', drifted: false },
            {
              id: 'a/10.0.0.3:8000',
              fingerprint: 'llama/fp_a/0123456789ab',
              drifted: false,
              error: 'timeout after 5s',
            },
          ],
        },
        endpointHealth: [
          { id: 'a/10.0.0.2:8000', breakerOpen: 2, halfOpen: 0, reporting: 3, errorPercent: 100 },
          {
            id: 'a/10.0.0.1:8000',
            breakerOpen: 0,
            halfOpen: 0,
            reporting: 3,
            errorPercent: 7,
            rateLimitPercent: 1,
            ewmaTtftMs: 850,
            driftMismatches: 4,
          },
          { id: 'c/10.0.0.5:8000', breakerOpen: 0, halfOpen: 1, reporting: 3 },
        ],
      }),
      'apps',
    );
    assert.deepEqual(
      view.rows.map((r) => r.id),
      [
        'a/10.0.0.2:8000',
        'c/10.0.0.5:8000',
        'b/10.0.0.9:8000',
        'a/10.0.0.1:8000',
        'a/10.0.0.3:8000',
      ],
    );
    const merged = view.rows.find((r) => r.id === 'a/10.0.0.1:8000')!;
    assert.deepEqual(merged, {
      id: 'a/10.0.0.1:8000',
      breakerOpen: 0,
      halfOpen: 0,
      reporting: 3,
      errorPercent: 7,
      rateLimitPercent: 1,
      ewmaTtftMs: 850,
      driftMismatches: 4,
      drifted: false,
      fingerprint: 'llama/fp_a/0123456789ab',
      probedAt: null,
      probeError: null,
    });
    const onlyProbed = view.rows.find((r) => r.id === 'b/10.0.0.9:8000')!;
    assert.equal(onlyProbed.breakerOpen, null, 'not in endpointHealth: no health numbers');
    const onlyHealth = view.rows.find((r) => r.id === 'a/10.0.0.2:8000')!;
    assert.equal(onlyHealth.drifted, null, 'not probed');
    assert.equal(view.rows.find((r) => r.id === 'a/10.0.0.3:8000')!.probeError, 'timeout after 5s');
    assert.equal(view.unlistedEndpoints, 1);
    assert.equal(view.exitCode, 1);
    assert.deepEqual(view.problems, [
      'a/10.0.0.2:8000: breaker open on 2/3 sidecars',
      'c/10.0.0.5:8000: breaker half-open on 1/3',
      'b/10.0.0.9:8000: drifted (llama/fp_x/ffffffffffff)',
    ]);
  });

  it('errors, 429s, mismatches and a failed probe alone do not make it unhealthy', () => {
    const view = poolView(
      pool({
        ...HEALTHY_STATUS,
        endpointHealth: [
          {
            id: 'a/10.0.0.1:8000',
            breakerOpen: 0,
            halfOpen: 0,
            reporting: 2,
            errorPercent: 30,
            rateLimitPercent: 20,
            driftMismatches: 3,
          },
        ],
        drift: {
          endpoints: [{ id: 'a/10.0.0.2:8000', drifted: false, error: 'connect ECONNREFUSED' }],
        },
      }),
      'apps',
    );
    assert.equal(view.exitCode, 0, view.problems.join('; '));
    assert.deepEqual(view.drift, { expected: null });
  });

  for (const [what, conditions, problem] of [
    [
      'Ready False',
      [
        healthyConditions[0]!,
        healthyConditions[1]!,
        condition('Ready', 'False', 'NoReadyEndpoints'),
      ],
      'Ready is False (NoReadyEndpoints)',
    ],
    [
      'ResolvedRefs False while Ready is True',
      [
        healthyConditions[0]!,
        condition('ResolvedRefs', 'False', 'SecretNotFound'),
        healthyConditions[2]!,
      ],
      'ResolvedRefs is False (SecretNotFound)',
    ],
    [
      'Accepted Unknown',
      [condition('Accepted', 'Unknown', 'Pending'), healthyConditions[1]!, healthyConditions[2]!],
      'Accepted is Unknown (Pending)',
    ],
    [
      'a missing condition',
      [healthyConditions[0]!, healthyConditions[1]!],
      'Ready is missing from the status',
    ],
  ] as const) {
    it(`is unhealthy with ${what}`, () => {
      const view = poolView(pool({ ...HEALTHY_STATUS, conditions: [...conditions] }), 'apps');
      assert.equal(view.exitCode, 1);
      assert.deepEqual(view.problems, [problem]);
    });
  }

  it('counts drifted endpoints the list does not show', () => {
    const none = poolView(
      pool({ ...HEALTHY_STATUS, endpoints: { ready: 2, total: 3, drifted: 2 } }),
      'apps',
    );
    assert.deepEqual(none.problems, ['2 endpoints drifted']);
    const some = poolView(
      pool({
        endpoints: { ready: 2, total: 3, drifted: 2 },
        drift: { endpoints: [{ id: 'a/x:1', drifted: true }] },
      }),
      'apps',
    );
    assert.deepEqual(some.problems, ['a/x:1: drifted', '1 more endpoint drifted']);
  });

  it('a pool without any status: every condition missing, nothing else', () => {
    const view = poolView(
      { metadata: { name: 'new', generation: 1 }, spec: { backends: [] } },
      'default',
    );
    assert.equal(view.exitCode, 1);
    assert.deepEqual(view.problems, [
      'no status: the controller has not written one (is it running?)',
    ]);
    assert.equal(view.snapshot, null);
    assert.equal(view.sidecars, null);
    assert.equal(view.endpoints, null);
    assert.equal(view.drift, null);
    assert.equal(view.observedGeneration, null);
    assert.equal(view.mode, null);
    assert.deepEqual(view.rows, []);
    assert.equal(view.unlistedEndpoints, 0);
  });

  it('reads a malformed status defensively', () => {
    const view = poolView(
      {
        metadata: { name: 'odd' },
        status: {
          conditions: [{ type: 'Ready', status: 'True' }],
          endpointHealth: [{ id: 7 }, { id: 'a/x:1' }],
          drift: { endpoints: [{ drifted: true }] },
          endpoints: {},
          sidecars: {},
          snapshot: {},
        },
      },
      'ns',
    );
    assert.deepEqual(
      view.rows.map((r) => [r.id, r.breakerOpen, r.reporting]),
      [['a/x:1', 0, 0]],
    );
    assert.deepEqual(view.endpoints, { ready: 0, total: 0, drifted: 0 });
    assert.deepEqual(view.sidecars, { connected: 0, inSync: 0 });
    assert.deepEqual(view.snapshot, { version: null, hash: null });
    assert.equal(view.conditions[0]!.reason, null);
    assert.equal(poolView(undefined, 'ns').pool, '');
  });
});

describe('breakerSummary', () => {
  const row = (breakerOpen: number | null, halfOpen: number | null, reporting: number | null) =>
    ({ breakerOpen, halfOpen, reporting }) as PoolEndpointRow;
  it('says on how many of the reporting sidecars', () => {
    assert.equal(breakerSummary(row(2, 0, 3)), 'open on 2/3 sidecars');
    assert.equal(breakerSummary(row(0, 1, 3)), 'half-open on 1/3');
    assert.equal(breakerSummary(row(1, 1, 3)), 'open on 1/3 sidecars, half-open on 1/3');
    assert.equal(breakerSummary(row(0, 0, 3)), undefined);
    assert.equal(breakerSummary(row(null, null, null)), undefined);
    assert.equal(breakerSummary(row(1, null, null)), 'open on 1/0 sidecars');
  });
});

describe('sidecarView', () => {
  it('is healthy when ready with every breaker closed and nothing drifted', () => {
    const view = sidecarView(
      'http://127.0.0.1:9090',
      READY,
      debug([debugEndpoint('a/10.0.0.1:8000')]),
    );
    assert.equal(view.exitCode, 0);
    assert.deepEqual(view.problems, []);
    assert.equal(view.ready, true);
    assert.equal(view.readyStatus, 'ready');
    assert.equal(view.pool, 'chat');
    assert.equal(view.snapshotVersion, 3);
    assert.deepEqual(view.rows[0], {
      id: 'a/10.0.0.1:8000',
      backend: 'a',
      url: 'http://10.0.0.1:8000/v1',
      tier: 0,
      breaker: 'closed',
      slow: false,
      inFlight: 0,
      window: { requests: 20, errors: 1, rateLimited: 0 },
      requests: 120,
      errors: 1,
      rateLimited: 0,
      ewmaTtftMs: 412.5,
      ewmaSeeded: false,
      drifted: false,
      fingerprint: 'llama/fp_a/0123456789ab',
      driftMismatches: 0,
    });
  });

  it('is unhealthy with a breaker open or half-open or an endpoint drifted, worst first', () => {
    const view = sidecarView(
      'http://127.0.0.1:9090',
      READY,
      debug([
        debugEndpoint('a/10.0.0.1:8000'),
        debugEndpoint('a/10.0.0.2:8000', { drifted: true, fingerprint: 'llama/fp_x/ffffffffffff' }),
        debugEndpoint('b/10.0.0.3:8000', { breaker: 'half-open' }),
        debugEndpoint('b/10.0.0.4:8000', { breaker: 'open' }),
      ]),
    );
    assert.equal(view.exitCode, 1);
    assert.deepEqual(
      view.rows.map((r) => r.id),
      ['b/10.0.0.4:8000', 'b/10.0.0.3:8000', 'a/10.0.0.2:8000', 'a/10.0.0.1:8000'],
    );
    assert.deepEqual(view.problems, [
      'b/10.0.0.4:8000: breaker open',
      'b/10.0.0.3:8000: breaker half-open',
      'a/10.0.0.2:8000: drifted (llama/fp_x/ffffffffffff)',
    ]);
  });

  it('is unhealthy when not ready, or with no endpoints', () => {
    const draining = sidecarView(
      'http://x',
      { httpStatus: 503, body: { status: 'draining' } },
      debug([debugEndpoint('a/x:1')]),
    );
    assert.deepEqual(draining.problems, ['not ready: draining']);
    assert.equal(draining.ready, false);
    const unconfigured = sidecarView(
      'http://x',
      { httpStatus: 503, body: { status: 'no configuration applied yet' } },
      { pool: null, mode: null, snapshotVersion: null, endpoints: [] },
    );
    assert.deepEqual(unconfigured.problems, ['not ready: no configuration applied yet']);
    assert.equal(unconfigured.pool, null);
    const empty = sidecarView('http://x', READY, debug([]));
    assert.deepEqual(empty.problems, ['the pool has no endpoints']);
    assert.equal(
      sidecarView('http://x', { httpStatus: 503, body: 'x' }, {}).readyStatus,
      'HTTP 503',
    );
  });

  it('copies only the fields it knows: an API key in the debug answer never reaches the view', () => {
    const view = sidecarView(
      'http://x',
      READY,
      debug([
        debugEndpoint('a/x:1', {
          apiKey: 'sk-secret-1',
          headers: { authorization: 'Bearer sk-secret-2' },
        }),
      ]),
    );
    assert.doesNotMatch(JSON.stringify(view), /sk-secret/);
  });

  it('reads a malformed answer defensively', () => {
    const view = sidecarView('http://x', READY, { endpoints: [{ id: 'a/x:1' }, null, { id: 3 }] });
    assert.deepEqual(
      view.rows.map((r) => [r.id, r.breaker, r.fingerprint, r.window.requests]),
      [['a/x:1', 'unknown', null, 0]],
    );
    assert.deepEqual(view.problems, ['a/x:1: breaker unknown']);
    assert.deepEqual(sidecarView('http://x', READY, undefined).problems, [
      'the pool has no endpoints',
    ]);
  });
});

describe('poolView: models', () => {
  const models = [
    { name: 'llama', endpoints: 2 },
    { name: 'qwen', endpoints: 0 },
    { name: 'gpt-4o', endpoints: 0, aliasOf: 'qwen' },
    { name: 'gpt-4o-mini', endpoints: 2, aliasOf: 'llama' },
  ];

  it('reads status.models and is unhealthy when a declared model has no ready endpoint', () => {
    const view = poolView(pool({ ...HEALTHY_STATUS, models }), 'apps');
    assert.deepEqual(view.models, [
      { name: 'llama', endpoints: 2, aliasOf: null },
      { name: 'qwen', endpoints: 0, aliasOf: null },
      { name: 'gpt-4o', endpoints: 0, aliasOf: 'qwen' },
      { name: 'gpt-4o-mini', endpoints: 2, aliasOf: 'llama' },
    ]);
    assert.equal(view.exitCode, 1);
    assert.deepEqual(view.problems, [
      'model qwen: no ready endpoint declares it; alias gpt-4o points at it',
    ]);
  });

  it('is healthy when every declared model has a ready endpoint', () => {
    const view = poolView(pool({ ...HEALTHY_STATUS, models: [models[0]!, models[3]!] }), 'apps');
    assert.equal(view.exitCode, 0);
  });

  it('has no models from a status without them, and skips malformed entries', () => {
    assert.deepEqual(poolView(pool(HEALTHY_STATUS), 'apps').models, []);
    const odd = [{ endpoints: 1 }, { name: 'm', endpoints: 'x' }] as never;
    assert.deepEqual(poolView(pool({ ...HEALTHY_STATUS, models: odd }), 'apps').models, [
      { name: 'm', endpoints: 0, aliasOf: null },
    ]);
  });
});
