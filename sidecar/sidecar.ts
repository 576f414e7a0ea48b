import { listen, type HostPort } from '../lib/listen.ts';
import type { Logger } from 'pino';
import { Balancer } from './policy/balancer.ts';
import type { Picker } from './policy/baseline-pickers.ts';
import type { Clock, EndpointSpec, PolicyEvent, Rng } from './policy/types.ts';
import { StandaloneDrift } from './standalone-drift.ts';
import { createAdminServer } from './admin-server.ts';
import {
  startControllerClient,
  type ControllerClient,
  type ControllerClientOptions,
} from './controller-client.ts';
import { endpointHealth } from './controller-report.ts';
import type { LoadedPool } from './pool-file.ts';
import type { ActivePool } from './pool-state.ts';
import { SidecarMetrics } from './proxy/metrics.ts';
import { SidecarProxy } from './proxy/proxy-server.ts';

export type { HostPort };

/** Where the pool configuration comes from. */
export type ConfigSource =
  | { kind: 'file'; poolFile: string }
  | ({ kind: 'controller' } & Omit<
      ControllerClientOptions,
      'logger' | 'onSnapshot' | 'currentEndpoints'
    >);

export interface SidecarOptions {
  listen: HostPort;
  admin: HostPort;
  source: ConfigSource;
  logger: Logger;
  maxBodyBytes: number;
  shutdownGraceMs: number;
  env: Record<string, string | undefined>;
  clock?: Clock;
  rng?: Rng;
  /** A baseline picker instead of affinity + P2C (the routing benchmark's baselines). */
  picker?: Picker | undefined;
}

export interface RunningSidecar {
  proxyUrl: string;
  adminUrl: string;
  current(): ActivePool | undefined;
  /** Re-reads the pool file now (the watcher does this on change). */
  reload(): Promise<boolean>;
  /** Stops accepting, lets requests in progress finish up to the grace period, then closes. */
  shutdown(): Promise<void>;
}

export class ConfigError extends Error {
  readonly code = 'SY_INVALID_POOL_FILE';
}

const systemClock: Clock = { nowMs: () => performance.now() };
const systemRng: Rng = { next: () => Math.random() };

/** Starts the standalone sidecar: a pool file, the proxy port and the admin port. */
export async function startSidecar(options: SidecarOptions): Promise<RunningSidecar> {
  const { logger } = options;
  const clock = options.clock ?? systemClock;
  const rng = options.rng ?? systemRng;
  const { source } = options;
  let first: LoadedPool | undefined;
  // Only a pool file needs YAML and the whole InferencePool validator: a sidecar fed by the
  // controller loads neither (a few MB of every app pod's memory: docs/image.md#memory).
  let poolFile: typeof import('./pool-file.ts') | undefined;
  if (source.kind === 'file') {
    poolFile = await import('./pool-file.ts');
    const loaded = await poolFile.loadPoolFile(source.poolFile, options.env);
    if (!loaded.ok)
      throw new ConfigError(poolFile.formatProblems(source.poolFile, loaded.problems));
    first = loaded.pool;
  }
  const poolName = source.kind === 'file' ? first!.name : source.pool;

  const metrics = new SidecarMetrics(poolName);
  let active: ActivePool | undefined;
  let draining = false;

  const onEvent = (event: PolicyEvent): void => {
    if (event.kind === 'breaker') {
      const level = event.to === 'open' ? 'warn' : 'info';
      logger[level](
        {
          pool: active?.name,
          endpoint: event.endpointId,
          from: event.from,
          to: event.to,
          reason: event.reason,
          openForMs: event.openForMs,
        },
        `circuit breaker ${event.to}`,
      );
    } else {
      logger.debug({ pool: active?.name, endpoint: event.endpointId }, 'cold-start sample dropped');
    }
  };

  /** The pool file's endpoints before drift verdicts were applied to them. */
  let fileEndpoints: readonly EndpointSpec[] = [];
  const drift = new StandaloneDrift({
    logger,
    onChange: () => {
      if (active === undefined || source.kind !== 'file') return;
      const endpoints = drift.mark(fileEndpoints);
      active.balancer.update(active.policy, endpoints);
      active = { ...active, endpoints };
    },
  });

  /** `version`: the controller's snapshot version; a file's configurations are simply counted. */
  const apply = (loaded: LoadedPool, version?: number): void => {
    if (active !== undefined && active.hash === loaded.hash) return;
    if (active !== undefined && active.name !== loaded.name) {
      logger.warn(
        { from: active.name, to: loaded.name },
        'pool renamed in the pool file; metrics keep the first name until restart',
      );
    }
    // Standalone, the sidecar probes for drift itself; from the controller, the snapshot says.
    if (source.kind === 'file') drift.configure(loaded.policy.drift, loaded.endpoints);
    const endpoints = source.kind === 'file' ? drift.mark(loaded.endpoints) : loaded.endpoints;
    const balancer =
      active?.balancer ??
      new Balancer(loaded.policy, endpoints, {
        clock,
        rng,
        onEvent,
        picker: options.picker,
      });
    if (active !== undefined) balancer.update(loaded.policy, endpoints);
    active = {
      name: loaded.name,
      version: version ?? (active?.version ?? 0) + 1,
      hash: loaded.hash,
      policy: loaded.policy,
      endpoints,
      timeouts: loaded.timeouts,
      balancer,
    };
    fileEndpoints = loaded.endpoints;
    metrics.retain(loaded.endpoints);
    metrics.configApplied.inc();
    logger.info(
      {
        pool: loaded.name,
        version: active.version,
        hash: loaded.hash,
        mode: loaded.policy.mode,
        endpoints: loaded.endpoints.map((e) => e.id),
      },
      'pool configuration applied',
    );
  };
  if (first !== undefined) apply(first);
  metrics.readStatusFrom(() => active?.balancer.status() ?? []);

  const proxy = new SidecarProxy({
    pool: () => active,
    metrics,
    logger,
    maxBodyBytes: options.maxBodyBytes,
    nowMs: () => performance.now(),
    isDraining: () => draining,
  });
  const admin = createAdminServer({ pool: () => active, metrics, isDraining: () => draining });

  const reload = async (): Promise<boolean> => {
    if (source.kind !== 'file' || poolFile === undefined) return false;
    const next = await poolFile.loadPoolFile(source.poolFile, options.env);
    if (!next.ok) {
      metrics.configRejected.inc();
      logger.error(
        { file: source.poolFile, problems: next.problems },
        'pool file change rejected; the last good configuration stays in force',
      );
      return false;
    }
    apply(next.pool);
    return true;
  };
  const watcher =
    source.kind === 'file'
      ? poolFile?.watchPoolFile(source.poolFile, () => void reload())
      : undefined;
  let client: ControllerClient | undefined;
  if (source.kind === 'controller') {
    const { kind: _kind, ...clientOptions } = source;
    client = startControllerClient({
      ...clientOptions,
      logger,
      onSnapshot: (snapshot, from) => {
        if (snapshot.pool.name !== source.pool || snapshot.pool.namespace !== source.namespace) {
          throw new Error(
            `snapshot of ${snapshot.pool.namespace}/${snapshot.pool.name} on the stream of ${source.namespace}/${source.pool}`,
          );
        }
        logger.info({ from, version: snapshot.version }, 'snapshot received');
        const { policy, endpoints, timeouts, hash } = snapshot;
        apply({ name: snapshot.pool.name, hash, policy, endpoints, timeouts }, snapshot.version);
      },
      currentEndpoints: () => endpointHealth(active?.balancer.status() ?? []),
    });
    await client.ready;
  }

  const proxyUrl = await listen(proxy.server, options.listen);
  const adminUrl = await listen(admin, options.admin);
  // Always announced (unless silent): scripts and tests wait for this line to learn the ports.
  const announcer = logger.level === 'silent' ? logger : logger.child({}, { level: 'info' });
  announcer.info({ url: proxyUrl, admin: adminUrl, pool: poolName }, 'sidecar listening');

  let shutdownPromise: Promise<void> | undefined;
  const shutdown = (): Promise<void> => {
    shutdownPromise ??= (async () => {
      draining = true;
      watcher?.close();
      drift.stop();
      await client?.close();
      logger.info(
        { inProgress: proxy.inProgress, graceMs: options.shutdownGraceMs },
        'draining: no new connections, waiting for requests in progress',
      );
      proxy.server.close();
      proxy.server.closeIdleConnections();
      let timer: NodeJS.Timeout | undefined;
      const graceOver = new Promise<'timeout'>(
        (r) => (timer = setTimeout(() => r('timeout'), options.shutdownGraceMs)),
      );
      const outcome = await Promise.race([proxy.whenIdle().then(() => 'idle' as const), graceOver]);
      clearTimeout(timer);
      if (outcome === 'timeout')
        logger.warn({ cut: proxy.inProgress }, 'grace period over: closing the remaining streams');
      proxy.server.closeAllConnections();
      proxy.close();
      admin.closeAllConnections();
      await new Promise<void>((r) => admin.close(() => r()));
      logger.info('sidecar stopped');
    })();
    return shutdownPromise;
  };

  return { proxyUrl, adminUrl, current: () => active, reload, shutdown };
}
