/**
 * The sidecar's wiring: configuration, proxy and admin server, built in that order (each after
 * what it uses), then start and graceful shutdown. The layers below never import this file:
 * sidecar → admin → proxy → config → policy (sidecar/layers.test.ts).
 */
import { readdir, stat } from 'node:fs/promises';
import { basename, dirname, extname, join } from 'node:path';
import type { Logger } from 'pino';
import { listen, type HostPort } from '../lib/listen.ts';
import { createAdminServer } from './admin/admin-server.ts';
import {
  ActivePoolState,
  declaresModelRouting,
  type ActivePool,
  type PoolConfig,
} from './config/active-pool.ts';
import { ConfigError } from './config/config-error.ts';
import type { ConfigSource, RunningConfigSource } from './config/config-source.ts';
import { startControllerSource } from './config/controller-source.ts';
import { ControllerConnections } from './config/controller/controller-connections.ts';
import { startModelDiscovery } from './proxy/model-discovery.ts';
import type { Clock, Picker, Rng } from './policy/index.ts';
import { SidecarMetrics } from './proxy/metrics.ts';
import { SidecarProxy, type PoolSlot } from './proxy/proxy-server.ts';
import { startProxyTracing } from './telemetry/start-proxy-tracing.ts';

export type { ConfigSource, HostPort };
export { ConfigError };

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
  /**
   * Model discovery (asking endpoints without declared `models` for their /v1/models): `auto`
   * (the default) while routing by model is in use, `on` always, `off` never (`ModelDiscoveryMode`).
   */
  modelDiscovery?: ModelDiscoveryMode | undefined;
  /**
   * Flow control: the priority of this pod's requests that carry no `x-switchyard-priority`
   * (`--priority`, from the pod annotation `switchyard.dev/priority`); undefined: each pool's
   * `flowControl.defaultPriority`.
   */
  defaultPriority?: number | undefined;
  /**
   * Flow control: this sidecar's workload for pools whose workload is a ServiceAccount or a pod
   * label, when the controller names none (`--workload`; standalone).
   */
  workload?: string | undefined;
}

/**
 * When the sidecar asks its endpoints what they serve. `auto`: when it follows several pools, or
 * a pool in force declares aliases or a backend's `models`; a single pool that declares neither
 * routes exactly as before (any model may go to any endpoint, `spec.models` refusing others), so
 * its endpoints are not asked. `on`: always (a single pool of LoRA servers that declare nothing).
 */
export type ModelDiscoveryMode = 'auto' | 'on' | 'off';

/** One pool a running sidecar follows: its name and the configuration in force, if any. */
export interface FollowedPool {
  readonly name: string;
  current(): ActivePool | undefined;
}

export interface RunningSidecar {
  proxyUrl: string;
  adminUrl: string;
  /** The first (default) pool's configuration in force. */
  current(): ActivePool | undefined;
  /**
   * Every pool followed, in order (the first is the default): what runs beside the pools, such as
   * model discovery, reads each pool's configuration in force from here.
   */
  pools(): readonly FollowedPool[];
  /** The configurations in force, in pool order (pools without one yet left out). */
  activePools(): readonly ActivePool[];
  /** Re-reads the pool file now (the watcher does this on change). */
  reload(): Promise<boolean>;
  /** Stops accepting, lets requests in progress finish up to the grace period, then closes. */
  shutdown(): Promise<void>;
}

const systemClock: Clock = { nowMs: () => performance.now() };
const systemRng: Rng = { next: () => Math.random() };

/** The pool files named: each file as given, each directory as its pool files, sorted. */
export async function expandPoolFiles(paths: readonly string[]): Promise<string[]> {
  const files: string[] = [];
  for (const path of paths) {
    let isDirectory = false;
    try {
      isDirectory = (await stat(path)).isDirectory();
    } catch {
      // Not there: reading it as a pool file says so, naming the file.
    }
    if (!isDirectory) {
      files.push(path);
      continue;
    }
    const names = (await readdir(path))
      .filter((n) => !n.startsWith('.') && /\.(ya?ml|json)$/i.test(n))
      .sort();
    if (names.length === 0)
      throw new ConfigError(`${path}: a pool-file directory with no *.yaml, *.yml or *.json file`);
    files.push(...names.map((n) => join(path, n)));
  }
  return files;
}

/**
 * The cache file of `pool` when a sidecar follows several: one per pool beside the given path
 * (`/cache/snapshot.json` → `/cache/snapshot.chat.json`); with one pool, the path itself.
 */
export function cacheFileFor(
  cacheFile: string | undefined,
  pool: string,
  pools: number,
): string | undefined {
  if (cacheFile === undefined || pools === 1) return cacheFile;
  const ext = extname(cacheFile);
  return join(dirname(cacheFile), `${basename(cacheFile, ext)}.${pool}${ext}`);
}

/** The names given more than once, for the error that refuses them. */
function duplicates(names: readonly string[]): string[] {
  return [...new Set(names.filter((n, i) => names.indexOf(n) !== i))];
}

/** Starts a sidecar: its configuration sources, the proxy port and the admin port. */
export async function startSidecar(options: SidecarOptions): Promise<RunningSidecar> {
  const { logger, source } = options;
  // Only a pool file needs YAML and the whole InferencePool validator: a sidecar fed by the
  // controller loads neither (a few MB of every app pod's memory: docs/image.md#memory).
  const poolFile =
    source.kind === 'file' ? await import('./config/pool-file-source.ts') : undefined;
  const files =
    source.kind === 'file'
      ? await expandPoolFiles(
          typeof source.poolFile === 'string' ? [source.poolFile] : source.poolFile,
        )
      : [];
  // A standalone sidecar does not start on an invalid pool file (ConfigError lists every problem).
  const firsts: PoolConfig[] = [];
  for (const file of files) firsts.push(await poolFile!.readPoolFile(file, options.env));
  // A pool named twice to the controller counts once (as the injection counts
  // `switchyard.dev/pools`); two pool files of one pool are a mistake (below).
  const poolNames =
    source.kind === 'file'
      ? firsts.map((f) => f.name)
      : typeof source.pool === 'string'
        ? [source.pool]
        : [...new Set(source.pool)];
  if (poolNames.length === 0) throw new ConfigError('no pool to follow');
  const repeated = duplicates(poolNames);
  if (repeated.length > 0) {
    throw new ConfigError(
      `pool ${repeated.join(', ')} is named by more than one pool file (${files.join(', ')}): give each pool once`,
    );
  }
  const poolName = poolNames[0]!;
  const first = new SidecarMetrics(poolName);
  const metrics = poolNames.map((name, i) => (i === 0 ? first : new SidecarMetrics(name, first)));
  const actives = poolNames.map(
    (_name, i) =>
      new ActivePoolState({
        clock: options.clock ?? systemClock,
        rng: options.rng ?? systemRng,
        picker: options.picker,
        logger,
        budgetSharing: source.kind === 'file' ? 'whole' : 'shared',
        workload: options.workload,
        onApplied: (pool) => {
          metrics[i]!.retain(pool.endpoints);
          metrics[i]!.configApplied.inc();
        },
      }),
  );
  actives.forEach((active, i) => {
    metrics[i]!.readGaugesFrom(() => active.current()?.balancer.gauges() ?? []);
    metrics[i]!.readExchangeFrom(() => active.current()?.balancer.prefillExchange());
    metrics[i]!.readFlowFrom(() => active.current()?.flow);
    // A series only for a pool that scales from zero (or still holds after turning it off).
    metrics[i]!.readHeldFrom(() =>
      active.current()?.policy.scaleFromZero === undefined && active.heldRequests() === 0
        ? undefined
        : active.heldRequests(),
    );
  });
  const active = actives[0]!;
  const configs: RunningConfigSource[] = [];
  let controllerConnections: ControllerConnections | undefined;
  try {
    if (source.kind === 'file') {
      files.forEach((file, i) => {
        configs.push(
          new poolFile!.PoolFileSource({
            file,
            env: options.env,
            first: firsts[i]!,
            active: actives[i]!,
            logger,
            onRejected: () => metrics[i]!.configRejected.inc(),
            loadScrapeEveryMs: source.loadScrapeEveryMs,
          }),
        );
      });
    } else {
      const { kind: _kind, pool: _pool, cacheFile, ...clientOptions } = source;
      // One stream per pool, concurrently, all on one HTTP/2 connection to the controller (each
      // connection costs the controller ~100 KB): each resolves once its cache file was read.
      controllerConnections = new ControllerConnections();
      const connections = controllerConnections;
      const started = await Promise.allSettled(
        poolNames.map((pool, i) =>
          startControllerSource({
            ...clientOptions,
            pool,
            cacheFile: cacheFileFor(cacheFile, pool, poolNames.length),
            active: actives[i]!,
            logger: poolNames.length === 1 ? logger : logger.child({ pool }),
            placementCounters: metrics[i]!.placements,
            connections,
            onDelta: (applied) => metrics[i]!.deltas[applied ? 'applied' : 'rejected'].inc(),
          }),
        ),
      );
      for (const s of started) if (s.status === 'fulfilled') configs.push(s.value);
      const failed = started.find((s) => s.status === 'rejected');
      if (failed !== undefined) throw failed.reason;
    }
  } catch (err) {
    await Promise.all(configs.map((c) => c.close()));
    await controllerConnections?.close();
    throw err;
  }
  /**
   * The configurations in force, in pool order: what runs beside the pools and follows them
   * (model discovery) reads them here, each time, as they change.
   */
  const inForce = (): readonly ActivePool[] =>
    actives.flatMap((a) => {
      const pool = a.current();
      return pool === undefined ? [] : [pool];
    });
  const slots = (): readonly PoolSlot[] =>
    poolNames.map((name, i) => ({ name, current: actives[i]!.current(), metrics: metrics[i]! }));
  // What endpoints whose backend declares no `models` serve, asked of each endpoint (its
  // /v1/models) and told to its pool's balancer; follows the pools in force as they change (and,
  // in `auto`, whether routing by model is in use: none asked while it is not).
  const discoveryMode = options.modelDiscovery ?? 'auto';
  const discovered = (): readonly ActivePool[] => {
    const pools = inForce();
    if (discoveryMode === 'on' || poolNames.length > 1) return pools;
    return pools.some(declaresModelRouting) ? pools : [];
  };
  const discovery =
    discoveryMode === 'off' ? undefined : startModelDiscovery({ pools: discovered, logger });
  const config: RunningConfigSource = {
    reload: async () => (await Promise.all(configs.map((c) => c.reload()))).every(Boolean),
    close: async () => {
      await Promise.all([...configs.map((c) => c.close()), discovery?.close()]);
      await controllerConnections?.close();
    },
  };

  const tracer = await startProxyTracing(options.env, poolName, logger);
  let draining = false;
  const startedAtMs = performance.now();
  const startupGraceMs = options.startupGraceMs ?? 30_000;
  let started: 'configured' | 'grace over' | undefined;
  const startup = (): typeof started => {
    if (started !== undefined) return started;
    if (actives.every((a) => a.current() !== undefined)) started = 'configured';
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
    pools: poolNames.length === 1 ? undefined : slots,
    metrics: first,
    logger,
    maxBodyBytes: options.maxBodyBytes,
    nowMs: () => performance.now(),
    isDraining: () => draining,
    tracer,
    defaultPriority: options.defaultPriority,
  });
  const admin = createAdminServer({
    pool: () => active.current(),
    pools: poolNames.length === 1 ? undefined : slots,
    metrics: first,
    isDraining: () => draining,
    startup,
  });

  const proxyUrl = await listen(proxy.server, options.listen);
  const adminUrl = await listen(admin, options.admin);
  // Always announced (unless silent): scripts and tests wait for this line to learn the ports.
  const announcer = logger.level === 'silent' ? logger : logger.child({}, { level: 'info' });
  announcer.info(
    {
      url: proxyUrl,
      admin: adminUrl,
      pool: poolName,
      ...(poolNames.length === 1 ? {} : { pools: poolNames }),
    },
    'sidecar listening',
  );

  let shutdownPromise: Promise<void> | undefined;
  const shutdown = (): Promise<void> => {
    shutdownPromise ??= (async () => {
      draining = true;
      // Requests held for a pool with no endpoint would only wait out the grace: 503 now.
      proxy.refuseHeld();
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
    pools: () => poolNames.map((name, i) => ({ name, current: () => actives[i]!.current() })),
    activePools: inForce,
    reload: () => config.reload(),
    shutdown,
  };
}
