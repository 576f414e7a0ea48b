/**
 * Sidecar injection end to end on a real kube-apiserver (harness/k8s/cluster.ts): a real
 * `switchyard controller` with self-managed TLS serves the webhook, registered by URL; pods are
 * created through the API server and the stored pod specs are checked. Then the injected sidecar's
 * own arguments, token (bound to the pod) and CA (from the pod's annotation) are used to run it,
 * and the official openai client calls through it.
 *
 * No kubelet runs, so nothing starts the containers; the API server admits and stores the pods
 * exactly as in a cluster (webhooks, PodSecurity, validation). SWITCHYARD_K8S_TESTS=0 skips it.
 */
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import { startSwitchyard, stopAll, type RunningProcess } from '../../harness/processes.ts';
import {
  freePorts,
  startCluster,
  waitFor,
  type Cluster,
  type K8sObject,
} from '../../harness/k8s/cluster.ts';
import { installInferencePoolCrd } from '../../harness/k8s/crd.ts';
import { runInjectedSidecar } from './injected-sidecar.ts';

const enabled = process.env['SWITCHYARD_K8S_TESTS'] !== '0';
const SYSTEM_NS = 'switchyard';
const APPS = 'apps';
const WEBHOOK = 'switchyard-test';
const TLS_SECRET = 'switchyard-tls';
const IMAGE = 'registry.example/switchyard:0.1.0';

interface Container {
  name: string;
  image?: string;
  args?: string[];
  restartPolicy?: string;
  env?: { name: string; value?: string }[];
  ports?: { containerPort: number }[];
  securityContext?: Record<string, unknown>;
}

interface Pod extends K8sObject {
  metadata: K8sObject['metadata'] & {
    annotations?: Record<string, string>;
    labels?: Record<string, string>;
  };
  spec: { containers: Container[]; initContainers?: Container[]; volumes?: { name: string }[] };
}

/** A pod that the restricted Pod Security Standard admits on its own. */
function appPod(
  name: string,
  extra: {
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    ports?: number[];
  } = {},
): Record<string, unknown> {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name,
      labels: { app: name, ...(extra.labels ?? { 'switchyard.dev/pool': 'chat' }) },
      ...(extra.annotations === undefined ? {} : { annotations: extra.annotations }),
    },
    spec: {
      serviceAccountName: 'default',
      securityContext: { runAsNonRoot: true, seccompProfile: { type: 'RuntimeDefault' } },
      containers: [
        {
          name: 'app',
          image: 'registry.example/chat-app:1',
          ports: (extra.ports ?? [3000]).map((containerPort) => ({ containerPort })),
          securityContext: {
            runAsUser: 2000,
            allowPrivilegeEscalation: false,
            capabilities: { drop: ['ALL'] },
          },
        },
      ],
    },
  };
}

describe(
  'sidecar injection on a real API server',
  { skip: !enabled && 'SWITCHYARD_K8S_TESTS=0' },
  () => {
    let cluster: Cluster;
    let dir: string;
    let controller: RunningProcess | undefined;
    let controllerPort: number;
    const extra: RunningProcess[] = [];

    const controllerArgs = (configFile: string): string[] => [
      'controller',
      '--kubeconfig',
      cluster.kubeconfigPath,
      '--listen',
      `127.0.0.1:${controllerPort}`,
      '--admin',
      '127.0.0.1:0',
      '--tls-secret',
      TLS_SECRET,
      '--tls-san',
      `switchyard.${SYSTEM_NS}.svc,127.0.0.1`,
      '--injection-config',
      configFile,
      '--webhook-config-name',
      WEBHOOK,
      '--lease-namespace',
      SYSTEM_NS,
      '--identity',
      'controller-0',
    ];

    const createPod = (
      namespace: string,
      pod: Record<string, unknown>,
    ): Promise<{ pod: Pod; status: number; warnings: string }> =>
      cluster.request<Pod>('POST', `/api/v1/namespaces/${namespace}/pods`, pod).then((res) => ({
        pod: res.body,
        status: res.status,
        warnings: String(res.headers['warning'] ?? ''),
      }));

    const eventsOf = async (
      namespace: string,
      pod: string,
    ): Promise<{ reason: string; message: string }[]> =>
      (
        await cluster.request<{
          items: { reason: string; message: string; involvedObject: { name: string } }[];
        }>('GET', `/api/v1/namespaces/${namespace}/events`)
      ).body.items.filter((e) => e.involvedObject.name === pod);

    const webhookCaBundles = async (): Promise<(string | undefined)[]> =>
      (
        await cluster.request<{ webhooks: { clientConfig: { caBundle?: string } }[] }>(
          'GET',
          `/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/${WEBHOOK}`,
        )
      ).body.webhooks.map((w) => w.clientConfig.caBundle);

    let configFile: string;

    before(async () => {
      dir = mkdtempSync(join(tmpdir(), 'switchyard-inject-'));
      cluster = await startCluster();
      await installInferencePoolCrd(cluster);
      await cluster.applyYaml(`apiVersion: v1
kind: Namespace
metadata: {name: ${SYSTEM_NS}}
---
apiVersion: v1
kind: Namespace
metadata:
  name: ${APPS}
  labels: {pod-security.kubernetes.io/enforce: restricted}
`);
      [controllerPort] = (await freePorts(1)) as [number];
      // Two webhooks that both inject: the API server calls both, so a pod is injected twice; and
      // re-invokes them (reinvocationPolicy IfNeeded) after the other changed it.
      const webhook = (name: string): Record<string, unknown> => ({
        name,
        clientConfig: { url: `https://127.0.0.1:${controllerPort}/mutate/pods` },
        rules: [
          { operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['pods'] },
        ],
        objectSelector: { matchExpressions: [{ key: 'switchyard.dev/pool', operator: 'Exists' }] },
        namespaceSelector: {
          matchExpressions: [
            {
              key: 'kubernetes.io/metadata.name',
              operator: 'NotIn',
              values: ['kube-system', SYSTEM_NS],
            },
          ],
        },
        failurePolicy: 'Ignore',
        reinvocationPolicy: 'IfNeeded',
        sideEffects: 'None',
        admissionReviewVersions: ['v1'],
        timeoutSeconds: 5,
      });
      const created = await cluster.request(
        'POST',
        '/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations',
        {
          apiVersion: 'admissionregistration.k8s.io/v1',
          kind: 'MutatingWebhookConfiguration',
          metadata: { name: WEBHOOK },
          webhooks: [webhook('a.inject.switchyard.dev'), webhook('b.inject.switchyard.dev')],
        },
      );
      assert.equal(created.status, 201, created.text);
      configFile = join(dir, 'injection.json');
      writeFileSync(
        configFile,
        JSON.stringify({
          controllerUrl: `https://switchyard.${SYSTEM_NS}.svc:8443`,
          image: IMAGE,
          resources: { requests: { cpu: '50m', memory: '64Mi' }, limits: { memory: '256Mi' } },
          excludeNamespaces: ['kube-system', SYSTEM_NS],
        }),
      );
      controller = await startSwitchyard(controllerArgs(configFile));
      await waitFor(
        'the leader to set the webhook caBundle',
        async () => (await webhookCaBundles()).every((b) => b !== undefined),
        { timeoutMs: 30_000 },
      );
      await cluster.applyYaml(
        `apiVersion: switchyard.dev/v1alpha1
kind: InferencePool
metadata: {name: chat, namespace: ${APPS}}
spec:
  backends: [{name: local, url: 'http://127.0.0.1:1/v1'}]
`,
      );
      // The controller has seen the pool once its leader wrote the pool's status.
      await waitFor('the pool status', async () => {
        const res = await cluster.request<{ status?: { observedGeneration?: number } }>(
          'GET',
          `/apis/switchyard.dev/v1alpha1/namespaces/${APPS}/inferencepools/chat`,
        );
        return res.body.status?.observedGeneration !== undefined;
      });
    });

    after(async () => {
      await stopAll([...extra, controller]);
      await cluster?.stop();
      rmSync(dir, { recursive: true, force: true });
    });

    it('made its CA and serving certificate in a Secret, and put the CA in the webhook', async () => {
      const secret = await cluster.request<{ type: string; data: Record<string, string> }>(
        'GET',
        `/api/v1/namespaces/${SYSTEM_NS}/secrets/${TLS_SECRET}`,
      );
      assert.equal(secret.status, 200);
      assert.equal(secret.body.type, 'kubernetes.io/tls');
      const pem = (key: string): string =>
        Buffer.from(secret.body.data[key] ?? '', 'base64').toString();
      const ca = new X509Certificate(pem('ca.crt'));
      const serving = new X509Certificate(pem('tls.crt'));
      assert.ok(serving.checkIssued(ca));
      assert.equal(serving.subjectAltName, `DNS:switchyard.${SYSTEM_NS}.svc, IP Address:127.0.0.1`);
      for (const bundle of await webhookCaBundles())
        assert.equal(Buffer.from(bundle ?? '', 'base64').toString(), pem('ca.crt'));
    });

    let injected: Pod;

    it('injects a labelled pod once, as a native sidecar the restricted standard admits', async () => {
      const { pod, status, warnings } = await createPod(APPS, appPod('chat-app'));
      assert.equal(status, 201, JSON.stringify(pod));
      assert.equal(warnings, '');
      injected = pod;
      const sidecars = (pod.spec.initContainers ?? []).filter(
        (c) => c.name === 'switchyard-sidecar',
      );
      assert.equal(sidecars.length, 1, 'two webhooks, one sidecar');
      const sidecar = sidecars[0]!;
      assert.equal(sidecar.restartPolicy, 'Always');
      assert.equal(sidecar.image, IMAGE);
      assert.deepEqual(sidecar.args?.slice(0, 5), [
        'sidecar',
        '--controller',
        `https://switchyard.${SYSTEM_NS}.svc:8443`,
        '--pool',
        'chat',
      ]);
      assert.deepEqual(pod.spec.containers[0]?.env, [
        { name: 'OPENAI_BASE_URL', value: 'http://127.0.0.1:8080/v1' },
      ]);
      assert.equal(pod.metadata.annotations?.['switchyard.dev/injected'], 'true');
      assert.match(
        pod.metadata.annotations?.['switchyard.dev/ca-bundle'] ?? '',
        /BEGIN CERTIFICATE/,
      );
      assert.deepEqual(
        (pod.spec.volumes ?? []).map((v) => v.name).filter((n) => n.startsWith('switchyard-')),
        ['switchyard-token', 'switchyard-cache'],
      );
    });

    it('the injected sidecar, run with its own arguments, token and CA, routes the app’s calls', async () => {
      // A backend for the pool on loopback (an external URL backend needs no EndpointSlice).
      const sim = await startSwitchyard([
        'sim',
        '--port',
        '0',
        '--name',
        'backend',
        '--prefill-ms-per-token',
        '0',
      ]);
      extra.push(sim);
      await cluster.applyYaml(
        `apiVersion: switchyard.dev/v1alpha1
kind: InferencePool
metadata: {name: chat, namespace: ${APPS}}
spec:
  backends: [{name: local, url: '${sim.url}/v1'}]
`,
      );
      const proc = await runInjectedSidecar(cluster, injected, APPS, {
        dir,
        serviceUrl: `https://switchyard.${SYSTEM_NS}.svc:8443`,
        controllerUrl: `https://127.0.0.1:${controllerPort}`,
      });
      extra.push(proc);
      const client = new OpenAI({ baseURL: `${proc.url}/v1`, apiKey: 'unused' });
      const answer = await waitFor('a completion through the injected sidecar', async () => {
        try {
          return await client.chat.completions.create({
            model: 'm',
            max_tokens: 3,
            messages: [{ role: 'user', content: 'hello' }],
          });
        } catch {
          return undefined;
        }
      });
      assert.equal(answer.object, 'chat.completion');
    });

    /** A report with `token` to the pool chat of APPS: the status the controller answers. */
    const reportWith = async (token: string, sidecar: string): Promise<number> => {
      const secret = await cluster.request<{ data: Record<string, string> }>(
        'GET',
        `/api/v1/namespaces/${SYSTEM_NS}/secrets/${TLS_SECRET}`,
      );
      const ca = Buffer.from(secret.body.data['ca.crt'] ?? '', 'base64').toString();
      return new Promise((resolve, reject) => {
        const body = JSON.stringify({
          sidecar,
          appliedVersion: 0,
          appliedHash: '',
          endpoints: [],
        });
        const req = https.request(
          `https://127.0.0.1:${controllerPort}/v1/namespaces/${APPS}/pools/chat/reports`,
          {
            method: 'POST',
            ca,
            agent: false,
            headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
          },
          (res) => {
            res.resume();
            resolve(res.statusCode ?? 0);
          },
        );
        req.on('error', reject);
        req.end(body);
      });
    };

    it('a pod-bound token, reused from the TokenReview cache, stops working within seconds of the pod’s deletion', async () => {
      // The cache keeps a positive review up to 30 min, but a pod-bound token only while the
      // controller's pod watch holds its pod (controller/stream/review-cache.ts).
      const { status } = await createPod(APPS, appPod('short-lived'));
      assert.equal(status, 201);
      const { token } = await cluster.createServiceAccountToken(APPS, 'default', {
        audience: 'switchyard',
        boundPod: 'short-lived',
      });
      const report = (): Promise<number> => reportWith(token, 'short-lived');
      // Twice: reviewed, then from the cache.
      assert.ok((await report()) < 300);
      assert.ok((await report()) < 300);
      const deleted = performance.now();
      await cluster.request(
        'DELETE',
        `/api/v1/namespaces/${APPS}/pods/short-lived?gracePeriodSeconds=0`,
      );
      await waitFor('the deleted pod’s token refused', async () => (await report()) === 401, {
        timeoutMs: 10_000,
      });
      assert.ok(performance.now() - deleted < 10_000);
    });

    it('a token reused from the TokenReview cache stops working within seconds of its ServiceAccount’s deletion (the API server’s 10 s included)', async () => {
      // Kept up to 30 min only while the controller's ServiceAccount watch holds the account
      // with the UID the review gave (controller/kube/account-watch.ts).
      const { token } = await cluster.createServiceAccountToken(APPS, 'doomed', {
        audience: 'switchyard',
      });
      const report = (): Promise<number> => reportWith(token, 'doomed');
      await waitFor('the account’s token let in', async () => (await report()) < 300, {
        timeoutMs: 10_000,
      });
      assert.ok((await report()) < 300, 'from the cache');
      const deleted = performance.now();
      await cluster.request('DELETE', `/api/v1/namespaces/${APPS}/serviceaccounts/doomed`);
      // The API server itself keeps calling the token valid for up to 10 s after the deletion
      // (kube-apiserver's token cache); the controller then keeps that answer 5 s at most.
      await waitFor('the deleted account’s token refused', async () => (await report()) === 401, {
        timeoutMs: 30_000,
      });
      assert.ok(performance.now() - deleted < 30_000);
    });

    it('leaves OPENAI_BASE_URL out when the pod opts out', async () => {
      const { pod } = await createPod(
        APPS,
        appPod('opted-out', { annotations: { 'switchyard.dev/inject-openai-base-url': 'false' } }),
      );
      assert.equal(pod.spec.initContainers?.[0]?.name, 'switchyard-sidecar');
      assert.equal(pod.spec.containers[0]?.env, undefined);
    });

    it('leaves unlabelled pods and pods of excluded namespaces untouched', async () => {
      const { pod: plain } = await createPod(APPS, appPod('plain', { labels: {} }));
      assert.equal(plain.spec.initContainers, undefined);
      assert.equal(plain.metadata.annotations, undefined);
      const { pod: system, status } = await createPod(
        'kube-system',
        appPod('system', { labels: { 'switchyard.dev/pool': 'chat' } }),
      );
      assert.equal(status, 201);
      assert.equal(system.spec.initContainers, undefined);
    });

    it('admits a pod that cannot take the sidecar, with a warning, an annotation and an Event', async () => {
      const { pod, status, warnings } = await createPod(
        APPS,
        appPod('port-clash', { ports: [8080] }),
      );
      assert.equal(status, 201);
      assert.equal(pod.spec.initContainers, undefined);
      assert.match(warnings, /sidecar not injected: container app uses port 8080/);
      assert.match(
        pod.metadata.annotations?.['switchyard.dev/injection-skipped'] ?? '',
        /port 8080/,
      );
      const events = await waitFor('the SidecarInjectionSkipped Event', async () => {
        const found = await eventsOf(APPS, 'port-clash');
        return found.length > 0 ? found : undefined;
      });
      assert.equal(events[0]?.reason, 'SidecarInjectionSkipped');
    });

    it('warns when the pool does not exist yet, and injects anyway', async () => {
      const { pod, warnings } = await createPod(
        APPS,
        appPod('early', { labels: { 'switchyard.dev/pool': 'not-yet' } }),
      );
      assert.equal(pod.spec.initContainers?.[0]?.name, 'switchyard-sidecar');
      assert.match(warnings, /InferencePool apps\/not-yet does not exist yet/);
    });

    it('with the controller down, pods are still created (failurePolicy Ignore), then get an Event', async () => {
      await controller!.stop();
      const { pod, status } = await createPod(APPS, appPod('during-outage'));
      assert.equal(status, 201);
      assert.equal(pod.spec.initContainers, undefined);
      controller = await startSwitchyard(controllerArgs(configFile));
      const events = await waitFor(
        'the SidecarNotInjected Event',
        async () => {
          const found = await eventsOf(APPS, 'during-outage');
          return found.length > 0 ? found : undefined;
        },
        { timeoutMs: 30_000 },
      );
      assert.equal(events[0]?.reason, 'SidecarNotInjected');
      assert.match(events[0]?.message ?? '', /delete the pod/);
      // Only that pod: the injected ones and the skipped one (already told) get nothing new.
      assert.equal((await eventsOf(APPS, 'chat-app')).length, 0);
      const metrics = await (await fetch(`${controller.adminUrl}/metrics`)).text();
      assert.match(metrics, /^switchyard_controller_pods_not_injected 2$/m);
    });

    it('a restarted controller reuses its Secret: same CA, caBundle unchanged', async () => {
      const secret = await cluster.request<{ data: Record<string, string> }>(
        'GET',
        `/api/v1/namespaces/${SYSTEM_NS}/secrets/${TLS_SECRET}`,
      );
      for (const bundle of await webhookCaBundles())
        assert.equal(bundle, secret.body.data['ca.crt']);
      const { pod } = await createPod(APPS, appPod('after-restart'));
      assert.equal(pod.spec.initContainers?.[0]?.name, 'switchyard-sidecar');
      assert.equal(
        pod.metadata.annotations?.['switchyard.dev/ca-bundle'],
        Buffer.from(secret.body.data['ca.crt'] ?? '', 'base64').toString(),
      );
    });

    it('puts a reset caBundle back', async () => {
      const res = await cluster.request(
        'PATCH',
        `/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/${WEBHOOK}`,
        [{ op: 'remove', path: '/webhooks/0/clientConfig/caBundle' }],
        { contentType: 'application/json-patch+json' },
      );
      assert.equal(res.status, 200, res.text);
      // The leader checks every minute; a restart checks at once (faster for a test).
      await controller!.stop();
      controller = await startSwitchyard(controllerArgs(configFile));
      await waitFor(
        'the caBundle to be restored',
        async () => (await webhookCaBundles()).every((b) => b !== undefined),
        { timeoutMs: 30_000 },
      );

      it('a replica that needs another name renews the serving certificate under the same CA', async () => {
        const read = async (): Promise<Record<string, string>> =>
          (
            await cluster.request<{ data: Record<string, string> }>(
              'GET',
              `/api/v1/namespaces/${SYSTEM_NS}/secrets/${TLS_SECRET}`,
            )
          ).body.data;
        const before = await read();
        const [port] = (await freePorts(1)) as [number];
        const args = controllerArgs(configFile).map((a) =>
          a === `127.0.0.1:${controllerPort}`
            ? `127.0.0.1:${port}`
            : a === 'controller-0'
              ? 'controller-1'
              : a.startsWith('switchyard.') && a.endsWith(',127.0.0.1')
                ? `${a},switchyard.example`
                : a,
        );
        const second = await startSwitchyard(args);
        extra.push(second);
        const after = await read();
        assert.equal(after['ca.crt'], before['ca.crt'], 'the CA stays: injected sidecars trust it');
        assert.notEqual(after['tls.crt'], before['tls.crt']);
        const cert = new X509Certificate(Buffer.from(after['tls.crt'] ?? '', 'base64').toString());
        assert.match(cert.subjectAltName ?? '', /DNS:switchyard\.example/);
      });
    });
  },
);
