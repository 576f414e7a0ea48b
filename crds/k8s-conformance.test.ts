/**
 * Part of `npm test`; SWITCHYARD_K8S_CONFORMANCE=0 turns it off (e.g. on a machine without Go).
 *
 * Builds crds/k8s-conformance (Go, with the Kubernetes API server's own validation code from the Go
 * module proxy; about 1.5 minutes the first time) and checks that
 * - the generated CRD is one the API server accepts (structural, CEL rules compile within the cost
 *   limits);
 * - for sample documents, every CEL error the API server reports is reported by validatePool at
 *   the same path with the same message, every path the API server complains about is one
 *   validatePool complains about, and the defaults both apply are the same.
 * It needs Go and the Go module proxy; the build is cached by Go's build cache (~2 s warm).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { validatePool } from './validate.ts';

const enabled = process.env['SWITCHYARD_K8S_CONFORMANCE'] !== '0';

type Doc = {
  apiVersion: string;
  kind: string;
  metadata: { name: string };
  spec: Record<string, unknown> & { backends: Record<string, unknown>[] };
};

function base(): Doc {
  return {
    apiVersion: 'switchyard.dev/v1alpha1',
    kind: 'InferencePool',
    metadata: { name: 'chat' },
    spec: {
      mode: 'Balance',
      backends: [
        { name: 'a', url: 'http://127.0.0.1:9101/v1' },
        { name: 'b', url: 'http://127.0.0.1:9102/v1' },
      ],
    },
  };
}

const cases: { name: string; doc: Doc }[] = [];
function add(name: string, change: (d: Doc) => void): void {
  const doc = base();
  change(doc);
  cases.push({ name, doc });
}

add('valid minimal', () => {});
add('failover example', (d) => {
  d.spec = {
    mode: 'Failover',
    costWeightPerMs: 0.001,
    backends: [
      { name: 'primary', url: 'http://127.0.0.1:9101/v1', costPerMTok: 0.2 },
      { name: 'secondary', url: 'http://127.0.0.1:9102/v1', costPerMTok: 0.6, model: 'm' },
    ],
    affinity: { key: 'Prefix', prefixChars: 4096, maxSlowdown: 2.5 },
    retry: { budgetPercent: 20, minPerSecond: 10, maxAttempts: 3 },
  };
});
add('every section', (d) => {
  d.spec['models'] = ['m1', 'm2'];
  d.spec['drift'] = { probeEvery: '10m' };
  d.spec['timeouts'] = { idle: '1h30m', clientStall: '90s' };
});
add('nulls', (d) => {
  d.spec['health'] = null;
  d.spec['affinity'] = { key: null, header: 'x-a' };
});
add('service and url', (d) => {
  d.spec.backends[0] = { name: 'a', url: 'https://x/v1', service: { name: 'vllm', port: 8000 } };
});
add('url and urls', (d) => {
  d.spec.backends[0] = { name: 'a', url: 'https://x/v1', urls: ['https://y/v1'] };
});
add('no source', (d) => {
  d.spec.backends[1] = { name: 'b' };
});
add('duplicate names', (d) => {
  d.spec.backends.push({ name: 'c', url: 'https://x' }, { name: 'c', url: 'https://y' });
  d.spec.backends[1] = { name: 'c', url: 'https://z' };
});
add('secret on service', (d) => {
  d.spec.backends[0] = {
    name: 'a',
    service: { name: 'vllm', port: 'http' },
    apiKeySecretRef: { name: 's', key: 'k' },
  };
});
add('secret on service, allowed', (d) => {
  d.spec.backends[0] = {
    name: 'a',
    service: { name: 'vllm', port: 'http' },
    apiKeySecretRef: { name: 's', key: 'k' },
    allowInsecureApiKey: true,
  };
});
add('two key sources', (d) => {
  d.spec.backends[0] = {
    name: 'a',
    url: 'https://x/v1',
    apiKeySecretRef: { name: 's', key: 'k' },
    apiKeyEnv: 'K',
  };
});
add('key over http', (d) => {
  d.spec.backends[0] = { name: 'a', url: 'http://10.0.0.1/v1', apiKeyEnv: 'K' };
});
add('key over loopback http', (d) => {
  d.spec.backends[0] = {
    name: 'a',
    urls: ['http://localhost:8000/v1', 'http://127.0.0.1', 'http://[::1]:80/v1'],
    apiKeyEnv: 'K',
  };
});
add('key over http, one of urls', (d) => {
  d.spec.backends[0] = {
    name: 'a',
    urls: ['https://x/v1', 'http://127.0.0.1.example.com/v1'],
    apiKeyEnv: 'K',
  };
});
add('maxOpenFor < openFor', (d) => {
  d.spec['health'] = { openFor: '10m' };
});
add('maxOpenFor not a duration', (d) => {
  d.spec['health'] = { openFor: '10m', maxOpenFor: 'soon' };
});
add('bad durations', (d) => {
  d.spec['defaultTtft'] = '0s';
  d.spec['timeouts'] = { connect: '1h0m', firstByte: '5', idle: '', clientStall: '1m0s' };
});
add('out of range', (d) => {
  d.spec['costWeightPerMs'] = 0;
  d.spec['affinity'] = { prefixChars: 10, maxSlowdown: 0.5 };
  d.spec['health'] = { maxErrorRate: 1.5, max429Rate: -0.1, minRequests: 0 };
  d.spec['retry'] = { budgetPercent: 101, minPerSecond: -1, maxAttempts: 11 };
});
add('bad enums', (d) => {
  d.spec['mode'] = 'balance';
  d.spec['drift'] = { action: 'Delete' };
});
add('bad names and ports', (d) => {
  d.spec.backends[0] = { name: 'A_b', url: 'https://x/v1' };
  d.spec.backends[1] = {
    name: 'b',
    service: { name: '1svc', port: 70000 },
    apiKeySecretRef: { name: 'S', key: 'k/k' },
    allowInsecureApiKey: true,
  };
});
add('port names', (d) => {
  d.spec.backends.push(
    { name: 'c', service: { name: 'svc', port: 'http--x' } },
    { name: 'd', service: { name: 'svc', port: '8080' } },
    { name: 'e', service: { name: 'svc', port: 0 } },
    { name: 'f', service: { name: 'svc', port: 'grpc-web' } },
  );
});
add('bad url', (d) => {
  d.spec.backends[0] = { name: 'a', url: 'ftp://x' };
});
add('duplicate urls and models', (d) => {
  d.spec.backends[0] = { name: 'a', urls: ['http://127.0.0.1:1/v1', 'http://127.0.0.1:1/v1'] };
  d.spec['models'] = ['a', 'b', 'a'];
});
add('empty lists', (d) => {
  d.spec.backends[0] = { name: 'a', urls: [] };
});
add('wrong types', (d) => {
  d.spec['mode'] = 1;
  d.spec['health'] = { window: 5, minRequests: '10' };
  d.spec['models'] = 'x';
});
add('missing name', (d) => {
  d.spec.backends[0] = { url: 'https://x/v1' };
});
add('models, aliases and weights', (d) => {
  d.spec.backends[0] = {
    name: 'a',
    url: 'http://127.0.0.1:9101/v1',
    models: ['llama', 'sql-lora'],
    weight: 95,
  };
  d.spec.backends[1] = { name: 'b', url: 'http://127.0.0.1:9102/v1', weight: 5 };
  d.spec['aliases'] = [{ name: 'gpt-4o-mini', model: 'llama' }];
});
add('bad models and weights', (d) => {
  d.spec.backends[0] = {
    name: 'a',
    url: 'http://127.0.0.1:9101/v1',
    models: ['m', 'm', ''],
    weight: 1.5,
  };
  d.spec.backends[1] = { name: 'b', url: 'http://127.0.0.1:9102/v1', models: [], weight: 1000001 };
});
add('weights on some backends', (d) => {
  d.spec.backends[0] = { name: 'a', url: 'http://127.0.0.1:9101/v1', weight: 3 };
});
add('weights all 0', (d) => {
  d.spec.backends[0] = { name: 'a', url: 'http://127.0.0.1:9101/v1', weight: 0 };
  d.spec.backends[1] = { name: 'b', url: 'http://127.0.0.1:9102/v1', weight: 0 };
});
add('failover weights', (d) => {
  d.spec.mode = 'Failover';
  d.spec.backends[0] = { name: 'a', url: 'http://127.0.0.1:9101/v1', weight: 3 };
});
add('failover weight 0', (d) => {
  d.spec.mode = 'Failover';
  d.spec.backends[0] = { name: 'a', url: 'http://127.0.0.1:9101/v1', weight: 0 };
});
add('alias chains and duplicates', (d) => {
  d.spec['aliases'] = [
    { name: 'x', model: 'y' },
    { name: 'y', model: 'z' },
    { name: 'x', model: 'z' },
  ];
});
add('aliases against spec.models', (d) => {
  d.spec['models'] = ['m', 'n'];
  d.spec['aliases'] = [
    { name: 'm', model: 'n' },
    { name: 'o', model: 'p' },
  ];
});
add('alias named like a backend model (refused by validatePool only)', (d) => {
  d.spec.backends[0] = { name: 'a', url: 'http://127.0.0.1:9101/v1', models: ['m', 'lora'] };
  d.spec['aliases'] = [{ name: 'lora', model: 'm' }];
});
add('flow control, empty (every default)', (d) => {
  d.spec['flowControl'] = {};
});
add('flow control, every field', (d) => {
  d.spec['flowControl'] = {
    defaultPriority: -3,
    maxQueueWait: '1m30s',
    queue: { maxRequests: 0, maxBytes: 17179869184 },
    saturation: { kvCacheUsage: 1, maxInFlightPerEndpoint: 4 },
    workload: { serviceAccount: {} },
    budgets: [
      { tokensPerMinute: 1000000 },
      { workload: 'apps/chat', requestsPerMinute: 600 },
      { workload: 'apps/batch', requestsPerMinute: 0.5, tokensPerMinute: 2000 },
    ],
  };
});
add('flow control, podLabel', (d) => {
  d.spec['flowControl'] = { workload: { podLabel: 'app.kubernetes.io/name' } };
  d.spec['models'] = ['m'];
});
add('flow control, out of range and bad types', (d) => {
  d.spec['flowControl'] = {
    defaultPriority: 1.5,
    maxQueueWait: '30',
    queue: { maxRequests: -1, maxBytes: 17179869185 },
    saturation: { kvCacheUsage: 0, maxInFlightPerEndpoint: 0 },
    workload: { header: 'x team' },
  };
});
add('flow control, bad podLabel', (d) => {
  d.spec['flowControl'] = { workload: { podLabel: 'team/' } };
});
add('flow control, two workload sources', (d) => {
  d.spec['flowControl'] = { workload: { header: 'x-team', podLabel: 'team' } };
});
add('flow control, no workload source', (d) => {
  d.spec['flowControl'] = { workload: {} };
});
add('flow control, budget problems', (d) => {
  d.spec['flowControl'] = {
    workload: { header: 'X-Team' },
    budgets: [
      { requestsPerMinute: 5 },
      { tokensPerMinute: 5 },
      { workload: 'a', requestsPerMinute: 1 },
      { workload: 'b' },
      { workload: 'a', tokensPerMinute: 0 },
      { workload: '', requestsPerMinute: 1 },
    ],
  };
});
add('flow control, workload budgets without a workload source', (d) => {
  d.spec['flowControl'] = { budgets: [{ workload: 'a', requestsPerMinute: 1 }] };
});

interface K8sError {
  path: string;
  type: string;
  detail: string;
}
interface K8sResult {
  name: string;
  errors: K8sError[];
  celSkipped: boolean;
  object: { spec: unknown };
}

describe(
  'the CRD under the Kubernetes API server',
  { skip: !enabled && 'SWITCHYARD_K8S_CONFORMANCE=0' },
  () => {
    it('accepts the CRD and agrees with validatePool', { timeout: 600_000 }, (t) => {
      const dir = mkdtempSync(join(tmpdir(), 'switchyard-k8s-'));
      t.after(() => rmSync(dir, { recursive: true, force: true }));
      const binary = join(dir, 'k8s-conformance');
      const source = fileURLToPath(new URL('./k8s-conformance', import.meta.url));
      execFileSync('go', ['build', '-o', binary, '.'], { cwd: source, stdio: 'inherit' });
      const casesFile = join(dir, 'cases.json');
      writeFileSync(casesFile, JSON.stringify(cases));
      const crd = fileURLToPath(new URL('./switchyard.dev_inferencepools.yaml', import.meta.url));
      const results = JSON.parse(
        execFileSync(binary, [crd, casesFile], { encoding: 'utf8' }),
      ) as K8sResult[];

      for (const [i, c] of cases.entries()) {
        const k8s = results[i];
        assert.ok(k8s !== undefined);
        const ts = validatePool(structuredClone(c.doc));
        const tsErrors = ts.ok ? [] : ts.errors;
        const where = `${c.name}: k8s ${JSON.stringify(k8s.errors)} ts ${JSON.stringify(tsErrors)}`;
        // CEL errors (not the schema's "<path> in body ..." ones) match exactly.
        for (const e of k8s.errors) {
          if (e.type === 'FieldValueInvalid' && !e.detail.startsWith(`${e.path} in body`)) {
            assert.ok(
              tsErrors.some((t) => t.path === e.path && t.message === e.detail),
              `${where}\nCEL error not reported the same: ${e.path}: ${e.detail}`,
            );
          }
          assert.ok(
            tsErrors.some((t) => t.path === e.path),
            `${where}\nmissing path ${e.path}`,
          );
        }
        if (k8s.errors.length === 0 && ts.ok) {
          assert.deepEqual(ts.pool.spec, k8s.object.spec, `${c.name}: defaults differ`);
        }
        if (ts.ok) assert.equal(k8s.errors.length, 0, where);
      }
    });
  },
);
