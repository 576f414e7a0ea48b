/**
 * (e) A CPU profile of the sidecar's hot path, and of the bare passthrough for contrast: a
 * closed loop against a proxy started under `--cpu-prof`, the measured pass only summarised.
 * The raw profiles go to bench/results/overhead-*.cpuprofile (not committed).
 */
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, readdirSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { cpuSeconds } from '../../harness/proc.ts';
import { summariseProfile } from '../common/cpu-profile.ts';
import { startNodeScript, tempDir } from '../common/peers.ts';
import { REPO } from '../common/repo.ts';
import type { Flags } from './flags.ts';
import { closedLoop } from './load.ts';
import { label, type Results } from './report.ts';
import {
  BARE_PROXY_SCRIPT,
  firstReason,
  log,
  startSidecar,
  wants,
  type OverheadRun,
} from './setup.ts';

const RESULTS_DIR = join(REPO, 'bench/results');

export async function profileProxies(run: OverheadRun): Promise<void> {
  const { flags, results, poolFile, backend } = run;
  if (flags.profileSeconds <= 0) return;
  if (results.targets.sidecar?.skipped === undefined && wants(flags, 'sidecar')) {
    results.profile.sidecar = await profileOne(
      'sidecar',
      (dir) => startSidecar(poolFile, ['--cpu-prof', `--cpu-prof-dir=${dir}`]),
      flags,
      backend.pid,
    ).catch((err: unknown) => ({ skipped: firstReason((err as Error).message) }));
  }
  if (results.targets.bare?.skipped === undefined && wants(flags, 'bare')) {
    results.profile.bare = await profileOne(
      'bare',
      (dir) =>
        startNodeScript('bare', BARE_PROXY_SCRIPT, ['--target', backend.url], {
          nodeArgs: ['--cpu-prof', `--cpu-prof-dir=${dir}`],
        }),
      flags,
      backend.pid,
    ).catch((err: unknown) => ({ skipped: firstReason((err as Error).message) }));
  }
}

/** Sets the CPU affinity of every thread of `pid` (taskset); false when that is not possible. */
function pin(pid: number, cpus: string): boolean {
  try {
    execFileSync('taskset', ['-a', '-p', '-c', cpus, String(pid)], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

async function profileOne(
  name: string,
  start: (dir: string) => Promise<{ url: string; pid: number; stop: () => Promise<unknown> }>,
  flags: Flags,
  backendPid: number,
): Promise<Results['profile'][string]> {
  const dir = tempDir(`prof-${name}`);
  const proc = await start(dir);
  let window: { fromUs: number; toUs: number } | undefined;
  let requests: number | undefined;
  let cpuUsPerRequest: number | undefined;
  // V8 samples wall time: a proxy that waits for a core is charged to the frame it was preempted
  // in (mostly a syscall). Pinning the proxy to a core of its own keeps that out of its profile.
  const cpus = os.cpus().length;
  const all = `0-${cpus - 1}`;
  const pinned =
    flags.pin &&
    cpus >= 2 &&
    pin(proc.pid, String(cpus - 1)) &&
    pin(backendPid, '0') &&
    pin(process.pid, '0');
  try {
    await closedLoop(proc.url, flags.profileConcurrency, flags.warmupSeconds * 1000 || 500);
    const from = process.hrtime.bigint();
    const cpuBefore = cpuSeconds(proc.pid);
    const loop = await closedLoop(proc.url, flags.profileConcurrency, flags.profileSeconds * 1000);
    const cpuAfter = cpuSeconds(proc.pid);
    // Only the measured pass counts: start-up, module loading and the warm-up are left out.
    window = {
      fromUs: Number(from / 1000n),
      toUs: Number(from / 1000n) + flags.profileSeconds * 1e6,
    };
    requests = loop.completed;
    if (cpuBefore !== undefined && cpuAfter !== undefined && loop.completed > 0)
      cpuUsPerRequest = Math.round(((cpuAfter - cpuBefore) * 1e6) / loop.completed);
    log(
      `profiled ${label(name)}${pinned ? ` (pinned to CPU ${cpus - 1})` : ''}: ${loop.rps} req/s, ${cpuUsPerRequest ?? '?'} µs CPU/req`,
    );
  } finally {
    if (pinned) {
      pin(process.pid, all);
      pin(backendPid, all);
    }
    await proc.stop();
  }
  const file = readdirSync(dir).find((f) => f.endsWith('.cpuprofile'));
  if (file === undefined) return { skipped: `no .cpuprofile written in ${dir}` };
  mkdirSync(RESULTS_DIR, { recursive: true });
  const kept = join(RESULTS_DIR, `overhead-${name}.cpuprofile`);
  copyFileSync(join(dir, file), kept);
  const summary = summariseProfile(kept, REPO, { top: 20, window, requests });
  summary.file = kept.slice(REPO.length);
  summary.cpuUsPerRequest = cpuUsPerRequest;
  summary.pinned = pinned
    ? `proxy on CPU ${cpus - 1}; bench client and backend on CPU 0`
    : 'not pinned';
  return summary;
}
