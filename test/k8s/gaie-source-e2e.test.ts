/**
 * A Gateway API inference extension (GAIE) InferencePool as a backend source, on the real API
 * server (harness/k8s/cluster.ts) with a real controller and sidecar (issue 44):
 *
 * Pool `chat` is Failover over backend `gaie` (`inferencePoolRef: {name: llama}`) then an
 * external url tier `provider` (a simulator on a test host). The controller starts before GAIE's
 * CRD exists: the pool says so in ResolvedRefs (and an Event) and the provider serves. Then the
 * CRD is installed (harness/k8s/gaie.ts, from the Go module proxy) while the GAIE pool is still
 * missing, then the GAIE pool, still empty (the provider serves), then two member pods whose
 * status (podIP on a test host, Ready) is written through the status subresource, as a kubelet
 * would: traffic goes to them. One turns unready, then the other is deleted (it stays,
 * terminating, as there is no kubelet to end it): traffic follows, back to the provider when none
 * is left. An h2c pool is refused with a clear condition.
 *
 * The openai client calls through the sidecar. SWITCHYARD_K8S_TESTS=0 skips it.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import { startCluster, waitFor, type Cluster } from '../../harness/k8s/cluster.ts';
import { installInferencePoolCrd } from '../../harness/k8s/crd.ts';
import { installGaieInferencePoolCrd } from '../../harness/k8s/gaie.ts';
import {
  controllerSidecarArgs,
  FAST_SIM,
  startSwitchyard,
  stopAll,
  type RunningProcess,
} from '../../harness/processes.ts';
import { createNamespaces, startPlainController } from './test-controller.ts';
import {
  assertTestAddress,
  createTestHost,
  startSwitchyardIn,
  type HostProcess,
  type TestHost,
} from './test-hosts.ts';

const enabled = process.env['SWITCHYARD_K8S_TESTS'] !== '0';
const NS = 'apps';
const POOL = `/apis/switchyard.dev/v1alpha1/namespaces/${NS}/inferencepools/chat`;
const GAIE_POOLS = `/apis/inference.networking.k8s.io/v1/namespaces/${NS}/inferencepools`;
const PODS = `/api/v1/namespaces/${NS}/pods`;
const MISSING = 'InferencePool inference.networking.k8s.io/v1 apps/llama not found';

interface Condition {
  type: string;
  status: string;
  reason: string;
  message: string;
}

describe(
  'a GAIE InferencePool as a backend source on a real API server',
  { skip: !enabled && 'SWITCHYARD_K8S_TESTS=0' },
  () => {
    let cluster: Cluster;
    let dir: string;
    const hosts: TestHost[] = [];
    const sims: HostProcess[] = [];
    let controller: RunningProcess | undefined;
    let sidecar: RunningProcess | undefined;
    let client: OpenAI;
    let g1: TestHost;
    let g2: TestHost;
    let provider: TestHost;

    const resolvedRefs = async (): Promise<Condition | undefined> => {
      const res = await cluster.request<{ status?: { conditions?: Condition[] } }>('GET', POOL);
      return res.body.status?.conditions?.find((c) => c.type === 'ResolvedRefs');
    };

    const sidecarEndpoints = async (): Promise<string[]> => {
      const res = await fetch(`${sidecar!.adminUrl}/debug/backends`);
      const body = (await res.json()) as { endpoints: { id: string }[] };
      return body.endpoints.map((e) => e.id).sort();
    };
    const untilSidecarHas = (ids: readonly string[], what: string) =>
      waitFor(what, async () => {
        const seen = await sidecarEndpoints();
        return JSON.stringify(seen) === JSON.stringify([...ids].sort()) ? seen : undefined;
      });

    /** The endpoints that answered `n` chat completions through the sidecar, with counts. */
    const answeredBy = async (n: number): Promise<Record<string, number>> => {
      for (const h of hosts) assertTestAddress(h.ip);
      const counts: Record<string, number> = {};
      for (let i = 0; i < n; i++) {
        const { data, response } = await client.chat.completions
          .create({ model: 'm', max_tokens: 3, messages: [{ role: 'user', content: `hi ${i}` }] })
          .withResponse();
        assert.ok(data.choices.length > 0);
        const id = (response.headers.get('x-switchyard-backend') ?? '?').split(';')[0]!.trim();
        counts[id] = (counts[id] ?? 0) + 1;
      }
      return counts;
    };

    const gaieId = (h: TestHost): string => `gaie/${h.ip}:8000`;
    const providerId = (): string => `provider/${provider.ip}:8000`;

    /** A member pod as the API stores it before a kubelet runs it: no IP, not ready. */
    const createPod = async (name: string, labels: Record<string, string>): Promise<void> => {
      const res = await cluster.request('POST', PODS, {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name, labels },
        // Bound to a node: a delete then waits for its kubelet (there is none), so the pod stays,
        // terminating, as a real one does during its grace period.
        spec: { nodeName: 'node-1', containers: [{ name: 'vllm', image: 'vllm' }] },
      });
      assert.equal(res.status, 201, res.text);
    };
    /** What a kubelet would write: the pod runs on `host`, ready or not. */
    const setPodStatus = async (name: string, host: TestHost, ready: boolean): Promise<void> => {
      const now = new Date().toISOString();
      const res = await cluster.request('PATCH', `${PODS}/${name}/status`, {
        status: {
          phase: 'Running',
          podIP: host.ip,
          podIPs: [{ ip: host.ip }],
          conditions: [
            { type: 'Ready', status: ready ? 'True' : 'False', lastTransitionTime: now },
          ],
        },
      });
      assert.equal(res.status, 200, res.text);
    };

    before(async () => {
      dir = mkdtempSync(join(tmpdir(), 'switchyard-gaie-'));
      cluster = await startCluster();
      await installInferencePoolCrd(cluster);
      await createNamespaces(cluster, [NS, 'switchyard']);
      for (const label of ['g1', 'g2', 'provider']) {
        const host = await createTestHost(label);
        hosts.push(host);
        sims.push(
          await startSwitchyardIn(host, ['sim', '--port', '8000', '--name', label, ...FAST_SIM]),
        );
      }
      [g1, g2, provider] = hosts as [TestHost, TestHost, TestHost];
      assertTestAddress(provider.ip);
      await cluster.applyYaml(`apiVersion: switchyard.dev/v1alpha1
kind: InferencePool
metadata: {name: chat, namespace: ${NS}}
spec:
  mode: Failover
  backends:
  - {name: gaie, inferencePoolRef: {name: llama}}
  - {name: provider, url: 'http://${provider.ip}:8000/v1'}
  affinity: {key: None}
`);
      controller = await startPlainController(cluster);
      const token = await cluster.createServiceAccountToken(NS, 'app', { audience: 'switchyard' });
      const tokenFile = join(dir, 'token');
      writeFileSync(tokenFile, token.token);
      sidecar = await startSwitchyard(
        controllerSidecarArgs({
          controllerUrl: controller.url,
          pool: 'chat',
          namespace: NS,
          tokenFile,
          sidecarId: 'app-1',
        }),
      );
      client = new OpenAI({ baseURL: `${sidecar.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    });

    after(async () => {
      await stopAll([sidecar, controller]);
      await Promise.all(sims.map((s) => s.stop()));
      await Promise.all(hosts.map((h) => h.remove()));
      await cluster?.stop();
      if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
    });

    it('without GAIE’s CRD the pool says what is missing, and the url tier serves', async () => {
      const condition = await waitFor('ResolvedRefs False for the missing CRD', async () => {
        const c = await resolvedRefs();
        return c?.status === 'False' ? c : undefined;
      });
      assert.equal(condition.reason, 'InferencePoolNotFound');
      assert.match(condition.message, new RegExp(`^Backend gaie: ${MISSING}: .*install`));
      await waitFor('the Warning Event', async () => {
        const res = await cluster.request<{ items: { reason: string; type: string }[] }>(
          'GET',
          `/api/v1/namespaces/${NS}/events`,
        );
        return res.body.items.some(
          (e) => e.reason === 'InferencePoolNotFound' && e.type === 'Warning',
        );
      });
      await untilSidecarHas([providerId()], 'the provider tier alone in the sidecar');
      assert.deepEqual(await answeredBy(5), { [providerId()]: 5 });
      assert.equal((await fetch(`${controller!.adminUrl}/readyz`)).status, 200);
    });

    it('with the CRD but no such GAIE pool, the condition names the pool', async (t) => {
      await installGaieInferencePoolCrd(cluster);
      // The GAIE watch retries its list with its backoff: seconds, not a hot loop.
      await waitFor(
        'the message without the missing CRD',
        async () => (await resolvedRefs())?.message === `Backend gaie: ${MISSING}`,
        { timeoutMs: 35_000 },
      );
      // While the CRD was missing: a warning per retry, backing off, and nothing else went wrong.
      const retries = controller!
        .output()
        .split('\n')
        .filter((l) => l.includes('"informer":"inferencepools.inference.networking.k8s.io"'));
      t.diagnostic(`${retries.length} retries of the GAIE list while its CRD was missing`);
      assert.ok(retries.length >= 1 && retries.length <= 12, retries.join('\n'));
      assert.equal((await fetch(`${controller!.adminUrl}/readyz`)).status, 200);
    });

    it('an empty GAIE pool resolves, and the url tier serves until a pod is ready', async () => {
      const res = await cluster.request('POST', GAIE_POOLS, {
        apiVersion: 'inference.networking.k8s.io/v1',
        kind: 'InferencePool',
        metadata: { name: 'llama' },
        spec: {
          selector: { matchLabels: { app: 'llama' } },
          targetPorts: [{ number: 8000 }],
          endpointPickerRef: { name: 'llama-epp', port: { number: 9002 } },
        },
      });
      assert.equal(res.status, 201, res.text);
      await waitFor('ResolvedRefs True', async () => (await resolvedRefs())?.status === 'True');
      await createPod('llama-1', { app: 'llama' });
      await createPod('llama-2', { app: 'llama' });
      await createPod('other', { app: 'other' });
      await setPodStatus('other', provider, true); // ready, but not a member
      await setPodStatus('llama-1', g1, false);
      assert.deepEqual(await answeredBy(3), { [providerId()]: 3 });
      assert.deepEqual(await sidecarEndpoints(), [providerId()]);
    });

    it('ready member pods become the first tier: traffic goes to them', async () => {
      await setPodStatus('llama-1', g1, true);
      await setPodStatus('llama-2', g2, true);
      await untilSidecarHas([gaieId(g1), gaieId(g2), providerId()], 'both pods in the sidecar');
      const counts = await answeredBy(20);
      assert.deepEqual(Object.keys(counts).sort(), [gaieId(g1), gaieId(g2)].sort());
    });

    it('a pod turned unready, then one terminating, is followed; then the url tier serves', async () => {
      await setPodStatus('llama-2', g2, false);
      await untilSidecarHas([gaieId(g1), providerId()], 'the unready pod out of the sidecar');
      assert.deepEqual(await answeredBy(5), { [gaieId(g1)]: 5 });
      const res = await cluster.request('DELETE', `${PODS}/llama-1`);
      assert.equal(res.status, 200, res.text);
      await untilSidecarHas([providerId()], 'the terminating pod out of the sidecar');
      const terminating = await cluster.request<{ metadata: { deletionTimestamp?: string } }>(
        'GET',
        `${PODS}/llama-1`,
      );
      assert.ok(terminating.body.metadata.deletionTimestamp, 'still there, terminating');
      assert.deepEqual(await answeredBy(5), { [providerId()]: 5 });
    });

    it('an h2c GAIE pool is refused with a condition that says why', async () => {
      await setPodStatus('llama-2', g2, true);
      await untilSidecarHas([gaieId(g2), providerId()], 'the pod ready again');
      const res = await cluster.request('PATCH', `${GAIE_POOLS}/llama`, {
        spec: { appProtocol: 'kubernetes.io/h2c' },
      });
      assert.equal(res.status, 200, res.text);
      const condition = await waitFor('ResolvedRefs False for h2c', async () => {
        const c = await resolvedRefs();
        return c?.status === 'False' ? c : undefined;
      });
      assert.equal(condition.reason, 'InferencePoolUnsupported');
      assert.match(condition.message, /appProtocol kubernetes\.io\/h2c.*HTTP\/1\.1/);
      await untilSidecarHas([providerId()], 'the h2c tier out of the sidecar');
    });
  },
);
