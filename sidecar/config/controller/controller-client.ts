/**
 * The sidecar's client of the controller's snapshot stream (docs/snapshot-protocol.md): subscribes
 * to its pool over HTTPS, applies every valid snapshot whose content changed, caches it on disk,
 * posts reports, and reconnects with exponential backoff and full jitter. It never gives up: a
 * refused token, a missing pool or a controller that is down are logged and retried, and the
 * sidecar keeps routing with its last good snapshot meanwhile.
 *
 * Four parts, each in its own module: the stream (`SnapshotStream`), the reports (`Reporter`),
 * the last-known-good cache on disk (`SnapshotCache`), and the decision what a snapshot changes
 * (`SnapshotApplier`). This module checks the options and wires them. All of a sidecar's pools
 * share one HTTP/2 connection to the controller (`ControllerConnections`).
 *
 * Secrets: the bearer token is never logged, and snapshots are logged by endpoint id only (an
 * endpoint may carry an `apiKey`). JSON syntax errors are logged without their message, which
 * quotes the offending text.
 */
import { readFile } from 'node:fs/promises';
import type { Logger } from 'pino';
import {
  DELTAS_QUERY,
  parseShares,
  placementsPath,
  reportPath,
  snapshotStreamPath,
  type BudgetDemand,
  type EndpointHealthReport,
  type PoolDemand,
  type PoolLoad,
  type PoolPlacements,
  type PoolShares,
  type PoolSnapshot,
} from '../../../crds/snapshot.ts';
import { describeError } from './describe-error.ts';
import { PlacementUploader } from './placement-uploader.ts';
import { ControllerConnections } from './controller-connections.ts';
import { Reporter } from './reporter.ts';
import { SnapshotApplier, type SnapshotSource } from './snapshot-applier.ts';
import { LatestFileWriter, SnapshotCache } from './snapshot-cache.ts';
import { SnapshotStream, type BackoffOptions } from './snapshot-stream.ts';
import { DEFAULT_MAX_EVENT_SIZE } from './sse-parser.ts';

export type { BackoffOptions };
export { ControllerConnections };

export interface ControllerClientOptions {
  /** e.g. `https://switchyard-controller.switchyard.svc:8443` (`http://` for tests only). */
  controllerUrl: string;
  namespace: string;
  pool: string;
  /** The projected ServiceAccount token (audience `switchyard`), re-read on every connection. */
  tokenFile: string;
  /** PEM bundle that signs the controller's certificate; the system CAs when absent. */
  caFile?: string | undefined;
  /** Who reports: the pod name. */
  sidecarId: string;
  /**
   * Where the last applied snapshot is kept (0600, atomic) and restored from at start; the last
   * budget shares are kept beside it (`sharesFileOf`).
   */
  cacheFile?: string | undefined;
  /** No byte from the controller for this long → reconnect. Default 35 s (3 heartbeats + slack). */
  heartbeatTimeoutMs?: number | undefined;
  /** Default 10 s. */
  reportEveryMs?: number | undefined;
  /**
   * A periodic report the same as the last one the controller took is skipped for up to this
   * many periods (default 6, reporter.ts `UNCHANGED_REPORT_PERIODS`; 1 sends every one).
   */
  unchangedReportPeriods?: number | undefined;
  /** Default 500 ms doubling to 30 s, with full jitter. */
  backoff?: BackoffOptions | undefined;
  /** Largest event accepted from the stream (default 16 MiB); a larger one drops the connection. */
  maxEventSize?: number | undefined;
  /**
   * The sidecar's connection to the controller, shared by all its pools (its owner closes it).
   * Absent: the client opens its own and closes it with itself.
   */
  connections?: ControllerConnections | undefined;
  logger: Logger;
  /**
   * Make this snapshot the configuration in force; false when the same content (hash) is in force
   * already. Called only with `parseSnapshot`-valid snapshots of this pool. If it throws, the
   * snapshot counts as not applied (logged; the same snapshot is offered again after the next
   * reconnect).
   */
  onSnapshot(snapshot: PoolSnapshot, source: SnapshotSource): boolean;
  /**
   * The load the pool's servers reported, as the controller scraped it (a `load` event, every
   * `--load-scrape-every`, 100 ms by default). Optional: without it load events are ignored, as
   * by sidecars before them.
   */
  onLoad?: ((load: PoolLoad) => void) | undefined;
  /**
   * This sidecar's shares of the pool's budgets (a `shares` event, issue 43), and the workload
   * the controller names it. Called only with `parseShares`-valid events; nothing is called when
   * the stream closes: the last shares stay in force while the controller is away.
   */
  onShares?: ((shares: PoolShares) => void) | undefined;
  /**
   * An `endpoints` delta (issue 46) was applied, or could not be (false: the stream is dropped and
   * reopened for the full snapshot); the metric `switchyard_snapshot_deltas_total`.
   */
  onDelta?: ((applied: boolean) => void) | undefined;
  /**
   * Every `snapshot` and `endpoints` event as received, before it is checked: its type, `id:` and
   * data. For the fleet benchmark's byte counts; the sidecar does not set it.
   */
  onStreamEvent?: ((type: string, id: string | undefined, data: string) => void) | undefined;
  /** Per-endpoint health for reports (see `endpointHealth` in endpoint-health.ts). */
  currentEndpoints(): EndpointHealthReport[];
  /**
   * Use and demand of the pool's budgets for reports; while it returns some, reports go every
   * second instead of every `reportEveryMs`.
   */
  budgets?: (() => BudgetDemand[] | undefined) | undefined;
  /**
   * The pool's demand as this sidecar sees it, for the controller's autoscaling gauges (issue
   * 44); read once per report (its rates cover the time since the previous one).
   */
  demand?: (() => PoolDemand | undefined) | undefined;
  /** Randomness for the jitter, in [0, 1); injectable for tests. */
  random?: (() => number) | undefined;
  /**
   * `--share-placements` (issue 45), default true: upload this sidecar's placements to a
   * controller that relays them, and apply the ones it relays. False: neither.
   */
  sharePlacements?: boolean | undefined;
  /** The pool's placements: what to upload, where received ones go (without it: neither). */
  placements?: PlacementHooks | undefined;
}

/** The fleet-wide view's side of one pool (issue 45): the source wires these to its balancer. */
export interface PlacementHooks {
  /** The batch waiting, at most `maxBytes` of JSON, removed from the queue; undefined if none. */
  take(maxBytes: number): PoolPlacements | undefined;
  /** A valid `placements` event of `bytes` bytes arrived. */
  received(placements: PoolPlacements, bytes: number): void;
  /** The controller took `count` uploaded placements. */
  uploaded?(count: number): void;
  /** An upload failed; its batch was dropped. */
  uploadFailed?(): void;
}

export interface ControllerClient {
  /** Resolves once the cache was read (a restored snapshot already applied); never waits for the controller, never rejects. */
  ready: Promise<void>;
  /** True while a snapshot stream is open. */
  connected(): boolean;
  /** Version of the snapshot in force (from the stream or the cache), undefined before any. */
  lastAppliedVersion(): number | undefined;
  /** Requests wait for want of share: report the demand now (at most 4 a second). */
  reportDemandNow(): void;
  /** True while placements are uploaded: the open stream's controller relays them. */
  uploadingPlacements(): boolean;
  /** Ends the stream and every timer and request; resolves when all is closed. Idempotent. */
  close(): Promise<void>;
}

export const CONTROLLER_CLIENT_DEFAULTS = {
  heartbeatTimeoutMs: 35_000,
  reportEveryMs: 10_000,
  backoff: { initialMs: 500, maxMs: 30_000 },
} as const;

/** The options, checked, with their defaults and the URLs derived from them. */
interface Settings {
  base: URL;
  streamUrl: URL;
  reportUrl: URL;
  placementsUrl: URL;
  heartbeatTimeoutMs: number;
  reportEveryMs: number;
  reportTimeoutMs: number;
  backoff: BackoffOptions;
  maxEventSize: number;
  random: () => number;
}

function positive(name: string, value: number): number {
  if (!Number.isFinite(value) || value <= 0) throw new TypeError(`${name} must be > 0`);
  return value;
}

/** Throws a TypeError naming the first bad option. */
function settingsOf(options: ControllerClientOptions): Settings {
  let base: URL;
  try {
    base = new URL(options.controllerUrl);
  } catch {
    throw new TypeError(`controllerUrl is not a URL: ${options.controllerUrl}`);
  }
  if (base.protocol !== 'https:' && base.protocol !== 'http:')
    throw new TypeError(`controllerUrl must be https:// (or http:// for tests)`);
  if (base.username !== '' || base.password !== '' || base.search !== '' || base.hash !== '')
    throw new TypeError('controllerUrl must not carry credentials, a query or a fragment');
  for (const key of ['namespace', 'pool', 'sidecarId', 'tokenFile'] as const)
    if (options[key].length === 0) throw new TypeError(`${key} must not be empty`);
  if (options.sidecarId.length > 253) throw new TypeError('sidecarId is longer than 253');
  const heartbeatTimeoutMs = positive(
    'heartbeatTimeoutMs',
    options.heartbeatTimeoutMs ?? CONTROLLER_CLIENT_DEFAULTS.heartbeatTimeoutMs,
  );
  const reportEveryMs = positive(
    'reportEveryMs',
    options.reportEveryMs ?? CONTROLLER_CLIENT_DEFAULTS.reportEveryMs,
  );
  const backoff = options.backoff ?? CONTROLLER_CLIENT_DEFAULTS.backoff;
  positive('backoff.initialMs', backoff.initialMs);
  if (positive('backoff.maxMs', backoff.maxMs) < backoff.initialMs)
    throw new TypeError('backoff.maxMs must be >= backoff.initialMs');
  const maxEventSize = positive('maxEventSize', options.maxEventSize ?? DEFAULT_MAX_EVENT_SIZE);

  const prefix = base.pathname.replace(/\/+$/, '');
  // deltas=1: this client applies `endpoints` events (issue 46); a controller without them ignores it.
  const query = `?sidecar=${encodeURIComponent(options.sidecarId)}&${DELTAS_QUERY}=1`;
  return {
    base,
    streamUrl: new URL(prefix + snapshotStreamPath(options.namespace, options.pool) + query, base),
    reportUrl: new URL(prefix + reportPath(options.namespace, options.pool), base),
    placementsUrl: new URL(prefix + placementsPath(options.namespace, options.pool), base),
    heartbeatTimeoutMs,
    reportEveryMs,
    reportTimeoutMs: Math.min(10_000, Math.max(1_000, reportEveryMs)),
    backoff,
    maxEventSize,
    random: options.random ?? Math.random,
  };
}

/**
 * Where the last `shares` event is kept beside the snapshot cache: `snapshot.json` →
 * `snapshot.shares.json`. Restored at start, so a sidecar restarted while the controller is down
 * keeps enforcing its last share (its part of a split whose sum is within the budget) instead of
 * none.
 */
export function sharesFileOf(cacheFile: string): string {
  return cacheFile.endsWith('.json')
    ? `${cacheFile.slice(0, -'.json'.length)}.shares.json`
    : `${cacheFile}.shares`;
}

/** The last shares on disk: one write at a time, only the newest pending. */
class SharesCache {
  readonly #file: string | undefined;
  readonly #log: Logger;
  #writer: LatestFileWriter<PoolShares> | undefined;

  constructor(file: string | undefined, log: Logger) {
    this.#file = file;
    this.#log = log;
  }

  /** The cached shares, or undefined (missing, unreadable or invalid: logged, ignored). */
  async restore(): Promise<PoolShares | undefined> {
    if (this.#file === undefined) return undefined;
    let text: string;
    try {
      text = await readFile(this.#file, 'utf8');
    } catch {
      return undefined; // none yet: a pool without budgets, or never got shares
    }
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      this.#log.warn({ sharesFile: this.#file }, 'the shares cache is not valid JSON; ignored');
      return undefined;
    }
    const parsed = parseShares(value);
    if (!parsed.ok) {
      this.#log.warn(
        { sharesFile: this.#file, errors: parsed.errors },
        'the shares cache is invalid; ignored',
      );
      return undefined;
    }
    return parsed.value;
  }

  save(shares: PoolShares): void {
    const file = this.#file;
    if (file === undefined) return;
    this.#writer ??= new LatestFileWriter<PoolShares>(
      file,
      () => undefined,
      (err) =>
        this.#log.warn(
          { sharesFile: file, err: describeError(err) },
          'cannot write the shares cache; a restart while the controller is down will start without budget shares',
        ),
    );
    this.#writer.save(shares);
  }

  async close(): Promise<void> {
    await this.#writer?.idle();
  }
}

/** Starts subscribing at once (after the cache was read); see `ControllerClient`. */
export function startControllerClient(options: ControllerClientOptions): ControllerClient {
  const settings = settingsOf(options);
  const { namespace, pool, sidecarId } = options;
  const controller = settings.base.origin;
  const log = options.logger.child({
    component: 'controller-client',
    pool: `${namespace}/${pool}`,
  });
  if (
    settings.base.protocol === 'http:' &&
    !['localhost', '127.0.0.1', '[::1]'].includes(settings.base.hostname)
  )
    log.warn(
      { controller },
      'the controller URL is plain http: the token and API keys travel unencrypted (use https)',
    );

  const ownConnections = options.connections === undefined;
  const connections = options.connections ?? new ControllerConnections();
  const cache = new SnapshotCache({ file: options.cacheFile, log });
  const sharesCache = new SharesCache(
    options.onShares === undefined || options.cacheFile === undefined
      ? undefined
      : sharesFileOf(options.cacheFile),
    log,
  );
  const applier = new SnapshotApplier({
    pool: { namespace, name: pool },
    apply: (snapshot, source) => options.onSnapshot(snapshot, source),
    cache,
    log,
  });
  const reporter = new Reporter({
    url: settings.reportUrl,
    connections,
    sidecarId,
    everyMs: settings.reportEveryMs,
    unchangedPeriods: options.unchangedReportPeriods,
    timeoutMs: settings.reportTimeoutMs,
    log,
    applied: () => applier.applied,
    currentEndpoints: () => options.currentEndpoints(),
    budgets: options.budgets,
    demand: options.demand,
  });
  // Issue 45: placements go up only to a controller whose stream said it relays them.
  const placements = options.sharePlacements === false ? undefined : options.placements;
  const uploader =
    placements === undefined
      ? undefined
      : new PlacementUploader({
          url: settings.placementsUrl,
          connections,
          log,
          take: (maxBytes) => placements.take(maxBytes),
          uploaded: (count) => placements.uploaded?.(count),
          failed: () => placements.uploadFailed?.(),
        });
  const stream = new SnapshotStream({
    url: settings.streamUrl,
    controller,
    connections,
    namespace,
    pool,
    sidecarId,
    tokenFile: options.tokenFile,
    caFile: options.caFile,
    heartbeatTimeoutMs: settings.heartbeatTimeoutMs,
    backoff: settings.backoff,
    random: settings.random,
    maxEventSize: settings.maxEventSize,
    log,
    onConnected: (session, placementsBytesPerSecond) => {
      reporter.start(session);
      if (placementsBytesPerSecond !== undefined) uploader?.start(session);
    },
    onDisconnected: () => {
      reporter.stop();
      uploader?.stop();
    },
    onPlacements:
      placements === undefined ? undefined : (batch, bytes) => placements.received(batch, bytes),
    onSnapshot: (snapshot) => {
      const accepted = applier.accept(snapshot, 'stream');
      if (accepted) reporter.sendNow();
      return accepted;
    },
    onDelta: (applied) => options.onDelta?.(applied),
    onStreamEvent: options.onStreamEvent && ((e) => options.onStreamEvent?.(e.type, e.id, e.data)),
    onLoad: (load) => options.onLoad?.(load),
    onShares: (shares) => {
      options.onShares?.(shares);
      sharesCache.save(shares);
    },
  });

  let closing: Promise<void> | undefined;
  const ready = cache
    .restore()
    .then(async (cached) => {
      if (cached !== undefined && closing === undefined) applier.accept(cached, 'cache');
      const shares = await sharesCache.restore();
      if (shares !== undefined && closing === undefined) {
        log.info({ budgets: shares.budgets.length }, 'budget shares restored from the cache');
        options.onShares?.(shares);
      }
    })
    .catch((err: unknown) => {
      log.warn({ err: describeError(err) }, 'restoring the snapshot cache failed; ignored');
    });
  const loop = ready.then(() => stream.run());

  const close = (): Promise<void> => {
    closing ??= (async () => {
      stream.close();
      reporter.close();
      uploader?.close();
      await loop;
      await reporter.closed();
      await uploader?.closed();
      if (ownConnections) await connections.close();
      await cache.close();
      await sharesCache.close();
    })();
    return closing;
  };

  return {
    ready,
    connected: () => stream.connected,
    lastAppliedVersion: () => applier.applied?.version,
    reportDemandNow: () => reporter.demandNow(),
    uploadingPlacements: () => uploader?.active ?? false,
    close,
  };
}
