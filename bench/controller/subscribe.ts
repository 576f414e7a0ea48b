/**
 * The simulated sidecars: subscribers connecting to the controller's stream (the initial sync),
 * the idle window that follows, and disconnecting them all at the end.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { waitFor } from '../../harness/k8s/cluster.ts';
import type { PoolFixture } from './fixture.ts';
import type { Flags } from './flags.ts';
import type { RunResources } from './run-resources.ts';
import { log, type ApiServer, type Pools, type RunningController, type Tokens } from './setup.ts';
import { Subscriber } from './subscribers.ts';

/** A write waiting for every subscriber of its pool to hold the change. */
interface Pending {
  expected: string;
  t0: number;
  arrivals: Map<string, number>;
  need: number;
  resolve: () => void;
}

/** When each subscriber of a written pool got the snapshot with the change. */
export class Arrivals {
  private readonly pending = new Map<number, Pending>();

  /** Called by every subscriber with every snapshot it receives. */
  readonly onSnapshot = (s: Subscriber, at: number): void => {
    const p = this.pending.get(s.pool.index);
    if (p === undefined || s.key !== p.expected || p.arrivals.has(s.id)) return;
    p.arrivals.set(s.id, at - p.t0);
    if (p.arrivals.size === p.need) p.resolve();
  };

  /**
   * Starts waiting for `need` subscribers of `pool` to hold the endpoint set `expected` (t0 is
   * now); `done` resolves once they all do.
   */
  expect(
    pool: PoolFixture,
    expected: string,
    need: number,
  ): { t0: number; arrivals: Map<string, number>; done: Promise<void> } {
    let resolve!: () => void;
    const done = new Promise<void>((r) => (resolve = r));
    const p: Pending = { expected, t0: 0, arrivals: new Map(), need, resolve };
    this.pending.set(pool.index, p);
    p.t0 = performance.now();
    return { t0: p.t0, arrivals: p.arrivals, done };
  }

  forget(pool: PoolFixture): void {
    this.pending.delete(pool.index);
  }
}

export interface InitialSync {
  subscribers: Subscriber[];
  arrivals: Arrivals;
  /** When the last subscriber held its first snapshot. */
  syncedAt: number;
  /** From spawn to the controller's "caches synced" log line. */
  cachesSyncedMs: number | undefined;
  /** Answers other than 200 while connecting, by reason. */
  refusals: Record<string, number>;
}

/** Every subscriber connects (token-cache primers first with --prime-tokens) and gets a snapshot. */
export async function connectSubscribers(
  flags: Flags,
  pools: Pools,
  tokens: Tokens,
  controller: RunningController,
  resources: RunResources,
): Promise<InitialSync> {
  const arrivals = new Arrivals();
  const subscribers: Subscriber[] = [];
  resources.hold(() => {
    for (const s of subscribers) s.close();
  });
  for (let i = 0; i < flags.subscribers; i++) {
    const pool = pools.of(i);
    subscribers.push(
      new Subscriber({
        index: i,
        pool,
        token: tokens.next(pool.namespace),
        baseUrl: controller.process.url,
        ca: controller.ca,
        reportEveryMs: flags.reportEveryMs,
        onSnapshot: arrivals.onSnapshot,
      }),
    );
  }
  if (flags.primeTokens) {
    // One subscriber per distinct token first, until it holds a snapshot: the controller's
    // token cache then answers every later connection without a TokenReview.
    const seen = new Set<string>();
    const primers = subscribers.filter((s) => !seen.has(s.token) && seen.add(s.token));
    log(`priming the controller's token cache with ${primers.length} subscribers`);
    for (const s of primers) s.start();
    await waitFor(
      'the priming subscribers to hold a first snapshot',
      () => primers.every((s) => s.firstSnapshotAt !== undefined),
      { timeoutMs: 120_000, intervalMs: 20 },
    );
    for (const s of subscribers) if (!primers.includes(s)) s.start();
  } else for (const s of subscribers) s.start();
  log(`${flags.subscribers} subscribers connecting to ${controller.process.url}`);
  await waitFor(
    'every subscriber to hold a first snapshot',
    () => subscribers.every((s) => s.firstSnapshotAt !== undefined),
    { timeoutMs: 120_000, intervalMs: 20 },
  );
  const syncedAt = Math.max(...subscribers.map((s) => s.firstSnapshotAt!));
  const cachesSyncedMs = controller.process
    .output()
    .split('\n')
    .flatMap((line) => {
      if (!line.includes('caches synced')) return [];
      try {
        return [(JSON.parse(line) as { time: number }).time - controller.spawnDate];
      } catch {
        return [];
      }
    })[0];
  const refusals: Record<string, number> = {};
  for (const s of subscribers)
    for (const [k, v] of Object.entries(s.refusals)) refusals[k] = (refusals[k] ?? 0) + v;
  log(`initial sync: ${Math.round(syncedAt - controller.spawnAt)} ms`);
  await controller.memoryPoint('initial sync done');
  return { subscribers, arrivals, syncedAt, cachesSyncedMs, refusals };
}

export interface IdleWindow {
  fromMs: number;
  toMs: number;
  /** The controller's connections to the API server until 2 s after the sync. */
  connectionsAtSync: { opened: number; maxOpen: number };
}

/** Streams open, nothing written: only the subscribers' reports. */
export async function idleWindow(
  flags: Flags,
  server: ApiServer,
  controller: RunningController,
): Promise<IdleWindow> {
  const { probe } = controller;
  await sleep(2_000);
  probe.sample();
  const connectionsAtSync = { opened: probe.seen.size, maxOpen: probe.maxOpen };
  probe.start(1_000);
  const fromMs = performance.now();
  await sleep(flags.idleSeconds * 1000);
  server.sampler.sample();
  const toMs = performance.now();
  await controller.memoryPoint('after the idle window');
  return { fromMs, toMs, connectionsAtSync };
}

export interface SubscriberStats {
  connects: number;
  drops: number;
  snapshots: number;
  reports: { sent: number; ok: number; failed: number };
  refusals: Record<string, number>;
}

/** Closes every stream, then stops the controller; what the subscribers saw over the run. */
export async function disconnectAll(
  sync: InitialSync,
  controller: RunningController,
): Promise<SubscriberStats> {
  const { subscribers } = sync;
  const stats: SubscriberStats = {
    connects: subscribers.reduce((n, s) => n + s.connects, 0),
    drops: subscribers.reduce((n, s) => n + s.drops, 0),
    snapshots: subscribers.reduce((n, s) => n + s.snapshots, 0),
    reports: {
      sent: subscribers.reduce((n, s) => n + s.reports.sent, 0),
      ok: subscribers.reduce((n, s) => n + s.reports.ok, 0),
      failed: subscribers.reduce((n, s) => n + s.reports.failed, 0),
    },
    refusals: {},
  };
  for (const s of subscribers)
    for (const [k, v] of Object.entries(s.refusals))
      stats.refusals[k] = (stats.refusals[k] ?? 0) + v;
  for (const s of subscribers) s.close();
  log('stopping the controller');
  await controller.process.stop(15_000);
  return stats;
}
