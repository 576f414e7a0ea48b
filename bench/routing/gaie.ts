/**
 * The Gateway API inference extension's endpoint picker as a benchmark peer (`gaie-epp`): GAIE's
 * picker run as in Kubernetes, against a real kube-apiserver (harness/k8s), with an InferencePool
 * whose Pod objects stand for the simulators, and the ext_proc stand-in for Envoy in front
 * (extproc-proxy/main.go). One picker and one stand-in for every client: the EPP is central by
 * design.
 *
 * Which picker: GAIE v1.6 ships only the lightweight reference picker `lwepp` (round-robin over
 * the pool's ready pods, no metrics scraping, no scorers); the full EPP with its prefix-cache,
 * queue and KV-cache scorers has left the module. Both binaries come from
 * scripts/gaie/build-epp.sh; the bench builds nothing and skips the peer when they are missing.
 *
 * The simulators all listen on 127.0.0.1 on ports of their own, and an InferencePool has one set
 * of target ports for all its pods; so the pool lists every simulator's port (at most 8, the
 * CRD's limit) and each Pod names its own with GAIE's `inference.networking.k8s.io/active-ports`
 * annotation: the picker sees exactly one endpoint per simulator.
 */
import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { startCluster, waitFor, type Cluster } from '../../harness/k8s/cluster.ts';
import { GAIE_MODULE_VERSION, installGaieInferencePoolCrd } from '../../harness/k8s/gaie.ts';
import { freePort, spawnListening, type Child } from '../common/peers.ts';
import {
  hostPort,
  type PolicyDefinition,
  type RouterContext,
  type RouterSet,
} from './policy-definition.ts';

export const NAMESPACE = 'default';
const POOL = 'bench';
const POD_LABEL = 'switchyard-bench-sim';
/** GAIE's annotation that narrows a pod to some of the pool's target ports. */
const ACTIVE_PORTS = 'inference.networking.k8s.io/active-ports';
/** The header the picker's response phase sets to the endpoint that served (its conformance aid). */
export const SERVED_HEADER = 'x-conformance-test-served-endpoint';
const MAX_TARGET_PORTS = 8;

/** The folder scripts/gaie/build-epp.sh builds into. */
export function gaieBinDir(): string {
  const cache = process.env['SWITCHYARD_CACHE_DIR'] ?? join(homedir(), '.cache/switchyard');
  return join(cache, 'gaie', GAIE_MODULE_VERSION, 'epp');
}

const lwepp = (): string => join(gaieBinDir(), 'lwepp');
export const extprocProxyBinary = (): string => join(gaieBinDir(), 'extproc-proxy');

export function unavailable(): string | undefined {
  const missing = [lwepp(), extprocProxyBinary()].filter((b) => !existsSync(b));
  if (missing.length === 0) return undefined;
  return `${missing.join(' and ')} not built (scripts/gaie/build-epp.sh builds GAIE's picker and the ext_proc stand-in)`;
}

/** The pool and one Ready Pod per backend, its podIP the simulator's address. */
async function createPool(cluster: Cluster, ctx: Pick<RouterContext, 'backends'>): Promise<void> {
  const endpoints = ctx.backends.map((b) => new URL(b.url));
  if (endpoints.length > MAX_TARGET_PORTS) {
    throw new Error(
      `gaie-epp serves at most ${MAX_TARGET_PORTS} backends (an InferencePool's targetPorts limit), got ${endpoints.length}`,
    );
  }
  const pool = {
    apiVersion: 'inference.networking.k8s.io/v1',
    kind: 'InferencePool',
    metadata: { name: POOL, namespace: NAMESPACE },
    spec: {
      selector: { matchLabels: { app: POD_LABEL } },
      targetPorts: endpoints.map((u) => ({ number: Number(u.port) })),
      endpointPickerRef: { name: 'gaie-epp', port: { number: 9002 } },
    },
  };
  const created = await cluster.request(
    'POST',
    `/apis/inference.networking.k8s.io/v1/namespaces/${NAMESPACE}/inferencepools`,
    pool,
  );
  if (created.status >= 300) throw new Error(`creating the InferencePool: ${created.text}`);
  await Promise.all(
    endpoints.map(async (u, i) => {
      const name = `sim-${i}`;
      const pod = {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: {
          name,
          namespace: NAMESPACE,
          labels: { app: POD_LABEL },
          annotations: { [ACTIVE_PORTS]: u.port },
        },
        spec: {
          containers: [
            { name: 'sim', image: 'switchyard-sim', ports: [{ containerPort: Number(u.port) }] },
          ],
        },
      };
      const path = `/api/v1/namespaces/${NAMESPACE}/pods`;
      const res = await cluster.request('POST', path, pod);
      if (res.status >= 300) throw new Error(`creating Pod ${name}: ${res.text}`);
      // No kubelet: the bench writes the status one would, Running and Ready at the sim's address.
      const status = await cluster.request('PATCH', `${path}/${name}/status`, {
        status: {
          phase: 'Running',
          podIP: u.hostname,
          podIPs: [{ ip: u.hostname }],
          conditions: [{ type: 'Ready', status: 'True' }],
        },
      });
      if (status.status >= 300) throw new Error(`marking Pod ${name} Ready: ${status.text}`);
    }),
  );
}

/** Until a round of requests through the stand-in has reached every backend (the EPP knows all). */
async function untilEveryBackendServed(
  url: string,
  ctx: Pick<RouterContext, 'backends'>,
): Promise<void> {
  const want = new Set(ctx.backends.map((b) => hostPort(b.url)));
  await waitFor(
    `GAIE's picker to route to all ${want.size} backends`,
    async () => {
      const seen = new Set<string>();
      for (let i = 0; i < want.size * 2; i++) {
        const res = await fetch(`${url}/v1/models`).catch(() => undefined);
        if (res === undefined) return false;
        await res.arrayBuffer();
        const served = res.headers.get(SERVED_HEADER);
        if (res.ok && served !== null) seen.add(served);
      }
      return [...want].every((e) => seen.has(e));
    },
    { timeoutMs: 60_000 },
  );
}

/** GAIE's picker and the stand-in in front, on a running cluster: the pool made, every backend routed to. */
export async function startGaieEpp(
  cluster: Cluster,
  ctx: Pick<RouterContext, 'backends'>,
): Promise<RouterSet> {
  const children: Child[] = [];
  const stop = async (): Promise<void> => {
    await Promise.all(children.map((c) => c.stop()));
  };
  try {
    await installGaieInferencePoolCrd(cluster);
    await createPool(cluster, ctx);
    const [grpc, health, metrics, http] = await Promise.all([
      freePort(),
      freePort(),
      freePort(),
      freePort(),
    ]);
    // Plaintext gRPC (the stand-in speaks no TLS); errors only: its default is development mode
    // at debug level, and per-request log lines would cost CPU the other peers do not spend.
    children.push(
      await spawnListening(
        'lwepp',
        lwepp(),
        [
          '--pool-name',
          POOL,
          '--pool-namespace',
          NAMESPACE,
          '--grpc-port',
          String(grpc),
          '--grpc-health-port',
          String(health),
          '--metrics-port',
          String(metrics),
          '--secure-serving=false',
          '--zap-log-level=error',
        ],
        grpc,
        { env: { KUBECONFIG: cluster.kubeconfigPath }, timeoutMs: 30_000 },
      ),
    );
    const proxy = await spawnListening(
      'extproc-proxy',
      extprocProxyBinary(),
      ['--listen', `127.0.0.1:${http}`, '--epp', `127.0.0.1:${grpc}`],
      http,
    );
    children.push(proxy);
    await untilEveryBackendServed(proxy.url, ctx);
    return { urls: [proxy.url], pids: children.map((c) => c.pid), stop };
  } catch (err) {
    const logs = children.map((c) => `${c.name}: ${c.output().slice(-2000)}`).join('\n');
    await stop();
    throw new Error(`${(err as Error).message}\n${logs}`, { cause: err });
  }
}

async function start(ctx: RouterContext): Promise<RouterSet> {
  const cluster = await startCluster();
  try {
    const set = await startGaieEpp(cluster, ctx);
    return {
      ...set,
      stop: async () => {
        await set.stop();
        await cluster.stop();
      },
    };
  } catch (err) {
    await cluster.stop();
    throw err;
  }
}

export const gaieEpp: PolicyDefinition = {
  name: 'gaie-epp',
  family: 'peer',
  describe: `GAIE ${GAIE_MODULE_VERSION}'s endpoint picker (lwepp: round-robin over the InferencePool's ready pods, the only picker the module ships) on a real kube-apiserver, behind switchyard's ext_proc stand-in for Envoy (full-duplex streamed bodies, no retries); one shared instance that every client sends to`,
  unavailable,
  version: () => `gateway-api-inference-extension ${GAIE_MODULE_VERSION} lwepp`,
  start,
  central: true,
};
