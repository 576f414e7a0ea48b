/**
 * The fleet bench's rolling-restart stage (issue 46): one pool whose Service has `--rolling-restart`
 * endpoints over EndpointSlices of at most 100, followed by `--rolling-subscribers` extra clients
 * in subscriber hosts of their own; a Deployment rolling restart replayed as EndpointSlice writes
 * (rollout-plan.ts), one step every `--rolling-step-ms`. Measures per subscriber the snapshots
 * applied and the bytes of their events during the restart (fleet-host.ts' counters), the time
 * until every subscriber holds the final endpoint list, and per replica the snapshots published
 * and its CPU.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { BACKEND, mintTokens, paths, PORT, type PoolFixture } from './fixture.ts';
import { keyDigest } from './fleet-digest.ts';
import type { FleetFlags } from './fleet-flags.ts';
import { readReplicas, type Replica } from './fleet-replicas.ts';
import { epochMs, Fleet } from './fleet-subscribers.ts';
import { parseMetrics } from './report.ts';
import { loadAverage } from './resources.ts';
import {
  applyStep,
  initialSlices,
  readyIps,
  rolloutSteps,
  waveSize,
  type Slice,
  type SliceWrite,
} from './rollout-plan.ts';
import { log, type ApiServer } from './setup.ts';

const NAME = 'rolling';
const SERVICE = `svc-${NAME}`;

/** The `i`-th address of 10.201.0.0/16, apart from the other pools' 10.200.0.0/16. */
function rollingAddress(i: number): string {
  const third = Math.floor(i / 254);
  if (third > 255) throw new RangeError('out of addresses in 10.201.0.0/16');
  return `10.201.${third}.${(i % 254) + 1}`;
}

/** The endpoint ids the pool's snapshot holds for these ready addresses, as a digest. */
const digestOf = (ips: readonly string[]): string =>
  keyDigest(
    ips
      .map((ip) => `${BACKEND}/${ip}:${PORT}`)
      .sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))
      .join(','),
  );

function sliceObject(namespace: string, slice: Slice): unknown {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: {
      name: slice.name,
      namespace,
      labels: {
        'kubernetes.io/service-name': SERVICE,
        'endpointslice.kubernetes.io/managed-by': 'endpointslice-controller.k8s.io',
      },
    },
    addressType: 'IPv4',
    endpoints: slice.pods.map((p) => ({
      addresses: [p.ip],
      // A draining pod still passing its readiness probe: serving, not ready, terminating.
      conditions: { ready: p.ready, serving: p.ready || p.terminating, terminating: p.terminating },
    })),
    ports: [{ name: 'http', port: PORT, protocol: 'TCP' }],
  };
}

async function write(server: ApiServer, namespace: string, w: SliceWrite): Promise<void> {
  const base = paths.slices(namespace);
  if (w.op === 'create') await server.api.must('POST', base, sliceObject(namespace, w.slice));
  else if (w.op === 'update')
    await server.api.must('PUT', `${base}/${w.slice.name}`, sliceObject(namespace, w.slice), [200]);
  else await server.api.must('DELETE', `${base}/${w.slice.name}`, undefined, [200]);
}

async function published(replicas: readonly Replica[]): Promise<number[]> {
  return Promise.all(
    replicas
      .filter((r) => r.alive)
      .map(async (r) => {
        const text = await (await fetch(`${r.process.adminUrl}/metrics`)).text();
        return parseMetrics(text).get('switchyard_controller_snapshots_published_total') ?? 0;
      }),
  );
}

const r1 = (v: number): number => Math.round(v * 10) / 10;

export async function rollingRestart(opts: {
  flags: FleetFlags;
  server: ApiServer;
  namespace: string;
  replicas: Replica[];
  dir: string;
  caFile: string;
  hold: (release: () => Promise<unknown>) => void;
  dist: (values: readonly number[]) => unknown;
}): Promise<Record<string, unknown>> {
  const { flags, server, namespace, replicas, caFile, dist } = opts;
  const n = flags.rollingRestart;
  const dir = join(opts.dir, 'rolling');
  mkdirSync(dir, { recursive: true });
  const oldIps = Array.from({ length: n }, (_, i) => rollingAddress(i));
  const newIps = Array.from({ length: n }, (_, i) => rollingAddress(n + i));
  const slices = initialSlices(SERVICE, oldIps);

  log(`rolling restart: a pool of ${n} endpoints in ${slices.length} EndpointSlice(s)`);
  await server.api.must('POST', paths.services(namespace), {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name: SERVICE, namespace },
    spec: { clusterIP: 'None', ports: [{ name: 'http', port: 80, targetPort: PORT }] },
  });
  for (const slice of slices) await write(server, namespace, { op: 'create', slice });
  await server.api.must('POST', paths.pools(namespace), {
    apiVersion: 'switchyard.dev/v1alpha1',
    kind: 'InferencePool',
    metadata: { name: NAME, namespace },
    spec: { backends: [{ name: BACKEND, service: { name: SERVICE, port: 'http' } }] },
  });
  const tokens = await mintTokens(server.api, server.cluster, namespace, flags.rollingSubscribers);
  const pool = { namespace, name: NAME } as PoolFixture;
  const fleet = new Fleet({ of: () => pool }, flags.rollingSubscribers, 0);
  opts.hold(() => fleet.stopAll());
  const all = fleet.subscribers.map((s) => s.index);
  const first = fleet.expect(all, () => digestOf(oldIps));
  const hosts = Math.ceil(flags.rollingSubscribers / 250);
  await fleet.startHosts(
    hosts,
    replicas.filter((r) => r.alive).map((r) => r.port),
    dir,
    caFile,
    flags.reportEveryS * 1000,
    (i) => {
      const file = join(dir, `token-${i}`);
      writeFileSync(file, tokens[i]!, { mode: 0o600 });
      return file;
    },
  );
  await Promise.race([
    first.done,
    sleep(flags.syncTimeoutMs, undefined, { ref: false }).then(() =>
      Promise.reject(new Error('rolling restart: the subscribers never got the initial snapshot')),
    ),
  ]);
  first.forget();
  await sleep(2_000);

  const steps = rolloutSteps(oldIps, newIps, flags.rollingBatch);
  const final = fleet.expect(all, () => digestOf(newIps));
  const countersBefore = await fleet.hostCounters();
  const cpuBefore = await readReplicas(replicas);
  const publishedBefore = await published(replicas);
  const loadBefore = loadAverage();
  log(`rolling restart: ${steps.length} steps, one every ${flags.rollingStepMs} ms`);
  const t0 = epochMs();
  let writes = 0;
  let readyChanges = 0;
  let lastWriteAt = t0;
  let lastChangeAt = t0;
  for (const step of steps) {
    const at = performance.now();
    const before = readyIps(slices).join(',');
    for (const w of applyStep(SERVICE, slices, step)) {
      await write(server, namespace, w);
      writes++;
    }
    lastWriteAt = epochMs();
    if (readyIps(slices).join(',') !== before) {
      readyChanges++;
      lastChangeAt = lastWriteAt;
    }
    await sleep(Math.max(0, at + flags.rollingStepMs - performance.now()));
  }
  const timedOut = await Promise.race([
    final.done.then(() => false),
    sleep(flags.timeoutMs, undefined, { ref: false }).then(() => true),
  ]);
  final.forget();
  // Late snapshots (another replica's, a coalesced write's) still count: let them land.
  await sleep(2_000);
  const seconds = (epochMs() - t0) / 1000;
  const countersAfter = await fleet.hostCounters();
  const cpuAfter = await readReplicas(replicas);
  const publishedAfter = await published(replicas);
  const perSub = all.map((i) => {
    const a = countersAfter.get(i) ?? [0, 0];
    const b = countersBefore.get(i) ?? [0, 0];
    return [a[0] - b[0], a[1] - b[1]] as const;
  });
  const arrivals = [...final.arrivals.values()];
  const result = {
    endpoints: n,
    slicesBefore: initialSlices(SERVICE, oldIps).length,
    slicesAfter: slices.length,
    wave: waveSize(n),
    batch: flags.rollingBatch,
    steps: steps.length,
    stepMs: flags.rollingStepMs,
    sliceWrites: writes,
    // Steps that changed the ready set: the most snapshots a subscriber can need.
    readySetChanges: readyChanges,
    replaySeconds: r1((lastWriteAt - t0) / 1000),
    subscribers: flags.rollingSubscribers,
    subscriberHosts: hosts,
    timedOut,
    allFinalAfterLastWriteMs: timedOut ? null : r1(Math.max(...arrivals) - lastWriteAt),
    allFinalAfterLastReadyChangeMs: timedOut ? null : r1(Math.max(...arrivals) - lastChangeAt),
    snapshotsPerSubscriber: dist(perSub.map((c) => c[0])),
    // Snapshot events only (SSE framing included; TLS, heartbeats and load/shares/placements
    // events not counted: load scraping is off in the bench, so none are sent anyway).
    kbPerSubscriber: dist(perSub.map((c) => c[1] / 1024)),
    replicas: cpuAfter.map((r, i) => ({
      identity: r.identity,
      snapshotsPublished: (publishedAfter[i] ?? 0) - (publishedBefore[i] ?? 0),
      cpuPct:
        r.cpuSeconds === undefined || cpuBefore[i]?.cpuSeconds === undefined
          ? null
          : r1(((r.cpuSeconds - cpuBefore[i].cpuSeconds) / seconds) * 100),
      connectedSidecars: r.connectedSidecars,
    })),
    cpuWindowSeconds: r1(seconds),
    loadBefore,
    loadAfter: loadAverage(),
  };
  log(`rolling restart: ${JSON.stringify(result)}`);
  await fleet.stopAll();
  return result;
}
