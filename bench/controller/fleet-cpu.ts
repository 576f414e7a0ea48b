/**
 * Where a fleet stage's CPU went, process group by process group: the controller replicas, the
 * API server, etcd, the subscriber hosts, the full sidecars, the bench itself, and the machine.
 * Every process of the fleet bench shares one machine, so a stage that takes long on it may be
 * waiting for the replicas or for the subscribers' own side of the work (TLS, parsing); this
 * says which. Also the API server's own time per TokenReview over the stage.
 */
import { cpuSeconds, machineCpuSeconds } from '../../harness/proc.ts';
import type { Replica } from './fleet-replicas.ts';
import { parseMetrics } from './report.ts';
import type { ApiServer } from './setup.ts';

/** Cumulative CPU seconds per pid, read at one moment. */
export interface CpuReading {
  atMs: number;
  byPid: Map<number, number>;
  groups: Record<CpuGroup, number[]>;
  machineTasks: number | undefined;
  machineIrq: number | undefined;
  /** The API server's request-duration sum and count for POST tokenreviews. */
  reviews: { seconds: number; count: number } | undefined;
}

type CpuGroup = 'replicas' | 'apiServer' | 'etcd' | 'hosts' | 'sidecars' | 'bench';

export interface CpuPids {
  apiServer: number | undefined;
  etcd: number | undefined;
  fleet: { hosts: number[]; sidecars: number[] };
}

export async function readCpu(
  server: ApiServer,
  pids: CpuPids,
  replicas: readonly Replica[],
): Promise<CpuReading> {
  const byPid = new Map<number, number>();
  const groups: Record<CpuGroup, number[]> = {
    replicas: replicas.filter((r) => r.alive).map((r) => r.process.pid),
    apiServer: pids.apiServer === undefined ? [] : [pids.apiServer],
    etcd: pids.etcd === undefined ? [] : [pids.etcd],
    hosts: pids.fleet.hosts,
    sidecars: pids.fleet.sidecars,
    bench: [process.pid],
  };
  for (const list of Object.values(groups))
    for (const pid of list) {
      const s = cpuSeconds(pid === process.pid ? 'self' : pid);
      if (s !== undefined) byPid.set(pid, s);
    }
  const machine = machineCpuSeconds();
  return {
    atMs: performance.now(),
    byPid,
    groups,
    machineTasks: machine?.tasks,
    machineIrq: machine?.irq,
    reviews: await tokenReviewSeconds(server).catch(() => undefined),
  };
}

/**
 * CPU between two readings in % of one core, per group (summed over the group's processes alive
 * at the second reading, from their start when they started meanwhile; a killed replica's last
 * seconds are not charged), the machine's processes and interrupts, and the API server's mean
 * time per TokenReview meanwhile.
 */
export function cpuBetween(before: CpuReading, after: CpuReading) {
  const seconds = (after.atMs - before.atMs) / 1000;
  const pct = (s: number) => Math.round((s / seconds) * 1000) / 10;
  const groups: Record<string, number> = {};
  for (const [group, pids] of Object.entries(after.groups)) {
    let sum = 0;
    for (const pid of pids) {
      const a = after.byPid.get(pid);
      // A process started during the stage spent all its CPU in it.
      if (a !== undefined) sum += a - (before.byPid.get(pid) ?? 0);
    }
    groups[group] = pct(sum);
  }
  const reviews =
    before.reviews !== undefined && after.reviews !== undefined
      ? {
          count: after.reviews.count - before.reviews.count,
          meanMs:
            after.reviews.count > before.reviews.count
              ? Math.round(
                  ((after.reviews.seconds - before.reviews.seconds) /
                    (after.reviews.count - before.reviews.count)) *
                    10_000,
                ) / 10
              : null,
        }
      : null;
  return {
    seconds: Math.round(seconds * 10) / 10,
    pctOfOneCore: groups,
    machineTasksPct:
      before.machineTasks === undefined || after.machineTasks === undefined
        ? null
        : pct(after.machineTasks - before.machineTasks),
    machineIrqPct:
      before.machineIrq === undefined || after.machineIrq === undefined
        ? null
        : pct(after.machineIrq - before.machineIrq),
    apiServerTokenReviews: reviews,
  };
}

/** `apiserver_request_duration_seconds` sum and count for POST tokenreviews. */
async function tokenReviewSeconds(server: ApiServer): Promise<{ seconds: number; count: number }> {
  const res = await server.api.request('GET', '/metrics');
  let seconds = 0;
  let count = 0;
  for (const [key, value] of parseMetrics(res.text)) {
    if (!key.includes('verb="POST"') || !key.includes('resource="tokenreviews"')) continue;
    if (key.startsWith('apiserver_request_duration_seconds_sum{')) seconds += value;
    else if (key.startsWith('apiserver_request_duration_seconds_count{')) count += value;
  }
  return { seconds, count };
}
