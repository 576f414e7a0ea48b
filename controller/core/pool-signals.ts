/**
 * The autoscaling signals of each pool (issue 44), as the leader exports them on its /metrics
 * (`switchyard_pool_*`): what the pool's model servers report (summed over the pool's servers)
 * and what its sidecars report of their demand (summed over the fleet), beside the pool's ready
 * endpoints. Pure: readings in, one row per pool out; and the compact form in which each replica
 * hands its part to the leader through its summary Lease (stream/replica-summary.ts).
 *
 * Whole pool, not one replica's share:
 * - Demand: each replica sums the reports of the sidecars subscribed to it (a disconnected one
 *   no longer counts); the leader adds the other live replicas' sums to its own. A sidecar is
 *   subscribed to one replica at a time, so nothing is counted twice.
 * - Servers: a replica scrapes every endpoint of each pool a sidecar of it is subscribed to
 *   (lib/load-scrape/), so one replica's reading covers the pool's servers; replicas are not
 *   added up. The leader takes its own when it scrapes the pool, else the other replica's that
 *   covers the most servers (relayed, so up to two summary periods older).
 */
import type { PoolDemand } from '../../crds/snapshot.ts';

/** The demand of a pool's sidecars, summed (rates per second, counts now). */
export type DemandSum = PoolDemand;

export const NO_DEMAND: DemandSum = Object.freeze({
  requestsPerSecond: 0,
  shedPerSecond: 0,
  queued: 0,
  held: 0,
});

/** The sum of sidecars' (or replicas') demand; one without a report (an older sidecar) adds 0. */
export function sumDemand(demands: Iterable<DemandSum | undefined>): DemandSum {
  let requestsPerSecond = 0;
  let shedPerSecond = 0;
  let queued = 0;
  let held = 0;
  for (const d of demands) {
    if (d === undefined) continue;
    requestsPerSecond += d.requestsPerSecond;
    shedPerSecond += d.shedPerSecond;
    queued += d.queued;
    held += d.held;
  }
  return { requestsPerSecond, shedPerSecond, queued, held };
}

/** One endpoint's latest load reading (a `load` event's entry), with the server it was read from. */
export interface ServerReading {
  /** The scraped server (its metrics URL): two endpoint ids of one server count once. */
  server: string;
  running?: number | undefined;
  waiting?: number | undefined;
  kvCacheUsage?: number | undefined;
}

/**
 * The load of a pool's servers. A field is absent when no server reports it: a sum over no
 * server would read as an idle pool when scraping fails, and an autoscaler would scale it down.
 */
export interface ServerLoad {
  /** Servers with a fresh reading. */
  servers: number;
  waiting?: number | undefined;
  running?: number | undefined;
  /** Mean and largest KV-cache use (0..1) over the servers that report it. */
  kvCacheMean?: number | undefined;
  kvCacheMax?: number | undefined;
}

/** The servers' readings summed; undefined when no server has one. */
export function summariseServers(readings: Iterable<ServerReading>): ServerLoad | undefined {
  const seen = new Set<string>();
  let waiting: number | undefined;
  let running: number | undefined;
  let kvSum = 0;
  let kvMax: number | undefined;
  let kvCount = 0;
  for (const r of readings) {
    if (seen.has(r.server)) continue;
    seen.add(r.server);
    if (r.waiting !== undefined) waiting = (waiting ?? 0) + r.waiting;
    if (r.running !== undefined) running = (running ?? 0) + r.running;
    if (r.kvCacheUsage !== undefined) {
      kvSum += r.kvCacheUsage;
      kvCount++;
      kvMax = Math.max(kvMax ?? 0, r.kvCacheUsage);
    }
  }
  if (seen.size === 0) return undefined;
  return {
    servers: seen.size,
    ...(waiting === undefined ? {} : { waiting }),
    ...(running === undefined ? {} : { running }),
    ...(kvCount === 0 ? {} : { kvCacheMean: kvSum / kvCount, kvCacheMax: kvMax }),
  };
}

/**
 * The pool's server load as the leader sees it: its own reading when it scrapes the pool, else
 * the relayed reading of the other replica that covers the most servers (the first of equals).
 */
export function chooseServerLoad(
  local: ServerLoad | undefined,
  remote: readonly ServerLoad[],
): ServerLoad | undefined {
  if (local !== undefined) return local;
  let best: ServerLoad | undefined;
  for (const r of remote) if (best === undefined || r.servers > best.servers) best = r;
  return best;
}

/** What one replica knows of one pool: its sidecars' demand, and the servers it scrapes. */
export interface ReplicaSignals {
  demand?: DemandSum | undefined;
  server?: ServerLoad | undefined;
}

/** One pool's row of gauges. */
export interface PoolSignals {
  key: string;
  readyEndpoints: number;
  demand: DemandSum;
  server?: ServerLoad | undefined;
}

/**
 * Every pool's signals: `pools` are the pools with a snapshot and their ready endpoints; the
 * leader's own signals and the other live replicas' by pool key.
 */
export function poolSignals(
  pools: Iterable<readonly [key: string, readyEndpoints: number]>,
  local: ReadonlyMap<string, ReplicaSignals>,
  remote: (key: string) => readonly ReplicaSignals[],
): PoolSignals[] {
  const rows: PoolSignals[] = [];
  for (const [key, readyEndpoints] of pools) {
    const mine = local.get(key);
    const others = remote(key);
    const server = chooseServerLoad(
      mine?.server,
      others.flatMap((o) => (o.server === undefined ? [] : [o.server])),
    );
    rows.push({
      key,
      readyEndpoints,
      demand: sumDemand([mine?.demand, ...others.map((o) => o.demand)]),
      ...(server === undefined ? {} : { server }),
    });
  }
  return rows;
}

// ---------------------------------------------------------------------------------------------
// The summary Lease's form: per pool one array, short enough for a thousand pools in an
// annotation: [requestsPerSecond, shedPerSecond, queued, held, servers, waiting, running,
// kvCacheMean, kvCacheMax], null for what is unknown (no demand, no server reading, a field no
// server reports). Another replica's version may write more fields: extra ones are ignored.
// ---------------------------------------------------------------------------------------------

export type CompactSignals = (number | null)[];

const round3 = (x: number): number => Math.round(x * 1000) / 1000;

export function encodeSignals(s: ReplicaSignals): CompactSignals {
  const d = s.demand;
  const v = s.server;
  const opt = (x: number | undefined): number | null => (x === undefined ? null : round3(x));
  return [
    d === undefined ? null : round3(d.requestsPerSecond),
    d === undefined ? null : round3(d.shedPerSecond),
    d?.queued ?? null,
    d?.held ?? null,
    v?.servers ?? null,
    opt(v?.waiting),
    opt(v?.running),
    opt(v?.kvCacheMean),
    opt(v?.kvCacheMax),
  ];
}

/** A finite number ≥ 0, or undefined (null, missing, or what a broken writer left). */
function count(x: unknown): number | undefined {
  return typeof x === 'number' && Number.isFinite(x) && x >= 0 ? x : undefined;
}

/** One pool's signals from another replica's summary; what does not parse is left out. */
export function decodeSignals(value: unknown): ReplicaSignals {
  if (!Array.isArray(value)) return {};
  const [rps, shed, queued, held, servers, waiting, running, kvMean, kvMax] = (
    value as unknown[]
  ).map(count);
  const out: ReplicaSignals = {};
  if (rps !== undefined && shed !== undefined && queued !== undefined && held !== undefined)
    out.demand = { requestsPerSecond: rps, shedPerSecond: shed, queued, held };
  if (servers !== undefined && servers > 0)
    out.server = {
      servers,
      ...(waiting === undefined ? {} : { waiting }),
      ...(running === undefined ? {} : { running }),
      ...(kvMean === undefined || kvMax === undefined
        ? {}
        : { kvCacheMean: kvMean, kvCacheMax: kvMax }),
    };
  return out;
}
