/**
 * Set-ups shared by the end-to-end tests: namespaces, a controller on plain HTTP for the tests
 * where TLS is not what is under test, and a whole pool behind a Service on test hosts
 * (`startServicePool`).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  controllerSidecarArgs,
  startSwitchyard,
  stopAll,
  type RunningProcess,
} from '../../harness/processes.ts';
import { startCluster, type Cluster } from '../../harness/k8s/cluster.ts';
import { installInferencePoolCrd } from '../../harness/k8s/crd.ts';
import { assertTestAddress, createTestHost, type TestHost } from './test-hosts.ts';

/** Patches the options of the `switchyard sim` serving port 8000 of test host `h` (its admin API). */
export async function configureSim(h: TestHost, patch: Record<string, unknown>): Promise<void> {
  assertTestAddress(h.ip);
  const res = await fetch(`http://${h.ip}:8000/admin/config`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(patch),
  });
  if (res.status !== 200)
    throw new Error(`sim admin of ${h.ip}: ${res.status} ${await res.text()}`);
}

/** Creates each namespace (there is no controller manager: nothing else would). */
export async function createNamespaces(cluster: Cluster, names: readonly string[]): Promise<void> {
  for (const name of names)
    await cluster.request('POST', '/api/v1/namespaces', {
      apiVersion: 'v1',
      kind: 'Namespace',
      metadata: { name },
    });
}

/**
 * `switchyard controller --insecure-http` on `listen` as admin, its Lease in namespace
 * `switchyard` (which must exist), with `extra` flags appended.
 */
export function startPlainController(
  cluster: Cluster,
  listen = '127.0.0.1:0',
  extra: string[] = [],
): Promise<RunningProcess> {
  return startSwitchyard([
    'controller',
    '--kubeconfig',
    cluster.kubeconfigPath,
    '--insecure-http',
    '--listen',
    listen,
    '--admin',
    '127.0.0.1:0',
    '--lease-namespace',
    'switchyard',
    '--identity',
    'controller-0',
    ...extra,
  ]);
}

/** The namespace of a `ServicePool`'s pool, Service and app. */
export const POOL_NAMESPACE = 'apps';
/** A `ServicePool`'s InferencePool, `chat`, in the API. */
export const POOL_PATH = '/apis/switchyard.dev/v1alpha1/namespaces/apps/inferencepools/chat';

export interface ServicePoolOptions {
  /** Names the temporary folder (`switchyard-<name>-…`). */
  name: string;
  /** A test host per label, each serving on port 8000 what `serve` starts in it. */
  hosts: readonly string[];
  /** Starts the host's server; `dir` is the pool's temporary folder, for its files. */
  serve(host: TestHost, label: string, dir: string): Promise<{ stop(): Promise<unknown> }>;
  /** Objects applied before the pool (Secrets it references), YAML documents. */
  objects?: readonly string[];
  /** More backends after `gpus` (YAML flow mappings), in failover order. */
  backends?: readonly string[];
  /** Lines of the pool's spec after its backend and `affinity: {key: None}`. */
  spec?: readonly string[];
  /** Each controller's flags after `startPlainController`'s own (default: one, no flags). */
  controllers?: readonly (readonly string[])[];
}

/**
 * What the Service-backed end-to-end tests stand on: a real API server with the CRD and
 * namespaces `apps` and `switchyard`; test hosts behind Service `vllm` (one EndpointSlice, port
 * 8000); InferencePool `chat` whose backend `gpus` is that Service; plain-HTTP controllers; and
 * the app's token for sidecars fed by them.
 */
export interface ServicePool {
  cluster: Cluster;
  /** The pool's temporary folder (the token, sidecar caches, what the tests write). */
  dir: string;
  hosts: TestHost[];
  controllers: RunningProcess[];
  /**
   * The app's service-account token (audience `switchyard`), also in `tokenFile`: bound to no
   * pod, so it reads the pool without API keys. `startSidecar` gives each sidecar a pod's token.
   */
  token: string;
  tokenFile: string;
  /** The endpoint id the controller gives a host: `gpus/<ip>:8000`. */
  endpointId(host: TestHost): string;
  /**
   * A sidecar of the pool fed by `controller`, its cache in `dir`; stopped by `stop()`. It runs as
   * an injected one would: with the token of its own pod (`sidecarId`, labelled for the pool).
   */
  startSidecar(
    sidecarId: string,
    controller?: RunningProcess,
    options?: { reportEvery?: string },
  ): Promise<RunningProcess>;
  /** Stops everything started, removes the hosts, the API server and the folder. */
  stop(): Promise<void>;
}

/**
 * Starts a `ServicePool`. A start that fails stops what it had started before it throws, so a
 * test's `after` only has the returned pool (if any) to stop.
 */
export async function startServicePool(o: ServicePoolOptions): Promise<ServicePool> {
  const namespace = POOL_NAMESPACE;
  const dir = mkdtempSync(join(tmpdir(), `switchyard-${o.name}-`));
  let cluster: Cluster | undefined;
  const hosts: TestHost[] = [];
  const servers: { stop(): Promise<unknown> }[] = [];
  const controllers: RunningProcess[] = [];
  const sidecars: RunningProcess[] = [];
  const stop = async (): Promise<void> => {
    await stopAll([...sidecars, ...controllers]);
    await Promise.all(servers.map((s) => s.stop()));
    await Promise.all(hosts.map((h) => h.remove()));
    await cluster?.stop();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const api = (cluster = await startCluster());
    await installInferencePoolCrd(cluster);
    await createNamespaces(cluster, [namespace, 'switchyard']);
    for (const label of o.hosts) {
      const host = await createTestHost(label);
      hosts.push(host);
      servers.push(await o.serve(host, label, dir));
    }
    await cluster.applyYaml(`apiVersion: v1
kind: Service
metadata: {name: vllm, namespace: ${namespace}}
spec:
  ports: [{name: http, port: 80, targetPort: 8000}]
`);
    for (const h of hosts) assertTestAddress(h.ip);
    await cluster.request(
      'POST',
      `/apis/discovery.k8s.io/v1/namespaces/${namespace}/endpointslices`,
      {
        apiVersion: 'discovery.k8s.io/v1',
        kind: 'EndpointSlice',
        metadata: { name: 'vllm-1', labels: { 'kubernetes.io/service-name': 'vllm' } },
        addressType: 'IPv4',
        endpoints: hosts.map((h) => ({ addresses: [h.ip], conditions: { ready: true } })),
        ports: [{ name: 'http', port: 8000, protocol: 'TCP' }],
      },
    );
    for (const object of o.objects ?? []) await cluster.applyYaml(object, { namespace });
    await cluster.applyYaml(`apiVersion: switchyard.dev/v1alpha1
kind: InferencePool
metadata: {name: chat, namespace: ${namespace}}
spec:
  backends: [{name: gpus, service: {name: vllm, port: http}}${(o.backends ?? []).map((b) => `, ${b}`).join('')}]
  affinity: {key: None}
${(o.spec ?? []).map((line) => `  ${line}\n`).join('')}`);
    for (const flags of o.controllers ?? [[]])
      controllers.push(await startPlainController(cluster, '127.0.0.1:0', [...flags]));
    const { token } = await cluster.createServiceAccountToken(namespace, 'app', {
      audience: 'switchyard',
    });
    const tokenFile = join(dir, 'token');
    writeFileSync(tokenFile, token);
    return {
      cluster,
      dir,
      hosts,
      controllers,
      token,
      tokenFile,
      endpointId: (host) => `gpus/${host.ip}:8000`,
      startSidecar: async (sidecarId, controller = controllers[0], options = {}) => {
        if (controller === undefined) throw new Error('the pool has no controller');
        // Only a token bound to a pod that follows the pool gets its API keys
        // (controller/core/stream-access.ts); one pod per sidecar, as in a cluster.
        await api.request('POST', `/api/v1/namespaces/${namespace}/pods`, {
          apiVersion: 'v1',
          kind: 'Pod',
          metadata: { name: sidecarId, labels: { 'switchyard.dev/pool': 'chat' } },
          spec: { serviceAccountName: 'app', containers: [{ name: 'app', image: 'app' }] },
        });
        const podToken = await api.createServiceAccountToken(namespace, 'app', {
          audience: 'switchyard',
          boundPod: sidecarId,
        });
        const sidecarTokenFile = join(dir, `${sidecarId}.token`);
        writeFileSync(sidecarTokenFile, podToken.token);
        const sidecar = await startSwitchyard(
          controllerSidecarArgs({
            controllerUrl: controller.url,
            pool: 'chat',
            namespace,
            tokenFile: sidecarTokenFile,
            cacheFile: join(dir, `${sidecarId}.json`),
            sidecarId,
            reportEvery: options.reportEvery,
          }),
        );
        sidecars.push(sidecar);
        return sidecar;
      },
      stop,
    };
  } catch (error) {
    await stop().catch(() => undefined);
    throw error;
  }
}
