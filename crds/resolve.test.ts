import { AFFINITY_MAX_EXTRA_IN_FLIGHT } from './policy-defaults.ts';
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { parse } from 'yaml';
import { Value } from '@sinclair/typebox/value';
import { FlowControlPolicySchema, type PoolPolicy } from './policy-types.ts';
import { BALANCE_EXAMPLE, FAILOVER_EXAMPLE, FLOW_CONTROL_EXAMPLE } from './examples.ts';
import type { InferencePool } from './inference-pool.schema.ts';
import { resolvePool, resolvePolicy, urlEndpoints } from './resolve.ts';
import { validatePool } from './validate.ts';

function valid(doc: unknown): InferencePool {
  const result = validatePool(doc);
  assert.ok(result.ok, JSON.stringify(result.ok ? [] : result.errors));
  return result.pool;
}

function withBackends(backends: unknown[]): InferencePool {
  return valid({
    apiVersion: 'switchyard.dev/v1alpha1',
    kind: 'InferencePool',
    metadata: { name: 'chat' },
    spec: { backends },
  });
}

const DEFAULT_POLICY: PoolPolicy = {
  mode: 'Balance',
  costWeightPerMs: undefined,
  defaultTtftMs: 500,
  models: [],
  affinity: {
    key: 'Prefix',
    header: 'x-session-id',
    prefixChars: 4096,
    maxSlowdown: 2.5,
    maxExtraInFlight: AFFINITY_MAX_EXTRA_IN_FLIGHT,
    loadFactor: 1.25,
  },
  health: {
    windowMs: 10_000,
    minRequests: 20,
    maxErrorRate: 0.5,
    consecutiveErrors: 5,
    max429Rate: 0.3,
    maxTtftSlowdown: 4,
    openForMs: 30_000,
    maxOpenForMs: 300_000,
  },
  retry: { budgetPercent: 20, minPerSecond: 10, maxAttempts: 3 },
  coldStart: { idleAfterMs: 60_000 },
};
const DEFAULT_TIMEOUTS = {
  connectMs: 5_000,
  firstByteMs: 60_000,
  idleMs: 300_000,
  clientStallMs: 60_000,
};

describe('resolvePool: the reference examples', () => {
  it('resolves the Balance example', () => {
    const result = resolvePool(valid(parse(BALANCE_EXAMPLE)), {});
    assert.deepEqual(result, {
      ok: true,
      policy: {
        ...DEFAULT_POLICY,
        health: { ...DEFAULT_POLICY.health, windowMs: 5_000, minRequests: 10 },
      },
      endpoints: ['a', 'b', 'c'].map((name, tier) => ({
        id: `${name}/127.0.0.1:910${tier + 1}`,
        backend: name,
        tier,
        url: `http://127.0.0.1:910${tier + 1}/v1`,
        costPerMTok: 0,
      })),
      timeouts: DEFAULT_TIMEOUTS,
    });
  });

  it('resolves the flow-control example', () => {
    const result = resolvePool(valid(parse(FLOW_CONTROL_EXAMPLE)), {});
    assert.ok(result.ok);
    assert.deepEqual(result.policy, {
      ...DEFAULT_POLICY,
      flowControl: {
        defaultPriority: 0,
        maxQueueWaitMs: 20_000,
        maxQueuedRequests: 500,
        maxQueuedBytes: 33_554_432,
        kvCacheSaturation: 0.9,
        sheddableHeadroom: 0.2,
        preemptSheddable: false,
        maxInFlightPerEndpoint: 32,
        workload: { kind: 'Header', header: 'x-team' },
        budgets: [
          { id: 'pool', tokensPerMinute: 2_000_000 },
          { id: 'workload:chat', workload: 'chat', requestsPerMinute: 1200 },
          {
            id: 'workload:batch',
            workload: 'batch',
            requestsPerMinute: 300,
            tokensPerMinute: 500_000,
          },
        ],
      },
    });
  });

  it('resolves the Failover example', () => {
    const result = resolvePool(valid(parse(FAILOVER_EXAMPLE)), {});
    assert.deepEqual(result, {
      ok: true,
      policy: { ...DEFAULT_POLICY, mode: 'Failover', costWeightPerMs: 0.001 },
      endpoints: [
        {
          id: 'primary/127.0.0.1:9101',
          backend: 'primary',
          tier: 0,
          url: 'http://127.0.0.1:9101/v1',
          costPerMTok: 0.2,
        },
        {
          id: 'secondary/127.0.0.1:9102',
          backend: 'secondary',
          tier: 1,
          url: 'http://127.0.0.1:9102/v1',
          costPerMTok: 0.6,
          model: 'other-model',
        },
      ],
      timeouts: DEFAULT_TIMEOUTS,
    });
  });
});

describe('resolvePool: policy', () => {
  it('turns every duration into ms and lower-cases the affinity header', () => {
    const pool = valid({
      apiVersion: 'switchyard.dev/v1alpha1',
      kind: 'InferencePool',
      metadata: { name: 'chat' },
      spec: {
        defaultTtft: '1s500ms',
        models: ['llama-3.1-8b'],
        affinity: { key: 'Header', header: 'X-Session-ID' },
        health: { window: '1m', openFor: '10s', maxOpenFor: '1h30m' },
        coldStart: { idleAfter: '2m' },
        timeouts: { connect: '250ms', firstByte: '2m', idle: '1h', clientStall: '90s' },
        backends: [{ name: 'a', url: 'http://127.0.0.1:1/v1' }],
      },
    });
    const result = resolvePolicy(pool.spec);
    assert.ok(result.ok);
    assert.equal(result.policy.defaultTtftMs, 1_500);
    assert.deepEqual(result.policy.models, ['llama-3.1-8b']);
    assert.equal(result.policy.affinity.header, 'x-session-id');
    assert.equal(result.policy.health.windowMs, 60_000);
    assert.equal(result.policy.health.openForMs, 10_000);
    assert.equal(result.policy.health.maxOpenForMs, 5_400_000);
    assert.equal(result.policy.coldStart.idleAfterMs, 120_000);
    assert.deepEqual(result.timeouts, {
      connectMs: 250,
      firstByteMs: 120_000,
      idleMs: 3_600_000,
      clientStallMs: 90_000,
    });
  });

  it('reports a duration that does not parse (a pool that skipped validation)', () => {
    const pool = valid(parse(BALANCE_EXAMPLE));
    pool.spec.timeouts.idle = 'forever';
    const result = resolvePolicy(pool.spec);
    assert.equal(result.ok, false);
    assert.deepEqual(result.ok ? [] : result.errors.map((e) => e.path), ['spec.timeouts.idle']);
  });

  it('does not share the models list with the pool', () => {
    const pool = valid(parse(BALANCE_EXAMPLE));
    pool.spec.models = ['a'];
    const result = resolvePolicy(pool.spec);
    assert.ok(result.ok);
    result.policy.models.push('b');
    assert.deepEqual(pool.spec.models, ['a']);
  });
});

describe('resolvePool: endpoints', () => {
  it('makes one endpoint per url, ids by host and port, trailing slashes trimmed', () => {
    const result = resolvePool(
      withBackends([
        { name: 'one', url: 'https://API.example.com/v1/' },
        {
          name: 'many',
          urls: ['http://10.0.0.1:8000/v1', 'http://10.0.0.2:8000/v1/', 'http://[::1]:8000'],
          costPerMTok: 0.5,
          model: 'm',
        },
      ]),
      {},
    );
    assert.ok(result.ok);
    assert.deepEqual(result.endpoints, [
      {
        id: 'one/api.example.com:443',
        backend: 'one',
        tier: 0,
        url: 'https://api.example.com/v1',
        costPerMTok: 0,
      },
      ...[
        ['10.0.0.1:8000', 'http://10.0.0.1:8000/v1'],
        ['10.0.0.2:8000', 'http://10.0.0.2:8000/v1'],
        ['[::1]:8000', 'http://[::1]:8000'],
      ].map(([hostPort, url]) => ({
        id: `many/${hostPort}`,
        backend: 'many',
        tier: 1,
        url,
        costPerMTok: 0.5,
        model: 'm',
      })),
    ]);
  });

  it('adds the path to the id when two urls share host and port', () => {
    const result = resolvePool(
      withBackends([
        {
          name: 'gw',
          urls: [
            'http://gateway:80/a/v1',
            'http://gateway/b/v1',
            'http://gateway:8080/v1',
            'http://gateway:80',
          ],
        },
      ]),
      {},
    );
    assert.ok(result.ok);
    assert.deepEqual(
      result.endpoints.map((e) => [e.id, e.url]),
      [
        ['gw/gateway:80/a/v1', 'http://gateway/a/v1'],
        ['gw/gateway:80/b/v1', 'http://gateway/b/v1'],
        ['gw/gateway:8080', 'http://gateway:8080/v1'],
        ['gw/gateway:80/', 'http://gateway'],
      ],
    );
  });

  it('falls back to the whole URL when http and https share a port', () => {
    const result = urlEndpoints(
      {
        name: 'odd',
        urls: ['http://h:8443/v1', 'https://h:8443/v1'],
        costPerMTok: 0,
        allowInsecureApiKey: false,
      },
      0,
      undefined,
    );
    assert.ok(result.ok);
    assert.deepEqual(
      result.endpoints.map((e) => e.id),
      ['odd/http://h:8443/v1', 'odd/https://h:8443/v1'],
    );
  });

  it('reports two urls that are the same endpoint', () => {
    const result = resolvePool(
      withBackends([{ name: 'a', urls: ['http://h/v1', 'http://h:80/v1/', 'http://H/v1'] }]),
      {},
    );
    assert.deepEqual(result, {
      ok: false,
      errors: [
        {
          path: 'spec.backends[0].urls[1]',
          message: 'is the same endpoint as spec.backends[0].urls[0] (http://h/v1)',
        },
        {
          path: 'spec.backends[0].urls[2]',
          message: 'is the same endpoint as spec.backends[0].urls[0] (http://h/v1)',
        },
      ],
    });
  });

  it('reports a URL that does not parse (a pool that skipped validation)', () => {
    const result = urlEndpoints(
      { name: 'a', url: 'mailto:x', costPerMTok: 0, allowInsecureApiKey: false },
      3,
      undefined,
    );
    assert.deepEqual(result, {
      ok: false,
      errors: [{ path: 'spec.backends[3].url', message: 'must be an http or https URL' }],
    });
  });
});

describe('resolvePool: API keys and what needs Kubernetes', () => {
  it('reads apiKeyEnv from the environment it is given', () => {
    const pool = withBackends([
      { name: 'a', url: 'https://api.example.com/v1', apiKeyEnv: 'PROVIDER_KEY' },
      { name: 'b', urls: ['http://127.0.0.1:1/v1', 'http://127.0.0.1:2/v1'], apiKeyEnv: 'LOCAL' },
      { name: 'c', url: 'http://127.0.0.1:3/v1' },
    ]);
    const result = resolvePool(pool, { PROVIDER_KEY: ' sk-123\n', LOCAL: 'local' });
    assert.ok(result.ok);
    assert.deepEqual(
      result.endpoints.map((e) => [e.id, e.apiKey]),
      [
        ['a/api.example.com:443', 'sk-123'],
        ['b/127.0.0.1:1', 'local'],
        ['b/127.0.0.1:2', 'local'],
        ['c/127.0.0.1:3', undefined],
      ],
    );
    assert.equal('apiKey' in (result.endpoints[3] ?? {}), false);
  });

  it('says which header the key goes in when the backend asks for x-api-key', () => {
    const pool = withBackends([
      { name: 'a', url: 'https://api.example.com/v1', apiKeyEnv: 'K', apiKeyHeader: 'x-api-key' },
      { name: 'b', url: 'https://b.example.com/v1', apiKeyEnv: 'K', apiKeyHeader: 'Authorization' },
      { name: 'c', url: 'https://c.example.com/v1', apiKeyHeader: 'x-api-key' },
    ]);
    const result = resolvePool(pool, { K: 'sk' });
    assert.ok(result.ok);
    assert.deepEqual(
      result.endpoints.map((e) => [e.apiKey, e.apiKeyHeader]),
      [
        ['sk', 'x-api-key'],
        ['sk', undefined],
        [undefined, undefined],
      ],
    );
  });

  it('reports a missing, empty or unusable variable, naming the field and never the key', () => {
    const pool = withBackends([
      { name: 'a', url: 'https://a.example/v1', apiKeyEnv: 'MISSING' },
      { name: 'b', url: 'https://b.example/v1', apiKeyEnv: 'EMPTY' },
      { name: 'c', url: 'https://c.example/v1', apiKeyEnv: 'BROKEN' },
      { name: 'd', url: 'https://d.example/v1', apiKeyEnv: 'toString' },
    ]);
    const result = resolvePool(pool, { EMPTY: '  ', BROKEN: 'sk-1\nInjected: yes' });
    assert.deepEqual(result, {
      ok: false,
      errors: [
        {
          path: 'spec.backends[0].apiKeyEnv',
          message: 'the environment variable MISSING is not set',
        },
        { path: 'spec.backends[1].apiKeyEnv', message: 'the environment variable EMPTY is empty' },
        {
          path: 'spec.backends[2].apiKeyEnv',
          message:
            'the environment variable BROKEN holds characters that cannot go into an HTTP header',
        },
        {
          path: 'spec.backends[3].apiKeyEnv',
          message: 'the environment variable toString is not set',
        },
      ],
    });
  });

  it('rejects service backends and apiKeySecretRef: they need Kubernetes', () => {
    const pool = withBackends([
      { name: 'in-cluster', service: { name: 'vllm', port: 8000 } },
      {
        name: 'provider',
        url: 'https://api.example.com/v1',
        apiKeySecretRef: { name: 'provider-key', key: 'apiKey' },
      },
      {
        name: 'both',
        service: { name: 'vllm', port: 'http' },
        apiKeySecretRef: { name: 'k', key: 'k' },
        allowInsecureApiKey: true,
      },
    ]);
    assert.deepEqual(resolvePool(pool, {}), {
      ok: false,
      errors: [
        {
          path: 'spec.backends[0].service',
          message: 'needs Kubernetes; a standalone pool file can only use url or urls',
        },
        {
          path: 'spec.backends[1].apiKeySecretRef',
          message: 'needs Kubernetes; a standalone pool file can only use apiKeyEnv',
        },
        {
          path: 'spec.backends[2].service',
          message: 'needs Kubernetes; a standalone pool file can only use url or urls',
        },
        {
          path: 'spec.backends[2].apiKeySecretRef',
          message: 'needs Kubernetes; a standalone pool file can only use apiKeyEnv',
        },
      ],
    });
  });
});

describe('resolvePool: models, weights and aliases', () => {
  function resolved(spec: Record<string, unknown>) {
    const pool = valid({
      apiVersion: 'switchyard.dev/v1alpha1',
      kind: 'InferencePool',
      metadata: { name: 'chat' },
      spec,
    });
    const result = resolvePool(pool, {});
    assert.ok(result.ok, JSON.stringify(result.ok ? [] : result.errors));
    return result;
  }

  it('gives each endpoint its backend’s models and weight, aliases not applied', () => {
    const result = resolved({
      backends: [
        {
          name: 'stable',
          urls: ['http://127.0.0.1:9101/v1', 'http://127.0.0.1:9102/v1'],
          models: ['llama-3.1-8b', 'sql-lora'],
          weight: 95,
        },
        { name: 'canary', url: 'http://127.0.0.1:9103/v1', models: ['llama-3.1-8b'], weight: 5 },
      ],
      aliases: [{ name: 'gpt-4o-mini', model: 'llama-3.1-8b' }],
    });
    assert.deepEqual(
      result.endpoints.map((e) => [e.id, e.models, e.weight]),
      [
        ['stable/127.0.0.1:9101', ['llama-3.1-8b', 'sql-lora'], 95],
        ['stable/127.0.0.1:9102', ['llama-3.1-8b', 'sql-lora'], 95],
        ['canary/127.0.0.1:9103', ['llama-3.1-8b'], 5],
      ],
    );
    assert.deepEqual(result.policy.aliases, [{ name: 'gpt-4o-mini', model: 'llama-3.1-8b' }]);
  });

  it('leaves every new field out when unset, so an unchanged pool resolves as before', () => {
    const result = resolved({
      backends: [{ name: 'a', url: 'http://127.0.0.1:9101/v1' }],
      aliases: [],
    });
    assert.deepEqual(result.policy, DEFAULT_POLICY);
    assert.ok(!('aliases' in result.policy));
    const [endpoint] = result.endpoints;
    assert.ok(endpoint !== undefined && !('models' in endpoint) && !('weight' in endpoint));
  });

  it('keeps a weight of 0', () => {
    const result = resolved({
      backends: [
        { name: 'a', url: 'http://127.0.0.1:9101/v1', weight: 1 },
        { name: 'b', url: 'http://127.0.0.1:9102/v1', weight: 0 },
      ],
    });
    assert.deepEqual(
      result.endpoints.map((e) => e.weight),
      [1, 0],
    );
  });

  it('does not share the lists with the pool', () => {
    const pool = withBackends([{ name: 'a', url: 'http://127.0.0.1:9101/v1', models: ['m'] }]);
    const result = resolvePool(pool, {});
    assert.ok(result.ok);
    result.endpoints[0]?.models?.push('x');
    assert.deepEqual(pool.spec.backends[0]?.models, ['m']);
  });
});

describe('resolvePolicy: flow control', () => {
  function withFlow(flowControl: unknown): InferencePool {
    return valid({
      apiVersion: 'switchyard.dev/v1alpha1',
      kind: 'InferencePool',
      metadata: { name: 'chat' },
      spec: { backends: [{ name: 'a', url: 'http://127.0.0.1:9101/v1' }], flowControl },
    });
  }

  function flowOf(pool: InferencePool) {
    const resolved = resolvePolicy(pool.spec);
    assert.ok(resolved.ok, JSON.stringify(resolved.ok ? [] : resolved.errors));
    return resolved.policy.flowControl;
  }

  it('is absent when the pool leaves flowControl out', () => {
    const resolved = resolvePolicy(withBackends([{ name: 'a', url: 'http://x/v1' }]).spec);
    assert.ok(resolved.ok);
    assert.equal('flowControl' in resolved.policy, false);
  });

  it('fills every default of an empty flowControl', () => {
    assert.deepEqual(flowOf(withFlow({})), {
      defaultPriority: 0,
      maxQueueWaitMs: 30_000,
      maxQueuedRequests: 1000,
      maxQueuedBytes: 67_108_864,
      kvCacheSaturation: 0.95,
      sheddableHeadroom: 0.2,
      preemptSheddable: false,
      budgets: [],
    });
  });

  it('resolves every field: ms, a lower-case header, budget ids', () => {
    const flow = flowOf(
      withFlow({
        defaultPriority: -2,
        maxQueueWait: '1m30s',
        queue: { maxRequests: 0, maxBytes: 1024 },
        saturation: {
          kvCacheUsage: 0.8,
          sheddableHeadroom: 0.1,
          preemptSheddable: true,
          maxInFlightPerEndpoint: 16,
        },
        workload: { header: 'X-Team' },
        budgets: [
          { workload: 'chat', requestsPerMinute: 600 },
          { tokensPerMinute: 100_000 },
          { workload: 'batch', requestsPerMinute: 60, tokensPerMinute: 20_000.5 },
        ],
      }),
    );
    assert.deepEqual(flow, {
      defaultPriority: -2,
      maxQueueWaitMs: 90_000,
      maxQueuedRequests: 0,
      maxQueuedBytes: 1024,
      kvCacheSaturation: 0.8,
      sheddableHeadroom: 0.1,
      preemptSheddable: true,
      maxInFlightPerEndpoint: 16,
      workload: { kind: 'Header', header: 'x-team' },
      budgets: [
        { id: 'workload:chat', workload: 'chat', requestsPerMinute: 600 },
        { id: 'pool', tokensPerMinute: 100_000 },
        {
          id: 'workload:batch',
          workload: 'batch',
          requestsPerMinute: 60,
          tokensPerMinute: 20_000.5,
        },
      ],
    });
  });

  it('resolves each workload source', () => {
    assert.deepEqual(flowOf(withFlow({ workload: { serviceAccount: {} } }))?.workload, {
      kind: 'ServiceAccount',
    });
    assert.deepEqual(
      flowOf(withFlow({ workload: { podLabel: 'app.kubernetes.io/name' } }))?.workload,
      {
        kind: 'PodLabel',
        label: 'app.kubernetes.io/name',
      },
    );
  });

  it('matches the resolved schema (what the snapshot carries)', () => {
    const flow = flowOf(
      withFlow({
        workload: { podLabel: 'team' },
        budgets: [{ requestsPerMinute: 1 }, { workload: 'a', tokensPerMinute: 0.5 }],
      }),
    );
    assert.ok(Value.Check(FlowControlPolicySchema, flow));
  });

  it('reports a maxQueueWait that does not parse (a pool that skipped validation)', () => {
    const pool = withFlow({});
    const resolved = resolvePolicy({
      ...pool.spec,
      flowControl: { ...pool.spec.flowControl!, maxQueueWait: '5' },
    });
    assert.ok(!resolved.ok);
    assert.deepEqual(
      resolved.errors.map((e) => e.path),
      ['spec.flowControl.maxQueueWait'],
    );
  });

  it('does not share the budgets with the pool', () => {
    const pool = withFlow({ budgets: [{ requestsPerMinute: 5 }] });
    const flow = flowOf(pool);
    assert.notEqual(flow?.budgets[0], pool.spec.flowControl?.budgets?.[0]);
  });
});
