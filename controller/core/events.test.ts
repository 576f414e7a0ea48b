import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { ReconcileResult } from './reconcile-result.ts';
import { EVENT_MESSAGE_MAX_BYTES, reconcileEvents } from './events.ts';
import { notReady, pool, ready, reconcile, secret, service, slice, type World } from './testing.ts';

const KEY = 'sk-live-0123456789';
const spec = {
  backends: [
    { name: 'in-cluster', service: { name: 'vllm', port: 8000 } },
    {
      name: 'provider',
      url: 'https://api.example.com/v1',
      apiKeySecretRef: { name: 'provider-key', key: 'apiKey' },
    },
  ],
};
const world = (overrides: Partial<World> = {}): World => ({
  services: [service('vllm')],
  slices: [slice('vllm', [ready('10.0.0.7'), ready('10.0.0.8')])],
  secrets: [secret('provider-key', { apiKey: KEY })],
  ...overrides,
});
const summary = (r: ReconcileResult) => r.events.map((e) => [e.type, e.reason, e.message]);

describe('reconcile events', () => {
  test('says nothing when a reconcile changes nothing', () => {
    const first = reconcile(pool(spec), world());
    assert.deepEqual(reconcile(pool(spec), world(), first).events, []);
  });

  test('reports only problems on the first reconcile', () => {
    assert.deepEqual(reconcile(pool(spec), world()).events, []);
    assert.deepEqual(summary(reconcile(pool(spec), world({ secrets: [] }))), [
      ['Warning', 'SecretNotFound', 'Backend provider: Secret provider-key not found'],
    ]);
  });

  test('warns when a Secret goes missing and tells when it is back', () => {
    const fine = reconcile(pool(spec), world());
    const missing = reconcile(pool(spec), world({ secrets: [] }), fine);
    assert.deepEqual(summary(missing), [
      ['Warning', 'SecretNotFound', 'Backend provider: Secret provider-key not found'],
      [
        'Normal',
        'EndpointsChanged',
        'Endpoints changed: 1 removed (provider/api.example.com:443); 2 endpoints in the snapshot',
      ],
    ]);
    const back = reconcile(pool(spec), world(), missing);
    assert.deepEqual(summary(back), [
      ['Normal', 'BackendsResolved', 'All 2 backends resolved'],
      [
        'Normal',
        'EndpointsChanged',
        'Endpoints changed: 1 added (provider/api.example.com:443); 3 endpoints in the snapshot',
      ],
    ]);
  });

  test('reports a change of reason under the same status', () => {
    const noSecret = reconcile(pool(spec), world({ secrets: [] }));
    const noKey = reconcile(
      pool(spec),
      world({ secrets: [secret('provider-key', { other: 'x' })] }),
      noSecret,
    );
    assert.deepEqual(summary(noKey), [
      ['Warning', 'SecretKeyNotFound', 'Backend provider: Secret provider-key has no key apiKey'],
    ]);
  });

  test('warns when the last endpoint stops being ready', () => {
    const onlyService = pool({ backends: [spec.backends[0]] });
    const fine = reconcile(onlyService, world());
    const down = reconcile(
      onlyService,
      world({ slices: [slice('vllm', [notReady('10.0.0.7', '10.0.0.8')])] }),
      fine,
    );
    assert.deepEqual(summary(down)[0], [
      'Warning',
      'NoReadyEndpoints',
      'No endpoint is ready: backend in-cluster has 0 of 2 ready',
    ]);
  });

  test('names added, removed and updated endpoints, at most five of each', () => {
    const many = (n: number, from: number) =>
      Array.from({ length: n }, (_, i) => `10.0.0.${from + i}`);
    const before = reconcile(
      pool(spec),
      world({ slices: [slice('vllm', [ready(...many(7, 10))])] }),
    );
    const after = reconcile(
      pool(spec),
      world({ slices: [slice('vllm', [ready(...many(7, 20))])] }),
      before,
    );
    assert.deepEqual(summary(after), [
      [
        'Normal',
        'EndpointsChanged',
        'Endpoints changed: 7 added (in-cluster/10.0.0.20:8000, in-cluster/10.0.0.21:8000, ' +
          'in-cluster/10.0.0.22:8000, in-cluster/10.0.0.23:8000, in-cluster/10.0.0.24:8000 and 2 more); ' +
          '7 removed (in-cluster/10.0.0.10:8000, in-cluster/10.0.0.11:8000, in-cluster/10.0.0.12:8000, ' +
          'in-cluster/10.0.0.13:8000, in-cluster/10.0.0.14:8000 and 2 more); 8 endpoints in the snapshot',
      ],
    ]);
    const dearer = reconcile(
      pool({ backends: [{ ...spec.backends[0], costPerMTok: 1 }, spec.backends[1]] }),
      world({ slices: [slice('vllm', [ready(...many(7, 20))])] }),
      after,
    );
    assert.equal(dearer.events.length, 1);
    assert.match(dearer.events[0]?.message ?? '', /^Endpoints changed: 7 updated \(/);
  });

  test('names the backend of a rotated key, never the key', () => {
    const before = reconcile(pool(spec), world());
    const after = reconcile(
      pool(spec),
      world({ secrets: [secret('provider-key', { apiKey: `${KEY}-rotated` })] }),
      before,
    );
    assert.deepEqual(summary(after), [
      ['Normal', 'ApiKeyChanged', 'The API key of backend provider changed'],
    ]);
    assert.ok(!JSON.stringify(after.events).includes(KEY));
  });

  test('reports a change of policy or timeouts', () => {
    const before = reconcile(pool(spec), world());
    const after = reconcile(pool({ ...spec, timeouts: { connect: '1s' } }), world(), before);
    assert.deepEqual(summary(after), [['Normal', 'PolicyChanged', 'Policy or timeouts changed']]);
  });

  test('reports a spec that stops being accepted once, not again as Ready', () => {
    const before = reconcile(pool(spec), world());
    const broken = reconcile(
      pool({ backends: [{ ...spec.backends[1], apiKeySecretRef: undefined, apiKeyEnv: 'KEY' }] }),
      world(),
      before,
    );
    assert.deepEqual(
      broken.events.map((e) => [e.type, e.reason]),
      [['Warning', 'UnsupportedField']],
    );
  });

  test('clips a long message to the limit of an event', () => {
    const previous = reconcile(pool(spec), world());
    const events = reconcileEvents(previous, {
      ...previous,
      conditions: previous.conditions.map((c) =>
        c.type === 'Ready'
          ? { ...c, status: 'False', reason: 'NoReadyEndpoints', message: 'é'.repeat(2000) }
          : c,
      ),
    });
    const message = events[0]?.message ?? '';
    assert.ok(new TextEncoder().encode(message).length <= EVENT_MESSAGE_MAX_BYTES);
    assert.match(message, /^é+\.\.\.$/);
  });
});

describe('reconcile events: aliases', () => {
  const aliasSpec = (models: string[]) => ({
    backends: [{ name: 'in-cluster', service: { name: 'vllm', port: 8000 }, models }],
    aliases: [{ name: 'gpt-4o-mini', model: 'llama' }],
  });
  const fine = () => world({ secrets: [] });
  const warning = [
    'Warning',
    'AliasTargetNotServed',
    "Alias gpt-4o-mini points at llama, which no ready endpoint declares in its backend's models: requests for gpt-4o-mini are answered 404 (model_not_found) until one does",
  ];

  test('warns once when an alias comes to point at a model no ready endpoint declares', () => {
    const served = reconcile(pool(aliasSpec(['llama', 'qwen'])), fine());
    assert.deepEqual(served.events, []);
    const down = reconcile(
      pool(aliasSpec(['llama', 'qwen'])),
      world({ slices: [slice('vllm', [notReady('10.0.0.7')])], secrets: [] }),
      served,
    );
    assert.deepEqual(
      summary(down).filter(([, reason]) => reason === 'AliasTargetNotServed'),
      [warning],
    );
    const still = reconcile(
      pool(aliasSpec(['llama', 'qwen'])),
      world({ slices: [slice('vllm', [notReady('10.0.0.7')])], secrets: [] }),
      down,
    );
    assert.deepEqual(still.events, []);
  });

  test('warns on the first reconcile about an alias whose model no backend lists', () => {
    assert.deepEqual(summary(reconcile(pool(aliasSpec(['qwen'])), fine())), [warning]);
  });
});
