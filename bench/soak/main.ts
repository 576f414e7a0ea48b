/**
 * `npm run bench:soak`: a bounded soak of one real sidecar in front of simulated backends, at a
 * steady open-loop rate with a share of the requests abandoned by the client at random points.
 * Every few seconds it samples the sidecar's RSS and heap (for their slope: a leak shows as a
 * steady climb, in MB per minute by least squares) and its event-loop delay. At the end the
 * sidecar must be back to no request in flight and no connection held. Writes
 * bench/results/soak.json.
 *
 * Not in `npm test`: it runs 10 minutes by default (`--duration 1h` for longer, `30s` to try it).
 */
import { balancePool, sidecarOn, type SidecarOnPool } from '../../harness/pool-file.ts';
import { startSim, stopAll, type RunningProcess } from '../../harness/processes.ts';
import { mulberry32 } from '../../lib/rng.ts';
import { parseFlags, type Flags } from './flags.ts';
import { assembleResults, writeResults } from './results.ts';
import { startSampling } from './samples.ts';
import { breakerOpenings, settle } from './settle.ts';
import { Workload } from './workload.ts';

async function main(): Promise<void> {
  const flags = parseFlags();
  const sims: RunningProcess[] = [];
  let fixture: SidecarOnPool | undefined;
  try {
    fixture = await startSidecarOnSims(flags, sims);
    const { sidecar } = fixture;
    const workload = new Workload(flags, mulberry32(flags.seed), sidecar.url);
    process.stderr.write(
      `soak: ${flags.rate} req/s for ${flags.durationMs / 1000} s, ${flags.abortFraction * 100} % aborted, ${flags.sims} sims\n`,
    );
    const sampling = await startSampling(flags, sims, sidecar, workload);
    await workload.offer(sampling.loadStarted);
    sampling.stop();
    const loadMs = performance.now() - sampling.loadStarted;
    await workload.drain();
    const after = await settle(sidecar);
    const results = assembleResults(
      flags,
      workload,
      sampling.samples,
      loadMs,
      after,
      breakerOpenings(sidecar),
    );
    writeResults(flags, results);
    if (workload.counts.failed > 0 || !after.settled || after.clientConnections > 0)
      process.exitCode = 1;
  } finally {
    await fixture?.stop();
    await stopAll(sims);
  }
}

/** `--sims` simulators (512 slots each) and a sidecar balancing over them. */
async function startSidecarOnSims(flags: Flags, sims: RunningProcess[]): Promise<SidecarOnPool> {
  for (let i = 0; i < flags.sims; i++)
    sims.push(await startSim(`s${i}`, ['--slots', '512', '--seed', String(i)]));
  return sidecarOn(
    balancePool(
      sims.map((s) => s.url),
      flags.health === undefined ? '' : `  health: ${flags.health}`,
    ),
    ['--log-level', 'warn'],
  );
}

await main();
