/**
 * The Gateway API inference extension's endpoint pickers as benchmark peers: GAIE's picker run as
 * in Kubernetes, against a real kube-apiserver (harness/k8s), with an InferencePool whose Pod
 * objects stand for the simulators, and the ext_proc stand-in for Envoy in front
 * (extproc-proxy/main.go). One picker and one stand-in for every client: the EPP is central by
 * design.
 *
 * Two pickers (scripts/gaie/build-epp.sh builds either; the bench builds nothing and skips a peer
 * whose binaries are missing, the test builds on first use):
 * - `gaie-epp`: the full EPP, `cmd/epp` of GAIE v1.5.0 (the last release that ships it), with its
 *   default configuration: queue (weight 2), KV-cache utilisation (2) and prefix-cache (3)
 *   scorers, a max-score picker with random tie-break, and the vLLM metrics
 *   (`vllm:num_requests_waiting`, `vllm:num_requests_running`, `vllm:kv_cache_usage_perc`)
 *   scraped every 50 ms from each pod's target port, `/metrics`, which the simulator serves.
 * - `gaie-lwepp`: `cmd/lwepp` of GAIE v1.6.2, the lightweight reference picker: round-robin over
 *   the pool's ready pods, no metrics, no scorers.
 *
 * The simulators all listen on 127.0.0.1 on ports of their own, and an InferencePool has one set
 * of target ports for all its pods; so the pool lists every simulator's port (at most 8, the
 * CRD's limit) and each Pod names its own with GAIE's `inference.networking.k8s.io/active-ports`
 * annotation (both versions honour it): the picker sees exactly one endpoint per simulator, and
 * the full EPP scrapes each simulator's own /metrics.
 */
import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runBuildScript } from '../../harness/build-script.ts';
import { startCluster, waitFor, type Cluster } from '../../harness/k8s/cluster.ts';
import { installGaieInferencePoolCrd } from '../../harness/k8s/gaie.ts';
import { freePort, spawnListening, type Child } from '../common/peers.ts';
import {
  hostPort,
  type PolicyDefinition,
  type RouterContext,
  type RouterSet,
} from './policy-definition.ts';

/** `epp`: GAIE's full endpoint picker; `lwepp`: its round-robin reference picker. */
export type GaiePicker = 'epp' | 'lwepp';

/** Pinned, as in scripts/gaie/build-epp.sh: v1.5.0 is the last GAIE with cmd/epp. */
export const GAIE_VERSIONS: Readonly<Record<GaiePicker, string>> = {
  epp: process.env['SWITCHYARD_GAIE_EPP_VERSION'] ?? 'v1.5.0',
  lwepp: process.env['SWITCHYARD_GAIE_LWEPP_VERSION'] ?? 'v1.6.2',
};

const BUILD_SCRIPT = fileURLToPath(new URL('../../scripts/gaie/build-epp.sh', import.meta.url));

export const NAMESPACE = 'default';
const POOL = 'bench';
const POD_LABEL = 'switchyard-bench-sim';
/** GAIE's annotation that narrows a pod to some of the pool's target ports. */
const ACTIVE_PORTS = 'inference.networking.k8s.io/active-ports';
/** The response header the stand-in sets to the endpoint it forwarded to. */
export const SERVED_HEADER = 'x-gateway-destination-endpoint-served';
const MAX_TARGET_PORTS = 8;

/** The folder scripts/gaie/build-epp.sh builds `picker` into. */
export function gaieBinDir(picker: GaiePicker): string {
  const cache = process.env['SWITCHYARD_CACHE_DIR'] ?? join(homedir(), '.cache/switchyard');
  return join(cache, 'gaie', GAIE_VERSIONS[picker], 'epp');
}

const pickerBinary = (picker: GaiePicker): string => join(gaieBinDir(picker), picker);
export const extprocProxyBinary = (picker: GaiePicker): string =>
  join(gaieBinDir(picker), 'extproc-proxy');

export function unavailable(picker: GaiePicker): string | undefined {
  const missing = [pickerBinary(picker), extprocProxyBinary(picker)].filter((b) => !existsSync(b));
  if (missing.length === 0) return undefined;
  return `${missing.join(' and ')} not built (scripts/gaie/build-epp.sh ${picker} builds GAIE's picker and the ext_proc stand-in)`;
}

/** Runs scripts/gaie/build-epp.sh (a no-op once built; minutes on a cold Go cache). */
export async function buildGaie(picker: GaiePicker): Promise<void> {
  await runBuildScript('bash', [BUILD_SCRIPT, picker, GAIE_VERSIONS[picker]], '[gaie-build]');
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

/** The first model a backend lists (the bench's simulators serve one they were told, not `sim`). */
async function servedModel(backendUrl: string): Promise<string> {
  const res = await fetch(`${backendUrl}/v1/models`);
  const body = (await res.json()) as { data?: { id?: string }[] };
  const id = body.data?.[0]?.id;
  if (!res.ok || id === undefined) throw new Error(`${backendUrl}/v1/models lists no model`);
  return id;
}

/** One chat completion of one token through the stand-in; the endpoint that served, if any. */
async function oneToken(url: string, model: string, prompt: string): Promise<string | undefined> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model,
      max_tokens: 1,
      messages: [{ role: 'user', content: prompt }],
    }),
  }).catch(() => undefined);
  if (res === undefined) return undefined;
  await res.arrayBuffer();
  return res.ok ? (res.headers.get(SERVED_HEADER) ?? undefined) : undefined;
}

/**
 * Until the picker knows every pod and a request through the stand-in is served. lwepp: a round
 * of requests has reached every backend (round-robin). The full EPP picks by score, so a round
 * need not reach every backend (a simulator that kept KV blocks from an earlier policy's run
 * scores lower until its cache empties); instead its own metrics list one
 * `inference_pool_per_pod_queue_size` series per endpoint in its datastore.
 */
async function untilReady(
  picker: GaiePicker,
  url: string,
  metricsPort: number,
  ctx: Pick<RouterContext, 'backends'>,
): Promise<void> {
  const want = new Set(ctx.backends.map((b) => hostPort(b.url)));
  const model = await servedModel(ctx.backends[0]!.url);
  let round = 0;
  await waitFor(
    `GAIE's picker (${picker}) to know all ${want.size} backends and route a request`,
    async () => {
      round++;
      if (picker === 'epp') {
        const res = await fetch(`http://127.0.0.1:${metricsPort}/metrics`).catch(() => undefined);
        if (res === undefined || !res.ok) return false;
        const known = (await res.text())
          .split('\n')
          .filter((l) => l.startsWith('inference_pool_per_pod_queue_size{')).length;
        return known === want.size && (await oneToken(url, model, `ready? ${round}`)) !== undefined;
      }
      const seen = new Set<string>();
      for (let i = 0; i < want.size * 2; i++) {
        const served = await oneToken(url, model, `ready? ${round}.${i}`);
        if (served !== undefined) seen.add(served);
      }
      return [...want].every((e) => seen.has(e));
    },
    { timeoutMs: 60_000 },
  );
}

/** The picker's flags beyond its gRPC, health and metrics ports. */
function pickerFlags(picker: GaiePicker): string[] {
  // Plaintext gRPC (the stand-in speaks no TLS); errors only: the default is development mode at
  // debug level, and per-request log lines would cost CPU the other peers do not spend.
  const common = [
    ...['--pool-name', POOL, '--pool-namespace', NAMESPACE],
    ...['--secure-serving=false', '--zap-log-level=error'],
  ];
  if (picker === 'lwepp') return common;
  // The full EPP: its default scheduling configuration (no --config-file); no tracing exporter
  // (nothing collects it), no pprof; its own /metrics without the API server's authn (the bench
  // does not read it).
  return [...common, '--tracing=false', '--enable-pprof=false', '--metrics-endpoint-auth=false'];
}

/** GAIE's picker and the stand-in in front, on a running cluster: the pool made, every backend routed to. */
export async function startGaieEpp(
  cluster: Cluster,
  ctx: Pick<RouterContext, 'backends'>,
  picker: GaiePicker = 'epp',
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
    children.push(
      await spawnListening(
        picker,
        pickerBinary(picker),
        [
          ...pickerFlags(picker),
          '--grpc-port',
          String(grpc),
          '--grpc-health-port',
          String(health),
          '--metrics-port',
          String(metrics),
        ],
        grpc,
        { env: { KUBECONFIG: cluster.kubeconfigPath }, timeoutMs: 30_000 },
      ),
    );
    const proxy = await spawnListening(
      'extproc-proxy',
      extprocProxyBinary(picker),
      ['--listen', `127.0.0.1:${http}`, '--epp', `127.0.0.1:${grpc}`],
      http,
    );
    children.push(proxy);
    await untilReady(picker, proxy.url, metrics, ctx);
    return { urls: [proxy.url], pids: children.map((c) => c.pid), stop };
  } catch (err) {
    const logs = children.map((c) => `${c.name}: ${c.output().slice(-2000)}`).join('\n');
    await stop();
    throw new Error(`${(err as Error).message}\n${logs}`, { cause: err });
  }
}

function starter(picker: GaiePicker): (ctx: RouterContext) => Promise<RouterSet> {
  return async (ctx) => {
    const cluster = await startCluster();
    try {
      const set = await startGaieEpp(cluster, ctx, picker);
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
  };
}

const STAND_IN = `on a real kube-apiserver, behind switchyard's ext_proc stand-in for Envoy (full-duplex streamed bodies, no retries); one shared instance that every client sends to`;

export const gaieEpp: PolicyDefinition = {
  name: 'gaie-epp',
  family: 'peer',
  describe: `GAIE ${GAIE_VERSIONS.epp}'s full endpoint picker (cmd/epp, default profile: queue, KV-cache and prefix-cache scorers over the pods' scraped vLLM metrics) ${STAND_IN}`,
  unavailable: () => unavailable('epp'),
  version: () => `gateway-api-inference-extension ${GAIE_VERSIONS.epp} epp`,
  start: starter('epp'),
  central: true,
};

export const gaieLwepp: PolicyDefinition = {
  name: 'gaie-lwepp',
  family: 'peer',
  describe: `GAIE ${GAIE_VERSIONS.lwepp}'s reference picker (cmd/lwepp: round-robin over the InferencePool's ready pods) ${STAND_IN}`,
  unavailable: () => unavailable('lwepp'),
  version: () => `gateway-api-inference-extension ${GAIE_VERSIONS.lwepp} lwepp`,
  start: starter('lwepp'),
  central: true,
};
