/**
 * One app pod, several models, one sidecar, on the real API server (harness/k8s/cluster.ts), with
 * a real controller and simulators on test hosts (issue 42):
 *
 * - Pool `chat`: Service `vllm` whose two pods serve the same base model `tiny` with different
 *   LoRA adapters (`sql-lora` on one, `chat-lora` on the other). The backend declares no models:
 *   the sidecar learns what each endpoint serves from its `/v1/models`. An alias `gpt-4o-mini`
 *   stands for `tiny`.
 * - Pool `embed`: Service `embed` with one pod serving `embed-small`, declared on the backend.
 * - The app pod is labelled for `chat` and annotated `switchyard.dev/pools: embed`; its sidecar
 *   follows both pools (`--pool chat --pool embed`, as the injection writes them) with a token
 *   bound to that pod, so the controller's per-pool authorisation is what is under test too.
 *
 * The official openai client calls through the sidecar: each request reaches only an endpoint
 * that serves its model; `/v1/models` is the union of both pools; an unknown model gets 404
 * `model_not_found`; both pools count the one sidecar in their status.
 *
 * SWITCHYARD_K8S_TESTS=0 skips it.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import { waitFor, startCluster, type Cluster } from '../../harness/k8s/cluster.ts';
import { installInferencePoolCrd } from '../../harness/k8s/crd.ts';
import {
  controllerSidecarArgs,
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
const POOLS = `/apis/switchyard.dev/v1alpha1/namespaces/${NS}/inferencepools`;
const FAST_SIM = ['--prefill-ms-per-token', '0.01', '--decode-ms-per-token', '1', '--slots', '8'];

/** A simulator serving `model` and these LoRA adapters of it, on port 8000 of `host`. */
function startSim(host: TestHost, model: string, adapters: readonly string[]) {
  return startSwitchyardIn(host, [
    'sim',
    '--port',
    '8000',
    '--model',
    model,
    ...(adapters.length === 0 ? [] : ['--loras', adapters.join(',')]),
    ...FAST_SIM,
  ]);
}

describe(
  'one pod, two pools, one sidecar on a real API server',
  { skip: !enabled && 'SWITCHYARD_K8S_TESTS=0' },
  () => {
    let cluster: Cluster;
    let dir: string;
    const hosts: TestHost[] = [];
    const sims: HostProcess[] = [];
    let controller: RunningProcess | undefined;
    let sidecar: RunningProcess | undefined;
    let client: OpenAI;
    let sqlHost: TestHost;
    let chatHost: TestHost;
    let embedHost: TestHost;

    const endpointId = (backend: string, host: TestHost): string => `${backend}/${host.ip}:8000`;

    /** A chat completion through the sidecar, and the endpoint that answered it. */
    const chatOn = async (model: string): Promise<string> => {
      const { response } = await client.chat.completions
        .create({ model, max_tokens: 3, messages: [{ role: 'user', content: 'hi' }] })
        .withResponse();
      return (response.headers.get('x-switchyard-backend') ?? '').split(';')[0]!.trim();
    };

    before(async () => {
      dir = mkdtempSync(join(tmpdir(), 'switchyard-multi-model-'));
      cluster = await startCluster();
      await installInferencePoolCrd(cluster);
      await createNamespaces(cluster, [NS, 'switchyard']);
      for (const label of ['sql', 'chat', 'embed']) hosts.push(await createTestHost(label));
      [sqlHost, chatHost, embedHost] = hosts as [TestHost, TestHost, TestHost];
      sims.push(await startSim(sqlHost, 'tiny', ['sql-lora']));
      sims.push(await startSim(chatHost, 'tiny', ['chat-lora']));
      sims.push(await startSim(embedHost, 'embed-small', []));
      for (const h of hosts) assertTestAddress(h.ip);
      const slice = (service: string, members: readonly TestHost[]) => ({
        apiVersion: 'discovery.k8s.io/v1',
        kind: 'EndpointSlice',
        metadata: { name: `${service}-1`, labels: { 'kubernetes.io/service-name': service } },
        addressType: 'IPv4',
        endpoints: members.map((h) => ({ addresses: [h.ip], conditions: { ready: true } })),
        ports: [{ name: 'http', port: 8000, protocol: 'TCP' }],
      });
      for (const service of ['vllm', 'embed'])
        await cluster.applyYaml(`apiVersion: v1
kind: Service
metadata: {name: ${service}, namespace: ${NS}}
spec:
  ports: [{name: http, port: 80, targetPort: 8000}]
`);
      const slices = `/apis/discovery.k8s.io/v1/namespaces/${NS}/endpointslices`;
      await cluster.request('POST', slices, slice('vllm', [sqlHost, chatHost]));
      await cluster.request('POST', slices, slice('embed', [embedHost]));
      await cluster.applyYaml(`apiVersion: switchyard.dev/v1alpha1
kind: InferencePool
metadata: {name: chat, namespace: ${NS}}
spec:
  backends: [{name: gpus, service: {name: vllm, port: http}}]
  aliases: [{name: gpt-4o-mini, model: tiny}]
  affinity: {key: None}
`);
      await cluster.applyYaml(`apiVersion: switchyard.dev/v1alpha1
kind: InferencePool
metadata: {name: embed, namespace: ${NS}}
spec:
  backends: [{name: embedders, service: {name: embed, port: http}, models: [embed-small]}]
  affinity: {key: None}
`);
      controller = await startPlainController(cluster);
      // The app pod as the injection sees it: the label names the first pool, the annotation
      // the others. Its bound token reads both pools and no other (stream-access.ts).
      await cluster.request('POST', `/api/v1/namespaces/${NS}/pods`, {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: {
          name: 'app-1',
          labels: { 'switchyard.dev/pool': 'chat' },
          annotations: { 'switchyard.dev/pools': 'embed' },
        },
        spec: { serviceAccountName: 'default', containers: [{ name: 'app', image: 'app' }] },
      });
      const token = await cluster.createServiceAccountToken(NS, 'default', {
        audience: 'switchyard',
        boundPod: 'app-1',
      });
      const tokenFile = join(dir, 'app-1.token');
      writeFileSync(tokenFile, token.token);
      sidecar = await startSwitchyard(
        controllerSidecarArgs({
          controllerUrl: controller.url,
          pool: ['chat', 'embed'],
          namespace: NS,
          tokenFile,
          cacheFile: join(dir, 'snapshot.json'),
          sidecarId: 'app-1',
        }),
      );
      client = new OpenAI({ baseURL: `${sidecar.url}/v1`, apiKey: 'unused', maxRetries: 0 });
      // Both pools applied and every chat endpoint's models discovered: /v1/models lists them.
      await waitFor(
        'both pools and the discovered adapters in the sidecar /v1/models',
        async () => {
          const ids = new Set((await client.models.list()).data.map((m) => m.id));
          return ['tiny', 'sql-lora', 'chat-lora', 'embed-small'].every((id) => ids.has(id))
            ? ids
            : undefined;
        },
        { timeoutMs: 30_000 },
      );
    });

    after(async () => {
      await stopAll([sidecar, controller]);
      await Promise.all(sims.map((s) => s.stop()));
      await Promise.all(hosts.map((h) => h.remove()));
      await cluster?.stop();
      if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
    });

    it('sends an adapter only to the pod that serves it, the base model to both', async () => {
      for (let i = 0; i < 12; i++) {
        assert.equal(await chatOn('sql-lora'), endpointId('gpus', sqlHost));
        assert.equal(await chatOn('chat-lora'), endpointId('gpus', chatHost));
      }
      const base = new Set<string>();
      for (let i = 0; i < 40 && base.size < 2; i++) base.add(await chatOn('tiny'));
      assert.deepEqual(
        [...base].sort(),
        [endpointId('gpus', sqlHost), endpointId('gpus', chatHost)].sort(),
      );
    });

    it('sends embeddings to the second pool through the same sidecar', async () => {
      const { data, response } = await client.embeddings
        .create({ model: 'embed-small', input: 'hello' })
        .withResponse();
      assert.ok(data.data.length === 1);
      assert.equal(
        response.headers.get('x-switchyard-backend'),
        endpointId('embedders', embedHost),
      );
    });

    it('resolves an alias and says so in x-switchyard-backend', async () => {
      const { response } = await client.chat.completions
        .create({
          model: 'gpt-4o-mini',
          max_tokens: 3,
          messages: [{ role: 'user', content: 'hi' }],
        })
        .withResponse();
      assert.match(response.headers.get('x-switchyard-backend') ?? '', /^gpus\/.*; model=tiny$/);
    });

    it('lists every served model once, adapters with their parent', async () => {
      const list = (await client.models.list()).data as (OpenAI.Model & { parent?: string })[];
      const ids = list.map((m) => m.id);
      assert.equal(new Set(ids).size, ids.length, `duplicates in ${ids.join(', ')}`);
      for (const id of ['tiny', 'sql-lora', 'chat-lora', 'embed-small', 'gpt-4o-mini'])
        assert.ok(ids.includes(id), `${id} missing from ${ids.join(', ')}`);
      assert.equal(list.find((m) => m.id === 'sql-lora')?.parent, 'tiny');
    });

    it('answers a model no pool serves with 404 model_not_found naming the served ones', async () => {
      await assert.rejects(
        client.chat.completions.create({
          model: 'no-such-model',
          messages: [{ role: 'user', content: 'hi' }],
        }),
        (err: unknown) => {
          assert.ok(err instanceof OpenAI.NotFoundError, String(err));
          const body = (err.error ?? {}) as { code?: string; message?: string };
          assert.equal(body.code, 'model_not_found');
          assert.match(body.message ?? '', /embed-small/);
          return true;
        },
      );
    });

    it('counts the one sidecar in the status of both pools', async () => {
      type Status = { status?: { sidecars?: { connected?: number; inSync?: number } } };
      for (const pool of ['chat', 'embed'])
        await waitFor(
          `the sidecar connected and in sync in ${pool}'s status`,
          async () => {
            const res = await cluster.request<Status>('GET', `${POOLS}/${pool}`);
            const s = res.body.status?.sidecars;
            return s?.connected === 1 && s.inSync === 1 ? s : undefined;
          },
          { timeoutMs: 30_000 },
        );
    });
  },
);
