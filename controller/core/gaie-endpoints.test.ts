import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  gaieEndpoints,
  gaieLabelSelector,
  gaiePoolName,
  type GaieBackend,
  type GaieLookup,
} from './gaie-endpoints.ts';
import type { GaieInferencePool, Pod } from './objects.ts';
import { Reason } from './problems.ts';
import { NAMESPACE, pool, reconcile } from './testing.ts';

const backend: GaieBackend = {
  name: 'gaie',
  tier: 0,
  inferencePoolRef: { name: 'llama' },
  costPerMTok: 0.5,
};

function gaiePool(spec: NonNullable<GaieInferencePool['spec']> = {}): GaieInferencePool {
  return {
    metadata: { name: 'llama', namespace: NAMESPACE },
    spec: {
      selector: { matchLabels: { app: 'llama' } },
      targetPorts: [{ number: 8000 }],
      ...spec,
    },
  };
}

/** A member pod as a kubelet reports it: labelled, with an IP, Ready unless said otherwise. */
function pod(
  ip: string | null,
  o: { ready?: boolean; labels?: Record<string, string>; deleting?: boolean } = {},
): Pod {
  return {
    metadata: {
      name: `llama-${ip ?? 'pending'}`,
      namespace: NAMESPACE,
      labels: o.labels ?? { app: 'llama', 'pod-template-hash': 'abc' },
      ...(o.deleting === true ? { deletionTimestamp: '2026-12-06T00:00:00Z' } : {}),
    },
    status: {
      podIP: ip,
      conditions: [
        { type: 'PodScheduled', status: 'True' },
        { type: 'Ready', status: o.ready === false ? 'False' : 'True' },
      ],
    },
  };
}

const found = (p: GaieInferencePool, pods: Pod[]): GaieLookup => ({ kind: 'found', pool: p, pods });
const ids = (r: ReturnType<typeof gaieEndpoints>): string[] =>
  r.ok ? r.endpoints.map((e) => e.id) : [];

describe('gaieEndpoints', () => {
  test('each ready member pod is an endpoint on each target port, over plain http', () => {
    const r = gaieEndpoints(
      backend,
      NAMESPACE,
      found(gaiePool({ targetPorts: [{ number: 8001 }, { number: 8000 }] }), [
        pod('10.0.0.2'),
        pod('10.0.0.1'),
      ]),
    );
    assert.ok(r.ok);
    assert.deepEqual(r.endpoints, [
      {
        id: 'gaie/10.0.0.1:8000',
        backend: 'gaie',
        tier: 0,
        url: 'http://10.0.0.1:8000/v1',
        costPerMTok: 0.5,
      },
      {
        id: 'gaie/10.0.0.1:8001',
        backend: 'gaie',
        tier: 0,
        url: 'http://10.0.0.1:8001/v1',
        costPerMTok: 0.5,
      },
      {
        id: 'gaie/10.0.0.2:8000',
        backend: 'gaie',
        tier: 0,
        url: 'http://10.0.0.2:8000/v1',
        costPerMTok: 0.5,
      },
      {
        id: 'gaie/10.0.0.2:8001',
        backend: 'gaie',
        tier: 0,
        url: 'http://10.0.0.2:8001/v1',
        costPerMTok: 0.5,
      },
    ]);
    assert.equal(r.total, 4);
  });

  test("carries the backend's model rewrite to every endpoint, as a Service backend does", () => {
    const r = gaieEndpoints(
      { ...backend, model: 'llama-3.1-8b' },
      NAMESPACE,
      found(gaiePool(), [pod('10.0.0.1')]),
    );
    assert.ok(r.ok);
    assert.deepEqual(
      r.endpoints.map((e) => e.model),
      ['llama-3.1-8b'],
    );
  });

  test('leaves out pods not ready, being deleted, without an IP, or not matching every label', () => {
    const r = gaieEndpoints(
      backend,
      NAMESPACE,
      found(gaiePool({ selector: { matchLabels: { app: 'llama', tier: 'gpu' } } }), [
        pod('10.0.0.1', { labels: { app: 'llama', tier: 'gpu' } }),
        pod('10.0.0.2', { labels: { app: 'llama', tier: 'gpu' }, ready: false }),
        pod('10.0.0.3', { labels: { app: 'llama', tier: 'gpu' }, deleting: true }),
        pod(null, { labels: { app: 'llama', tier: 'gpu' } }),
        pod('10.0.0.5', { labels: { app: 'llama' } }),
        { metadata: { labels: { app: 'llama', tier: 'gpu' } }, status: { podIP: '10.0.0.6' } },
        { metadata: { labels: { app: 'llama', tier: 'gpu' } } },
        {},
      ]),
    );
    assert.deepEqual(ids(r), ['gaie/10.0.0.1:8000']);
    // Counted: the four members with an IP, and the two pending ones (no IP yet).
    assert.ok(r.ok);
    assert.equal(r.total, 6);
  });

  test('one endpoint for two pods on one IP (an IP reused before the old pod is gone)', () => {
    const r = gaieEndpoints(
      backend,
      NAMESPACE,
      found(gaiePool(), [pod('10.0.0.1', { deleting: true }), pod('10.0.0.1')]),
    );
    assert.deepEqual(ids(r), ['gaie/10.0.0.1:8000']);
    assert.ok(r.ok);
    assert.equal(r.total, 1);
  });

  test('brackets an IPv6 pod IP', () => {
    const r = gaieEndpoints(backend, NAMESPACE, found(gaiePool(), [pod('fd00::1')]));
    assert.ok(r.ok);
    assert.equal(r.endpoints[0]?.url, 'http://[fd00::1]:8000/v1');
    assert.equal(r.endpoints[0]?.id, 'gaie/[fd00::1]:8000');
  });

  test('an empty pool (no member, or none ready) resolves with no endpoints', () => {
    const r = gaieEndpoints(backend, NAMESPACE, found(gaiePool(), []));
    assert.deepEqual(r, { ok: true, endpoints: [], total: 0 });
  });

  test('a missing GAIE pool is named with its group and version', () => {
    assert.deepEqual(gaieEndpoints(backend, NAMESPACE, { kind: 'not-found' }), {
      ok: false,
      problem: {
        reason: Reason.InferencePoolNotFound,
        message: 'InferencePool inference.networking.k8s.io/v1 apps/llama not found',
      },
    });
    assert.deepEqual(gaieEndpoints(backend, NAMESPACE, undefined), {
      ok: false,
      problem: {
        reason: Reason.InferencePoolNotFound,
        message: 'InferencePool inference.networking.k8s.io/v1 apps/llama not found',
      },
    });
    const r = gaieEndpoints(backend, NAMESPACE, { kind: 'not-found', why: 'no CRD' });
    assert.ok(!r.ok);
    assert.equal(r.problem.message, `${gaiePoolName(NAMESPACE, 'llama')} not found: no CRD`);
  });

  test('an unreadable GAIE pool says why', () => {
    const r = gaieEndpoints(backend, NAMESPACE, { kind: 'unreadable', why: 'HTTP 403' });
    assert.ok(!r.ok);
    assert.equal(r.problem.reason, Reason.InferencePoolNotReadable);
    assert.equal(
      r.problem.message,
      'InferencePool inference.networking.k8s.io/v1 apps/llama cannot be read: HTTP 403',
    );
  });

  test('refuses an h2c pool: the sidecar speaks HTTP/1.1 upstream', () => {
    const r = gaieEndpoints(
      backend,
      NAMESPACE,
      found(gaiePool({ appProtocol: 'kubernetes.io/h2c' }), [pod('10.0.0.1')]),
    );
    assert.ok(!r.ok);
    assert.equal(r.problem.reason, Reason.InferencePoolUnsupported);
    assert.match(r.problem.message, /appProtocol kubernetes\.io\/h2c.*HTTP\/1\.1/);
    assert.deepEqual(
      ids(
        gaieEndpoints(
          backend,
          NAMESPACE,
          found(gaiePool({ appProtocol: 'http' }), [pod('10.0.0.1')]),
        ),
      ),
      ['gaie/10.0.0.1:8000'],
    );
  });

  test('refuses a pool without matchLabels (it would select every pod) or target ports', () => {
    for (const spec of [
      { selector: { matchLabels: {} } },
      { selector: { matchLabels: null } },
      { selector: null },
    ]) {
      const r = gaieEndpoints(backend, NAMESPACE, found(gaiePool(spec), [pod('10.0.0.1')]));
      assert.ok(!r.ok);
      assert.match(r.problem.message, /no spec\.selector\.matchLabels/);
    }
    for (const targetPorts of [[], null, [{ number: null }], [{ number: 0 }, { number: 1.5 }]]) {
      const r = gaieEndpoints(backend, NAMESPACE, found(gaiePool({ targetPorts }), []));
      assert.ok(!r.ok);
      assert.match(r.problem.message, /no spec\.targetPorts/);
    }
    const bare = gaieEndpoints(backend, NAMESPACE, found({}, []));
    assert.ok(!bare.ok);
  });
});

describe('gaieLabelSelector', () => {
  test('is the matchLabels as a label selector, keys sorted', () => {
    assert.equal(
      gaieLabelSelector(gaiePool({ selector: { matchLabels: { b: '2', 'x.io/a': '1' } } })),
      'b=2,x.io/a=1',
    );
    assert.equal(gaieLabelSelector(gaiePool({ selector: { matchLabels: {} } })), undefined);
    assert.equal(gaieLabelSelector({}), undefined);
  });
});

describe('desiredSnapshot with an inferencePoolRef backend', () => {
  const chat = pool({
    mode: 'Failover',
    backends: [
      { name: 'gaie', inferencePoolRef: { name: 'llama' }, models: ['llama-3'] },
      { name: 'spare', url: 'https://api.example.com/v1' },
    ],
  });

  test('the GAIE pool is a tier before the provider, with its declared models', () => {
    const result = reconcile(chat, {
      gaiePools: new Map([['llama', found(gaiePool(), [pod('10.0.0.1')])]]),
    });
    assert.deepEqual(
      result.snapshot?.endpoints.map((e) => [e.id, e.tier, e.models]),
      [
        ['gaie/10.0.0.1:8000', 0, ['llama-3']],
        ['spare/api.example.com:443', 1, undefined],
      ],
    );
    assert.equal(result.conditions.find((c) => c.type === 'ResolvedRefs')?.status, 'True');
  });

  test('a missing GAIE pool: ResolvedRefs False naming it, the provider still serves', () => {
    const result = reconcile(chat);
    assert.deepEqual(
      result.conditions.find((c) => c.type === 'ResolvedRefs'),
      {
        type: 'ResolvedRefs',
        status: 'False',
        reason: 'InferencePoolNotFound',
        message: 'Backend gaie: InferencePool inference.networking.k8s.io/v1 apps/llama not found',
      },
    );
    assert.deepEqual(
      result.snapshot?.endpoints.map((e) => e.id),
      ['spare/api.example.com:443'],
    );
  });

  test('an empty GAIE pool is like an empty Service: resolved, no endpoints of its own', () => {
    const result = reconcile(
      pool({ backends: [{ name: 'gaie', inferencePoolRef: { name: 'llama' } }] }),
      { gaiePools: new Map([['llama', found(gaiePool(), [pod('10.0.0.1', { ready: false })])]]) },
    );
    assert.equal(result.conditions.find((c) => c.type === 'ResolvedRefs')?.status, 'True');
    assert.deepEqual(
      result.conditions.find((c) => c.type === 'Ready'),
      {
        type: 'Ready',
        status: 'False',
        reason: 'NoReadyEndpoints',
        message: 'No endpoint is ready: backend gaie has 0 of 1 ready',
      },
    );
  });
});
