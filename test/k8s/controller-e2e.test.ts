/**
 * The controller end to end, on a real kube-apiserver + etcd (harness/k8s/cluster.ts), with real
 * processes: `switchyard controller`, two `switchyard sidecar --controller …`, and simulated
 * backends on network-namespace test hosts (EndpointSlices refuse loopback addresses).
 *
 * SWITCHYARD_K8S_TESTS=0 skips it (e.g. on a machine without Go).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import {
  controllerSidecarArgs,
  startSwitchyard,
  stopAll,
  type RunningProcess,
} from '../../harness/processes.ts';
import { freePorts, startCluster, waitFor, type Cluster } from '../../harness/k8s/cluster.ts';
import { findSecrets } from '../reliability/secrets.ts';
import { recordFigure } from '../reliability/figures.ts';
import { installInferencePoolCrd } from '../../harness/k8s/crd.ts';
import { forgeServiceAccountToken } from './tokens.ts';
import { createNamespaces } from './test-controller.ts';
import { chatTo, keepSending, postChat } from './traffic.ts';
import { makeServingTls, type ServingTls } from '../../harness/tls.ts';
import {
  assertTestAddress,
  createTestHost,
  startSwitchyardIn,
  type TestHost,
} from './test-hosts.ts';

const enabled = process.env['SWITCHYARD_K8S_TESTS'] !== '0';
const NS = 'apps';
const POOLS = `/apis/switchyard.dev/v1alpha1/namespaces/${NS}/inferencepools`;
const SLICES = `/apis/discovery.k8s.io/v1/namespaces/${NS}/endpointslices`;
const SIM_FLAGS = ['--prefill-ms-per-token', '0.01', '--decode-ms-per-token', '1', '--slots', '16'];

interface DebugBackends {
  snapshotVersion: number | null;
  endpoints: { id: string; url: string }[];
}

function slice(
  name: string,
  endpoints: { ip: string; ready: boolean }[],
  service = 'vllm',
): unknown {
  for (const e of endpoints) assertTestAddress(e.ip);
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name, namespace: NS, labels: { 'kubernetes.io/service-name': service } },
    addressType: 'IPv4',
    endpoints: endpoints.map((e) => ({ addresses: [e.ip], conditions: { ready: e.ready } })),
    ports: [{ name: 'http', port: 8000, protocol: 'TCP' }],
  };
}

async function getJson<T>(url: string): Promise<T> {
  return (await (await fetch(url)).json()) as T;
}

/**
 * A request to the controller's stream port with the test CA: a GET of the stream (cut after its
 * head when it is a 200), or a POST of an empty report when `report` is set. Status and body.
 */
function streamRequest(
  url: string,
  ca: string,
  token: string | undefined,
  report = false,
): Promise<{ status: number; body: string }> {
  const body = report
    ? JSON.stringify({ sidecar: 'x', appliedVersion: 0, appliedHash: '', endpoints: [] })
    : undefined;
  return new Promise((resolve, reject) => {
    const req = https.request(url, {
      method: report ? 'POST' : 'GET',
      ca,
      headers: {
        ...(body === undefined
          ? {}
          : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }),
        ...(token === undefined ? {} : { authorization: `Bearer ${token}` }),
      },
    });
    req.on('response', (res) => {
      if (res.statusCode === 200 && !report) {
        resolve({ status: 200, body: '' });
        req.destroy();
        return;
      }
      let text = '';
      res.on('data', (c: Buffer) => (text += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

describe(
  'controller end to end on a real API server',
  { skip: !enabled && 'SWITCHYARD_K8S_TESTS=0' },
  () => {
    let cluster: Cluster;
    /** Replaces the endpoints of the Service's one EndpointSlice. */
    const putSlice = (endpoints: { ip: string; ready: boolean }[]): Promise<unknown> =>
      cluster.request('PUT', `${SLICES}/vllm-1`, slice('vllm-1', endpoints));
    let dir: string;
    let tls: ServingTls;
    const hosts: TestHost[] = [];
    const sims: { stop(): Promise<unknown> }[] = [];
    let controller: RunningProcess | undefined;
    const sidecars: RunningProcess[] = [];
    let tokenFile: string;
    /** Fixed, so sidecars find a restarted controller at the same address (as through a Service). */
    let controllerPort: number;

    const controllerArgs = (): string[] => [
      'controller',
      '--kubeconfig',
      cluster.kubeconfigPath,
      '--listen',
      `127.0.0.1:${controllerPort}`,
      '--admin',
      '127.0.0.1:0',
      '--tls-cert-file',
      tls.certFile,
      '--tls-key-file',
      tls.keyFile,
      '--lease-namespace',
      'switchyard',
      '--identity',
      'controller-0',
      '--heartbeat',
      '1s',
    ];

    const startSidecar = (
      id: string,
      controllerUrl: string,
      pool = 'chat',
      cacheFile = join(dir, `${id}.snapshot.json`),
      token = tokenFile,
    ): Promise<RunningProcess> =>
      startSwitchyard(
        controllerSidecarArgs({
          controllerUrl,
          pool,
          namespace: NS,
          tokenFile: token,
          caFile: tls.caFile,
          cacheFile,
          sidecarId: id,
        }),
      );

    const endpointsOf = async (sidecar: RunningProcess): Promise<string[]> =>
      (await getJson<DebugBackends>(`${sidecar.adminUrl}/debug/backends`)).endpoints
        .map((e) => e.id)
        .sort();

    /** Waits until every sidecar routes to exactly `ids`; returns how long that took. */
    const untilSidecarsSee = async (ids: string[], what: string): Promise<number> => {
      const started = performance.now();
      await waitFor(
        what,
        async () => {
          for (const s of sidecars)
            if ((await endpointsOf(s)).join() !== [...ids].sort().join()) return false;
          return true;
        },
        { timeoutMs: 30_000, intervalMs: 20 },
      );
      return performance.now() - started;
    };

    const chat = (sidecar: RunningProcess): Promise<Response> => postChat(sidecar.url);

    /**
     * For a failed zero-loss assertion: what each process logged about snapshots, breakers,
     * informers and leadership, and what each sidecar routes to now (a flake must explain itself).
     */
    const whatTheProcessesSaid = async (): Promise<string> => {
      const interesting =
        /configuration applied|snapshot|circuit breaker|informer|leader|stream|drift|error/i;
      const tail = (name: string, p: RunningProcess | undefined): string =>
        `--- ${name}:\n${(p?.output() ?? '')
          .split('\n')
          .filter((line) => interesting.test(line))
          .slice(-20)
          .join('\n')}`;
      const routes = await Promise.all(
        sidecars.map((s) =>
          fetch(`${s.adminUrl}/debug/backends`)
            .then((r) => r.text())
            .catch((err: unknown) => String(err)),
        ),
      );
      return [
        tail('controller', controller),
        ...sidecars.map((s, i) => tail(`sidecar ${i + 1}`, s)),
        ...routes.map((r, i) => `--- sidecar ${i + 1} /debug/backends:\n${r.slice(0, 2000)}`),
      ].join('\n');
    };

    const id = (host: TestHost): string => `in-cluster/${host.ip}:8000`;

    before(async () => {
      dir = mkdtempSync(join(tmpdir(), 'switchyard-e2e-'));
      tls = makeServingTls(dir);
      cluster = await startCluster();
      await installInferencePoolCrd(cluster);
      await createNamespaces(cluster, [NS, 'switchyard', 'other']);
      for (const label of ['h1', 'h2']) {
        const host = await createTestHost(label);
        hosts.push(host);
        sims.push(
          await startSwitchyardIn(host, ['sim', '--port', '8000', '--name', label, ...SIM_FLAGS]),
        );
      }
      await cluster.applyYaml(
        `apiVersion: v1
kind: Service
metadata: {name: vllm, namespace: ${NS}}
spec:
  ports: [{name: http, port: 80, targetPort: 8000}]
`,
      );
      await cluster.request('POST', SLICES, slice('vllm-1', [{ ip: hosts[0]!.ip, ready: true }]));
      await cluster.applyYaml(
        `apiVersion: switchyard.dev/v1alpha1
kind: InferencePool
metadata: {name: chat, namespace: ${NS}}
spec:
  backends:
  - name: in-cluster
    service: {name: vllm, port: http}
  health: {minRequests: 1000, consecutiveErrors: 0}
`,
      );
      const token = await cluster.createServiceAccountToken(NS, 'app', { audience: 'switchyard' });
      tokenFile = join(dir, 'token');
      writeFileSync(tokenFile, token.token);
      [controllerPort] = (await freePorts(1)) as [number];
      controller = await startSwitchyard(controllerArgs());
      for (const sidecarId of ['app-1', 'app-2'])
        sidecars.push(await startSidecar(sidecarId, controller.url));
    });

    after(async () => {
      await stopAll([...sidecars, controller]);
      await Promise.all(sims.map((s) => s.stop()));
      await Promise.all(hosts.map((h) => h.remove()));
      await cluster?.stop();
      rmSync(dir, { recursive: true, force: true });
    });

    it('routes through both sidecars to the Service endpoints on a test host', async () => {
      await untilSidecarsSee([id(hosts[0]!)], 'the first snapshot on both sidecars');
      for (const s of sidecars) {
        const res = await chat(s);
        assert.equal(res.status, 200);
        assert.equal(res.headers.get('x-switchyard-backend'), id(hosts[0]!));
      }
    });

    it('carries EndpointSlice changes to every sidecar: added, not ready, removed', async (t) => {
      const [h1, h2] = [hosts[0]!, hosts[1]!];
      await putSlice([
        { ip: h1.ip, ready: true },
        { ip: h2.ip, ready: true },
      ]);
      const addedMs = await untilSidecarsSee([id(h1), id(h2)], 'the added endpoint');
      await putSlice([
        { ip: h1.ip, ready: false },
        { ip: h2.ip, ready: true },
      ]);
      const notReadyMs = await untilSidecarsSee([id(h2)], 'the not-ready endpoint to leave');
      await putSlice([{ ip: h2.ip, ready: true }]);
      await untilSidecarsSee([id(h2)], 'the removed endpoint to stay gone');
      await putSlice([
        { ip: h1.ip, ready: true },
        { ip: h2.ip, ready: true },
      ]);
      const backMs = await untilSidecarsSee([id(h1), id(h2)], 'both endpoints again');
      t.diagnostic(
        `EndpointSlice write → both sidecars: added ${addedMs.toFixed(0)} ms, not ready ${notReadyMs.toFixed(0)} ms, re-added ${backMs.toFixed(0)} ms`,
      );
      const res = await chat(sidecars[0]!);
      assert.equal(res.status, 200);
    });

    it('shows in status that both sidecars are connected and in sync', async () => {
      type Status = {
        status?: {
          sidecars?: { connected?: number; inSync?: number };
          conditions?: { type: string; status: string }[];
          endpoints?: { ready?: number; total?: number };
          snapshot?: { version?: number };
        };
      };
      const status = await waitFor(
        'two sidecars in sync in status',
        async () => {
          const res = await cluster.request<Status>('GET', `${POOLS}/chat`);
          const s = res.body.status;
          return s?.sidecars?.connected === 2 && s.sidecars.inSync === 2 ? s : undefined;
        },
        { timeoutMs: 30_000 },
      );
      assert.equal(status.conditions?.find((c) => c.type === 'Ready')?.status, 'True');
      assert.equal(status.conditions?.find((c) => c.type === 'ResolvedRefs')?.status, 'True');
      assert.equal(status.endpoints?.ready, 2);
      assert.ok((status.snapshot?.version ?? 0) >= 1);
    });

    it('scale from zero: holds a request while the Service has no ready endpoint, then serves it', async (t) => {
      const h2 = hosts[1]!;
      await cluster.applyYaml(
        `apiVersion: v1
kind: Service
metadata: {name: zero, namespace: ${NS}}
spec:
  ports: [{name: http, port: 80, targetPort: 8000}]
---
apiVersion: switchyard.dev/v1alpha1
kind: InferencePool
metadata: {name: zero, namespace: ${NS}}
spec:
  backends:
  - name: in-cluster
    service: {name: zero, port: http}
  scaleFromZero: {maxWait: 20s}
`,
      );
      const zeroSlice = (ready: boolean): unknown =>
        slice('zero-1', [{ ip: h2.ip, ready }], 'zero');
      // The server's pod exists but is not ready yet (its model still loading).
      await cluster.request('POST', SLICES, zeroSlice(false));
      const sidecar = await startSidecar('app-zero', controller!.url, 'zero');
      try {
        await waitFor(
          'the snapshot of the pool with no endpoint',
          async () => {
            const b = await getJson<DebugBackends>(`${sidecar.adminUrl}/debug/backends`);
            return b.snapshotVersion !== null && b.endpoints.length === 0;
          },
          { intervalMs: 20 },
        );
        const answer = postChat(sidecar.url);
        await waitFor('the request held', () => /holding its requests/.test(sidecar.output()), {
          intervalMs: 20,
        });
        // What an autoscaler scales from zero on: the sidecar reports the held request at once
        // and the leader exports it.
        const held = new RegExp(
          `^switchyard_pool_demand_held_requests\\{namespace="${NS}",pool="zero"\\} 1$`,
          'm',
        );
        await waitFor(
          "the held request in the leader's gauge",
          async () => held.test(await (await fetch(`${controller!.adminUrl}/metrics`)).text()),
          { intervalMs: 50, timeoutMs: 10_000 },
        );
        const readyAt = performance.now();
        await cluster.request('PUT', `${SLICES}/zero-1`, zeroSlice(true));
        const res = await answer;
        const servedMs = performance.now() - readyAt;
        assert.equal(res.status, 200, await res.clone().text());
        assert.equal(res.headers.get('x-switchyard-backend'), id(h2));
        t.diagnostic(`EndpointSlice ready → held request answered: ${servedMs.toFixed(0)} ms`);
      } finally {
        await sidecar.stop();
      }
    });

    it('counts the sidecars of every replica in status, written by one leader', async () => {
      const [port2] = (await freePorts(1)) as [number];
      const args = controllerArgs().map((a) =>
        a === `127.0.0.1:${controllerPort}`
          ? `127.0.0.1:${port2}`
          : a === 'controller-0'
            ? 'controller-1'
            : a,
      );
      const replica = await startSwitchyard(args);
      const third = await startSidecar('app-3', replica.url);
      try {
        type Status = { status?: { sidecars?: { connected?: number; inSync?: number } } };
        await waitFor(
          'three sidecars (two on the leader, one on the second replica) in status',
          async () => {
            const s = (await cluster.request<Status>('GET', `${POOLS}/chat`)).body.status?.sidecars;
            return s?.connected === 3 && s.inSync === 3;
          },
          { timeoutMs: 30_000 },
        );
        const leaders = await Promise.all(
          [controller!, replica].map(async (c) =>
            /^switchyard_controller_leader 1$/m.test(
              await (await fetch(`${c.adminUrl}/metrics`)).text(),
            ),
          ),
        );
        assert.deepEqual(leaders, [true, false], 'exactly one replica leads');
      } finally {
        await third.stop();
        await replica.stop();
      }
    });

    it('names a missing Service and a missing Secret in status', async () => {
      await cluster.applyYaml(
        `apiVersion: switchyard.dev/v1alpha1
kind: InferencePool
metadata: {name: broken, namespace: ${NS}}
spec:
  backends:
  - {name: gone, service: {name: no-such-service, port: 8000}}
  - {name: provider, url: 'http://127.0.0.1:9/v1', apiKeySecretRef: {name: no-such-secret, key: apiKey}}
`,
      );
      type Status = {
        status?: { conditions?: { type: string; status: string; message: string }[] };
      };
      const refs = await waitFor('ResolvedRefs=False on the broken pool', async () => {
        const res = await cluster.request<Status>('GET', `${POOLS}/broken`);
        const c = res.body.status?.conditions?.find((x) => x.type === 'ResolvedRefs');
        return c?.status === 'False' ? c : undefined;
      });
      assert.match(refs.message, /no-such-service/);
      assert.match(refs.message, /no-such-secret/);
    });

    it('delivers a Secret’s API key to the sidecars on the stream only, and a rotated key too', async () => {
      const key1 = 'sk-e2e-first-3c1d9a';
      const key2 = 'sk-e2e-second-77b2e0';
      const secret = (value: string): unknown => ({
        apiVersion: 'v1',
        kind: 'Secret',
        metadata: { name: 'provider-key', namespace: NS },
        data: { apiKey: Buffer.from(value).toString('base64') },
      });
      await cluster.request('POST', `/api/v1/namespaces/${NS}/secrets`, secret(key1));
      assertTestAddress(hosts[0]!.ip);
      await cluster.applyYaml(
        `apiVersion: switchyard.dev/v1alpha1
kind: InferencePool
metadata: {name: keyed, namespace: ${NS}}
spec:
  backends:
  - name: provider
    url: 'http://${hosts[0]!.ip}:8000/v1'
    apiKeySecretRef: {name: provider-key, key: apiKey}
    allowInsecureApiKey: true
`,
      );
      // The key reaches a sidecar whose token is bound to a pod of the pool, and no other.
      await cluster.request('POST', `/api/v1/namespaces/${NS}/pods`, {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name: 'app-keyed', labels: { 'switchyard.dev/pool': 'keyed' } },
        spec: { serviceAccountName: 'app', containers: [{ name: 'app', image: 'app' }] },
      });
      await cluster.request('POST', `/api/v1/namespaces/${NS}/pods`, {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name: 'app-of-chat', labels: { 'switchyard.dev/pool': 'chat' } },
        spec: { serviceAccountName: 'app', containers: [{ name: 'app', image: 'app' }] },
      });
      const podTokenFile = join(dir, 'keyed-pod.token');
      writeFileSync(
        podTokenFile,
        (
          await cluster.createServiceAccountToken(NS, 'app', {
            audience: 'switchyard',
            boundPod: 'app-keyed',
          })
        ).token,
      );
      const cacheFile = join(dir, 'keyed.snapshot.json');
      const keyedSidecar = await startSidecar(
        'keyed-1',
        controller!.url,
        'keyed',
        cacheFile,
        podTokenFile,
      );
      // A token bound to no pod (`kubectl create token`) reads the pool without its key.
      const unboundCache = join(dir, 'keyed-unbound.snapshot.json');
      const unboundSidecar = await startSidecar(
        'keyed-unbound',
        controller!.url,
        'keyed',
        unboundCache,
      );
      try {
        await waitFor(
          'the keyless snapshot',
          async () => (await endpointsOf(unboundSidecar)).length === 1,
        );
        assert.equal(
          readFileSync(unboundCache, 'utf8').includes(key1),
          false,
          'no key without a pod',
        );
        assert.match(unboundSidecar.output(), /withholds API keys from this sidecar/);
        // A pod of another pool is refused, and told why.
        const otherPod = await cluster.createServiceAccountToken(NS, 'app', {
          audience: 'switchyard',
          boundPod: 'app-of-chat',
        });
        const refused = await streamRequest(
          `${controller!.url}/v1/namespaces/${NS}/pools/keyed/snapshots`,
          readFileSync(tls.caFile, 'utf8'),
          otherPod.token,
        );
        assert.equal(refused.status, 403);
        assert.match(
          refused.body,
          /Pod app-of-chat does not follow pool keyed \(it follows chat\)/,
        );
        assert.equal(refused.body.includes(key1), false);
        await waitFor(
          'the keyed snapshot',
          async () => (await endpointsOf(keyedSidecar)).length === 1,
        );
        assert.equal((await chat(keyedSidecar)).status, 200);
        assert.match(
          readFileSync(cacheFile, 'utf8'),
          new RegExp(key1),
          'the sidecar holds the key',
        );
        await cluster.request('PUT', `/api/v1/namespaces/${NS}/secrets/provider-key`, secret(key2));
        await waitFor(
          'the rotated key on the sidecar',
          () => readFileSync(cacheFile, 'utf8').includes(key2),
          { timeoutMs: 15_000 },
        );
        const status = (await cluster.request('GET', `${POOLS}/keyed`)).text;
        const events = (await cluster.request('GET', `/api/v1/namespaces/${NS}/events`)).text;
        const debug = JSON.stringify(await getJson(`${keyedSidecar.adminUrl}/debug/backends`));
        const metrics =
          (await (await fetch(`${keyedSidecar.adminUrl}/metrics`)).text()) +
          (await (await fetch(`${controller!.adminUrl}/metrics`)).text());
        const leaks = findSecrets(
          {
            status,
            events,
            debug,
            metrics,
            controllerLog: controller!.output(),
            sidecarLog: keyedSidecar.output(),
          },
          [key1, key2],
        );
        assert.deepEqual(leaks, []);
        assert.equal(
          readFileSync(unboundCache, 'utf8').includes(key2),
          false,
          'nor the rotated one',
        );
      } finally {
        await keyedSidecar.stop();
        await unboundSidecar.stop();
        for (const pod of ['app-keyed', 'app-of-chat'])
          await cluster.request(
            'DELETE',
            `/api/v1/namespaces/${NS}/pods/${pod}?gracePeriodSeconds=0`,
          );
      }
    });

    it('refuses the stream and reports to any token but a live one of the pool namespace, and shows no pool data', async (t) => {
      const ca = readFileSync(tls.caFile, 'utf8');
      const url = `${controller!.url}/v1/namespaces/${NS}/pools/chat/snapshots`;
      const token = async (ns: string, options: { audience?: string; boundPod?: string } = {}) =>
        (
          await cluster.createServiceAccountToken(ns, 'app', {
            audience: options.audience ?? 'switchyard',
            ...(options.boundPod === undefined ? {} : { boundPod: options.boundPod }),
          })
        ).token;
      const forged = (expiresInSeconds: number): Promise<string> =>
        forgeServiceAccountToken(cluster, {
          namespace: NS,
          serviceAccount: 'app',
          audience: 'switchyard',
          expiresInSeconds,
        });
      // A pod-bound token works while its pod exists, and one never used before is refused
      // once the pod is deleted (the API server checks the pod on every TokenReview).
      const pods = `/api/v1/namespaces/${NS}/pods`;
      await cluster.request('POST', pods, {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name: 'app-bound', labels: { 'switchyard.dev/pool': 'chat' } },
        spec: { serviceAccountName: 'app', containers: [{ name: 'app', image: 'app' }] },
      });
      const whileAlive = await token(NS, { boundPod: 'app-bound' });
      const afterDeletion = await token(NS, { boundPod: 'app-bound' });
      assert.equal((await streamRequest(url, ca, whileAlive)).status, 200, 'a bound token works');
      await cluster.request('DELETE', `${pods}/app-bound?gracePeriodSeconds=0`);
      await waitFor(
        'the pod to be gone',
        async () => (await cluster.request('GET', `${pods}/app-bound`)).status === 404,
      );

      assert.equal(
        (await streamRequest(url, ca, await forged(600))).status,
        200,
        'forged tokens verify',
      );
      const refusals = {
        'no token': { token: undefined, status: 401 },
        'not a token': { token: 'not-a-jwt', status: 401 },
        'the API server’s audience': {
          token: await token(NS, { audience: cluster.apiAudience }),
          status: 401,
        },
        'expired an hour ago': { token: await forged(-3600), status: 401 },
        'another namespace': { token: await token('other'), status: 403 },
        'a deleted pod': { token: afterDeletion, status: 401 },
      };
      const bodies: Record<string, string> = {};
      for (const [name, r] of Object.entries(refusals)) {
        const stream = await streamRequest(url, ca, r.token);
        assert.equal(stream.status, r.status, `stream, ${name}: ${stream.body}`);
        const report = await streamRequest(url.replace(/snapshots$/, 'reports'), ca, r.token, true);
        assert.equal(report.status, r.status, `report, ${name}: ${report.body}`);
        for (const [kind, body] of [
          ['stream', stream.body],
          ['report', report.body],
        ] as const) {
          bodies[`${kind}, ${name}`] = body;
          const parsed = JSON.parse(body) as { error?: Record<string, unknown> };
          assert.deepEqual(Object.keys(parsed), ['error'], 'an error and nothing else');
          assert.deepEqual(Object.keys(parsed.error ?? {}).sort(), ['code', 'message', 'type']);
          assert.doesNotMatch(
            body,
            /in-cluster|vllm|10\.77\.|"chat"|snapshot|sk-/,
            `${kind}, ${name}`,
          );
        }
      }
      const good = await streamRequest(url, ca, readFileSync(tokenFile, 'utf8'));
      assert.equal(good.status, 200);
      recordFigure(t, {
        fault: 'security: snapshot stream and reports with a bad token',
        load: `${Object.keys(refusals).length} kinds of token × stream and reports`,
        lost: 0,
        requests: Object.keys(bodies).length,
        refused: Object.keys(bodies).length,
        codes: Object.fromEntries(Object.entries(refusals).map(([k, v]) => [k, v.status])),
      });
    });

    it(
      'measures how long a token used just before its pod was deleted still opens a stream',
      {
        skip:
          process.env['SWITCHYARD_RELIABILITY_SLOW'] !== '1' &&
          'about a minute; SWITCHYARD_RELIABILITY_SLOW=1 runs it',
      },
      async (t) => {
        const ca = readFileSync(tls.caFile, 'utf8');
        const url = `${controller!.url}/v1/namespaces/${NS}/pools/chat/snapshots`;
        const pods = `/api/v1/namespaces/${NS}/pods`;
        await cluster.request('POST', pods, {
          apiVersion: 'v1',
          kind: 'Pod',
          metadata: { name: 'app-cached', labels: { 'switchyard.dev/pool': 'chat' } },
          spec: { serviceAccountName: 'app', containers: [{ name: 'app', image: 'app' }] },
        });
        const { token } = await cluster.createServiceAccountToken(NS, 'app', {
          audience: 'switchyard',
          boundPod: 'app-cached',
        });
        assert.equal((await streamRequest(url, ca, token)).status, 200);
        await cluster.request('DELETE', `${pods}/app-cached?gracePeriodSeconds=0`);
        const deleted = performance.now();
        const refusedAfterMs = await waitFor(
          'the token to be refused',
          async () =>
            (await streamRequest(url, ca, token)).status === 401 && performance.now() - deleted,
          { timeoutMs: 120_000, intervalMs: 500 },
        );
        recordFigure(t, {
          fault: 'security: a token of a deleted pod, reviewed just before the deletion',
          load: 'one stream request every 0.5 s',
          lost: 0,
          requests: 1,
          recoveryMs: Math.round(refusedAfterMs),
          note: 'without a pod watch (no --injection-config), new streams are accepted until the controller’s 60 s TokenReview cache expires',
        });
      },
    );

    it('keeps routing with zero failed requests while the controller is killed, serves a restarted sidecar from its cache, and resyncs', async (t) => {
      // Two sidecars under steady traffic; the second is restarted while the controller is down.
      const first = sidecars[0]!;
      let second = sidecars[1]!;
      const toFirst = keepSending(chatTo(() => first.url));
      let toSecond = keepSending(chatTo(() => second.url));
      await controller!.kill(); // kill -9 mid-traffic
      const killedAt = performance.now();
      await new Promise((r) => setTimeout(r, 1_000));
      const beforeRestart = await toSecond.stop();
      await second.stop();
      const restartedAt = performance.now();
      // A token of its own (same ServiceAccount): what the restarted controller's metrics say of
      // each sidecar below is then its own.
      const secondToken = join(dir, 'token-restarted');
      writeFileSync(
        secondToken,
        (await cluster.createServiceAccountToken(NS, 'app', { audience: 'switchyard' })).token,
      );
      // The controller is still down.
      second = await startSidecar('app-2', controller!.url, 'chat', undefined, secondToken);
      sidecars[1] = second;
      const cachedMs = performance.now() - restartedAt;
      toSecond = keepSending(chatTo(() => second.url));
      assert.deepEqual(await endpointsOf(second), await endpointsOf(first), 'the cached snapshot');
      await new Promise((r) => setTimeout(r, 1_000)); // both route on what they have meanwhile
      const controllerBackAt = performance.now();
      const downMs = controllerBackAt - killedAt;
      controller = await startSwitchyard(controllerArgs());
      const h1 = hosts[0]!;
      const h2 = hosts[1]!;
      await putSlice([{ ip: h2.ip, ready: true }]);
      await untilSidecarsSee([id(h2)], 'a change after the restart');
      const resyncMs = performance.now() - controllerBackAt;
      const counts = [await toFirst.stop(), beforeRestart, await toSecond.stop()];
      const sent = counts.reduce((n, c) => n + c.sent, 0);
      const failed = counts.reduce((n, c) => n + c.failed, 0);
      assert.equal(
        failed,
        0,
        `${failed} of ${sent} requests failed: ${counts.map((c) => c.firstFailure).join(' ')}\n${
          failed === 0 ? '' : await whatTheProcessesSaid()
        }`,
      );
      // The sidecar that stayed up came back with the review ticket the killed process gave it
      // (signed with a key derived from the same serving key): let in without a TokenReview. The
      // one restarted meanwhile, on a token of its own, had none and was reviewed.
      const auth = await (await fetch(`${controller.adminUrl}/metrics`)).text();
      const via = (how: string): number =>
        Number(
          new RegExp(
            `^switchyard_controller_sidecar_auth_total\\{via="${how}"\\} (\\d+)$`,
            'm',
          ).exec(auth)?.[1] ?? 0,
        );
      assert.ok(
        via('ticket') >= 1,
        `no sidecar let in by a ticket:\n${auth.match(/^switchyard_controller_sidecar_auth.*$/gm)?.join('\n')}`,
      );
      assert.ok(via('review') >= 1, 'the restarted sidecar was reviewed');
      recordFigure(t, {
        fault: 'control plane: controller kill -9 and restart; a sidecar restarted meanwhile',
        load: '2 sidecars, 1 request at a time each',
        lost: failed,
        requests: sent,
        controllerDownMs: Math.round(downMs),
        restartedSidecarReadyFromCacheMs: Math.round(cachedMs),
        recoveryMs: Math.round(resyncMs),
      });
      await putSlice([
        { ip: h1.ip, ready: true },
        { ip: h2.ip, ready: true },
      ]);
      await untilSidecarsSee([id(h1), id(h2)], 'both endpoints again');
    });

    it('recovers after the API server restarts, with zero failed requests', async (t) => {
      const traffic = sidecars.map((s) => keepSending(chatTo(() => s.url)));
      const restartStarted = performance.now();
      await cluster.restartApiServer();
      const apiDownMs = performance.now() - restartStarted;
      const started = performance.now();
      await putSlice([{ ip: hosts[0]!.ip, ready: true }]);
      await untilSidecarsSee([id(hosts[0]!)], 'a change after the API server restart');
      const resyncMs = performance.now() - started;
      const counts = await Promise.all(traffic.map((x) => x.stop()));
      const sent = counts.reduce((n, c) => n + c.sent, 0);
      const failed = counts.reduce((n, c) => n + c.failed, 0);
      assert.equal(
        failed,
        0,
        `${failed} of ${sent} requests failed: ${counts.map((c) => c.firstFailure).join(' ')}\n${
          failed === 0 ? '' : await whatTheProcessesSaid()
        }`,
      );
      recordFigure(t, {
        fault: 'control plane: API server restart',
        load: '2 sidecars, 1 request at a time each',
        lost: failed,
        requests: sent,
        apiServerRestartMs: Math.round(apiDownMs),
        recoveryMs: Math.round(resyncMs),
      });
    });
  },
);
