/**
 * The user's path, end to end, on a real node (kube-node.ts): the image built from the
 * Dockerfile, `helm install`, an InferencePool, a labelled app whose pods talk to their injected
 * sidecar with the official openai client; a controller pod deleted under traffic, the app rolled,
 * `helm upgrade`, `helm uninstall`. Each step prints its time; the sidecar's RSS inside the pod is
 * printed idle and holding 1,000 streams (docs/node.md).
 *
 * Needs root; builds what it needs on first use (scripts/node/build.sh, scripts/image/build.sh).
 * SWITCHYARD_NODE_TESTS=0 skips it.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { stringify } from 'yaml';
import { CHART, helm, type Helm } from '../chart/tools.ts';
import { waitFor } from '../../harness/k8s/cluster.ts';
import { APP_IMAGE, appImage, switchyardImage } from './images.ts';
import { startKubeNode, type KubeNode } from './kube-node.ts';

const skip = process.env.SWITCHYARD_NODE_TESTS === '0' ? 'SWITCHYARD_NODE_TESTS=0' : false;
const RELEASE_NS = 'switchyard-system';
const APP_NS = 'chat';
const SIDECAR = 'switchyard-sidecar';
const STREAMS = 1_000;

interface Pod {
  metadata: { name: string; labels?: Record<string, string>; deletionTimestamp?: string };
  spec: {
    initContainers?: { name: string; restartPolicy?: string; args?: string[] }[];
    containers: { name: string; env?: { name: string; value?: string }[] }[];
  };
  status: {
    phase?: string;
    podIP?: string;
    conditions?: { type: string; status: string }[];
    initContainerStatuses?: ContainerStatus[];
    containerStatuses?: ContainerStatus[];
  };
}
interface ContainerStatus {
  name: string;
  ready: boolean;
  started?: boolean;
  state?: { running?: { startedAt: string } };
}

const timings: [string, number][] = [];
async function timed<T>(step: string, fn: () => Promise<T>): Promise<T> {
  const start = Date.now();
  try {
    return await fn();
  } finally {
    const seconds = (Date.now() - start) / 1000;
    timings.push([step, seconds]);
    process.stderr.write(`[node-test] ${step}: ${seconds.toFixed(1)} s\n`);
  }
}

function vmRssMb(pid: number): number {
  const kb = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
  return Number(kb) / 1024;
}

function isReady(pod: Pod): boolean {
  return (pod.status.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True');
}

describe('the user’s path on a real node', { skip }, () => {
  let node: KubeNode;
  let tools: Helm;
  let kubeconfig: string;
  let image: { repository: string; tag: string };

  const pods = async (namespace: string, selector: string): Promise<Pod[]> => {
    const res = await node.cluster.request<{ items: Pod[] }>(
      'GET',
      `/api/v1/namespaces/${namespace}/pods?labelSelector=${encodeURIComponent(selector)}`,
    );
    return res.body.items.filter((p) => p.metadata.deletionTimestamp === undefined);
  };
  const readyPods = async (namespace: string, selector: string, count: number): Promise<Pod[]> =>
    waitFor(
      `${count} ready pod(s) ${selector} in ${namespace}`,
      async () => {
        const all = await pods(namespace, selector);
        const ready = all.filter(isReady);
        return ready.length === count && all.length === count ? ready : undefined;
      },
      { timeoutMs: 180_000, intervalMs: 500 },
    );
  const logLines = async (
    namespace: string,
    pod: string,
    container: string,
  ): Promise<Record<string, unknown>[]> =>
    (await node.kubectl(['-n', namespace, 'logs', pod, '-c', container]))
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
  const helmRun = (args: string[]): Promise<string> =>
    tools.run([...args, '--kubeconfig', kubeconfig]);
  const apply = (docs: object[]): Promise<string> =>
    node.kubectl(
      ['apply', '--server-side', '-f', '-'],
      docs.map((d) => stringify(d)).join('---\n'),
    );
  const appDeployment = (name: string, args: string[], replicas = 1): object => ({
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name, namespace: APP_NS },
    spec: {
      replicas,
      selector: { matchLabels: { app: name } },
      template: {
        metadata: { labels: { app: name, 'switchyard.dev/pool': 'chat' } },
        spec: {
          terminationGracePeriodSeconds: 2,
          containers: [
            {
              name: 'app',
              image: APP_IMAGE,
              imagePullPolicy: 'Never',
              args,
              securityContext: {
                runAsNonRoot: true,
                runAsUser: 65532,
                allowPrivilegeEscalation: false,
              },
            },
          ],
        },
      },
    },
  });

  before(async () => {
    node = await timed(
      'start the node (control plane, containerd, kubelet, kube-proxy)',
      startKubeNode,
    );
    kubeconfig = node.cluster.kubeconfigPath;
    const [switchyard, app] = await timed('build the images (podman, cached)', async () => {
      const s = await switchyardImage();
      return [s, await appImage()] as const;
    });
    await timed('import the images into containerd', async () => {
      await node.importImage(switchyard.archive);
      await node.importImage(app.archive);
    });
    const [repository, tag] = switchyard.name.split(/:(?=[^:]+$)/) as [string, string];
    image = { repository, tag };
    tools = await helm();
  });

  after(async () => {
    tools?.dispose();
    await node?.stop();
    process.stderr.write(
      '[node-test] step times:\n' +
        Object.entries(node?.timings ?? {})
          .map(([k, v]) => `  node: ${k}: ${(v / 1000).toFixed(1)} s\n`)
          .join('') +
        timings.map(([k, v]) => `  ${k}: ${v.toFixed(1)} s\n`).join(''),
    );
  });

  it('helm install: both controller replicas Running and Ready, one leader', async () => {
    await timed('helm install', () =>
      helmRun([
        'install',
        'switchyard',
        CHART,
        '--namespace',
        RELEASE_NS,
        '--create-namespace',
        '--set',
        `image.repository=${image.repository}`,
        '--set',
        `image.tag=${image.tag}`,
      ]),
    );
    const controllers = await timed('controller replicas Ready', () =>
      readyPods(RELEASE_NS, 'app.kubernetes.io/name=switchyard', 2),
    );
    const names = controllers.map((p) => p.metadata.name);
    const holder = await waitFor(
      'a leader',
      async () => {
        const lease = await node.cluster.request<{ spec?: { holderIdentity?: string } }>(
          'GET',
          `/apis/coordination.k8s.io/v1/namespaces/${RELEASE_NS}/leases/switchyard-controller`,
        );
        const h = lease.body.spec?.holderIdentity;
        return h !== undefined && names.includes(h) ? h : undefined;
      },
      { timeoutMs: 60_000 },
    );
    assert.ok(names.includes(holder));
    // The chart preloads the image's jemalloc (controller.allocator) and the controller says so.
    for (const name of names)
      assert.ok(
        (await logLines(RELEASE_NS, name, 'controller')).some(
          (l) => l['msg'] === 'memory allocator' && l['allocator'] === 'jemalloc',
        ),
        `${name} runs on jemalloc`,
      );
  });

  it('serves the webhook with its self-made certificate', async () => {
    const caBundle = await timed('webhook caBundle written', () =>
      waitFor(
        'the webhook’s caBundle',
        async () => {
          const res = await node.cluster.request<{
            webhooks?: { clientConfig: { caBundle?: string } }[];
          }>(
            'GET',
            '/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/switchyard',
          );
          return res.body.webhooks?.[0]?.clientConfig.caBundle || undefined;
        },
        { timeoutMs: 60_000 },
      ),
    );
    const secret = await node.cluster.request<{ data: Record<string, string> }>(
      'GET',
      `/api/v1/namespaces/${RELEASE_NS}/secrets/switchyard-tls`,
    );
    assert.equal(secret.status, 200);
    assert.equal(caBundle, secret.body.data['ca.crt'], 'the caBundle is the self-made CA');
  });

  it('routes an app’s openai client through its injected native sidecar', async () => {
    await node.kubectl(['create', 'namespace', APP_NS]);
    await timed(
      'model servers (simulator pods from the image) Ready behind a Service',
      async () => {
        await apply([
          {
            apiVersion: 'apps/v1',
            kind: 'Deployment',
            metadata: { name: 'model', namespace: APP_NS },
            spec: {
              replicas: 2,
              selector: { matchLabels: { app: 'model' } },
              template: {
                metadata: { labels: { app: 'model' } },
                spec: {
                  containers: [
                    {
                      name: 'sim',
                      image: `${image.repository}:${image.tag}`,
                      imagePullPolicy: 'Never',
                      args: [
                        'sim',
                        '--host',
                        '0.0.0.0',
                        '--port',
                        '8000',
                        '--slots',
                        '1000',
                        '--queue-limit',
                        '1000',
                        '--decode-ms-per-token',
                        '250',
                        '--load-slowdown',
                        '0',
                      ],
                      ports: [{ name: 'http', containerPort: 8000 }],
                      readinessProbe: { tcpSocket: { port: 8000 }, periodSeconds: 1 },
                    },
                  ],
                },
              },
            },
          },
          {
            apiVersion: 'v1',
            kind: 'Service',
            metadata: { name: 'model', namespace: APP_NS },
            spec: {
              selector: { app: 'model' },
              ports: [{ name: 'http', port: 8000, targetPort: 8000 }],
            },
          },
        ]);
        await readyPods(APP_NS, 'app=model', 2);
      },
    );
    await timed('InferencePool Ready', async () => {
      await apply([
        {
          apiVersion: 'switchyard.dev/v1alpha1',
          kind: 'InferencePool',
          metadata: { name: 'chat', namespace: APP_NS },
          spec: { backends: [{ name: 'in-cluster', service: { name: 'model', port: 'http' } }] },
        },
      ]);
      await waitFor(
        'the pool Ready with 2 endpoints',
        async () => {
          const res = await node.cluster.request<{
            status?: {
              conditions?: { type: string; status: string }[];
              endpoints?: { ready?: number };
            };
          }>('GET', `/apis/switchyard.dev/v1alpha1/namespaces/${APP_NS}/inferencepools/chat`);
          const s = res.body.status;
          return (
            s?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') === true &&
            s.endpoints?.ready === 2
          );
        },
        { timeoutMs: 60_000 },
      );
    });
    const [app] = await timed('app Deployment Ready (sidecar injected)', async () => {
      await apply([appDeployment('app', ['traffic'])]);
      return readyPods(APP_NS, 'app=app', 1);
    });
    const pod = app!;
    const sidecar = pod.spec.initContainers?.find((c) => c.name === SIDECAR);
    assert.equal(
      sidecar?.restartPolicy,
      'Always',
      'a native sidecar: an init container that stays',
    );
    const env = pod.spec.containers[0]!.env ?? [];
    assert.equal(env.find((e) => e.name === 'OPENAI_BASE_URL')?.value, 'http://127.0.0.1:8080/v1');
    const sidecarStatus = pod.status.initContainerStatuses?.find((c) => c.name === SIDECAR);
    const appStatus = pod.status.containerStatuses?.find((c) => c.name === 'app');
    assert.ok(sidecarStatus?.ready && sidecarStatus.started, 'the sidecar is started and ready');
    const sidecarStart = Date.parse(sidecarStatus.state!.running!.startedAt);
    const appStart = Date.parse(appStatus!.state!.running!.startedAt);
    assert.ok(sidecarStart <= appStart, 'the sidecar started first');
    const lines = await waitFor(
      'the app’s first summary with successes',
      async () => {
        const l = await logLines(APP_NS, pod.metadata.name, 'app');
        return l.some((x) => x.kind === 'summary' && (x.ok as number) > 0) ? l : undefined;
      },
      { timeoutMs: 60_000 },
    );
    const start = lines.find((l) => l.kind === 'start')!;
    assert.equal(start.baseUrl, 'http://127.0.0.1:8080/v1');
    assert.equal(start.readyz, 200, 'the sidecar was ready at the app’s first instant');
    assert.deepEqual(
      lines.filter((l) => l.kind === 'failure'),
      [],
    );
    // The sidecar runs as UID 65532 on a read-only root file system.
    const pid = await node.containerPid(APP_NS, pod.metadata.name, SIDECAR);
    assert.match(readFileSync(`/proc/${pid}/status`, 'utf8'), /^Uid:\s+65532\s/m);
    assert.match(
      readFileSync(`/proc/${pid}/mountinfo`, 'utf8')
        .split('\n')
        .find((l) => l.split(' ')[4] === '/') ?? '',
      /\sro[,\s]/,
    );
  });

  it('deletes a controller pod under traffic with no failed request', async () => {
    const [app] = await pods(APP_NS, 'app=app');
    const before = await logLines(APP_NS, app!.metadata.name, 'app');
    const okBefore = Math.max(
      0,
      ...before.filter((l) => l.kind === 'summary').map((l) => l.ok as number),
    );
    const [victim] = await pods(RELEASE_NS, 'app.kubernetes.io/name=switchyard');
    await timed('delete a controller pod; its replacement Ready', async () => {
      await node.kubectl([
        '-n',
        RELEASE_NS,
        'delete',
        'pod',
        victim!.metadata.name,
        '--wait=false',
      ]);
      await waitFor(
        'a replacement controller',
        async () => {
          const all = await pods(RELEASE_NS, 'app.kubernetes.io/name=switchyard');
          return (
            all.length === 2 &&
            all.every(isReady) &&
            all.every((p) => p.metadata.name !== victim!.metadata.name)
          );
        },
        { timeoutMs: 120_000, intervalMs: 500 },
      );
    });
    await sleep(4_000);
    const lines = await logLines(APP_NS, app!.metadata.name, 'app');
    const okAfter = Math.max(
      0,
      ...lines.filter((l) => l.kind === 'summary').map((l) => l.ok as number),
    );
    assert.deepEqual(
      lines.filter((l) => l.kind === 'failure'),
      [],
      'no failed request',
    );
    assert.ok(okAfter > okBefore, `requests went on (${okBefore} → ${okAfter})`);
  });

  it('rolls the app Deployment: the new pods get the sidecar', async () => {
    const [old] = await pods(APP_NS, 'app=app');
    await timed('kubectl rollout restart of the app', async () => {
      await node.kubectl(['-n', APP_NS, 'rollout', 'restart', 'deployment/app']);
      await node.kubectl(['-n', APP_NS, 'rollout', 'status', 'deployment/app', '--timeout=180s']);
    });
    const [fresh] = await readyPods(APP_NS, 'app=app', 1);
    assert.notEqual(fresh!.metadata.name, old!.metadata.name);
    assert.equal(
      fresh!.spec.initContainers?.find((c) => c.name === SIDECAR)?.restartPolicy,
      'Always',
    );
  });

  it('measures the sidecar’s RSS in a pod: idle, and holding 1,000 streams', async () => {
    const [idle] = await timed('an idle app pod Ready', async () => {
      await apply([appDeployment('idle', ['idle'])]);
      return readyPods(APP_NS, 'app=idle', 1);
    });
    await sleep(10_000);
    const idlePid = await node.containerPid(APP_NS, idle!.metadata.name, SIDECAR);
    const idleMb = vmRssMb(idlePid);
    const [streams] = await timed(`an app pod holding ${STREAMS} streams`, async () => {
      await apply([appDeployment('streams', ['streams', String(STREAMS)])]);
      const ready = await readyPods(APP_NS, 'app=streams', 1);
      // The app opens its streams at its first instant, without waiting: the sidecar's startup
      // probe (/startupz) must have held it back until the sidecar had its pool.
      const start = await waitFor('the streams app’s start line', async () =>
        (await logLines(APP_NS, ready[0]!.metadata.name, 'app')).find((l) => l.kind === 'start'),
      );
      assert.equal(
        start.readyz,
        200,
        'the sidecar had its pool at the streams app’s first instant',
      );
      let last: Record<string, unknown> | undefined;
      const open = await waitFor(
        `${STREAMS} streams open`,
        async () => {
          const lines = await logLines(APP_NS, ready[0]!.metadata.name, 'app');
          last = lines.findLast((l) => l.kind === 'progress') ?? last;
          return lines.find((l) => l.kind === 'streams-open');
        },
        { timeoutMs: 120_000, intervalMs: 500 },
      ).catch((error: unknown) => {
        throw new Error(
          `${(error as Error).message}; the app's last progress: ${JSON.stringify(last)}`,
          {
            cause: error,
          },
        );
      });
      assert.equal(
        open.failed,
        0,
        `streams failed before their first chunk: ${JSON.stringify(last)}`,
      );
      return ready;
    });
    const streamsPid = await node.containerPid(APP_NS, streams!.metadata.name, SIDECAR);
    const openMb = vmRssMb(streamsPid);
    const done = await waitFor(
      'the streams’ end',
      async () =>
        (await logLines(APP_NS, streams!.metadata.name, 'app')).find(
          (l) => l.kind === 'streams-done',
        ),
      { timeoutMs: 180_000, intervalMs: 1_000 },
    );
    const afterMb = vmRssMb(streamsPid);
    process.stderr.write(
      `[node-test] sidecar VmRSS in a pod: idle ${idleMb.toFixed(1)} MB, with ${STREAMS} streams ${openMb.toFixed(1)} MB, after them ${afterMb.toFixed(1)} MB\n`,
    );
    assert.equal(done.failed, 0, `every stream succeeded: ${JSON.stringify(done.errors)}`);
    await node.kubectl(['-n', APP_NS, 'delete', 'deployment', 'idle', 'streams', '--wait=false']);
  });

  it('helm upgrade to a changed value reaches new pods', async () => {
    await timed('helm upgrade --set sidecar.logLevel=debug; controllers rolled', async () => {
      await helmRun([
        'upgrade',
        'switchyard',
        CHART,
        '--namespace',
        RELEASE_NS,
        '--reuse-values',
        '--set',
        'sidecar.logLevel=debug',
      ]);
      await node.kubectl([
        '-n',
        RELEASE_NS,
        'rollout',
        'status',
        'deployment/switchyard',
        '--timeout=180s',
      ]);
    });
    await timed('the app rolled onto the new sidecar configuration', async () => {
      await node.kubectl(['-n', APP_NS, 'rollout', 'restart', 'deployment/app']);
      await node.kubectl(['-n', APP_NS, 'rollout', 'status', 'deployment/app', '--timeout=180s']);
    });
    const [fresh] = await readyPods(APP_NS, 'app=app', 1);
    const args = fresh!.spec.initContainers?.find((c) => c.name === SIDECAR)?.args ?? [];
    assert.equal(args[args.indexOf('--log-level') + 1], 'debug');
  });

  it('helm uninstall leaves nothing of the release but the CRD', async () => {
    await node.kubectl(['-n', APP_NS, 'delete', 'ipool', 'chat']);
    await timed('helm uninstall', () =>
      helmRun(['uninstall', 'switchyard', '--namespace', RELEASE_NS, '--wait']),
    );
    // What the controller made itself (its TLS Secret, the leader Lease, a Lease per replica) is
    // not Helm's: it carries owner references (controller/kube/owners.ts), and the garbage
    // collector deletes it after its owner, asynchronously; so wait for it, and name what stayed.
    let left: string[] = [];
    try {
      await waitFor(
        'nothing of the release but the CRD',
        async () => {
          const namespaced = (
            await node.kubectl([
              '-n',
              RELEASE_NS,
              'get',
              'all,secrets,configmaps,serviceaccounts,roles,rolebindings,leases,poddisruptionbudgets,networkpolicies',
              '-o',
              'name',
            ])
          )
            .split('\n')
            .filter(
              (n) =>
                n !== '' && !/^configmap\/kube-root-ca\.crt$|^serviceaccount\/default$/.test(n),
            );
          const cluster = (
            await node.kubectl([
              'get',
              'clusterroles,clusterrolebindings,mutatingwebhookconfigurations,customresourcedefinitions',
              '-o',
              'name',
            ])
          )
            .split('\n')
            .filter((n) => n.includes('switchyard'));
          left = [...namespaced, ...cluster];
          return left.length === 1 ? left : undefined;
        },
        { timeoutMs: 120_000, intervalMs: 1_000 },
      );
    } catch {
      // waitFor's own message cannot say what stayed; the assertion below does.
    }
    assert.deepEqual(
      left,
      ['customresourcedefinition.apiextensions.k8s.io/inferencepools.switchyard.dev'],
      'nothing of the release but the CRD',
    );
  });
});
