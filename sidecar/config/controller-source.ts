import type { Logger } from 'pino';
import type { BudgetDemand, BudgetShare } from '../../crds/snapshot.ts';
import type { ActivePoolState } from './active-pool.ts';
import type { ControllerSourceOptions, RunningConfigSource } from './config-source.ts';
import { startControllerClient } from './controller/controller-client.ts';
import { endpointHealth } from './controller/endpoint-health.ts';

/**
 * A sidecar fed by the controller: every snapshot the client accepts becomes the configuration in
 * force, and the reports carry the balancer's view of each endpoint. Resolves once the cache on
 * disk was read (a restored snapshot is already in force); never waits for the controller.
 */
/**
 * The pool's flow-control state as the controller source drives it (issue 43; built by the
 * active pool, sidecar/config/active-pool.ts): the shares the controller sends, and the demand
 * the reports carry. Each part is optional so that the source works against an active pool
 * without flow control.
 */
interface PoolFlowHooks {
  /** This sidecar's shares of the pool's budgets, and its workload as the controller names it. */
  applyShares(shares: readonly BudgetShare[], workload: string | undefined): void;
  /** Use and demand of each budget over the last minute; undefined or empty: no budgets. */
  demand(): BudgetDemand[] | undefined;
  /** Calls `listener` when a request starts waiting for want of share (report the demand now). */
  onShareWanted(listener: () => void): void;
}

export async function startControllerSource(
  options: ControllerSourceOptions & { active: ActivePoolState; logger: Logger },
): Promise<RunningConfigSource> {
  const { active, logger, ...clientOptions } = options;
  const flow = active as unknown as Partial<PoolFlowHooks>;
  const client = startControllerClient({
    ...clientOptions,
    logger,
    // Checked (ours, valid) and logged by the client's applier; the active pool tells a change
    // from the same content.
    onSnapshot: (snapshot) => {
      const { policy, endpoints, timeouts, hash } = snapshot;
      return active.apply(
        { name: snapshot.pool.name, hash, policy, endpoints, timeouts },
        snapshot.version,
      );
    },
    // Load the controller scraped from the servers: each reading counts from when it was
    // measured, and a fresher ORCA header from this sidecar's own responses wins.
    onLoad: (load) => {
      const balancer = active.current()?.balancer;
      if (balancer === undefined) return;
      for (const endpoint of load.endpoints)
        balancer.reportLoad(endpoint.id, endpoint, endpoint.ageMs);
    },
    // Only the fields a report carries: status() finds slow endpoints (a sort of every EWMA) and
    // estimates loads, which a report does not send, and this runs on the proxy's loop.
    currentEndpoints: () => endpointHealth(active.current()?.balancer.health() ?? []),
    // Budgets across the fleet: the shares in force until the next event, whatever happens to the
    // stream (static stability: never zero, never the whole budget, because the controller left).
    onShares: (shares) => flow.applyShares?.(shares.budgets, shares.workload),
    budgets: () => flow.demand?.(),
  });
  flow.onShareWanted?.(() => client.reportDemandNow());
  await client.ready;
  return { reload: () => Promise.resolve(false), close: () => client.close() };
}
