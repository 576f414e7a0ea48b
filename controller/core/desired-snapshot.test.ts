import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { InferencePool } from '../../crds/inference-pool.schema.ts';
import { parseSnapshot } from '../../crds/snapshot.ts';
import { desiredSnapshot } from './desired-snapshot.ts';
import type { ReconcileResult } from './reconcile-result.ts';
import type { EndpointSlice } from './objects.ts';
import {
  NAMESPACE,
  base64,
  inputOf,
  notReady,
  pool,
  ready,
  reconcile,
  secret,
  service,
  slice,
  terminating,
} from './testing.ts';

const inCluster = { name: 'in-cluster', service: { name: 'vllm', port: 8000 }, costPerMTok: 0.2 };
const provider = {
  name: 'provider',
  url: 'https://api.example.com/v1',
  model: 'provider-model',
  apiKeySecretRef: { name: 'provider-key', key: 'apiKey' },
  costPerMTok: 0.6,
};
const KEY = 'sk-live-0123456789';

const condition = (r: ReconcileResult, type: string) => {
  const c = r.conditions.find((x) => x.type === type);
  assert.ok(c, `no ${type} condition`);
  return c;
};
const ids = (r: ReconcileResult) => r.snapshot?.endpoints.map((e) => e.id);
const urls = (r: ReconcileResult) => r.snapshot?.endpoints.map((e) => e.url);

describe('desiredSnapshot: service backends', () => {
  test('routes to every ready address of the Service slices', () => {
    const r = reconcile(pool({ backends: [inCluster] }), {
      services: [service('vllm')],
      slices: [
        slice('vllm', [ready('10.0.0.7'), ready('10.0.0.8')]),
        slice('vllm', [ready('10.0.1.2')]),
      ],
    });
    assert.deepEqual(r.snapshot?.endpoints, [
      {
        id: 'in-cluster/10.0.0.7:8000',
        backend: 'in-cluster',
        tier: 0,
        url: 'http://10.0.0.7:8000/v1',
        costPerMTok: 0.2,
      },
      {
        id: 'in-cluster/10.0.0.8:8000',
        backend: 'in-cluster',
        tier: 0,
        url: 'http://10.0.0.8:8000/v1',
        costPerMTok: 0.2,
      },
      {
        id: 'in-cluster/10.0.1.2:8000',
        backend: 'in-cluster',
        tier: 0,
        url: 'http://10.0.1.2:8000/v1',
        costPerMTok: 0.2,
      },
    ]);
    assert.deepEqual(r.endpoints, { ready: 3, total: 3, drifted: 0 });
    assert.deepEqual(
      r.conditions.map((c) => [c.type, c.status, c.reason, c.message]),
      [
        ['Accepted', 'True', 'Accepted', 'Spec accepted'],
        ['ResolvedRefs', 'True', 'BackendsResolved', 'The backend resolved'],
        ['Ready', 'True', 'EndpointsReady', '3 of 3 endpoints ready'],
      ],
    );
    assert.deepEqual(r.backends, [
      { name: 'in-cluster', tier: 0, ready: 3, total: 3, problems: [] },
    ]);
  });

  test('ignores endpoints that are not ready, but counts them', () => {
    const r = reconcile(pool({ backends: [inCluster] }), {
      services: [service('vllm')],
      slices: [slice('vllm', [ready('10.0.0.7'), notReady('10.0.0.8')])],
    });
    assert.deepEqual(ids(r), ['in-cluster/10.0.0.7:8000']);
    assert.deepEqual(r.endpoints, { ready: 1, total: 2, drifted: 0 });
    assert.equal(condition(r, 'Ready').message, '1 of 2 endpoints ready');
  });

  test('counts an endpoint without a ready condition as ready, as the API says', () => {
    const r = reconcile(pool({ backends: [inCluster] }), {
      services: [service('vllm')],
      slices: [
        slice('vllm', [
          { addresses: ['10.0.0.7'] },
          { addresses: ['10.0.0.8'], conditions: {} },
          { addresses: ['10.0.0.9'], conditions: { ready: null } },
        ]),
      ],
    });
    assert.deepEqual(ids(r), [
      'in-cluster/10.0.0.7:8000',
      'in-cluster/10.0.0.8:8000',
      'in-cluster/10.0.0.9:8000',
    ]);
  });

  test('never routes to a terminating endpoint, even one that still serves or says ready', () => {
    const r = reconcile(pool({ backends: [inCluster] }), {
      services: [service('vllm')],
      slices: [
        slice('vllm', [
          ready('10.0.0.7'),
          terminating('10.0.0.8'),
          // publishNotReadyAddresses: ready stays true while the pod terminates
          { addresses: ['10.0.0.9'], conditions: { ready: true, terminating: true } },
        ]),
      ],
    });
    assert.deepEqual(ids(r), ['in-cluster/10.0.0.7:8000']);
    assert.deepEqual(r.endpoints, { ready: 1, total: 3, drifted: 0 });
  });

  test('resolves a numeric service port to the target port the slices carry', () => {
    const r = reconcile(
      pool({ backends: [{ ...inCluster, service: { name: 'vllm', port: 80 } }] }),
      {
        services: [service('vllm', [{ name: 'http', port: 80, targetPort: 8000 }])],
        slices: [
          slice('vllm', [ready('10.0.0.7')], {
            ports: [{ name: 'http', port: 8000, protocol: 'TCP' }],
          }),
        ],
      },
    );
    assert.deepEqual(urls(r), ['http://10.0.0.7:8000/v1']);
    assert.deepEqual(ids(r), ['in-cluster/10.0.0.7:8000']);
  });

  test('resolves a named service port through the slice ports', () => {
    const r = reconcile(
      pool({ backends: [{ ...inCluster, service: { name: 'vllm', port: 'http' } }] }),
      {
        services: [
          service('vllm', [
            { name: 'metrics', port: 9090, targetPort: 9090 },
            { name: 'http', port: 80, targetPort: 'web' },
          ]),
        ],
        slices: [
          slice('vllm', [ready('10.0.0.7')], {
            ports: [
              { name: 'metrics', port: 9090 },
              { name: 'http', port: 8000 },
            ],
          }),
        ],
      },
    );
    assert.deepEqual(urls(r), ['http://10.0.0.7:8000/v1']);
  });

  test('matches the single unnamed port of a Service to a slice port without a name', () => {
    const r = reconcile(pool({ backends: [{ ...inCluster, model: 'llama' }] }), {
      services: [service('vllm', [{ port: 8000, targetPort: 9000 }])],
      slices: [slice('vllm', [ready('10.0.0.7')], { ports: [{ port: 9000 }] })],
    });
    assert.deepEqual(
      r.snapshot?.endpoints.map((e) => [e.url, e.model]),
      [['http://10.0.0.7:9000/v1', 'llama']],
    );
  });

  test('reads the pod port per slice when a named targetPort differs between pods', () => {
    const r = reconcile(
      pool({ backends: [{ ...inCluster, service: { name: 'vllm', port: 'http' } }] }),
      {
        services: [service('vllm', [{ name: 'http', port: 80, targetPort: 'web' }])],
        slices: [
          slice('vllm', [ready('10.0.0.7')], { ports: [{ name: 'http', port: 8000 }] }),
          slice('vllm', [ready('10.0.0.8')], { ports: [{ name: 'http', port: 8001 }] }),
        ],
      },
    );
    assert.deepEqual(urls(r), ['http://10.0.0.7:8000/v1', 'http://10.0.0.8:8001/v1']);
  });

  test('skips slices that do not carry the port', () => {
    const r = reconcile(
      pool({ backends: [{ ...inCluster, service: { name: 'vllm', port: 'http' } }] }),
      {
        services: [
          service('vllm', [
            { name: 'http', port: 80 },
            { name: 'metrics', port: 9090 },
          ]),
        ],
        slices: [
          slice('vllm', [ready('10.0.0.7')], { ports: [{ name: 'http', port: 8000 }] }),
          slice('vllm', [ready('10.0.0.8')], { ports: [{ name: 'metrics', port: 9090 }] }),
          slice('vllm', [ready('10.0.0.9')], {
            ports: [{ name: 'http', port: 8000, protocol: 'UDP' }],
          }),
          slice('vllm', [ready('10.0.0.10')], { ports: null }),
        ],
      },
    );
    assert.deepEqual(ids(r), ['in-cluster/10.0.0.7:8000']);
    assert.deepEqual(r.endpoints, { ready: 1, total: 1, drifted: 0 });
  });

  test('names a service port that does not exist in ResolvedRefs', () => {
    const p = pool({ backends: [{ ...inCluster, service: { name: 'vllm', port: 9000 } }] });
    const r = reconcile(p, {
      services: [
        service('vllm', [
          { name: 'http', port: 80 },
          { name: 'metrics', port: 9090 },
        ]),
      ],
      slices: [slice('vllm', [ready('10.0.0.7')])],
    });
    const refs = condition(r, 'ResolvedRefs');
    assert.equal(refs.status, 'False');
    assert.equal(refs.reason, 'ServicePortNotFound');
    assert.equal(
      refs.message,
      'Backend in-cluster: Service vllm has no TCP port 9000; its ports are 80 (http), 9090 (metrics)',
    );
    const named = reconcile(
      pool({ backends: [{ ...inCluster, service: { name: 'vllm', port: 'grpc' } }] }),
      {
        services: [service('vllm', [{ name: 'http', port: 80 }])],
      },
    );
    assert.match(
      condition(named, 'ResolvedRefs').message,
      /has no TCP port named grpc; its ports are 80 \(http\)$/,
    );
  });

  test('does not take a UDP port for the TCP port of the same number', () => {
    const r = reconcile(
      pool({ backends: [{ ...inCluster, service: { name: 'vllm', port: 53 } }] }),
      {
        services: [service('vllm', [{ name: 'dns', port: 53, protocol: 'UDP' }, { port: 80 }])],
      },
    );
    assert.equal(condition(r, 'ResolvedRefs').reason, 'ServicePortNotFound');
    assert.match(condition(r, 'ResolvedRefs').message, /its ports are 53 UDP \(dns\), 80$/);
  });

  test('names a missing Service in ResolvedRefs and sends nothing when it was the only backend', () => {
    const r = reconcile(pool({ backends: [inCluster] }), {
      slices: [slice('vllm', [ready('10.0.0.7')])],
    });
    assert.deepEqual(
      [
        condition(r, 'ResolvedRefs').status,
        condition(r, 'ResolvedRefs').reason,
        condition(r, 'ResolvedRefs').message,
      ],
      ['False', 'ServiceNotFound', 'Backend in-cluster: Service vllm not found'],
    );
    assert.equal(r.snapshot, undefined);
    assert.equal(r.hash, '');
    assert.deepEqual(
      [condition(r, 'Ready').status, condition(r, 'Ready').reason],
      ['False', 'BackendsNotResolved'],
    );
    assert.deepEqual(r.endpoints, { ready: 0, total: 0, drifted: 0 });
  });

  test('refuses an ExternalName Service, which has no endpoints', () => {
    const r = reconcile(pool({ backends: [inCluster] }), {
      services: [service('vllm', [], 'ExternalName')],
    });
    assert.equal(condition(r, 'ResolvedRefs').reason, 'ServiceTypeUnsupported');
    assert.match(
      condition(r, 'ResolvedRefs').message,
      /Service vllm is of type ExternalName.*use url/,
    );
  });

  test('dials the backend port on the pods of a Service without ports', () => {
    const r = reconcile(pool({ backends: [inCluster] }), {
      services: [service('vllm', [])],
      slices: [slice('vllm', [ready('10.0.0.7')], { ports: [] })],
    });
    assert.deepEqual(urls(r), ['http://10.0.0.7:8000/v1']);
    const named = reconcile(
      pool({ backends: [{ ...inCluster, service: { name: 'vllm', port: 'http' } }] }),
      {
        services: [{ metadata: { name: 'vllm' }, spec: {} }],
      },
    );
    assert.equal(
      condition(named, 'ResolvedRefs').message,
      'Backend in-cluster: Service vllm has no ports, so no port named http',
    );
  });

  test('takes the numeric targetPort when a slice port has no number ("all ports")', () => {
    const world = (targetPort: number | string) => ({
      services: [service('vllm', [{ port: 8000, targetPort }])],
      slices: [slice('vllm', [ready('10.0.0.7')], { ports: [{ name: '', port: null }] })],
    });
    assert.deepEqual(urls(reconcile(pool({ backends: [inCluster] }), world(8080))), [
      'http://10.0.0.7:8080/v1',
    ]);
    const noNumber = reconcile(pool({ backends: [inCluster] }), world('web'));
    assert.deepEqual(noNumber.snapshot?.endpoints, []);
    assert.equal(
      condition(noNumber, 'Ready').message,
      'No endpoint is ready: backend in-cluster has no endpoints',
    );
  });

  test('brackets IPv6 addresses in ids and URLs', () => {
    const r = reconcile(pool({ backends: [inCluster] }), {
      services: [service('vllm')],
      slices: [slice('vllm', [ready('fd00::7')], { addressType: 'IPv6' })],
    });
    assert.deepEqual(
      r.snapshot?.endpoints.map((e) => [e.id, e.url]),
      [['in-cluster/[fd00::7]:8000', 'http://[fd00::7]:8000/v1']],
    );
  });

  test('speaks https when the port appProtocol or name says so', () => {
    const cases: [
      string,
      Parameters<typeof service>[1],
      NonNullable<Parameters<typeof slice>[2]>['ports'],
      string,
    ][] = [
      [
        'appProtocol https on the Service port',
        [{ name: 'web', port: 8000, appProtocol: 'https' }],
        [{ name: 'web', port: 8443 }],
        'https',
      ],
      [
        'a Service port named https',
        [{ name: 'https', port: 8000 }],
        [{ name: 'https', port: 8443 }],
        'https',
      ],
      [
        'a Service port named https-<suffix>',
        [{ name: 'https-api', port: 8000 }],
        [{ name: 'https-api', port: 8443 }],
        'https',
      ],
      [
        'appProtocol HTTPS on the slice port',
        [{ name: 'web', port: 8000 }],
        [{ name: 'web', port: 8443, appProtocol: 'HTTPS' }],
        'https',
      ],
      [
        'a plain port',
        [{ name: 'web', port: 8000, appProtocol: 'kubernetes.io/h2c' }],
        [{ name: 'web', port: 8443 }],
        'http',
      ],
      [
        'a port named httpsx',
        [{ name: 'httpsx', port: 8000 }],
        [{ name: 'httpsx', port: 8443 }],
        'http',
      ],
    ];
    for (const [what, servicePorts, slicePorts, scheme] of cases) {
      const r = reconcile(pool({ backends: [inCluster] }), {
        services: [service('vllm', servicePorts)],
        slices: [slice('vllm', [ready('10.0.0.7')], { ports: slicePorts })],
      });
      assert.deepEqual(urls(r), [`${scheme}://10.0.0.7:8443/v1`], what);
    }
  });

  test('lists an address found in two slices once, routable when either copy is ready', () => {
    const r = reconcile(pool({ backends: [inCluster] }), {
      services: [service('vllm')],
      slices: [
        slice('vllm', [notReady('10.0.0.7'), ready('10.0.0.8')]),
        slice('vllm', [ready('10.0.0.7'), notReady('10.0.0.8'), notReady('10.0.0.9')]),
        slice('vllm', [notReady('10.0.0.9')]),
      ],
    });
    assert.deepEqual(ids(r), ['in-cluster/10.0.0.7:8000', 'in-cluster/10.0.0.8:8000']);
    assert.deepEqual(r.endpoints, { ready: 2, total: 3, drifted: 0 });
  });

  test('ignores a slice labelled for another Service but keeps an unlabelled one', () => {
    const foreign = slice('other', [ready('10.0.0.8')]);
    const unlabelled = slice('vllm', [ready('10.0.0.9')], { labels: {} });
    const input = inputOf(pool({ backends: [inCluster] }), { services: [service('vllm')] });
    const slicesByService = new Map<string, EndpointSlice[]>([
      ['vllm', [slice('vllm', [ready('10.0.0.7')]), foreign, unlabelled]],
    ]);
    const r = desiredSnapshot({ ...input, slicesByService });
    assert.deepEqual(ids(r), ['in-cluster/10.0.0.7:8000', 'in-cluster/10.0.0.9:8000']);
  });

  test('copes with empty addresses, endpoints without addresses and slices without endpoints', () => {
    const r = reconcile(pool({ backends: [inCluster] }), {
      services: [service('vllm')],
      slices: [
        slice('vllm', [{ addresses: [''] }, { addresses: null }, ready('10.0.0.7')]),
        { ...slice('vllm', []), endpoints: null },
      ],
    });
    assert.deepEqual(ids(r), ['in-cluster/10.0.0.7:8000']);
    assert.deepEqual(r.endpoints, { ready: 1, total: 1, drifted: 0 });
  });

  test('keeps backends in spec order and sorts endpoints by id within each', () => {
    const r = reconcile(
      pool({
        mode: 'Failover',
        backends: [
          { name: 'zeta', service: { name: 'vllm', port: 8000 } },
          { name: 'alpha', urls: ['https://b.example/v1', 'https://a.example/v1'] },
        ],
      }),
      {
        services: [service('vllm')],
        slices: [
          slice('vllm', [ready('10.0.0.9', '10.0.0.10')]),
          slice('vllm', [ready('10.0.0.1')]),
        ],
      },
    );
    assert.deepEqual(
      r.snapshot?.endpoints.map((e) => [e.tier, e.id]),
      [
        // code-unit order: ':' sorts after '0'
        [0, 'zeta/10.0.0.10:8000'],
        [0, 'zeta/10.0.0.1:8000'],
        [0, 'zeta/10.0.0.9:8000'],
        [1, 'alpha/a.example:443'],
        [1, 'alpha/b.example:443'],
      ],
    );
  });
});

describe('desiredSnapshot: url backends and API keys', () => {
  test('resolves url and urls backends with their model and price', () => {
    const r = reconcile(
      pool({
        backends: [
          { name: 'a', url: 'http://10.1.0.1:8000/v1/', model: 'm', costPerMTok: 1 },
          { name: 'b', urls: ['https://b1.example/v1', 'https://b2.example/v1'] },
        ],
      }),
    );
    assert.deepEqual(r.snapshot?.endpoints, [
      {
        id: 'a/10.1.0.1:8000',
        backend: 'a',
        tier: 0,
        url: 'http://10.1.0.1:8000/v1',
        costPerMTok: 1,
        model: 'm',
      },
      {
        id: 'b/b1.example:443',
        backend: 'b',
        tier: 1,
        url: 'https://b1.example/v1',
        costPerMTok: 0,
      },
      {
        id: 'b/b2.example:443',
        backend: 'b',
        tier: 1,
        url: 'https://b2.example/v1',
        costPerMTok: 0,
      },
    ]);
    assert.equal(condition(r, 'ResolvedRefs').message, 'All 2 backends resolved');
  });

  test('puts the Secret key into every endpoint of its backend, service backends too', () => {
    const r = reconcile(
      pool({
        backends: [
          {
            ...inCluster,
            apiKeySecretRef: { name: 'vllm-key', key: 'token' },
            allowInsecureApiKey: true,
          },
          { ...provider, url: undefined, urls: ['https://p1.example/v1', 'https://p2.example/v1'] },
        ],
      }),
      {
        services: [service('vllm')],
        slices: [slice('vllm', [ready('10.0.0.7')])],
        secrets: [
          secret('vllm-key', { token: 'in-cluster-token' }),
          secret('provider-key', { apiKey: KEY }),
        ],
      },
    );
    assert.deepEqual(
      r.snapshot?.endpoints.map((e) => [e.id, e.apiKey, e.model]),
      [
        ['in-cluster/10.0.0.7:8000', 'in-cluster-token', undefined],
        ['provider/p1.example:443', KEY, 'provider-model'],
        ['provider/p2.example:443', KEY, 'provider-model'],
      ],
    );
  });

  test('names a missing Secret in ResolvedRefs without its value', () => {
    const r = reconcile(pool({ backends: [inCluster, provider] }), {
      services: [service('vllm')],
      slices: [slice('vllm', [ready('10.0.0.7')])],
    });
    const refs = condition(r, 'ResolvedRefs');
    assert.deepEqual(
      [refs.status, refs.reason, refs.message],
      ['False', 'SecretNotFound', 'Backend provider: Secret provider-key not found'],
    );
    // The other backend keeps routing; the one without its key gets nothing.
    assert.deepEqual(ids(r), ['in-cluster/10.0.0.7:8000']);
    assert.deepEqual(r.backends[1], {
      name: 'provider',
      tier: 1,
      ready: 0,
      total: 1,
      problems: [
        { reason: 'SecretNotFound', message: 'Backend provider: Secret provider-key not found' },
      ],
    });
    assert.equal(condition(r, 'Ready').status, 'True');
  });

  test('names a Secret without the key, and never shows what the Secret holds', () => {
    const r = reconcile(pool({ backends: [provider] }), {
      secrets: [secret('provider-key', { apikey: KEY, other: 'hunter2' })],
    });
    assert.equal(condition(r, 'ResolvedRefs').reason, 'SecretKeyNotFound');
    assert.equal(
      condition(r, 'ResolvedRefs').message,
      'Backend provider: Secret provider-key has no key apiKey',
    );
    const text = JSON.stringify(r);
    assert.ok(!text.includes(KEY) && !text.includes('hunter2') && !text.includes(base64(KEY)));
  });

  test('does not take a key from the prototype of the Secret data', () => {
    const r = reconcile(
      pool({
        backends: [{ ...provider, apiKeySecretRef: { name: 'provider-key', key: 'constructor' } }],
      }),
      {
        secrets: [secret('provider-key', {}), { metadata: { name: 'unused' } }],
      },
    );
    assert.equal(condition(r, 'ResolvedRefs').reason, 'SecretKeyNotFound');
    const noData = reconcile(pool({ backends: [provider] }), {
      secrets: [{ metadata: { name: 'provider-key' }, data: null }],
    });
    assert.equal(condition(noData, 'ResolvedRefs').reason, 'SecretKeyNotFound');
  });

  test('trims the trailing newline of a key and decodes it as UTF-8', () => {
    const r = reconcile(pool({ backends: [provider] }), {
      secrets: [secret('provider-key', { apiKey: ` ${KEY}-é\n` })],
    });
    assert.equal(r.snapshot?.endpoints[0]?.apiKey, `${KEY}-é`);
  });

  test('refuses a key that is empty, not base64 UTF-8, or unfit for a header, without echoing it', () => {
    const cases: [string, string, string][] = [
      ['not base64', '!!not base64!!', 'is not base64-encoded UTF-8 text'],
      ['not UTF-8', '/w==', 'is not base64-encoded UTF-8 text'],
      ['only whitespace', base64('  \n'), 'is empty'],
      [
        'a control character',
        base64('sk-\u0001secret'),
        'holds characters that cannot go into an HTTP header',
      ],
      [
        'a character past U+00FF',
        base64('sk-€secret'),
        'holds characters that cannot go into an HTTP header',
      ],
    ];
    for (const [what, data, reason] of cases) {
      const r = reconcile(pool({ backends: [provider] }), {
        secrets: [{ metadata: { name: 'provider-key' }, data: { apiKey: data } }],
      });
      const refs = condition(r, 'ResolvedRefs');
      assert.equal(refs.reason, 'SecretKeyInvalid', what);
      assert.equal(
        refs.message,
        `Backend provider: The key apiKey of Secret provider-key ${reason}`,
        what,
      );
      assert.ok(!JSON.stringify(r).includes('secret'), what);
      assert.equal(r.snapshot, undefined, what);
    }
  });

  test('keeps a service backend out of the snapshot until its key is readable, but counts it', () => {
    const keyed = {
      ...inCluster,
      apiKeySecretRef: { name: 'vllm-key', key: 'token' },
      allowInsecureApiKey: true,
    };
    const r = reconcile(
      pool({ backends: [keyed, { name: 'spare', url: 'https://spare.example/v1' }] }),
      {
        services: [service('vllm')],
        slices: [slice('vllm', [ready('10.0.0.7'), ready('10.0.0.8')])],
      },
    );
    assert.deepEqual(ids(r), ['spare/spare.example:443']);
    assert.deepEqual(r.endpoints, { ready: 1, total: 3, drifted: 0 });
  });

  test('lists both problems of a backend whose Service and Secret are missing, Service first', () => {
    const keyed = {
      ...inCluster,
      apiKeySecretRef: { name: 'vllm-key', key: 'token' },
      allowInsecureApiKey: true,
    };
    const r = reconcile(pool({ backends: [keyed] }));
    assert.equal(condition(r, 'ResolvedRefs').reason, 'ServiceNotFound');
    assert.equal(
      condition(r, 'ResolvedRefs').message,
      'Backend in-cluster: Service vllm not found; Backend in-cluster: Secret vllm-key not found',
    );
  });
});

describe('desiredSnapshot: readiness', () => {
  test('sends a snapshot without endpoints when no endpoint is ready, and says why', () => {
    const r = reconcile(
      pool({
        backends: [inCluster, { name: 'empty', service: { name: 'empty', port: 8000 } }, provider],
      }),
      {
        services: [service('vllm'), service('empty')],
        slices: [slice('vllm', [notReady('10.0.0.7'), terminating('10.0.0.8')])],
      },
    );
    assert.deepEqual(r.snapshot?.endpoints, []);
    assert.notEqual(r.hash, '');
    const readyCondition = condition(r, 'Ready');
    assert.deepEqual(
      [readyCondition.status, readyCondition.reason, readyCondition.message],
      [
        'False',
        'NoReadyEndpoints',
        'No endpoint is ready: backend in-cluster has 0 of 2 ready; backend empty has no endpoints; backend provider is not resolved',
      ],
    );
  });

  test('says "1 endpoint" for one', () => {
    const r = reconcile(pool({ backends: [{ name: 'a', url: 'https://a.example/v1' }] }));
    assert.equal(condition(r, 'Ready').message, '1 of 1 endpoint ready');
  });
});

describe('desiredSnapshot: the spec', () => {
  const raw = (spec: unknown): InferencePool =>
    ({
      apiVersion: 'switchyard.dev/v1alpha1',
      kind: 'InferencePool',
      metadata: { name: 'chat', namespace: NAMESPACE },
      spec,
    }) as InferencePool;

  test('is not Accepted when the spec is invalid, and sends nothing', () => {
    const r = desiredSnapshot(inputOf(raw({ backends: [] })));
    assert.deepEqual(
      r.conditions.map((c) => [c.type, c.status, c.reason, c.message]),
      [
        ['Accepted', 'False', 'InvalidSpec', 'spec.backends: must not be empty'],
        [
          'ResolvedRefs',
          'Unknown',
          'NotAccepted',
          'The spec was not accepted, so its references were not resolved',
        ],
        [
          'Ready',
          'False',
          'NotAccepted',
          'The spec was not accepted (see Accepted): no snapshot is sent and the sidecars keep their last one',
        ],
      ],
    );
    assert.equal(r.snapshot, undefined);
    assert.deepEqual(r.backends, []);
  });

  test('lists at most 10 spec errors and counts the rest', () => {
    const backends = Array.from({ length: 12 }, (_, i) => ({ name: `b${i}`, url: 'ftp://x' }));
    const message = condition(desiredSnapshot(inputOf(raw({ backends }))), 'Accepted').message;
    assert.equal(message.split('; ').length, 11);
    assert.match(message, /^spec\.backends\[0\]\.url: .*; and 2 more$/);
  });

  test('refuses apiKeyEnv, which only a pool file can use, but still resolves the references', () => {
    const r = reconcile(
      pool({ backends: [{ name: 'a', url: 'https://a.example/v1', apiKeyEnv: 'KEY' }, inCluster] }),
    );
    assert.deepEqual(
      r.conditions.map((c) => [c.type, c.status, c.reason]),
      [
        ['Accepted', 'False', 'UnsupportedField'],
        ['ResolvedRefs', 'False', 'ServiceNotFound'],
        ['Ready', 'False', 'NotAccepted'],
      ],
    );
    assert.match(
      condition(r, 'Accepted').message,
      /^spec\.backends\[0\]\.apiKeyEnv: .*use apiKeySecretRef$/,
    );
    assert.equal(r.snapshot, undefined);
    assert.deepEqual(r.endpoints, { ready: 1, total: 1, drifted: 0 });
  });

  test('is not Accepted when two URLs of a backend are the same endpoint', () => {
    const r = reconcile(
      pool({ backends: [{ name: 'a', urls: ['https://a.example/v1', 'https://A.example/v1/'] }] }),
    );
    assert.equal(condition(r, 'Accepted').reason, 'InvalidSpec');
    assert.match(
      condition(r, 'Accepted').message,
      /^spec\.backends\[0\]\.urls\[1\]: is the same endpoint as/,
    );
    assert.equal(r.snapshot, undefined);
  });

  test('fills in the defaults a stored object lacks', () => {
    const r = desiredSnapshot(
      inputOf(raw({ backends: [{ name: 'a', url: 'https://a.example/v1' }] })),
    );
    assert.equal(condition(r, 'Accepted').status, 'True');
    assert.equal(r.snapshot?.policy.health.windowMs, 10_000);
    assert.equal(r.snapshot?.timeouts.connectMs, 5_000);
    assert.equal(r.snapshot?.endpoints[0]?.costPerMTok, 0);
  });

  test('names the pool in the snapshot, also without a namespace', () => {
    const p = pool({ backends: [{ name: 'a', url: 'https://a.example/v1' }] });
    assert.deepEqual(reconcile(p).snapshot?.pool, { namespace: 'apps', name: 'chat' });
    const { namespace: _ns, ...metadata } = p.metadata;
    assert.deepEqual(reconcile({ ...p, metadata }).snapshot?.pool, { namespace: '', name: 'chat' });
  });

  test('does not change the pool object it was given', () => {
    const p = raw({ backends: [{ name: 'a', url: 'https://a.example/v1' }] });
    const before = JSON.stringify(p);
    desiredSnapshot(inputOf(p));
    assert.equal(JSON.stringify(p), before);
  });
});

describe('desiredSnapshot: the snapshot and its hash', () => {
  const world = () => ({
    services: [service('vllm')],
    slices: [slice('vllm', [ready('10.0.0.7')]), slice('vllm', [ready('10.0.0.8')])],
    secrets: [secret('provider-key', { apiKey: KEY })],
  });
  const p = pool({ costWeightPerMs: 0.001, models: ['llama'], backends: [inCluster, provider] });

  test('produces a snapshot that sidecars accept', () => {
    const r = reconcile(p, world());
    assert.ok(r.snapshot);
    const parsed = parseSnapshot({ ...r.snapshot, version: 1 });
    assert.ok(parsed.ok, JSON.stringify(parsed));
    assert.equal(r.snapshot.hash, r.hash);
    assert.match(r.hash, /^[0-9a-f]{16}$/);
    assert.equal(r.snapshot.policy.costWeightPerMs, 0.001);
  });

  test('hashes equal content equally, whatever order the slices come in', () => {
    const a = reconcile(p, world());
    const w = world();
    const b = reconcile(p, {
      ...w,
      slices: [...w.slices].reverse(),
      services: [service('unused'), ...w.services],
    });
    assert.equal(a.hash, b.hash);
    assert.deepEqual(a.snapshot, b.snapshot);
  });

  test('changes the hash when a key rotates, an endpoint comes or goes, or the policy changes', () => {
    const base = reconcile(p, world()).hash;
    const rotated = reconcile(p, {
      ...world(),
      secrets: [secret('provider-key', { apiKey: `${KEY}-2` })],
    }).hash;
    const fewer = reconcile(p, { ...world(), slices: [slice('vllm', [ready('10.0.0.7')])] }).hash;
    const policy = reconcile(pool({ ...p.spec, retry: { maxAttempts: 1 } }), world()).hash;
    const hashes = new Set([base, rotated, fewer, policy]);
    assert.equal(hashes.size, 4);
  });

  test('hashes only the routing, not the pool name', () => {
    const other = pool(
      { costWeightPerMs: 0.001, models: ['llama'], backends: [inCluster, provider] },
      'other',
    );
    assert.equal(reconcile(p, world()).hash, reconcile(other, world()).hash);
  });
});

describe('desiredSnapshot: drift verdicts from the status', () => {
  const urls3 = {
    name: 'gpus',
    urls: ['http://10.0.0.1:8000/v1', 'http://10.0.0.2:8000/v1', 'http://10.0.0.3:8000/v1'],
  };
  const withDrift = (action: 'Exclude' | 'Warn', probing = true) => {
    const p = pool({
      backends: [urls3],
      ...(probing ? { drift: { probeEvery: '1m', action } } : {}),
    });
    p.status = {
      drift: {
        expected: 'llama/fp_a/aaaaaaaaaaaa',
        endpoints: [
          { id: 'gpus/10.0.0.2:8000', fingerprint: 'llama/fp_b/bbbbbbbbbbbb', drifted: true },
          { id: 'gpus/10.0.0.1:8000', fingerprint: 'llama/fp_a/aaaaaaaaaaaa', drifted: false },
        ],
      },
    };
    return p;
  };
  const byId = (r: ReconcileResult) => new Map((r.snapshot?.endpoints ?? []).map((e) => [e.id, e]));

  test('Exclude: a drifted endpoint is marked drifted; every probed one carries its probe', () => {
    const r = reconcile(withDrift('Exclude'));
    const e = byId(r);
    assert.equal(e.get('gpus/10.0.0.2:8000')?.drifted, true);
    assert.equal(e.get('gpus/10.0.0.2:8000')?.probe?.drifted, true);
    assert.equal(e.get('gpus/10.0.0.1:8000')?.drifted, undefined);
    assert.deepEqual(e.get('gpus/10.0.0.1:8000')?.probe, {
      fingerprint: 'llama/fp_a/aaaaaaaaaaaa',
      model: 'llama',
      systemFingerprint: 'fp_a',
    });
    assert.equal(e.get('gpus/10.0.0.3:8000')?.probe, undefined, 'not probed yet');
    assert.deepEqual(r.endpoints, { ready: 2, total: 3, drifted: 1 });
    assert.equal(r.snapshot?.policy.drift?.action, 'Exclude');
    assert.equal(r.snapshot?.policy.drift?.probeEveryMs, 60_000);
    assert.ok(parseSnapshot({ ...r.snapshot, version: 1 }).ok, 'the stream contract holds');
  });

  test('Warn: reported and counted, not excluded', () => {
    const r = reconcile(withDrift('Warn'));
    assert.equal(byId(r).get('gpus/10.0.0.2:8000')?.drifted, undefined);
    assert.equal(byId(r).get('gpus/10.0.0.2:8000')?.probe?.drifted, true, 'reported, not excluded');
    assert.deepEqual(r.endpoints, { ready: 3, total: 3, drifted: 1 });
  });

  test('without drift detection in the spec, a leftover status says nothing', () => {
    const r = reconcile(withDrift('Exclude', false));
    assert.equal(byId(r).get('gpus/10.0.0.2:8000')?.drifted, undefined);
    assert.equal(byId(r).get('gpus/10.0.0.2:8000')?.probe, undefined);
    assert.deepEqual(r.endpoints, { ready: 3, total: 3, drifted: 0 });
  });
});

describe('desiredSnapshot: tls of https backends', () => {
  const CA = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n';
  const OTHER_CA = '-----BEGIN CERTIFICATE-----\nMIIC\n-----END CERTIFICATE-----\n';
  const httpsService = (name: string) =>
    service(name, [{ name: 'https', port: 8443, targetPort: 8443, appProtocol: 'https' }]);
  const httpsSlice = (name: string) =>
    slice(name, [ready('10.0.0.7')], { ports: [{ name: 'https', port: 8443 }] });

  test('resolves caSecretRef into every endpoint, with serverName; inline caBundle as it is', () => {
    const r = reconcile(
      pool({
        mode: 'Failover',
        backends: [
          {
            name: 'in-cluster',
            service: { name: 'vllm', port: 'https' },
            tls: { caSecretRef: { name: 'vllm-tls', key: 'ca.crt' }, serverName: 'vllm.svc' },
          },
          { ...provider, tls: { caBundle: OTHER_CA } },
        ],
      }),
      {
        services: [httpsService('vllm')],
        slices: [httpsSlice('vllm')],
        secrets: [secret('vllm-tls', { 'ca.crt': CA }), secret('provider-key', { apiKey: KEY })],
      },
    );
    assert.deepEqual(
      r.snapshot?.endpoints.map((e) => [e.url, e.tls]),
      [
        ['https://10.0.0.7:8443/v1', { caBundle: CA, serverName: 'vllm.svc' }],
        ['https://api.example.com/v1', { caBundle: OTHER_CA }],
      ],
    );
    assert.ok(parseSnapshot({ ...r.snapshot, version: 1 }).ok);
  });

  test('insecureSkipVerify alone; tls with only defaults adds nothing', () => {
    const r = reconcile(
      pool({
        backends: [
          { name: 'a', url: 'https://a.example/v1', tls: { insecureSkipVerify: true } },
          { name: 'b', url: 'https://b.example/v1', tls: {} },
        ],
      }),
    );
    assert.deepEqual(
      r.snapshot?.endpoints.map((e) => e.tls),
      [{ insecureSkipVerify: true }, undefined],
    );
  });

  for (const [what, secrets, reason, message] of [
    ['a missing Secret', [], 'SecretNotFound', 'Secret vllm-tls not found'],
    [
      'a missing key',
      [secret('vllm-tls', { 'tls.crt': CA })],
      'SecretKeyNotFound',
      'Secret vllm-tls has no key ca.crt',
    ],
    [
      'a value that is not base64',
      [{ metadata: { name: 'vllm-tls' }, data: { 'ca.crt': '%%%' } }],
      'SecretKeyInvalid',
      'The key ca.crt of Secret vllm-tls is not base64-encoded UTF-8 text',
    ],
    [
      'a private key instead of certificates',
      [
        secret('vllm-tls', {
          'ca.crt': '-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----\n',
        }),
      ],
      'SecretKeyInvalid',
      'The key ca.crt of Secret vllm-tls must hold only certificates, and it holds a PRIVATE KEY block: never put a key here',
    ],
    [
      'no PEM at all',
      [{ metadata: { name: 'vllm-tls' }, data: { 'ca.crt': base64('hello') } }],
      'SecretKeyInvalid',
      'The key ca.crt of Secret vllm-tls must hold PEM certificates: one or more -----BEGIN CERTIFICATE----- blocks',
    ],
  ] as const) {
    test(`names ${what} in ResolvedRefs and sends that backend no endpoint`, () => {
      const r = reconcile(
        pool({
          backends: [
            {
              name: 'in-cluster',
              service: { name: 'vllm', port: 'https' },
              tls: { caSecretRef: { name: 'vllm-tls', key: 'ca.crt' } },
            },
            { name: 'b', url: 'https://b.example/v1' },
          ],
        }),
        { services: [httpsService('vllm')], slices: [httpsSlice('vllm')], secrets: [...secrets] },
      );
      const refs = condition(r, 'ResolvedRefs');
      assert.deepEqual(
        [refs.status, refs.reason, refs.message],
        ['False', reason, `Backend in-cluster: tls.caSecretRef: ${message}`],
      );
      assert.deepEqual(ids(r), ['b/b.example:443']);
    });
  }
});

describe('desiredSnapshot: models, weights and aliases', () => {
  const world = {
    services: [service('vllm'), service('canary')],
    slices: [
      slice('vllm', [ready('10.0.0.7'), notReady('10.0.0.9')]),
      slice('canary', [ready('10.0.1.2')]),
    ],
  };
  const stable = { name: 'stable', service: { name: 'vllm', port: 8000 } };
  const canary = { name: 'canary', service: { name: 'canary', port: 8000 } };

  test('gives service endpoints their backend’s models and weight', () => {
    const r = reconcile(
      pool({
        backends: [
          { ...stable, models: ['llama', 'sql-lora'], weight: 95 },
          { ...canary, models: ['llama'], weight: 5 },
        ],
        aliases: [{ name: 'gpt-4o-mini', model: 'llama' }],
      }),
      world,
    );
    assert.deepEqual(
      r.snapshot?.endpoints.map((e) => [e.id, e.models, e.weight]),
      [
        ['stable/10.0.0.7:8000', ['llama', 'sql-lora'], 95],
        ['canary/10.0.1.2:8000', ['llama'], 5],
      ],
    );
    assert.deepEqual(r.snapshot?.policy.aliases, [{ name: 'gpt-4o-mini', model: 'llama' }]);
    const parsed = parseSnapshot({ ...r.snapshot, version: 1 });
    assert.ok(parsed.ok, JSON.stringify(parsed));
    assert.deepEqual(r.models, [
      { name: 'llama', endpoints: 2 },
      { name: 'sql-lora', endpoints: 1 },
      { name: 'gpt-4o-mini', endpoints: 2, aliasOf: 'llama' },
    ]);
    assert.equal(r.aliasesNotServed, undefined);
  });

  test('a pool without the new fields hashes as before they existed', () => {
    // No new key in the policy or the endpoints, so the canonical JSON (and the hash) of such a
    // pool is what it was before: an upgrade does not re-push every pool's snapshot.
    const r = reconcile(pool({ backends: [stable, canary], aliases: [] }), world);
    const plain = reconcile(pool({ backends: [stable, canary] }), world);
    assert.equal(r.hash, plain.hash);
    assert.ok(r.snapshot && !('aliases' in r.snapshot.policy));
    for (const e of r.snapshot.endpoints) assert.ok(!('models' in e) && !('weight' in e));
    assert.equal(r.models, undefined);
  });

  test('counts declared models with no ready endpoint as 0 and names the aliases they break', () => {
    const r = reconcile(
      pool({
        backends: [
          { ...stable, models: ['llama'] },
          { name: 'gone', service: { name: 'missing', port: 8000 }, models: ['qwen'] },
        ],
        aliases: [
          { name: 'gpt-4o', model: 'qwen' },
          { name: 'gpt-4o-mini', model: 'llama' },
        ],
      }),
      world,
    );
    assert.deepEqual(r.models, [
      { name: 'llama', endpoints: 1 },
      { name: 'qwen', endpoints: 0 },
      { name: 'gpt-4o', endpoints: 0, aliasOf: 'qwen' },
      { name: 'gpt-4o-mini', endpoints: 1, aliasOf: 'llama' },
    ]);
    assert.deepEqual(r.aliasesNotServed, [{ name: 'gpt-4o', model: 'qwen' }]);
  });

  test('calls no alias unserved while a backend leaves its models to discovery', () => {
    const r = reconcile(
      pool({
        backends: [{ ...stable, models: ['llama'] }, canary],
        aliases: [{ name: 'fast', model: 'qwen' }],
      }),
      world,
    );
    assert.deepEqual(r.models, [
      { name: 'llama', endpoints: 1 },
      { name: 'fast', endpoints: 0, aliasOf: 'qwen' },
    ]);
    assert.equal(r.aliasesNotServed, undefined);
  });

  test('lists the models even when no backend resolved', () => {
    const r = reconcile(
      pool({ backends: [{ ...stable, service: { name: 'missing', port: 8000 }, models: ['m'] }] }),
      world,
    );
    assert.equal(r.snapshot, undefined);
    assert.deepEqual(r.models, [{ name: 'm', endpoints: 0 }]);
  });
});
