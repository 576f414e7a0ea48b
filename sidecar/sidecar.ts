/**
 * The sidecar's wiring: configuration, proxy and admin server, built in that order (each after
 * what it uses), then start and graceful shutdown. The layers below never import this file:
 * sidecar → admin → proxy → config → policy (sidecar/layers.test.ts).
 */
import type { Logger } from 'pino';
import { listen, type HostPort } from '../lib/listen.ts';
import { createAdminServer } from './admin/admin-server.ts';
import { ActivePoolState, type ActivePool } from './config/active-pool.ts';
import type { ConfigSource, RunningConfigSource } from './config/config-source.ts';
import { startControllerSource } from './config/controller-source.ts';
import type { Clock, Picker, Rng } from './policy/index.ts';
import { SidecarMetrics } from './proxy/metrics.ts';
import { SidecarProxy } from './proxy/proxy-server.ts';
import { startProxyTracing } from './telemetry/start-proxy-tracing.ts';

export type { ConfigSource, HostPort };
export { ConfigError } from './config/config-error.ts';

export interface SidecarOptions {
  listen: HostPort;
  admin: HostPort;
  source: ConfigSource;
  logger: Logger;
  maxBodyBytes: number;
  shutdownGraceMs: number;
  /**
   * `/startupz` passes once a configuration is applied, or once this long has passed without one
   * (default 30 s): the injected sidecar's startup probe, so the app starts when its sidecar can
   * route, yet a controller that is down delays the app by no more than this.
   */
  startupGraceMs?: number;
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

const systemClock: Clock = { nowMs: () => performance.now() };
const systemRng: Rng = { next: () => Math.random() };

/** Starts a sidecar: its configuration source, the proxy port and the admin port. */
export async function startSidecar(options: SidecarOptions): Promise<RunningSidecar> {
  const { logger, source } = options;
  // Only a pool file needs YAML and the whole InferencePool validator: a sidecar fed by the
  // controller loads neither (a few MB of every app pod's memory: docs/image.md#memory).
  const poolFile =
    source.kind === 'file' ? await import('./config/pool-file-source.ts') : undefined;
  // A standalone sidecar does not start on an invalid pool file (ConfigError lists every problem).
  const first =
    source.kind === 'file' ? await poolFile!.readPoolFile(source.poolFile, options.env) : undefined;
  const poolName = source.kind === 'file' ? first!.name : source.pool;
  const metrics = new SidecarMetrics(poolName);
  const active = new ActivePoolState({
    clock: options.clock ?? systemClock,
    rng: options.rng ?? systemRng,
    picker: options.picker,
    logger,
    onApplied: (pool) => {
      metrics.retain(pool.endpoints);
      metrics.configApplied.inc();
    },
  });
  metrics.readGaugesFrom(() => active.current()?.balancer.gauges() ?? []);
  metrics.readExchangeFrom(() => active.current()?.balancer.prefillExchange());
  let config: RunningConfigSource;
  if (source.kind === 'file') {
    config = new poolFile!.PoolFileSource({
      file: source.poolFile,
      env: options.env,
      first: first!,
      active,
      logger,
      onRejected: () => metrics.configRejected.inc(),
      loadScrapeEveryMs: source.loadScrapeEveryMs,
    });
  } else {
    const { kind: _kind, ...clientOptions } = source;
    config = await startControllerSource({ ...clientOptions, active, logger });
  }

  const tracer = await startProxyTracing(options.env, poolName, logger);
  let draining = false;
  const startedAtMs = performance.now();
  const startupGraceMs = options.startupGraceMs ?? 30_000;
  let started: 'configured' | 'grace over' | undefined;
  const startup = (): typeof started => {
    if (started !== undefined) return started;
    if (active.current() !== undefined) started = 'configured';
    else if (performance.now() - startedAtMs >= startupGraceMs) {
      started = 'grace over';
      logger.warn(
        { graceMs: startupGraceMs },
        'no configuration yet, startup grace over: /startupz passes so the app may start; requests get 503 until a configuration arrives',
      );
    }
    return started;
  };
  const proxy = new SidecarProxy({
    pool: () => active.current(),
    metrics,
    logger,
    maxBodyBytes: options.maxBodyBytes,
    nowMs: () => performance.now(),
    isDraining: () => draining,
    tracer,
  });
  const admin = createAdminServer({
    pool: () => active.current(),
    metrics,
    isDraining: () => draining,
    startup,
  });

  const proxyUrl = await listen(proxy.server, options.listen);
  const adminUrl = await listen(admin, options.admin);
  // Always announced (unless silent): scripts and tests wait for this line to learn the ports.
  const announcer = logger.level === 'silent' ? logger : logger.child({}, { level: 'info' });
  announcer.info({ url: proxyUrl, admin: adminUrl, pool: poolName }, 'sidecar listening');

  let shutdownPromise: Promise<void> | undefined;
  const shutdown = (): Promise<void> => {
    shutdownPromise ??= (async () => {
      draining = true;
      await config.close();
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
      // The last spans (those of the drained requests) are exported before the process exits.
      await tracer?.shutdown();
      admin.closeAllConnections();
      await new Promise<void>((r) => admin.close(() => r()));
      logger.info('sidecar stopped');
    })();
    return shutdownPromise;
  };

  return {
    proxyUrl,
    adminUrl,
    current: () => active.current(),
    reload: () => config.reload(),
    shutdown,
  };
}
