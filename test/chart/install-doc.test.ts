/**
 * docs/install.md, run: every ```sh block of the guide, in order, verbatim, with the real helm and
 * kubectl on PATH against a real kube-apiserver (harness/k8s/cluster.ts). A block the page marks
 * `<!-- needs a kubelet, instead: … -->` is replaced by what a kubelet would have done; one marked
 * `first` is run after it. The stand-ins are the only liberties, and each is named below:
 *
 * - the controller runs as a process here, with the Deployment's own arguments and env as stored
 *   in the API server, the token of the chart's ServiceAccount (so the chart's RBAC is what it
 *   gets), listening on a test host's link address behind an EndpointSlice of the chart's
 *   Service; the API server (with --enable-aggregator-routing) calls the chart's own webhook
 *   configuration through that Service;
 * - "your vLLM" is a `switchyard sim` on a test host, behind the Service and EndpointSlice a
 *   vLLM Deployment would have, and the provider is another one (the page's provider URL is
 *   replaced by its address: traffic goes to loopback and test hosts only);
 * - the ReplicaSet's pod is created from the Deployment's template, and its injected sidecar is
 *   run with the pod's own arguments, a token bound to the pod and the CA from its annotation.
 *
 * The Gateway API inference extension's InferencePool CRD (harness/k8s/gaie.ts) is installed
 * first, with a GAIE pool named like the page's pool and an Event about it, so that a command
 * that named the kind ambiguously would touch GAIE's objects: the test checks that it did not.
 *
 * SWITCHYARD_K8S_TESTS=0 or SWITCHYARD_HELM_TESTS=0 skips it.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import { startSwitchyard, stopAll, type RunningProcess } from '../../harness/processes.ts';
import { k8sBinaries } from '../../harness/k8s/binaries.ts';
import { freePorts, startCluster, waitFor, type Cluster } from '../../harness/k8s/cluster.ts';
import { GAIE_CRD_NAME, installGaieInferencePoolCrd } from '../../harness/k8s/gaie.ts';
import { runInjectedSidecar, type InjectedPod } from '../k8s/injected-sidecar.ts';
import {
  assertTestAddress,
  createTestHost,
  startSwitchyardIn,
  type TestHost,
} from '../k8s/test-hosts.ts';
import { ROOT, buildHelm } from './tools.ts';

const enabled =
  process.env['SWITCHYARD_K8S_TESTS'] !== '0' && process.env['SWITCHYARD_HELM_TESTS'] !== '0';
const DOC = join(ROOT, 'docs/install.md');
const SYSTEM = 'switchyard-system';
const PROVIDER_API_KEY = 'sk-install-doc-provider-key-7f3a';
const GAIE_POOLS = '/apis/inference.networking.k8s.io/v1/namespaces/chat/inferencepools';
/** The message of an Event about the GAIE pool: no command of the page may list it. */
const GAIE_EVENT = 'an event about the GAIE pool chat';

export interface DocBlock {
  code: string;
  /** From a `<!-- needs a kubelet, instead|first: … -->` note just before the block. */
  kubelet: 'instead' | 'first' | undefined;
}

/** The ```sh blocks of a markdown page, each with the kubelet note that precedes it, if any. */
export function shellBlocks(markdown: string): DocBlock[] {
  const blocks: DocBlock[] = [];
  let pending: DocBlock['kubelet'];
  const fence = /<!--\s*needs a kubelet, (instead|first):[\s\S]*?-->|```sh\n([\s\S]*?)```/g;
  for (const m of markdown.matchAll(fence)) {
    if (m[1] !== undefined) pending = m[1] as 'instead' | 'first';
    else {
      blocks.push({ code: m[2]!, kubelet: pending });
      pending = undefined;
    }
  }
  return blocks;
}

const sim = ['--prefill-ms-per-token', '0.01', '--decode-ms-per-token', '0.5', '--slots', '8'];

describe('docs/install.md, every command', { skip: !enabled, timeout: 30 * 60_000 }, () => {
  let cluster: Cluster;
  let dir: string;
  let env: Record<string, string>;
  const hosts: TestHost[] = [];
  const hostProcesses: { stop(): Promise<unknown> }[] = [];
  const processes: RunningProcess[] = [];
  let controller: RunningProcess | undefined;
  let sidecar: RunningProcess | undefined;
  let link: TestHost;
  let streamPort = 0;
  const blocks = shellBlocks(readFileSync(DOC, 'utf8'));
  /** What replaces text of the page before it runs (see the file comment). */
  let substitutions: [string, string][] = [];

  const sh = (code: string): Promise<{ code: number; stdout: string; stderr: string }> =>
    new Promise((resolve) => {
      let script = code;
      for (const [from, to] of substitutions) script = script.replaceAll(from, to);
      // Background jobs of a block (port-forward) must not outlive it.
      execFile(
        'bash',
        ['--norc', '--noprofile', '-euo', 'pipefail', '-c', `${script}\nwait`],
        { cwd: ROOT, env, timeout: 120_000, maxBuffer: 16 * 1024 * 1024 },
        (error, stdout, stderr) =>
          resolve({
            code: error === null ? 0 : typeof error.code === 'number' ? error.code : 1,
            stdout,
            stderr,
          }),
      );
    });

  let next = 0;
  /** Runs the next block of the page, which must contain `marker` (the test reads in order). */
  const step = async (
    marker: string,
    standIn?: () => Promise<void>,
  ): Promise<{ stdout: string; stderr: string }> => {
    const block = blocks[next++];
    assert.ok(block !== undefined, `docs/install.md has a block with ${marker}`);
    assert.ok(
      block.code.includes(marker),
      `block ${next} is the one with ${marker}:\n${block.code}`,
    );
    if (block.kubelet !== undefined) {
      assert.ok(standIn !== undefined, `block ${next} needs a kubelet but has no stand-in`);
      await standIn();
      if (block.kubelet === 'instead') return { stdout: '', stderr: '' };
    }
    const out = await sh(block.code);
    assert.equal(out.code, 0, `block ${next} failed:\n${block.code}\n${out.stderr}${out.stdout}`);
    return out;
  };

  const apiGet = async <T>(path: string): Promise<T> => {
    const res = await cluster.request<T>('GET', path);
    assert.equal(res.status, 200, `GET ${path}: ${res.text}`);
    return res.body;
  };

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'switchyard-install-doc-'));
    const [binaries, helm] = await Promise.all([k8sBinaries(), buildHelm()]);
    cluster = await startCluster({ apiServerArgs: ['--enable-aggregator-routing=true'] });
    // GAIE's CRD first: the page's commands must mean switchyard's pools with both installed.
    await installGaieInferencePoolCrd(cluster);
    env = {
      PATH: `${dirname(binaries.kubectl)}:${dirname(helm)}:${process.env['PATH'] ?? ''}`,
      HOME: dir,
      KUBECONFIG: cluster.kubeconfigPath,
      HELM_CONFIG_HOME: join(dir, 'helm-config'),
      HELM_CACHE_HOME: join(dir, 'helm-cache'),
      HELM_DATA_HOME: join(dir, 'helm-data'),
      PROVIDER_API_KEY,
    };
    link = await createTestHost('controller-link');
    const vllm = await createTestHost('vllm');
    const provider = await createTestHost('provider');
    hosts.push(link, vllm, provider);
    for (const [host, name] of [
      [vllm, 'vllm'],
      [provider, 'provider'],
    ] as const)
      hostProcesses.push(
        await startSwitchyardIn(host, ['sim', '--port', '8000', '--name', name, ...sim]),
      );
    assertTestAddress(provider.ip);
    // The stand-in provider speaks plain HTTP, which the pool must then explicitly accept.
    substitutions = [
      [
        'url: https://api.provider.example/v1',
        `url: http://${provider.ip}:8000/v1\n      allowInsecureApiKey: true`,
      ],
    ];
    [streamPort] = (await freePorts(1)) as [number];
  });

  after(async () => {
    await stopAll([sidecar, controller, ...processes]);
    await Promise.all(hostProcesses.map((p) => p.stop()));
    await Promise.all(hosts.map((h) => h.remove()));
    await cluster?.stop();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  it('every block is run or stood in for, in order', async () => {
    // 1. Install the chart.
    const install = await step('helm install switchyard charts/switchyard');
    assert.match(install.stdout, /STATUS: deployed/);

    await step('rollout status deployment/switchyard', async () => {
      // What the kubelet and the endpoints controller would do for one replica.
      assertTestAddress(link.peerIp);
      const deployment = await apiGet<{
        spec: {
          template: {
            spec: { serviceAccountName: string; containers: { args: string[] }[] };
          };
        };
      }>(`/apis/apps/v1/namespaces/${SYSTEM}/deployments/switchyard`);
      const pod = deployment.spec.template.spec;
      const configMap = await apiGet<{ data: Record<string, string> }>(
        `/api/v1/namespaces/${SYSTEM}/configmaps/switchyard-injection`,
      );
      const configFile = join(dir, 'injection.json');
      writeFileSync(configFile, configMap.data['injection.json'] ?? '');
      const token = await cluster.createServiceAccountToken(SYSTEM, pod.serviceAccountName, {
        audience: cluster.apiAudience,
      });
      const replace: Record<string, string> = {
        '0.0.0.0:8443': `${link.peerIp}:${streamPort}`,
        '0.0.0.0:9091': '127.0.0.1:0',
        '/etc/switchyard/injection.json': configFile,
        '$(POD_NAME)': 'switchyard-7c9f-0',
        // The kubelet expands it from the downward API: the pod's address, here the test host's.
        '$(POD_IP)': link.peerIp,
      };
      const args = pod.containers[0]!.args.map((a) => replace[a] ?? a);
      // The sidecar stand-in reaches the controller by this address, not by cluster DNS.
      const san = args.indexOf('--tls-san') + 1;
      args[san] = `${args[san]},${link.peerIp}`;
      controller = await startSwitchyard(
        [...args, '--kubeconfig', cluster.writeKubeconfig(token.token)],
        { env: { POD_NAME: 'switchyard-7c9f-0', POD_NAMESPACE: SYSTEM } },
      );
      const slice = await cluster.request(
        'POST',
        `/apis/discovery.k8s.io/v1/namespaces/${SYSTEM}/endpointslices`,
        {
          apiVersion: 'discovery.k8s.io/v1',
          kind: 'EndpointSlice',
          metadata: {
            name: 'switchyard-1',
            labels: { 'kubernetes.io/service-name': 'switchyard' },
          },
          addressType: 'IPv4',
          endpoints: [{ addresses: [link.peerIp], conditions: { ready: true } }],
          ports: [{ name: 'stream', port: streamPort, protocol: 'TCP' }],
        },
      );
      assert.equal(slice.status, 201, slice.text);
      await waitFor('the controller to be ready', async () => {
        const res = await fetch(`${controller!.adminUrl}/readyz`).catch(() => undefined);
        return res?.status === 200;
      });
    });

    const webhook = await waitFor(
      'the caBundle in the webhook configuration',
      async () => {
        const out = await sh(blocks[next]!.code);
        return /^switchyard caBundle: \S{20,}/.test(out.stdout) ? out : undefined;
      },
      { timeoutMs: 30_000 },
    );
    assert.match(webhook.stdout, /^switchyard caBundle: LS0t/); // base64 of "-----BEGIN"
    await step('kubectl get mutatingwebhookconfiguration switchyard');

    // 2. A first InferencePool (and the vLLM Service a vLLM Deployment would have).
    await step('kubectl create namespace chat');
    // GAIE's pool of the same name, and an Event about it, beside switchyard's pool.
    await cluster.applyYaml(`apiVersion: inference.networking.k8s.io/v1
kind: InferencePool
metadata: {name: chat, namespace: chat}
spec:
  selector: {matchLabels: {app: vllm}}
  targetPorts: [{number: 8000}]
  endpointPickerRef: {name: vllm-epp, port: {number: 9002}}
`);
    const gaieEvent = await cluster.request('POST', '/api/v1/namespaces/chat/events', {
      apiVersion: 'v1',
      kind: 'Event',
      metadata: { name: 'chat.gaie', namespace: 'chat' },
      involvedObject: {
        apiVersion: 'inference.networking.k8s.io/v1',
        kind: 'InferencePool',
        name: 'chat',
        namespace: 'chat',
      },
      reason: 'Accepted',
      message: GAIE_EVENT,
      type: 'Normal',
      source: { component: 'gaie-test' },
    });
    assert.equal(gaieEvent.status, 201, gaieEvent.text);
    await cluster.applyYaml(`apiVersion: v1
kind: Service
metadata: {name: vllm, namespace: chat}
spec:
  selector: {app: vllm}
  ports: [{name: http, port: 80, targetPort: 8000}]
`);
    const vllm = hosts[1]!;
    assertTestAddress(vllm.ip);
    await cluster.request('POST', '/apis/discovery.k8s.io/v1/namespaces/chat/endpointslices', {
      apiVersion: 'discovery.k8s.io/v1',
      kind: 'EndpointSlice',
      metadata: { name: 'vllm-1', labels: { 'kubernetes.io/service-name': 'vllm' } },
      addressType: 'IPv4',
      endpoints: [{ addresses: [vllm.ip], conditions: { ready: true } }],
      ports: [{ name: 'http', port: 8000, protocol: 'TCP' }],
    });
    await step('kind: InferencePool');
    // The page's example of a refusal is what kubectl really prints.
    const quoted = /a backend with both `url` and `service`, say:\n`([^`]+)`/.exec(
      readFileSync(DOC, 'utf8'),
    )?.[1];
    assert.ok(quoted !== undefined);
    const bad = await sh(`kubectl apply -n chat -f - <<'EOF'
apiVersion: switchyard.dev/v1alpha1
kind: InferencePool
metadata: {name: bad}
spec:
  backends: [{name: x, url: 'http://a.example/v1', service: {name: vllm, port: http}}]
EOF`);
    assert.notEqual(bad.code, 0);
    assert.ok(bad.stderr.includes(quoted), `kubectl said:\n${bad.stderr}`);

    // 3. Label the application.
    await step('kubectl -n chat create deployment chat-app');
    const pods = await step('get pods -l switchyard.dev/pool=chat', async () => {
      const deployment = await apiGet<{
        spec: { template: { metadata: Record<string, unknown>; spec: Record<string, unknown> } };
      }>('/apis/apps/v1/namespaces/chat/deployments/chat-app');
      const created = await cluster.request<InjectedPod>('POST', '/api/v1/namespaces/chat/pods', {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { ...deployment.spec.template.metadata, generateName: 'chat-app-5d8f9-' },
        // The ServiceAccount admission plugin (off in the test cluster) would default this.
        spec: { ...deployment.spec.template.spec, serviceAccountName: 'default' },
      });
      assert.equal(created.status, 201, created.text);
      const pod = created.body;
      // Its sidecar, as the kubelet would run it.
      sidecar = await runInjectedSidecar(cluster, pod, 'chat', {
        dir,
        serviceUrl: `https://switchyard.${SYSTEM}.svc:8443`,
        controllerUrl: `https://${link.peerIp}:${streamPort}`,
      });
    });
    assert.match(
      pods.stdout,
      /^chat-app-5d8f9-\w+: switchyard-sidecar http:\/\/127\.0\.0\.1:8080\/v1$/m,
    );
    // The app's call, as an OpenAI client in the pod would make it.
    const client = new OpenAI({ baseURL: `${sidecar!.url}/v1`, apiKey: 'unused' });
    const answer = await waitFor('a completion through the sidecar', async () =>
      client.chat.completions
        .create({
          model: 'llama-3.1-8b',
          max_tokens: 3,
          messages: [{ role: 'user', content: 'hi' }],
        })
        .withResponse()
        .catch(() => undefined),
    );
    assert.match(answer.response.headers.get('x-switchyard-backend') ?? '', /^in-cluster/);

    const notInjected = await step('reason=SidecarNotInjected');
    assert.match(notInjected.stdout + notInjected.stderr, /No resources found/);

    // 4. Check the pool.
    await waitFor(
      'the status to count the sidecar in sync',
      async () =>
        (
          await apiGet<{ status?: { sidecars?: { inSync?: number } } }>(
            '/apis/switchyard.dev/v1alpha1/namespaces/chat/inferencepools/chat',
          )
        ).status?.sidecars?.inSync === 1,
      { timeoutMs: 30_000 },
    );
    const table = await step('kubectl -n chat get ipool');
    assert.match(table.stdout, /^NAME\s+MODE\s+READY\s+TOTAL\s+IN-SYNC\s+AGE$/m);
    assert.match(table.stdout, /^chat\s+Failover\s+2\s+2\s+1\s+\S+$/m);
    // What the page says of the bare name: with both CRDs, kubectl takes it to mean GAIE's.
    const bare = await sh(
      "kubectl -n chat get inferencepools -o jsonpath='{.items[*].apiVersion}'",
    );
    assert.equal(bare.stdout, 'inference.networking.k8s.io/v1', bare.stderr);
    const conditions = await step('.status.conditions');
    assert.match(conditions.stdout, /^Accepted=True /m);
    assert.match(conditions.stdout, /^Ready=True /m);
    assert.ok(
      !conditions.stdout.includes(GAIE_EVENT),
      `GAIE's Event listed:\n${conditions.stdout}`,
    );

    // 5. Metrics, read from the processes themselves.
    await step('port-forward deployment/switchyard 9091', async () => {
      const controllerMetrics = await (await fetch(`${controller!.adminUrl}/metrics`)).text();
      assert.match(controllerMetrics, /^switchyard_controller_connected_sidecars 1$/m);
      assert.match(
        controllerMetrics,
        /^switchyard_controller_injections_total\{result="injected"\} 1$/m,
      );
      const sidecarMetrics = await (await fetch(`${sidecar!.adminUrl}/metrics`)).text();
      assert.match(
        sidecarMetrics,
        /^switchyard_requests_total\{[^}]*backend="in-cluster"[^}]*\} [1-9]/m,
      );
      assert.match(sidecarMetrics, /^switchyard_ewma_ttft_seconds\{/m);
      for (const text of [controllerMetrics, sidecarMetrics])
        assert.ok(!text.includes(PROVIDER_API_KEY), 'no API key in metrics');
    });

    // 6. Uninstall. The kubelet would stop the controller's pods as Helm deletes the Deployment
    // (before the Secret is deleted: a running controller would make it again).
    await stopAll([sidecar, controller]);
    await step('helm uninstall switchyard');
    for (const path of [
      `/apis/apps/v1/namespaces/${SYSTEM}/deployments/switchyard`,
      '/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/switchyard',
      `/api/v1/namespaces/${SYSTEM}/secrets/switchyard-tls`,
      '/apis/apiextensions.k8s.io/v1/customresourcedefinitions/inferencepools.switchyard.dev',
    ])
      assert.equal((await cluster.request('GET', path)).status, 404, `${path} is gone`);
    // GAIE's pool and CRD are untouched: the page deleted switchyard's only.
    for (const path of [
      `${GAIE_POOLS}/chat`,
      `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${GAIE_CRD_NAME}`,
    ])
      assert.equal((await cluster.request('GET', path)).status, 200, `${path} is still there`);
    assert.equal(next, blocks.length, 'every block of docs/install.md ran');
  });

  it('the parser finds the notes', () => {
    const parsed = shellBlocks(
      'a\n```sh\none\n```\n<!-- needs a kubelet, instead: x\ny -->\ntext\n```sh\ntwo\n```\n```sh\nthree\n```\n',
    );
    assert.deepEqual(parsed, [
      { code: 'one\n', kubelet: undefined },
      { code: 'two\n', kubelet: 'instead' },
      { code: 'three\n', kubelet: undefined },
    ]);
  });
});
