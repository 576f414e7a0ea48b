import type { Logger } from 'pino';
import type { PoolShares } from '../../crds/snapshot.ts';
import type { ActivePoolState, PoolFlow } from './active-pool.ts';
import type { ControllerSourceOptions, RunningConfigSource } from './config-source.ts';
import {
  startControllerClient,
  type ControllerConnections,
} from './controller/controller-client.ts';
import { endpointHealth } from './controller/endpoint-health.ts';
import { placementSharing, type PlacementCounters } from './placement-sharing.ts';

/**
 * While requests wait in a budgeted pool's queue, demand is reported this often (≤ 4/s); and this
 * soon after requests start to be held (scale from zero).
 */
const DEMAND_POLL_MS = 250;

/**
 * A sidecar fed by the controller: every snapshot the client accepts becomes the configuration in
 * force, and the reports carry the balancer's view of each endpoint. Resolves once the cache on
 * disk was read (a restored snapshot is already in force); never waits for the controller.
 */
export async function startControllerSource(
  options: ControllerSourceOptions & {
    active: ActivePoolState;
    logger: Logger;
    /**
     * Requests of this pool held now because it has no ready endpoint (scale from zero, issue
     * 44), for the report's `demand.held`. Default: the pool's own hold (`active.heldRequests()`).
     */
    heldRequests?: (() => number) | undefined;
    /** The pool's placement metrics (issue 45). */
    placementCounters?: PlacementCounters | undefined;
    /** The sidecar's one connection to the controller, shared by its pools (issue 46). */
    connections?: ControllerConnections | undefined;
  },
): Promise<RunningConfigSource> {
  const {
    active,
    logger,
    heldRequests = () => active.heldRequests(),
    placementCounters,
    ...clientOptions
  } = options;
  const sharing = placementSharing(active, placementCounters);
  // A count the report's schema accepts (an integer ≥ 0), or the whole report would be refused.
  const held = (): number => {
    const n = heldRequests();
    return Number.isFinite(n) && n > 0 ? Math.floor(n) : 0;
  };
  // Budgets across the fleet (issue 43): the last shares the controller sent stay in force until
  // the next ones, whatever happens to the stream (static stability: never zero, never the whole
  // budget, because the controller went away). Kept here too, so that a pool whose flow state is
  // made after they came (flow control just turned on) still gets them.
  let lastShares: PoolShares | undefined;
  let sharedWith: PoolFlow | undefined;
  const flow = (): PoolFlow | undefined => active.current()?.flow;
  const applyShares = (): void => {
    const f = flow();
    if (f === undefined || lastShares === undefined) return;
    f.applyShares(lastShares.budgets, lastShares.workload);
    sharedWith = f;
  };
  const client = startControllerClient({
    ...clientOptions,
    logger,
    placements: sharing.hooks,
    // Checked (ours, valid) and logged by the client's applier; the active pool tells a change
    // from the same content.
    onSnapshot: (snapshot) => {
      const { policy, endpoints, timeouts, hash } = snapshot;
      const applied = active.apply(
        { name: snapshot.pool.name, hash, policy, endpoints, timeouts },
        snapshot.version,
      );
      if (flow() !== sharedWith) applyShares();
      return applied;
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
    onShares: (shares) => {
      lastShares = shares;
      applyShares();
    },
    budgets: () => {
      const f = flow();
      return f === undefined || f.policy.budgets.length === 0 ? undefined : f.demand();
    },
    // For the controller's autoscaling gauges: rates since the previous report, counts now.
    demand: () => {
      const pool = active.current();
      if (pool?.demand === undefined) return undefined;
      return { ...pool.demand.take(), queued: pool.flow?.queue.size ?? 0, held: held() };
    },
  });
  // Requests held in a budgeted pool's queue: report the demand at once (rate-limited), so the
  // controller re-splits now rather than at the next report period; and once more when the queue
  // has just emptied, so that a sidecar the demand left gives its share back at once rather than
  // a report period later (bench:budget: the share it could no longer spend).
  let queuedBefore = false;
  const demandPoll = setInterval(() => {
    const f = flow();
    const queued = f !== undefined && f.policy.budgets.length > 0 && f.queue.size > 0;
    if (queued || queuedBefore) client.reportDemandNow();
    queuedBefore = queued;
  }, DEMAND_POLL_MS);
  demandPoll.unref();
  // Scale from zero (issue 44): the first request held while the pool has no endpoint is reported
  // at once (rate-limited), so the autoscaler sees switchyard_pool_demand_held_requests rise now
  // rather than at the next report period (the report's `demand.held` is `heldRequests()`).
  active.hold.onFirstHeld = () => client.reportDemandNow();
  if (clientOptions.sharePlacements !== false) sharing.attach(() => client.uploadingPlacements());
  await client.ready;
  return {
    reload: () => Promise.resolve(false),
    close: () => {
      clearInterval(demandPoll);
      active.hold.onFirstHeld = undefined;
      sharing.detach();
      return client.close();
    },
  };
}
