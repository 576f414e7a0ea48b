/**
 * `npm run bench:controller`: the controller at scale, on a real kube-apiserver + etcd.
 *
 * 200 pools × 20 endpoints (Services, EndpointSlices, InferencePools) and 500 light simulated
 * sidecars on the real HTTPS snapshot stream. Measures:
 *
 *   - initial sync: controller spawned → every subscriber holds its pool's first snapshot;
 *   - EndpointSlice write → the last subscriber of that pool holds a snapshot with the change
 *     (p50/p90/p99/max), one write at a time and in bursts of concurrent writes, split into the
 *     API server's share (a watch in the bench process) and the controller's;
 *   - the controller's RSS (VmRSS, VmHWM) and CPU per phase, next to kube-apiserver's, etcd's and
 *     everything else's on this 2-core machine; its own push-latency and reconcile histograms.
 *
 * Writes bench/results/controller.json and the Controller section at the end of
 * docs/benchmarks.md. `--help` for the flags.
 */
import { waitQuiet } from '../common/quiet.ts';
import { parseFlags } from './flags.ts';
import { loadAverage } from './resources.ts';
import { assembleResults, storeResults, summariseProfiles } from './results.ts';
import { RunResources } from './run-resources.ts';
import {
  createPools,
  log,
  mintSubscriberTokens,
  startApiServer,
  startController,
} from './setup.ts';
import { connectSubscribers, disconnectAll, idleWindow } from './subscribe.ts';
import { measureWrites } from './writes.ts';

async function main(): Promise<void> {
  const flags = parseFlags();
  const startedMs = performance.now();
  if (flags.waitQuietSeconds > 0)
    await waitQuiet(flags.waitQuietSeconds, { belowPct: 25, windows: 1, log });
  const loadBefore = loadAverage();
  const resources = new RunResources();
  try {
    const server = await startApiServer(resources);
    const pools = await createPools(flags, server);
    const tokens = await mintSubscriberTokens(flags, server, pools);
    const controller = await startController(flags, server, resources);
    const initial = await connectSubscribers(flags, pools, tokens, controller, resources);
    const quiet = await idleWindow(flags, server, controller);
    const writes = await measureWrites(flags, server, pools, controller, initial);
    const subscriberStats = await disconnectAll(initial, controller);
    const sliceWatchRestarts = controller.watch.restarts;
    const profiles = summariseProfiles(flags, controller, initial, quiet, writes);
    const results = assembleResults({
      flags,
      startedMs,
      loadBefore,
      server,
      pools,
      tokens,
      controller,
      initial,
      quiet,
      writes,
      subscriberStats,
      sliceWatchRestarts,
      profiles,
    });
    await storeResults(flags, results);
  } finally {
    await resources.releaseAll();
  }
}

await main();
