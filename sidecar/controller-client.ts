/**
 * The sidecar's client of the controller's snapshot stream (docs/snapshot-protocol.md): subscribes
 * to its pool over HTTPS, applies every valid snapshot whose content changed, caches it on disk,
 * posts reports, and reconnects with exponential backoff and full jitter. It never gives up: a
 * refused token, a missing pool or a controller that is down are logged and retried, and the
 * sidecar keeps routing with its last good snapshot meanwhile.
 *
 * Secrets: the bearer token is never logged, and snapshots are logged by endpoint id only (an
 * endpoint may carry an `apiKey`). JSON syntax errors are logged without their message, which
 * quotes the offending text.
 */
import { readFile } from 'node:fs/promises';
import type { ClientRequest } from 'node:http';
import https from 'node:https';
import { http } from '../lib/node-http.ts';
import type { Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import {
  SNAPSHOT_PROTOCOL_VERSION,
  parseReport,
  parseSnapshot,
  reportPath,
  snapshotStreamPath,
  type EndpointHealthReport,
  type PoolSnapshot,
  type SidecarReport,
} from '../crds/snapshot.ts';
import { readSnapshotCache, writeFileAtomic } from './controller-cache.ts';
import {
  DEFAULT_MAX_EVENT_SIZE,
  SseEventTooLargeError,
  SseParser,
  type SseEvent,
} from './controller-sse.ts';

export interface BackoffOptions {
  initialMs: number;
  maxMs: number;
}

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
  /** Where the last applied snapshot is kept (0600, atomic) and restored from at start. */
  cacheFile?: string | undefined;
  /** No byte from the controller for this long → reconnect. Default 35 s (3 heartbeats + slack). */
  heartbeatTimeoutMs?: number | undefined;
  /** Default 10 s. */
  reportEveryMs?: number | undefined;
  /** Default 500 ms doubling to 30 s, with full jitter. */
  backoff?: BackoffOptions | undefined;
  /** Largest event accepted from the stream (default 16 MiB); a larger one drops the connection. */
  maxEventSize?: number | undefined;
  logger: Logger;
  /**
   * Apply this snapshot. Called only with `parseSnapshot`-valid snapshots of this pool, and only
   * when the content hash differs from the last applied one. If it throws, the snapshot counts
   * as not applied (logged; the same snapshot is offered again after the next reconnect).
   */
  onSnapshot(snapshot: PoolSnapshot, source: 'stream' | 'cache'): void;
  /** Per-endpoint health for reports (see `endpointHealth` in controller-report.ts). */
  currentEndpoints(): EndpointHealthReport[];
  /** Randomness for the jitter, in [0, 1); injectable for tests. */
  random?: (() => number) | undefined;
}

export interface ControllerClient {
  /** Resolves once the cache was read (a restored snapshot already applied); never waits for the controller, never rejects. */
  ready: Promise<void>;
  /** True while a snapshot stream is open. */
  connected(): boolean;
  /** Version of the snapshot in force (from the stream or the cache), undefined before any. */
  lastAppliedVersion(): number | undefined;
  /** Ends the stream and every timer and request; resolves when all is closed. Idempotent. */
  close(): Promise<void>;
}

export const CONTROLLER_CLIENT_DEFAULTS = {
  heartbeatTimeoutMs: 35_000,
  reportEveryMs: 10_000,
  backoff: { initialMs: 500, maxMs: 30_000 },
} as const;

/**
 * The wait before reconnect attempt number `failures` (0 for the first retry): uniform in
 * [0, min(maxMs, initialMs × 2^failures)] ("full jitter").
 */
export function backoffDelayMs(
  failures: number,
  backoff: BackoffOptions,
  random: () => number,
): number {
  const ceiling = Math.min(backoff.maxMs, backoff.initialMs * 2 ** Math.min(failures, 40));
  const r = Math.min(1, Math.max(0, random()));
  return Math.floor(r * ceiling);
}

const MAX_REFUSAL_BODY = 4096;

interface Session {
  token: string;
  ca: string | undefined;
}

interface Applied {
  version: number;
  hash: string;
}

function positive(name: string, value: number): number {
  if (!Number.isFinite(value) || value <= 0) throw new TypeError(`${name} must be > 0`);
  return value;
}

function checkOptions(options: ControllerClientOptions): URL {
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
  return base;
}

/** Error details that are safe to log: a code and a message (no stack, no request). */
function describe(err: unknown): { code?: string; message: string } {
  const e = err as NodeJS.ErrnoException;
  return e.code === undefined
    ? { message: String(e.message ?? err) }
    : { code: e.code, message: String(e.message) };
}

const TLS_HINT_CODES = new Set([
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'ERR_TLS_CERT_ALTNAME_INVALID',
  'CERT_HAS_EXPIRED',
]);

/** Starts subscribing at once (after the cache was read); see `ControllerClient`. */
export function startControllerClient(options: ControllerClientOptions): ControllerClient {
  const base = checkOptions(options);
  const { namespace, pool, sidecarId, tokenFile, caFile, cacheFile } = options;
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
  const random = options.random ?? Math.random;
  const reportTimeoutMs = Math.min(10_000, Math.max(1_000, reportEveryMs));

  const prefix = base.pathname.replace(/\/+$/, '');
  const query = `?sidecar=${encodeURIComponent(sidecarId)}`;
  const streamUrl = new URL(prefix + snapshotStreamPath(namespace, pool) + query, base);
  const reportUrl = new URL(prefix + reportPath(namespace, pool), base);
  const lib = base.protocol === 'https:' ? https : http;
  const log = options.logger.child({
    component: 'controller-client',
    pool: `${namespace}/${pool}`,
  });

  if (base.protocol === 'http:' && !['localhost', '127.0.0.1', '[::1]'].includes(base.hostname))
    log.warn(
      { controller: base.origin },
      'the controller URL is plain http: the token and API keys travel unencrypted (use https)',
    );

  const stop = new AbortController();
  let closed = false;
  let applied: Applied | undefined;
  let session: Session | undefined;
  let currentStream: ClientRequest | undefined;
  let reportTimer: NodeJS.Timeout | undefined;
  let reportBusy = false;
  let reportAgain = false;
  const reportsInFlight = new Map<ClientRequest, Promise<void>>();
  /** Every socket opened, until its handle is closed: `close()` waits for all of them. */
  const sockets = new Map<Socket, Promise<void>>();
  const track = (req: ClientRequest): void => {
    req.on('socket', (socket) => {
      if (sockets.has(socket)) return;
      sockets.set(
        socket,
        new Promise<void>((resolveSocket) =>
          socket.once('close', () => {
            sockets.delete(socket);
            resolveSocket();
          }),
        ),
      );
    });
  };
  let cachePending: PoolSnapshot | undefined;
  let cacheWriting: Promise<void> | undefined;

  const samePool = (snapshot: PoolSnapshot): boolean =>
    snapshot.pool.namespace === namespace && snapshot.pool.name === pool;

  /** Applies a valid snapshot of our pool; true when we are now in sync with it. */
  const accept = (snapshot: PoolSnapshot, source: 'stream' | 'cache'): boolean => {
    if (applied !== undefined && applied.hash === snapshot.hash) {
      if (applied.version !== snapshot.version) {
        // A new controller leader may renumber the same content: adopt its number, apply nothing.
        log.debug(
          { from: applied.version, to: snapshot.version, hash: snapshot.hash },
          'same snapshot content under a new version; not re-applied',
        );
        applied = { version: snapshot.version, hash: snapshot.hash };
        saveCache(snapshot, source);
      } else {
        log.debug({ version: snapshot.version, hash: snapshot.hash }, 'snapshot unchanged');
      }
      return true;
    }
    try {
      options.onSnapshot(snapshot, source);
    } catch (err) {
      log.error(
        { source, version: snapshot.version, hash: snapshot.hash, err: describe(err) },
        'applying the snapshot failed; the previous configuration stays in force',
      );
      return false;
    }
    applied = { version: snapshot.version, hash: snapshot.hash };
    log.info(
      {
        source,
        version: snapshot.version,
        hash: snapshot.hash,
        mode: snapshot.policy.mode,
        endpoints: snapshot.endpoints.map((e) => e.id),
      },
      'snapshot applied',
    );
    saveCache(snapshot, source);
    return true;
  };

  const saveCache = (snapshot: PoolSnapshot, source: 'stream' | 'cache'): void => {
    if (cacheFile === undefined || source === 'cache') return;
    cachePending = snapshot; // only the newest matters: writes coalesce
    cacheWriting ??= (async () => {
      while (cachePending !== undefined) {
        const next = cachePending;
        cachePending = undefined;
        try {
          await writeFileAtomic(cacheFile, JSON.stringify(next));
          log.debug({ cacheFile, version: next.version }, 'snapshot cache written');
        } catch (err) {
          log.warn(
            { cacheFile, err: describe(err) },
            'cannot write the snapshot cache; a restart while the controller is down will start empty',
          );
        }
      }
      cacheWriting = undefined;
    })();
  };

  const restore = async (): Promise<void> => {
    if (cacheFile === undefined) return;
    const result = await readSnapshotCache(cacheFile);
    if (closed) return;
    if (!result.ok) {
      if (result.reason === 'missing') log.info({ cacheFile }, 'no snapshot cache yet');
      else if (result.reason === 'unreadable')
        log.warn({ cacheFile, code: result.message }, 'cannot read the snapshot cache; ignored');
      else if (result.reason === 'corrupt')
        log.warn({ cacheFile }, 'the snapshot cache is not valid JSON; ignored');
      else
        log.warn(
          { cacheFile, errors: result.errors },
          'the snapshot cache is not a valid snapshot; ignored',
        );
      return;
    }
    const { snapshot } = result;
    if (!samePool(snapshot)) {
      log.warn(
        { cacheFile, cached: `${snapshot.pool.namespace}/${snapshot.pool.name}` },
        'the snapshot cache belongs to another pool; ignored',
      );
      return;
    }
    accept(snapshot, 'cache');
  };

  // ---- reports -------------------------------------------------------------------------------

  const sendReport = (urgent: boolean): void => {
    if (closed || session === undefined) return;
    if (reportBusy) {
      if (urgent) reportAgain = true;
      return;
    }
    let endpoints: EndpointHealthReport[];
    try {
      endpoints = options.currentEndpoints();
    } catch (err) {
      log.warn({ err: describe(err) }, 'report not sent: reading the endpoint health failed');
      return;
    }
    const report: SidecarReport = {
      sidecar: sidecarId,
      appliedVersion: applied?.version ?? 0,
      appliedHash: applied?.hash ?? '',
      endpoints,
    };
    const checked = parseReport(report);
    if (!checked.ok) {
      log.warn({ errors: checked.errors }, 'report not sent: it does not match the report schema');
      return;
    }
    const body = JSON.stringify(report);
    reportBusy = true;
    const req = lib.request(reportUrl, {
      method: 'POST',
      agent: false,
      ca: session.ca,
      timeout: reportTimeoutMs,
      headers: {
        authorization: `Bearer ${session.token}`,
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(body),
        'user-agent': 'switchyard-sidecar',
      },
    });
    const done = new Promise<void>((resolveDone) => {
      req.on('close', () => {
        reportsInFlight.delete(req);
        reportBusy = false;
        resolveDone();
        if (reportAgain) {
          reportAgain = false;
          sendReport(false);
        }
      });
    });
    reportsInFlight.set(req, done);
    track(req);
    req.on('response', (res) => {
      const status = res.statusCode ?? 0;
      if (status >= 200 && status < 300)
        log.debug({ appliedVersion: report.appliedVersion }, 'report sent');
      else log.debug({ status }, 'report refused by the controller');
      res.resume();
      res.on('error', () => undefined);
    });
    req.on('timeout', () => req.destroy(new Error(`no answer in ${reportTimeoutMs} ms`)));
    req.on('error', (err) => {
      if (!closed) log.debug({ err: describe(err) }, 'report failed');
    });
    req.end(body);
  };

  const stopReports = (): void => {
    clearInterval(reportTimer);
    reportTimer = undefined;
  };

  // ---- the stream ----------------------------------------------------------------------------

  const onEvent = (event: SseEvent): void => {
    if (closed) return;
    if (event.type !== 'snapshot') {
      log.debug({ type: event.type }, 'ignoring an event of unknown type');
      return;
    }
    let value: unknown;
    try {
      value = JSON.parse(event.data);
    } catch {
      // Not the parser's message: it quotes the text, which may hold an API key.
      log.error(
        { id: event.id, size: event.data.length },
        'snapshot rejected: not valid JSON; the last good snapshot stays in force',
      );
      return;
    }
    const parsed = parseSnapshot(value);
    if (!parsed.ok) {
      log.error(
        { id: event.id, errors: parsed.errors },
        'snapshot rejected: it does not match the snapshot schema; the last good snapshot stays in force',
      );
      return;
    }
    const snapshot = parsed.value;
    if (!samePool(snapshot)) {
      log.error(
        { id: event.id, got: `${snapshot.pool.namespace}/${snapshot.pool.name}` },
        'snapshot rejected: it is for another pool; the last good snapshot stays in force',
      );
      return;
    }
    if (accept(snapshot, 'stream')) sendReport(true);
  };

  const logRefusal = (status: number, code: string | undefined): void => {
    const fields = { status, code, controller: base.origin };
    if (status === 401)
      log.error(
        { ...fields, tokenFile },
        'the controller rejected the token (401): check that the token file holds a projected ' +
          'ServiceAccount token with audience "switchyard" that has not expired; retrying',
      );
    else if (status === 403)
      log.error(
        fields,
        `the controller refused pool ${namespace}/${pool} (403): the token's ServiceAccount must ` +
          `be in namespace "${namespace}" (a sidecar reads only pools of its own namespace); check --namespace; retrying`,
      );
    else if (status === 404)
      log.error(
        fields,
        `pool ${namespace}/${pool} not found (404): check --namespace and --pool; retrying ` +
          '(the pool may not be created yet)',
      );
    else log.warn(fields, `the controller answered ${status} instead of a stream; retrying`);
  };

  /** One connection, from request to close. Resolves true when the stream delivered any data. */
  const streamOnce = (next: Session): Promise<boolean> =>
    new Promise<boolean>((resolveStream) => {
      let delivered = false;
      let open = false;
      let ended: string | undefined;
      const req = lib.request(streamUrl, {
        method: 'GET',
        agent: false,
        ca: next.ca,
        headers: {
          authorization: `Bearer ${next.token}`,
          accept: 'text/event-stream',
          'cache-control': 'no-cache',
          'user-agent': 'switchyard-sidecar',
          'x-switchyard-protocol': String(SNAPSHOT_PROTOCOL_VERSION),
        },
      });
      currentStream = req;
      track(req);
      const end = (why: string): void => {
        ended ??= why;
        req.destroy();
      };
      // Covers connect, TLS, the response headers and silence on an open stream alike.
      const watchdog = setTimeout(() => {
        log.warn(
          { timeoutMs: heartbeatTimeoutMs, connected: open },
          open
            ? 'no snapshot or heartbeat from the controller in time; reconnecting'
            : 'the controller did not answer in time; retrying',
        );
        end('heartbeat timeout');
      }, heartbeatTimeoutMs);

      req.on('response', (res) => {
        res.on('error', () => undefined); // the request's 'close' reports the end
        const status = res.statusCode ?? 0;
        if (status !== 200) {
          ended ??= `status ${status}`;
          let body = '';
          res.setEncoding('utf8');
          res.on('data', (chunk: string) => {
            body += chunk;
            if (body.length > MAX_REFUSAL_BODY) res.destroy();
          });
          res.on('close', () => {
            let code: string | undefined;
            try {
              const parsed = JSON.parse(body) as { error?: { code?: unknown } };
              const c = parsed.error?.code;
              if (typeof c === 'string') code = c.slice(0, 64);
            } catch {
              // no error code: only the status is logged
            }
            if (!closed) logRefusal(status, code);
            req.destroy();
          });
          return;
        }
        const contentType = String(res.headers['content-type'] ?? '');
        if (!contentType.startsWith('text/event-stream')) {
          log.error(
            { contentType, controller: base.origin },
            'the controller answered 200 but not with an event stream; is --controller the right URL? retrying',
          );
          return end('not an event stream');
        }
        const protocol = res.headers['x-switchyard-protocol'];
        if (protocol !== undefined && protocol !== String(SNAPSHOT_PROTOCOL_VERSION)) {
          log.error(
            { theirs: protocol, ours: SNAPSHOT_PROTOCOL_VERSION },
            'the controller speaks another snapshot protocol version; retrying',
          );
          return end('protocol version');
        }
        open = true;
        session = next;
        log.info({ controller: base.origin, sidecar: sidecarId }, 'connected to the controller');
        reportTimer = setInterval(() => sendReport(false), reportEveryMs);
        const parser = new SseParser({ onEvent }, maxEventSize);
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          if (closed || ended !== undefined) return;
          delivered = true;
          watchdog.refresh();
          try {
            parser.push(chunk);
          } catch (err) {
            if (err instanceof SseEventTooLargeError)
              log.error({ maxEventSize }, `${err.message}; reconnecting`);
            else log.error({ err: describe(err) }, 'handling the stream failed; reconnecting');
            end('stream error');
          }
        });
        res.on('end', () => {
          ended ??= 'closed by the controller';
        });
      });
      req.on('error', (err) => {
        if (closed || ended !== undefined) return;
        ended = 'network error';
        const details = describe(err);
        const hint =
          details.code !== undefined && TLS_HINT_CODES.has(details.code)
            ? ' (TLS: check --ca-file and that the certificate names the controller host)'
            : '';
        log.warn(
          { err: details, controller: base.origin },
          `cannot reach the controller${hint}; retrying`,
        );
      });
      req.on('close', () => {
        clearTimeout(watchdog);
        if (open) {
          stopReports();
          session = undefined;
          if (!closed) log.warn({ reason: ended ?? 'closed' }, 'disconnected from the controller');
        }
        currentStream = undefined;
        resolveStream(delivered);
      });
      req.end();
    });

  const connectOnce = async (): Promise<boolean> => {
    let token: string;
    try {
      token = (await readFile(tokenFile, 'utf8')).trim();
    } catch (err) {
      log.error({ tokenFile, err: describe(err) }, 'cannot read the token file; retrying');
      return false;
    }
    if (token.length === 0) {
      log.error({ tokenFile }, 'the token file is empty; retrying');
      return false;
    }
    let ca: string | undefined;
    if (caFile !== undefined) {
      try {
        ca = await readFile(caFile, 'utf8');
      } catch (err) {
        log.error({ caFile, err: describe(err) }, 'cannot read the CA file; retrying');
        return false;
      }
    }
    if (closed) return false;
    return streamOnce({ token, ca });
  };

  const run = async (): Promise<void> => {
    let failures = 0;
    while (!closed) {
      let delivered = false;
      try {
        delivered = await connectOnce();
      } catch (err) {
        log.error({ err: describe(err) }, 'unexpected failure of the controller connection');
      }
      if (closed) return;
      if (delivered) failures = 0; // the stream worked: the next wait starts small again
      const delayMs = backoffDelayMs(failures, backoff, random);
      failures += 1;
      log.debug({ delayMs, failures }, 'reconnecting to the controller after a pause');
      try {
        await sleep(delayMs, undefined, { signal: stop.signal });
      } catch {
        return; // closed
      }
    }
  };

  const ready = restore().catch((err: unknown) => {
    log.warn({ err: describe(err) }, 'restoring the snapshot cache failed; ignored');
  });
  const loop = ready.then(run);

  let closing: Promise<void> | undefined;
  const close = (): Promise<void> => {
    closing ??= (async () => {
      closed = true;
      stop.abort();
      stopReports();
      currentStream?.destroy();
      for (const req of reportsInFlight.keys()) req.destroy();
      await loop;
      await Promise.all(reportsInFlight.values());
      for (const socket of sockets.keys()) socket.destroy();
      await Promise.all(sockets.values());
      await cacheWriting;
      session = undefined;
    })();
    return closing;
  };

  return {
    ready,
    connected: () => session !== undefined,
    lastAppliedVersion: () => applied?.version,
    close,
  };
}
