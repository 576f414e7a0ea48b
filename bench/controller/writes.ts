/**
 * The measured EndpointSlice writes: one at a time, then in bursts of concurrent writes, each
 * timed from just before the PUT until the last subscriber of its pool holds the change, and
 * split into the API server's share (the bench's own watch) and the controller's.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { memoryMb } from '../../harness/proc.ts';
import { mulberry32 } from '../../lib/rng.ts';
import {
  expectedKey,
  mutate,
  paths,
  sliceObject,
  type Change,
  type PoolFixture,
} from './fixture.ts';
import type { Flags } from './flags.ts';
import { distribution, type LatencyFigures } from './report.ts';
import { log, type ApiServer, type Pools, type RunningController } from './setup.ts';
import type { InitialSync } from './subscribe.ts';

/** One measured write. */
export interface WriteResult {
  pool: PoolFixture;
  change: Change;
  t0: number;
  ackMs: number;
  watchMs: number | undefined;
  /** ms after t0 at which each subscriber held the change (Infinity: not within the timeout). */
  arrivalsMs: number[];
  timedOut: boolean;
}

export interface Writes {
  /** Subscribers per pool index. */
  subscribersOf: Map<number, number>;
  burstSize: number;
  sequential: { writes: WriteResult[]; fromMs: number; toMs: number };
  bursts: { writes: WriteResult[]; completeMs: number[]; fromMs: number; toMs: number };
  /** The controller's /metrics before the measured writes, after the sequential ones, at the end. */
  metrics: {
    before: Map<string, number>;
    afterSequential: Map<string, number>;
    after: Map<string, number>;
  };
  /** The controller's RSS and peak RSS right after the writes. */
  endMemory: { rss: number; hwm: number } | undefined;
}

/** A seeded shuffle, so every run writes the pools in the same order. */
function shuffled<T>(items: readonly T[], seed: number): T[] {
  const random = mulberry32(seed);
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

export async function measureWrites(
  flags: Flags,
  server: ApiServer,
  pools: Pools,
  controller: RunningController,
  sync: InitialSync,
): Promise<Writes> {
  const { api, sampler } = server;
  const { watch, scrape } = controller;
  const subscribersOf = new Map<number, number>();
  for (let i = 0; i < flags.subscribers; i++) {
    const idx = pools.of(i).index;
    subscribersOf.set(idx, (subscribersOf.get(idx) ?? 0) + 1);
  }
  const order = shuffled(
    pools.all.filter((p) => subscribersOf.has(p.index)),
    42,
  );
  let cursor = 0;
  const nextPool = (): PoolFixture => order[cursor++ % order.length]!;
  const burstSize = Math.min(flags.burstSize, order.length);

  // Alternate the kind of change over all writes, so each kind is measured about as often.
  let writesMade = 0;
  const write = async (pool: PoolFixture): Promise<WriteResult> => {
    const change = mutate(pool, writesMade++ % 2 === 0 ? 'readiness' : 'address');
    const need = subscribersOf.get(pool.index) ?? 0;
    const p = sync.arrivals.expect(pool, expectedKey(pool), need);
    const res = await api.request<{ metadata?: { resourceVersion?: string } }>(
      'PUT',
      `${paths.slices(pool.namespace)}/${pool.slice}`,
      sliceObject(pool),
    );
    const ackMs = performance.now() - p.t0;
    if (res.status !== 200) throw new Error(`PUT ${pool.slice}: HTTP ${res.status}: ${res.text}`);
    let timer: NodeJS.Timeout | undefined;
    const timedOut = await Promise.race([
      p.done.then(() => false),
      new Promise<boolean>((r) => (timer = setTimeout(() => r(true), flags.timeoutMs))),
    ]);
    clearTimeout(timer);
    sync.arrivals.forget(pool);
    const rv = res.body.metadata?.resourceVersion ?? '';
    let watchAt = watch.deliveredAt(pool.namespace, pool.slice, rv);
    if (watchAt === undefined) {
      await sleep(100);
      watchAt = watch.deliveredAt(pool.namespace, pool.slice, rv);
    }
    const arrivalsMs = [...p.arrivals.values()];
    while (arrivalsMs.length < need) arrivalsMs.push(Infinity);
    return {
      pool,
      change,
      t0: p.t0,
      ackMs,
      watchMs: watchAt === undefined ? undefined : watchAt - p.t0,
      arrivalsMs,
      timedOut,
    };
  };

  log(`${flags.warmup} warm-up writes, then ${flags.rounds} measured, one at a time`);
  for (let i = 0; i < flags.warmup; i++) {
    await write(nextPool());
    await sleep(flags.gapMs);
  }
  const before = await scrape();
  const seqFrom = performance.now();
  const sequential: WriteResult[] = [];
  for (let i = 0; i < flags.rounds; i++) {
    sequential.push(await write(nextPool()));
    await sleep(flags.gapMs);
  }
  sampler.sample();
  const seqTo = performance.now();
  const afterSequential = await scrape();

  const burstGapMs = Math.max(1_000, flags.gapMs);
  const burstWrites: WriteResult[] = [];
  const burstComplete: number[] = [];
  let burstFrom = performance.now();
  if (flags.bursts > 0) {
    log(`1 warm-up burst, then ${flags.bursts} measured bursts of ${burstSize} writes at once`);
    const burst = (): Promise<WriteResult[]> =>
      Promise.all(Array.from({ length: burstSize }, () => nextPool()).map(write));
    await burst();
    await sleep(burstGapMs);
    burstFrom = performance.now();
    for (let i = 0; i < flags.bursts; i++) {
      const results = await burst();
      burstWrites.push(...results);
      const first = Math.min(...results.map((r) => r.t0));
      const last = Math.max(...results.map((r) => r.t0 + Math.max(...r.arrivalsMs)));
      burstComplete.push(last - first);
      await sleep(burstGapMs);
    }
  }
  sampler.sample();
  const burstTo = performance.now();
  const after = await scrape();
  const endMemory = memoryMb(controller.process.pid);
  controller.probe.sample();
  controller.probe.stop();
  await controller.memoryPoint('after the writes');
  return {
    subscribersOf,
    burstSize,
    sequential: { writes: sequential, fromMs: seqFrom, toMs: seqTo },
    bursts: { writes: burstWrites, completeMs: burstComplete, fromMs: burstFrom, toMs: burstTo },
    metrics: { before, afterSequential, after },
    endMemory,
  };
}

/** Latency figures of a set of writes (the last subscriber is the one the target is about). */
export function latencyFigures(writes: readonly WriteResult[]): LatencyFigures {
  const last = writes.map((w) => (w.timedOut ? Infinity : Math.max(...w.arrivalsMs)));
  const byChange: Record<string, number[]> = {};
  writes.forEach((w, i) => (byChange[w.change] ??= []).push(last[i]!));
  const shares = writes.flatMap((w, i) =>
    w.watchMs === undefined || w.timedOut ? [] : [last[i]! - w.watchMs],
  );
  return {
    writes: writes.length,
    timeouts: writes.filter((w) => w.timedOut).length,
    writeAckMs: distribution(writes.map((w) => w.ackMs)),
    watchDeliveredMs: distribution(
      writes.flatMap((w) => (w.watchMs === undefined ? [] : [w.watchMs])),
    ),
    lastSubscriberMs: distribution(last),
    perSubscriberMs: distribution(writes.flatMap((w) => w.arrivalsMs)),
    controllerShareMs: distribution(shares),
    fanoutSpreadMs: distribution(
      writes.flatMap((w) =>
        w.timedOut ? [] : [Math.max(...w.arrivalsMs) - Math.min(...w.arrivalsMs)],
      ),
    ),
    byChange: Object.fromEntries(Object.entries(byChange).map(([k, v]) => [k, distribution(v)])),
  };
}
