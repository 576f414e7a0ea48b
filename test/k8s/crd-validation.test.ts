/**
 * The InferencePool CRD on a real kube-apiserver (harness/k8s/cluster.ts): it is accepted and
 * established, discovery shows its short name and category, a valid pool gets the schema's
 * defaults, the printer columns are served, and each invalid pool is rejected with the message
 * that crds/semantic.ts defines (the CEL rules' own text) or the API server's schema message.
 *
 * SWITCHYARD_K8S_TESTS=0 skips it (e.g. on a machine without Go).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  AFFINITY_LOAD_FACTOR,
  AFFINITY_MAX_EXTRA_IN_FLIGHT,
  AFFINITY_MAX_SLOWDOWN,
} from '../../crds/policy-defaults.ts';
import {
  BACKEND_HAS_SOURCE,
  BACKEND_SINGLE_SOURCE,
  BUDGET_HAS_RATE,
  BUDGET_WORKLOAD_NEEDS_SOURCE,
  BUDGETS_ONE_POOL_WIDE,
  BUDGETS_UNIQUE_WORKLOADS,
  SERVICE_KEY_NEEDS_OPT_IN,
  TLS_NEEDS_HTTPS,
  TLS_SINGLE_CA_SOURCE,
  TLS_SKIP_VERIFY_WITHOUT_CA,
  UNIQUE_BACKEND_NAMES,
  WORKLOAD_HAS_SOURCE,
  WORKLOAD_SINGLE_SOURCE,
} from '../../crds/semantic.ts';
import {
  startCluster,
  statusMessage,
  type Cluster,
  type K8sObject,
} from '../../harness/k8s/cluster.ts';
import { installInferencePoolCrd } from '../../harness/k8s/crd.ts';

const NAMESPACE = 'crd-validation';
const POOLS = `/apis/switchyard.dev/v1alpha1/namespaces/${NAMESPACE}/inferencepools`;

type Backend = Record<string, unknown>;
type Pool = K8sObject & { spec: Record<string, unknown> & { backends: Backend[] } };

function pool(name: string, spec: Partial<Pool['spec']> = {}): Pool {
  return {
    apiVersion: 'switchyard.dev/v1alpha1',
    kind: 'InferencePool',
    metadata: { name },
    spec: {
      backends: [
        { name: 'a', url: 'https://a.example.com/v1' },
        { name: 'b', service: { name: 'vllm', port: 8000 } },
      ],
      ...spec,
    },
  };
}

/** An error the API server must report: at `path`, with `message`. */
interface Expected {
  path: string;
  message: string;
}

/** The error the API server reports for a CEL rule: the TypeScript twin computes the message. */
function celError(
  rule: { check(self: unknown): string | undefined },
  self: unknown,
  path: string,
): Expected {
  const message = rule.check(self);
  assert.ok(message !== undefined, `the TypeScript twin accepts ${JSON.stringify(self)}`);
  return { path, message };
}

const escape = (text: string): string => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/**
 * What a Status cause says: `Invalid value: <value>: <message>`, where <value> is the rejected
 * value (0.5) or, for CEL rules, its type ("object") up to Kubernetes 1.34 and absent from 1.35.
 */
function causePattern(message: string): RegExp {
  return new RegExp(`^Invalid value: (\\S+: )?${escape(message)}$`);
}

const serviceAndUrl: Backend = {
  name: 'a',
  service: { name: 'vllm', port: 8000 },
  url: 'https://a.example.com/v1',
};
const noSource: Backend = { name: 'a' };
const duplicates: Backend[] = [
  { name: 'a', url: 'https://a.example.com/v1' },
  { name: 'b', url: 'https://b.example.com/v1' },
  { name: 'a', url: 'https://c.example.com/v1' },
];
const CA = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n';
const httpTls: Backend = { name: 'a', url: 'http://a.example.com/v1', tls: { caBundle: CA } };
const twoCas = { caBundle: CA, caSecretRef: { name: 'ca', key: 'ca.crt' } };
const skipWithCa = { caBundle: CA, insecureSkipVerify: true };
const serviceKey: Backend = {
  name: 'a',
  service: { name: 'vllm', port: 8000 },
  apiKeySecretRef: { name: 'keys', key: 'a' },
};

const byHeader = { header: 'x-team' };
const twoSources = { header: 'x-team', podLabel: 'team' };
const noRate = [{ workload: 'chat', requestsPerMinute: 60 }, { workload: 'batch' }];
const twoPoolWide = [{ requestsPerMinute: 60 }, { tokensPerMinute: 1000 }];
const sameWorkload = [
  { workload: 'chat', requestsPerMinute: 60 },
  { workload: 'batch', requestsPerMinute: 6 },
  { workload: 'chat', tokensPerMinute: 1000 },
];
const workloadBudgets = { budgets: [{ workload: 'chat', requestsPerMinute: 60 }] };

/** Invalid pools and what the API server must say about each (every string must appear). */
const INVALID: { name: string; spec: Partial<Pool['spec']>; errors: Expected[] }[] = [
  {
    name: 'a backend with both service and url',
    spec: { backends: [serviceAndUrl] },
    errors: [celError(BACKEND_SINGLE_SOURCE, serviceAndUrl, 'spec.backends[0]')],
  },
  {
    name: 'a backend without an endpoint source',
    spec: { backends: [{ name: 'ok', url: 'https://ok.example.com/v1' }, noSource] },
    errors: [celError(BACKEND_HAS_SOURCE, noSource, 'spec.backends[1]')],
  },
  {
    name: 'duplicate backend names',
    spec: { backends: duplicates },
    errors: [celError(UNIQUE_BACKEND_NAMES, duplicates, 'spec.backends')],
  },
  {
    name: 'affinity.maxSlowdown below 1',
    spec: { affinity: { maxSlowdown: 0.5 } },
    errors: [
      {
        path: 'spec.affinity.maxSlowdown',
        message: 'spec.affinity.maxSlowdown in body should be greater than or equal to 1',
      },
    ],
  },
  {
    name: 'health.maxErrorRate above 1',
    spec: { health: { maxErrorRate: 1.5 } },
    errors: [
      {
        path: 'spec.health.maxErrorRate',
        message: 'spec.health.maxErrorRate in body should be less than or equal to 1',
      },
    ],
  },
  {
    name: 'apiKeySecretRef on a service backend without allowInsecureApiKey',
    spec: { backends: [serviceKey] },
    errors: [
      // fieldPath moves the error from the backend to its apiKeySecretRef.
      celError(SERVICE_KEY_NEEDS_OPT_IN, serviceKey, 'spec.backends[0].apiKeySecretRef'),
    ],
  },
  {
    name: 'tls on an http url',
    spec: { backends: [httpTls] },
    errors: [celError(TLS_NEEDS_HTTPS, httpTls, 'spec.backends[0].tls')],
  },
  {
    name: 'tls with both caBundle and caSecretRef',
    spec: { backends: [{ name: 'a', url: 'https://a.example.com/v1', tls: twoCas }] },
    errors: [celError(TLS_SINGLE_CA_SOURCE, twoCas, 'spec.backends[0].tls')],
  },
  {
    name: 'tls with insecureSkipVerify and a CA',
    spec: { backends: [{ name: 'a', url: 'https://a.example.com/v1', tls: skipWithCa }] },
    errors: [
      celError(TLS_SKIP_VERIFY_WITHOUT_CA, skipWithCa, 'spec.backends[0].tls.insecureSkipVerify'),
    ],
  },
  {
    name: 'a flowControl.workload with two sources',
    spec: { flowControl: { workload: twoSources } },
    errors: [celError(WORKLOAD_SINGLE_SOURCE, twoSources, 'spec.flowControl.workload')],
  },
  {
    name: 'a flowControl.workload with no source',
    spec: { flowControl: { workload: {} } },
    errors: [celError(WORKLOAD_HAS_SOURCE, {}, 'spec.flowControl.workload')],
  },
  {
    name: 'a budget without a rate',
    spec: { flowControl: { workload: byHeader, budgets: noRate } },
    errors: [celError(BUDGET_HAS_RATE, noRate[1], 'spec.flowControl.budgets[1]')],
  },
  {
    name: 'two pool-wide budgets',
    spec: { flowControl: { budgets: twoPoolWide } },
    errors: [celError(BUDGETS_ONE_POOL_WIDE, twoPoolWide, 'spec.flowControl.budgets')],
  },
  {
    name: 'two budgets of one workload',
    spec: { flowControl: { workload: byHeader, budgets: sameWorkload } },
    errors: [celError(BUDGETS_UNIQUE_WORKLOADS, sameWorkload, 'spec.flowControl.budgets')],
  },
  {
    name: 'a workload budget without flowControl.workload',
    spec: { flowControl: workloadBudgets },
    errors: [celError(BUDGET_WORKLOAD_NEEDS_SOURCE, workloadBudgets, 'spec.flowControl.budgets')],
  },
  {
    name: 'flowControl.saturation.kvCacheUsage of 0',
    spec: { flowControl: { saturation: { kvCacheUsage: 0 } } },
    errors: [
      {
        path: 'spec.flowControl.saturation.kvCacheUsage',
        message: 'spec.flowControl.saturation.kvCacheUsage in body should be greater than 0',
      },
    ],
  },
];

const enabled = process.env['SWITCHYARD_K8S_TESTS'] !== '0';

describe('InferencePool CRD on a real API server', { skip: !enabled }, () => {
  let cluster: Cluster;

  before(async () => {
    cluster = await startCluster();
    await installInferencePoolCrd(cluster);
    await cluster.applyYaml(`apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ${NAMESPACE}\n`);
  });

  after(async () => {
    await cluster?.stop();
  });

  it('is served with short name ipool and category switchyard', async () => {
    const res = await cluster.request<{
      resources: {
        name: string;
        kind: string;
        namespaced: boolean;
        shortNames?: string[];
        categories?: string[];
      }[];
    }>('GET', '/apis/switchyard.dev/v1alpha1');
    assert.equal(res.status, 200, res.text);
    const resource = res.body.resources.find((r) => r.name === 'inferencepools');
    assert.ok(resource, res.text);
    assert.equal(resource.kind, 'InferencePool');
    assert.equal(resource.namespaced, true);
    assert.deepEqual(resource.shortNames, ['ipool']);
    assert.deepEqual(resource.categories, ['switchyard']);
    assert.ok(
      res.body.resources.some((r) => r.name === 'inferencepools/status'),
      'status subresource',
    );
  });

  it('accepts a valid pool and stores the schema defaults', async () => {
    const res = await cluster.request<Pool>('POST', POOLS, pool('valid'));
    assert.equal(res.status, 201, statusMessage(res));
    const stored = await cluster.request<Pool>('GET', `${POOLS}/valid`);
    assert.equal(stored.status, 200);
    const spec = stored.body.spec as Record<string, Record<string, unknown> | string>;
    assert.equal(spec['mode'], 'Balance');
    assert.equal(spec['defaultTtft'], '500ms');
    assert.deepEqual(spec['affinity'], {
      key: 'Prefix',
      header: 'x-session-id',
      prefixChars: 4096,
      maxSlowdown: AFFINITY_MAX_SLOWDOWN,
      maxExtraInFlight: AFFINITY_MAX_EXTRA_IN_FLIGHT,
      loadFactor: AFFINITY_LOAD_FACTOR,
    });
    const health = spec['health'] as Record<string, unknown>;
    assert.equal(health['maxErrorRate'], 0.5);
    assert.equal(health['openFor'], '30s');
    assert.equal(health['maxOpenFor'], '5m');
    const backends = stored.body.spec.backends;
    assert.equal(backends[1]?.['allowInsecureApiKey'], false, 'backend defaults');
    // The same pool through server-side apply.
    const [applied] = await cluster.applyYaml(JSON.stringify(pool('applied')), {
      namespace: NAMESPACE,
    });
    assert.equal((applied?.['spec'] as Record<string, unknown>)['mode'], 'Balance');
  });

  it('accepts flow control with every workload source and stores its defaults', async () => {
    const sources = [{ serviceAccount: {} }, { podLabel: 'app.kubernetes.io/name' }, byHeader];
    for (const [i, workload] of sources.entries()) {
      const budgets = [
        { tokensPerMinute: 100000 },
        { workload: 'chat', requestsPerMinute: 600 },
        { workload: 'batch', requestsPerMinute: 60, tokensPerMinute: 20000 },
      ];
      const res = await cluster.request<Pool>(
        'POST',
        POOLS,
        pool(`flow-${i}`, { flowControl: { workload, budgets } }),
      );
      assert.equal(res.status, 201, statusMessage(res));
      assert.deepEqual(res.body.spec['flowControl'], {
        defaultPriority: 0,
        maxQueueWait: '30s',
        queue: { maxRequests: 1000, maxBytes: 67108864 },
        saturation: { kvCacheUsage: 0.95, sheddableHeadroom: 0.2, preemptSheddable: false },
        workload,
        budgets,
      });
    }
  });

  it('serves the printer columns', async () => {
    const res = await cluster.request<{
      columnDefinitions: { name: string; type: string }[];
      rows: { cells: unknown[] }[];
    }>('GET', POOLS, undefined, {
      headers: { accept: 'application/json;as=Table;v=v1;g=meta.k8s.io' },
    });
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(
      res.body.columnDefinitions.map((c) => c.name),
      ['Name', 'Mode', 'Ready', 'Total', 'In-Sync', 'Age'],
    );
    const row = res.body.rows.find((r) => r.cells[0] === 'valid');
    assert.ok(row, res.text);
    assert.equal(row.cells[1], 'Balance');
  });

  for (const c of INVALID) {
    it(`rejects ${c.name}`, async () => {
      const res = await cluster.request<{
        details?: { causes?: { field?: string; message?: string }[] };
      }>('POST', POOLS, pool(`invalid-${INVALID.indexOf(c)}`, c.spec));
      assert.equal(res.status, 422, `expected 422 Invalid, got ${res.status}: ${res.text}`);
      const message = statusMessage(res);
      const causes = res.body.details?.causes ?? [];
      // Exactly these fields are reported: nothing else is wrong with the pool.
      assert.deepEqual(
        causes.map((cause) => cause.field).sort(),
        c.errors.map((e) => e.path).sort(),
        message,
      );
      for (const expected of c.errors) {
        const cause = causes.find((x) => x.field === expected.path);
        assert.match(cause?.message ?? '', causePattern(expected.message), message);
        assert.ok(message.includes(`${expected.path}: ${cause?.message}`), message);
        assert.ok(message.includes(expected.message), message);
      }
    });
  }
});
