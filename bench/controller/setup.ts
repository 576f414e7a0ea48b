/**
 * The controller bench's set-up steps: a real API server (sampled from the start), the pools'
 * objects on it, ServiceAccount tokens for the subscribers, and the controller itself.
 */
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { startCluster, waitFor, type Cluster } from '../../harness/k8s/cluster.ts';
import { installInferencePoolCrd } from '../../harness/k8s/crd.ts';
import { memoryMb } from '../../harness/proc.ts';
import { startSwitchyard, type RunningProcess } from '../../harness/processes.ts';
import { stderrLog } from '../common/log.ts';
import {
  Api,
  createObjects,
  makePools,
  makeTls,
  mintTokens,
  paths,
  SliceWatch,
  type PoolFixture,
} from './fixture.ts';
import type { Flags } from './flags.ts';
import { parseMetrics, type MemoryPoint } from './report.ts';
import { childrenByName, ConnectionProbe, rssParts, Sampler } from './resources.ts';
import type { RunResources } from './run-resources.ts';

export const log = stderrLog('[bench:controller] ');

export interface ApiServer {
  cluster: Cluster;
  /** A keep-alive client as admin, for the bench's own writes. */
  api: Api;
  /** CPU and RSS of the controller, kube-apiserver, etcd, the bench and the machine. */
  sampler: Sampler;
  startMs: number;
}

/** etcd and kube-apiserver, the InferencePool CRD, and a sampler of their CPU from now on. */
export async function startApiServer(resources: RunResources): Promise<ApiServer> {
  log('starting etcd and kube-apiserver');
  const t = performance.now();
  const cluster = await startCluster();
  resources.hold(() => cluster.stop());
  const startMs = performance.now() - t;
  await installInferencePoolCrd(cluster);
  const children = childrenByName(['etcd', 'kube-apiserver']);
  const sampler = new Sampler({
    apiServer: children.get('kube-apiserver'),
    etcd: children.get('etcd'),
  });
  resources.hold(() => sampler.stop());
  const api = new Api(cluster);
  resources.hold(() => api.close());
  return { cluster, api, sampler, startMs };
}

export interface Pools {
  all: PoolFixture[];
  /** The pool subscriber `i` follows: pool i mod pools. */
  of: (subscriber: number) => PoolFixture;
  createMs: number;
}

/** A Service, an EndpointSlice and an InferencePool per pool, spread over the namespaces. */
export async function createPools(flags: Flags, server: ApiServer): Promise<Pools> {
  const namespaces = Array.from({ length: flags.namespaces }, (_, i) => `bench-${i}`);
  const all = makePools(flags.pools, flags.endpoints, namespaces);
  log(
    `creating ${flags.pools} Services, EndpointSlices and InferencePools in ${flags.namespaces} namespaces`,
  );
  const t = performance.now();
  // The CRD can take a moment to be served after Established.
  await waitFor(
    'InferencePools to be served',
    async () =>
      (await server.api.request('GET', `${paths.pools('default')}?limit=1`)).status === 200,
  );
  await createObjects(server.api, all, namespaces);
  return {
    all,
    of: (i) => all[i % all.length]!,
    createMs: performance.now() - t,
  };
}

export interface Tokens {
  /** The next token for a subscriber in `namespace` (round-robin over that namespace's). */
  next: (namespace: string) => string;
  mintMs: number;
}

/** A token per subscriber, or one per namespace shared (--tokens namespace). */
export async function mintSubscriberTokens(
  flags: Flags,
  server: ApiServer,
  pools: Pools,
): Promise<Tokens> {
  const perNamespace = new Map<string, number>();
  for (let i = 0; i < flags.subscribers; i++) {
    const ns = pools.of(i).namespace;
    perNamespace.set(ns, (perNamespace.get(ns) ?? 0) + 1);
  }
  log(
    `minting ${flags.tokens === 'per-subscriber' ? flags.subscribers : perNamespace.size} ServiceAccount tokens`,
  );
  const t = performance.now();
  const tokens = new Map<string, string[]>();
  for (const [ns, count] of perNamespace)
    tokens.set(
      ns,
      await mintTokens(
        server.api,
        server.cluster,
        ns,
        flags.tokens === 'per-subscriber' ? count : 1,
      ),
    );
  const mintMs = performance.now() - t;
  const used = new Map<string, number>();
  return {
    next: (ns) => {
      const list = tokens.get(ns)!;
      const n = used.get(ns) ?? 0;
      used.set(ns, n + 1);
      return list[n % list.length]!;
    },
    mintMs,
  };
}

export interface RunningController {
  process: RunningProcess;
  /** `performance.now()` and `Date.now()` when it was spawned. */
  spawnAt: number;
  spawnDate: number;
  listeningMs: number;
  /** The controller's own flags (TLS files left out), for the results. */
  flags: string[];
  /** The node flags it really runs with (bin/switchyard.js may add its own). */
  nodeFlags: string[];
  /** Its CA, for the subscribers. */
  ca: string;
  /** Where --cpu-prof writes. */
  profileDir: string;
  /** The bench's own watch of the EndpointSlices: when the API server delivered each write. */
  watch: SliceWatch;
  /** Its connections to the API server. */
  probe: ConnectionProbe;
  /** What its RSS is made of, at each `memoryPoint`. */
  memory: MemoryPoint[];
  scrape: () => Promise<Map<string, number>>;
  memoryPoint: (at: string) => Promise<void>;
}

/**
 * `switchyard controller` as the benches run it: every port picked by the OS, load scraping off
 * (nothing may connect to the bench's 10.200.x.x endpoints, fixture.ts). Also the fleet bench's
 * replicas (fleet-replicas.ts).
 */
export function controllerArgs(
  kubeconfigPath: string,
  tls: { certFile: string; keyFile: string },
  identity: string,
): string[] {
  return [
    'controller',
    '--kubeconfig',
    kubeconfigPath,
    '--tls-cert-file',
    tls.certFile,
    '--tls-key-file',
    tls.keyFile,
    '--listen',
    '127.0.0.1:0',
    '--admin',
    '127.0.0.1:0',
    '--lease-namespace',
    'switchyard',
    '--identity',
    identity,
    '--load-scrape-every',
    '0',
  ];
}

/** The controller on the API server, with a serving certificate of its own for the stream. */
export async function startController(
  flags: Flags,
  server: ApiServer,
  resources: RunResources,
): Promise<RunningController> {
  const { cluster, sampler } = server;
  const watch = new SliceWatch(cluster);
  watch.start();
  resources.hold(() => watch.stop());
  const tls = makeTls(resources.dir);
  const ca = readFileSync(tls.caFile, 'utf8');
  const args = controllerArgs(cluster.kubeconfigPath, tls, 'controller-0');
  await sleep(1_000); // a baseline sample before the controller exists
  log('starting the controller');
  const profileDir = join(resources.dir, 'prof');
  const spawnAt = performance.now();
  const spawnDate = Date.now();
  mkdirSync(profileDir, { recursive: true });
  const controller = await startSwitchyard(args, {
    timeoutMs: 60_000,
    env: flags.controllerEnv,
    nodeArgs: [
      ...flags.nodeArgs,
      ...(flags.profile ? ['--cpu-prof', '--cpu-prof-dir', profileDir] : []),
    ],
  });
  resources.controllerPid = controller.pid;
  resources.hold(() => controller.stop(5_000).catch(() => undefined));
  sampler.controllerPid = controller.pid;
  const nodeFlags = (() => {
    try {
      const argv = readFileSync(`/proc/${controller.pid}/cmdline`, 'utf8').split('\0');
      const script = argv.findIndex((a) => a.endsWith('switchyard.js'));
      return argv.slice(1, script === -1 ? 1 : script).filter((a) => !a.includes('/'));
    } catch {
      return [];
    }
  })();
  // The controller's connections to the API server: every 100 ms while syncing, then every 1 s.
  const probe = new ConnectionProbe(controller.pid, Number(new URL(cluster.server).port));
  probe.sample();
  probe.start(100);
  const listeningMs = performance.now() - spawnAt;
  const scrape = async (): Promise<Map<string, number>> =>
    parseMetrics(await (await fetch(`${controller.adminUrl}/metrics`)).text());
  const memory: MemoryPoint[] = [];
  /** What the controller's RSS is made of now: /proc and its own heap metrics. */
  const memoryPoint = async (at: string): Promise<void> => {
    const metrics = await scrape();
    const mb = (name: string): number | null => {
      const v = metrics.get(`switchyard_controller_process_${name}`);
      return v === undefined ? null : Math.round((v / 2 ** 20) * 10) / 10;
    };
    const parts = rssParts(controller.pid);
    const r1 = (v: number | undefined): number | null =>
      v === undefined ? null : Math.round(v * 10) / 10;
    memory.push({
      at,
      tSeconds: Math.round((performance.now() - spawnAt) / 100) / 10,
      rssMb: r1(memoryMb(controller.pid)?.rss),
      anonMb: r1(parts?.anon),
      fileMb: r1(parts?.file),
      heapTotalMb: mb('nodejs_heap_size_total_bytes'),
      heapUsedMb: mb('nodejs_heap_size_used_bytes'),
      externalMb: mb('nodejs_external_memory_bytes'),
      streams: metrics.get('switchyard_controller_connected_sidecars') ?? null,
      heapSpacesMb: Object.fromEntries(
        [...metrics]
          .flatMap(([key, v]) => {
            const m =
              /^switchyard_controller_process_nodejs_heap_space_size_(total|used)_bytes\{space="([^"]+)"\}$/.exec(
                key,
              );
            return m === null ? [] : [[`${m[2]} ${m[1]}`, Math.round((v / 2 ** 20) * 10) / 10]];
          })
          .sort(),
      ) as Record<string, number>,
    });
  };
  await memoryPoint('listening, no subscriber yet');
  return {
    process: controller,
    spawnAt,
    spawnDate,
    listeningMs,
    // What the results record of the command: the flags after the kubeconfig and certificate.
    flags: args.slice(args.indexOf('--listen')),
    nodeFlags,
    ca,
    profileDir,
    watch,
    probe,
    memory,
    scrape,
    memoryPoint,
  };
}
