/**
 * The leader's status writes. A reconcile, a drift verdict or a sidecar only marks its pool due
 * (`StatusQueue`); this writer drains the due pools a few at a time beside the reconcile loop, so
 * publishing the next pool's snapshot never waits for an API round trip, and writes a pool's
 * status only when it differs from the one last written (`statusEqual`).
 */
import { budgetStatus, type BudgetUnit, type ReplicaDemand } from './core/budget-shares.ts';
import type { Logger } from 'pino';
import { GROUP, PLURAL, VERSION } from '../crds/inference-pool.schema.ts';
import { splitKey, type PoolKey } from './core/pool-index.ts';
import { poolStatus, statusEqual, type SidecarView } from './core/status.ts';
import type { DriftMonitor } from './drift/monitor.ts';
import type { CachedPool, PoolCache } from './kube/caches.ts';
import { KubeApiError, type KubeRaw } from './kube/kube-raw.ts';
import type { ControllerMetrics } from './metrics.ts';
import type { PoolState, PoolStates } from './pool-states.ts';
import type { StatusQueue } from './status-queue.ts';

/** Status writes in flight at once (they share a small pool of API connections). */
export const STATUS_WRITE_CONCURRENCY = 4;

export interface StatusWriterOptions {
  raw: Pick<KubeRaw, 'request'>;
  queue: StatusQueue;
  states: PoolStates;
  pools: PoolCache;
  isLeader: () => boolean;
  /** This replica's sidecars of a pool (its stream server), and their demand of its budgets. */
  local: {
    sidecarViews(key: PoolKey): Map<string, SidecarView>;
    budgetDemandByPool?(): Map<PoolKey, Map<string, ReplicaDemand>>;
  };
  /** Sidecars of a pool connected to other replicas, as those replicas published them. */
  remote: {
    remoteSidecars(key: PoolKey): ReadonlyMap<string, SidecarView>;
    remoteDemand?(key: PoolKey, budget: string, unit: BudgetUnit): (ReplicaDemand | undefined)[];
  };
  drift: Pick<DriftMonitor, 'section'>;
  metrics: Pick<ControllerMetrics, 'statusWrites'>;
  logger: Logger;
  /** A sidecar that neither streams nor reports for this long no longer counts as connected. */
  sidecarStaleAfterMs: number;
  /** How often the pools marked due by sidecars are written (changes only). */
  everyMs: number;
}

export class StatusWriter {
  readonly #options: StatusWriterOptions;
  #writing = false;
  #stopped = false;
  #timer: NodeJS.Timeout | undefined;

  constructor(options: StatusWriterOptions) {
    this.#options = options;
    options.queue.onUrgent(() => void this.flush());
  }

  start(): void {
    this.#timer = setInterval(() => void this.flush(), this.#options.everyMs);
    this.#timer.unref();
  }

  stop(): void {
    this.#stopped = true;
    if (this.#timer !== undefined) clearInterval(this.#timer);
  }

  /** Writes the due pools, `STATUS_WRITE_CONCURRENCY` at a time; one flush runs at a time. */
  async flush(): Promise<void> {
    const { queue, isLeader } = this.#options;
    if (this.#writing || !isLeader()) return;
    this.#writing = true;
    try {
      while (queue.size > 0 && isLeader() && !this.#stopped) {
        await Promise.all(queue.take(STATUS_WRITE_CONCURRENCY).map((key) => this.#flushOne(key)));
      }
    } finally {
      this.#writing = false;
    }
  }

  async #flushOne(key: PoolKey): Promise<void> {
    const { states, pools, queue, logger } = this.#options;
    const state = states.get(key);
    const pool = pools.get(key);
    if (state === undefined || pool === undefined) return;
    try {
      await this.#write(key, pool, state);
    } catch (err) {
      queue.add(key); // try again on the next pass
      logger.warn({ pool: key, err: (err as Error).message }, 'status write failed');
    }
  }

  async #write(key: PoolKey, pool: CachedPool, state: PoolState): Promise<void> {
    const { raw, isLeader, local, remote, drift, metrics, sidecarStaleAfterMs } = this.#options;
    if (!isLeader()) return;
    const reports = local.sidecarViews(key);
    for (const [id, view] of remote.remoteSidecars(key))
      if (!reports.has(id)) reports.set(id, view);
    const status = poolStatus({
      generation: state.generation,
      result: state.result,
      snapshot:
        state.result.snapshot === undefined
          ? undefined
          : { version: state.version, hash: state.hash },
      sidecars: { reports, nowMs: performance.now(), staleAfterMs: sidecarStaleAfterMs },
      previous: state.lastStatus ?? pool.status,
      now: new Date().toISOString(),
      drift: drift.section(key),
      budgets: budgetStatus(
        state.result.snapshot?.policy.flowControl?.budgets ?? [],
        local.budgetDemandByPool?.().get(key) ?? new Map<string, ReplicaDemand>(),
        (budget, unit) => remote.remoteDemand?.(key, budget, unit) ?? [],
      ),
    });
    if (state.lastStatus !== undefined && statusEqual(state.lastStatus, status)) return;
    const { namespace, name } = splitKey(key);
    try {
      await raw.request(
        'PATCH',
        `/apis/${GROUP}/${VERSION}/namespaces/${namespace}/${PLURAL}/${name}/status`,
        { status },
        'application/merge-patch+json',
      );
      state.lastStatus = status;
      metrics.statusWrites.inc({ result: 'ok' });
    } catch (err) {
      const gone = err instanceof KubeApiError && err.status === 404;
      metrics.statusWrites.inc({ result: gone ? 'gone' : 'error' });
      if (!gone) throw err;
    }
  }
}
