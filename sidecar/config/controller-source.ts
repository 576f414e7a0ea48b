import type { Logger } from 'pino';
import type { ActivePoolState } from './active-pool.ts';
import type { ControllerSourceOptions, RunningConfigSource } from './config-source.ts';
import { startControllerClient } from './controller/controller-client.ts';
import { endpointHealth } from './controller/endpoint-health.ts';

/**
 * A sidecar fed by the controller: every snapshot the client accepts becomes the configuration in
 * force, and the reports carry the balancer's view of each endpoint. Resolves once the cache on
 * disk was read (a restored snapshot is already in force); never waits for the controller.
 */
export async function startControllerSource(
  options: ControllerSourceOptions & { active: ActivePoolState; logger: Logger },
): Promise<RunningConfigSource> {
  const { active, logger, ...clientOptions } = options;
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
  });
  await client.ready;
  return { reload: () => Promise.resolve(false), close: () => client.close() };
}
