/**
 * `npm run bench:controller-fleet`: the controller at fleet scale (issue 46, item 1), on the real
 * kube-apiserver + etcd. 1,000 pools by default; subscribers are the sidecar's own controller
 * client (stream, snapshot applier, reporter) run many per process in subscriber hosts, plus
 * optionally full sidecar processes of the compiled build; several controller replicas, each
 * host's connections spread over them round-robin (the Service's part). Measures:
 *
 *   - initial sync: hosts started → every subscriber applied its pool's current snapshot;
 *   - steady state: TokenReviews and writes per minute at the API server (its own counters),
 *     each replica's RSS and CPU;
 *   - an EndpointSlice write → every subscriber of that pool (p50/p99 per subscriber and of the
 *     last one), one write at a time;
 *   - a rolling restart of a `--rolling-restart`-replica Deployment, replayed as the EndpointSlice
 *     controller writes it, to one pool with subscribers of its own (fleet-rolling.ts);
 *   - a replica SIGKILLed: its subscribers reconnect to the others; the time until every one of
 *     them applied its pool's current snapshot again.
 *
 * Writes bench/results/controller-fleet.json; docs/benchmarks.md's section is written by hand
 * from it. `--help` for the flags.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { waitFor } from '../../harness/k8s/cluster.ts';
import { expectedKey, makeTls, mutate, paths, sliceObject } from './fixture.ts';
import { parseFleetFlags } from './fleet-flags.ts';
import { keyDigest } from './fleet-digest.ts';
import { cpuBetween, readCpu } from './fleet-cpu.ts';
import {
  apiRequestCounts,
  ratesPerMinute,
  readReplicas,
  startReplicas,
  type Replica,
} from './fleet-replicas.ts';
import { rollingRestart } from './fleet-rolling.ts';
import { epochMs, Fleet, type HostStats, type SubscriberState } from './fleet-subscribers.ts';
import { sumLogCounts } from './log-counts.ts';
import { loadAverage } from './resources.ts';
import { RunResources } from './run-resources.ts';
import { createPools, log, mintSubscriberTokens, startApiServer } from './setup.ts';

const pct = (values: readonly number[], p: number): number | null => {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return (
    Math.round(
      sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]! * 10,
    ) / 10
  );
};
const dist = (values: readonly number[]) => ({
  n: values.length,
  p50: pct(values, 50),
  p99: pct(values, 99),
  max: pct(values, 100),
});

async function main(): Promise<void> {
  const { fleet: flags, base } = parseFleetFlags();
  const startedAt = new Date().toISOString();
  const loadBefore = loadAverage();
  const resources = new RunResources();
  const results: Record<string, unknown> = { startedAt, flags, loadBefore };
  try {
    const server = await startApiServer(resources);
    const pools = await createPools(base, server);
    const tokens = await mintSubscriberTokens(base, server, pools);
    log(
      `pools created in ${Math.round(pools.createMs)} ms, tokens in ${Math.round(tokens.mintMs)} ms`,
    );
    const total = flags.clients + flags.sidecars;
    const tokenFiles: string[] = [];
    for (let i = 0; i < total; i++) {
      const file = join(resources.dir, `token-${i}`);
      writeFileSync(file, tokens.next(pools.of(i).namespace), { mode: 0o600 });
      tokenFiles.push(file);
    }
    const tls = makeTls(resources.dir);
    log(`starting ${flags.replicas} controller replicas`);
    const replicas = await startReplicas(
      flags.replicas,
      server,
      tls,
      flags.allocator,
      flags.cpuProfDir,
      flags.replicaNodeArgs,
    );
    resources.hold(() =>
      Promise.all(replicas.map((r) => r.process.stop(5_000).catch(() => undefined))),
    );
    const fleet = new Fleet(pools, flags.clients, flags.sidecars);
    if (flags.cpuProfDir !== undefined)
      fleet.hostNodeArgs = ['--cpu-prof', `--cpu-prof-dir=${join(flags.cpuProfDir, 'hosts')}`];
    resources.hold(() => fleet.stopAll());
    const want = (s: SubscriberState): string => keyDigest(expectedKey(s.pool));
    const cpuPids = {
      apiServer: server.sampler.apiServerPid,
      etcd: server.sampler.etcdPid,
      get fleet() {
        return fleet.pids;
      },
    };
    const cpuNow = () => readCpu(server, cpuPids, replicas);

    // Initial sync.
    const sync = fleet.expect(
      fleet.subscribers.map((s) => s.index),
      want,
    );
    const t0 = epochMs();
    const syncCpu = await cpuNow();
    log(`${flags.clients} clients in ${flags.hosts} hosts, ${flags.sidecars} full sidecars`);
    await fleet.startHosts(
      flags.hosts,
      replicas.map((r) => r.port),
      resources.dir,
      tls.caFile,
      flags.reportEveryS * 1000,
      (i) => tokenFiles[i]!,
    );
    const hostsUpMs = epochMs() - t0;
    if (flags.sidecars > 0) {
      // The full sidecars go through a forwarder of their own host's kind: the first host's.
      await fleet.startSidecars(
        `https://127.0.0.1:${fleet.forwarderPorts[0]!}`,
        resources.dir,
        tls.caFile,
        `${flags.reportEveryS}s`,
        (i) => tokenFiles[i]!,
      );
    }
    // Progress every 30 s: how many hold their snapshot, the replicas' streams, and the hosts'
    // connections (handed so far, ended by which side) and event-loop delay over the 30 s.
    const progress = setInterval(() => {
      void Promise.all([readReplicas(replicas), fleet.hostProgress()]).then(([rs, hs]) => {
        const sum = (f: (h: HostStats) => number): number => hs.reduce((n, h) => n + f(h), 0);
        const logsOf = hs.map((h) => h.logs);
        log(
          `synced ${sync.arrivals.size}/${total}; streams ${rs.map((r) => r.connectedSidecars ?? '?').join(' + ')}; RSS ${rs.map((r) => Math.round(r.rssMb ?? 0)).join(' / ')} MB; ` +
            `hosts: connected ${sum((h) => h.connected)}, handed ${sum((h) => h.handed.reduce((a, b) => a + b, 0))}, ended by replica ${sum((h) => h.closedFirstBy.replica)} / subscriber ${sum((h) => h.closedFirstBy.subscriber)}, loop delay max ${Math.max(...hs.map((h) => h.loopDelayMs.maxMs))} ms; load ${loadAverage()}; ` +
            `warnings ${JSON.stringify(sumLogCounts(logsOf, /^warn/))}; waits ${JSON.stringify(sumLogCounts(logsOf, /waiting$/))}`,
        );
      });
    }, 30_000);
    try {
      // The timeouts are unref'd: a race already won must not keep the bench alive.
      await Promise.race([
        sync.done,
        fleet.lost,
        sleep(flags.syncTimeoutMs, undefined, { ref: false }).then(() =>
          Promise.reject(
            new Error(
              `initial sync: ${total - sync.arrivals.size} of ${total} subscribers had no snapshot after ${flags.syncTimeoutMs / 60_000} min`,
            ),
          ),
        ),
      ]);
    } finally {
      clearInterval(progress);
    }
    sync.forget();
    const syncMs = Math.max(...sync.arrivals.values()) - t0;
    log(`initial sync: ${Math.round(syncMs)} ms`);
    results.initialSync = {
      subscribers: total,
      hostsStartedMs: Math.round(hostsUpMs),
      allSyncedMs: Math.round(syncMs),
      perSubscriberMs: dist([...sync.arrivals.values()].map((at) => at - t0)),
      // The full sidecars start after every host, a few at a time: their share apart.
      clientsMs: dist(
        [...sync.arrivals].flatMap(([i, at]) =>
          fleet.subscribers[i]!.kind === 'client' ? [at - t0] : [],
        ),
      ),
      fullSidecarsMs: dist(
        [...sync.arrivals].flatMap(([i, at]) =>
          fleet.subscribers[i]!.kind === 'sidecar' ? [at - t0] : [],
        ),
      ),
      load: loadAverage(),
      cpu: cpuBetween(syncCpu, await cpuNow()),
      replicasAfter: await readReplicas(replicas),
      ...(await hostsReading(fleet)),
      replicaLogs: replicaLogs(replicas),
    };

    // Steady state: reports only.
    await sleep(5_000);
    log(`steady state: ${flags.steadySeconds} s`);
    const before = await apiRequestCounts(server);
    const cpuBefore = await readReplicas(replicas);
    const steadyCpu = await cpuNow();
    const sFrom = performance.now();
    await sleep(flags.steadySeconds * 1000);
    const seconds = (performance.now() - sFrom) / 1000;
    const after = await apiRequestCounts(server);
    const cpuAfter = await readReplicas(replicas);
    const rates = ratesPerMinute(before, after, seconds);
    results.steadyState = {
      seconds: Math.round(seconds),
      load: loadAverage(),
      apiServerWritesPerMinute: rates,
      tokenReviewsPerMinute: rates['POST tokenreviews'] ?? 0,
      cpu: cpuBetween(steadyCpu, await cpuNow()),
      reportWritesPerMinute: Object.entries(rates)
        .filter(([k]) => /leases|inferencepools/.test(k))
        .reduce((n, [, v]) => n + v, 0),
      replicas: cpuAfter.map((r, i) => ({
        ...r,
        cpuPct:
          r.cpuSeconds === undefined || cpuBefore[i]?.cpuSeconds === undefined
            ? null
            : Math.round(((r.cpuSeconds - cpuBefore[i].cpuSeconds) / seconds) * 1000) / 10,
      })),
      ...(await hostsReading(fleet)),
    };

    // Writes, one at a time.
    const byPool = new Map<number, number[]>();
    for (const s of fleet.subscribers)
      byPool.set(s.pool.index, [...(byPool.get(s.pool.index) ?? []), s.index]);
    const written = [...byPool.keys()];
    const withSidecar = [
      ...new Set(fleet.subscribers.filter((s) => s.kind === 'sidecar').map((s) => s.pool.index)),
    ];
    const writes: {
      pool: string;
      need: number;
      perSubscriberMs: number[];
      lastMs: number;
      timedOut: boolean;
    }[] = [];
    const sidecarMs: number[] = [];
    log(`${flags.rounds} writes one at a time`);
    for (let r = 0; r < flags.rounds; r++) {
      // Every other write to a pool a full sidecar follows, when there are some.
      const from = r % 2 === 1 && withSidecar.length > 0 ? withSidecar : written;
      const pool = pools.all[from[(r * 7919) % from.length]!]!;
      mutate(pool, r % 2 === 0 ? 'readiness' : 'address');
      const need = byPool.get(pool.index)!;
      const w = fleet.expect(need, want);
      const w0 = epochMs();
      const res = await server.api.request(
        'PUT',
        `${paths.slices(pool.namespace)}/${pool.slice}`,
        sliceObject(pool),
      );
      if (res.status !== 200) throw new Error(`PUT ${pool.slice}: HTTP ${res.status}: ${res.text}`);
      const timedOut = await Promise.race([
        w.done.then(() => false),
        sleep(flags.timeoutMs, undefined, { ref: false }).then(() => true),
      ]);
      w.forget();
      const per = [...w.arrivals.values()].map((at) => at - w0);
      for (const [i, at] of w.arrivals)
        if (fleet.subscribers[i]!.kind === 'sidecar') sidecarMs.push(at - w0);
      writes.push({
        pool: pool.name,
        need: need.length,
        perSubscriberMs: per,
        lastMs: timedOut ? Infinity : Math.max(...per),
        timedOut,
      });
      await sleep(flags.gapMs);
    }
    results.writes = {
      writes: writes.length,
      timeouts: writes.filter((w) => w.timedOut).length,
      subscribersPerPool: dist(writes.map((w) => w.need)),
      perSubscriberMs: dist(writes.flatMap((w) => w.perSubscriberMs)),
      lastSubscriberMs: dist(writes.map((w) => w.lastMs)),
      // The full sidecars' times come from their log lines (ms resolution).
      fullSidecarMs: dist(sidecarMs),
      load: loadAverage(),
    };
    log(`writes: ${JSON.stringify(results.writes)}`);

    if (flags.rollingRestart > 0)
      results.rollingRestart = await rollingRestart({
        flags,
        server,
        namespace: pools.all[0]!.namespace,
        replicas,
        dir: resources.dir,
        caFile: tls.caFile,
        hold: (release) => resources.hold(release),
        dist,
      });

    // A replica killed.
    if (flags.kill) {
      const victim = replicas[0]!;
      const connectedBefore = (await readReplicas([victim]))[0]?.connectedSidecars;
      fleet.arm();
      await sleep(200);
      const killCpu = await cpuNow();
      const killApiBefore = await apiRequestCounts(server);
      const k0 = epochMs();
      log(`SIGKILL ${victim.identity} (${connectedBefore} sidecars connected)`);
      await victim.process.kill();
      victim.alive = false;
      const clients = fleet.subscribers.filter((s) => s.kind === 'client');
      let recovered = true;
      try {
        await waitFor(
          "every dropped subscriber to apply its pool's current snapshot again",
          () => {
            const dropped = clients.filter((s) => s.droppedAt !== undefined);
            return (
              dropped.length > 0 &&
              dropped.every((s) => s.afterSince !== undefined && s.digest === want(s))
            );
          },
          { timeoutMs: flags.timeoutMs, intervalMs: 50 },
        );
        // Late drops: the heartbeat timeout is not involved (the socket closes), but be sure.
        await sleep(1_000);
      } catch {
        recovered = false;
      }
      const killSeconds = (epochMs() - k0) / 1000;
      const killApi = ratesPerMinute(killApiBefore, await apiRequestCounts(server), killSeconds);
      const dropped = clients.filter((s) => s.droppedAt !== undefined);
      const back = dropped.flatMap((s) => (s.afterSince === undefined ? [] : [s.afterSince - k0]));
      results.kill = {
        victim: victim.identity,
        connectedBefore,
        droppedSubscribers: dropped.length,
        recovered,
        allCurrentMs: recovered ? Math.round(Math.max(...back)) : null,
        perSubscriberMs: dist(back),
        cpu: cpuBetween(killCpu, await cpuNow()),
        // The API server's writes (and TokenReviews) a minute over the kill's window.
        apiServerWritesPerMinute: killApi,
        survivors: await readReplicas(replicas),
        ...(await hostsReading(fleet)),
        replicaLogs: replicaLogs(replicas),
        load: loadAverage(),
      };
      log(`kill: ${JSON.stringify(results.kill)}`);
    }
    results.loadAfter = loadAverage();
    results.finishedAt = new Date().toISOString();
    writeFileSync(flags.out, JSON.stringify(results, null, 2) + '\n');
    log(`results: ${flags.out}`);
  } finally {
    await resources.releaseAll();
  }
}

/**
 * The hosts' readings (without their log counts) and their log lines summed over all hosts:
 * what the subscribers said, counted by message, since they started.
 */
async function hostsReading(
  fleet: Fleet,
): Promise<{ hosts: HostStats[]; hostLogs: Record<string, number> }> {
  const hosts = await fleet.hostStats();
  return {
    hosts: hosts.map(({ logs: _, ...rest }) => rest),
    hostLogs: sumLogCounts(hosts.map((h) => h.logs)),
  };
}

/** Each replica's warnings and errors so far, counted by message. */
function replicaLogs(replicas: readonly Replica[]): Record<string, Record<string, number>> {
  return Object.fromEntries(replicas.map((r) => [r.identity, r.logs.toJSON()]));
}

await main();
