import { readFile } from 'node:fs/promises';
import type http from 'node:http';
import type https from 'node:https';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import {
  LOAD_EVENT,
  SNAPSHOT_PROTOCOL_VERSION,
  parseLoad,
  parseSnapshot,
  type PoolLoad,
  type PoolSnapshot,
} from '../../../crds/snapshot.ts';
import { describeError } from './describe-error.ts';
import type { SocketTracker } from './socket-tracker.ts';
import { SseEventTooLargeError, SseParser, type SseEvent } from './sse-parser.ts';

export interface BackoffOptions {
  initialMs: number;
  maxMs: number;
}

/** What a connection was opened with: the reports of that connection use the same. */
export interface ControllerSession {
  token: string;
  ca: string | undefined;
}

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

const TLS_HINT_CODES = new Set([
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'ERR_TLS_CERT_ALTNAME_INVALID',
  'CERT_HAS_EXPIRED',
]);

export interface SnapshotStreamOptions {
  url: URL;
  /** The controller's origin, for log lines. */
  controller: string;
  lib: typeof http | typeof https;
  namespace: string;
  pool: string;
  sidecarId: string;
  tokenFile: string;
  caFile: string | undefined;
  heartbeatTimeoutMs: number;
  backoff: BackoffOptions;
  random: () => number;
  maxEventSize: number;
  tracker: SocketTracker;
  log: Logger;
  /** A stream is open (status 200, an event stream of our protocol version). */
  onConnected(session: ControllerSession): void;
  /** The open stream closed. */
  onDisconnected(): void;
  /** A valid snapshot of our pool arrived. */
  onSnapshot(snapshot: PoolSnapshot): void;
  /** A valid `load` event arrived: what the pool's servers last reported. */
  onLoad(load: PoolLoad): void;
}

/**
 * The subscription to the pool's snapshot stream: one connection at a time, each with the token
 * and CA read afresh, reconnecting with exponential backoff and full jitter until `close()`.
 * Refusals name what to check; invalid events are logged and skipped.
 */
export class SnapshotStream {
  readonly #options: SnapshotStreamOptions;
  readonly #stop = new AbortController();
  #closed = false;
  #current: http.ClientRequest | undefined;
  #session: ControllerSession | undefined;

  constructor(options: SnapshotStreamOptions) {
    this.#options = options;
  }

  /** True while a stream is open. */
  get connected(): boolean {
    return this.#session !== undefined;
  }

  /** Connects, and reconnects after every end, until `close()`. Never rejects. */
  async run(): Promise<void> {
    const { log, backoff, random } = this.#options;
    let failures = 0;
    while (!this.#closed) {
      let delivered = false;
      try {
        delivered = await this.#connectOnce();
      } catch (err) {
        log.error({ err: describeError(err) }, 'unexpected failure of the controller connection');
      }
      if (this.#closed) return;
      if (delivered) failures = 0; // the stream worked: the next wait starts small again
      const delayMs = backoffDelayMs(failures, backoff, random);
      failures += 1;
      log.debug({ delayMs, failures }, 'reconnecting to the controller after a pause');
      try {
        await sleep(delayMs, undefined, { signal: this.#stop.signal });
      } catch {
        return; // closed
      }
    }
  }

  /** Ends the connection and the loop; `run()` resolves soon after. */
  close(): void {
    this.#closed = true;
    this.#stop.abort();
    this.#current?.destroy();
  }

  /** Reads the credentials, then streams once. Resolves true when the stream delivered any data. */
  async #connectOnce(): Promise<boolean> {
    const { tokenFile, caFile, log } = this.#options;
    let token: string;
    try {
      token = (await readFile(tokenFile, 'utf8')).trim();
    } catch (err) {
      log.error({ tokenFile, err: describeError(err) }, 'cannot read the token file; retrying');
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
        log.error({ caFile, err: describeError(err) }, 'cannot read the CA file; retrying');
        return false;
      }
    }
    if (this.#closed) return false;
    return this.#streamOnce({ token, ca });
  }

  /** One connection, from request to close. Resolves true when the stream delivered any data. */
  #streamOnce(next: ControllerSession): Promise<boolean> {
    const { log, controller, heartbeatTimeoutMs, maxEventSize } = this.#options;
    return new Promise<boolean>((resolveStream) => {
      let delivered = false;
      let open = false;
      let ended: string | undefined;
      const req = this.#options.lib.request(this.#options.url, {
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
      this.#current = req;
      this.#options.tracker.track(req);
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
            let message: string | undefined;
            try {
              const parsed = JSON.parse(body) as { error?: { code?: unknown; message?: unknown } };
              const c = parsed.error?.code;
              if (typeof c === 'string') code = c.slice(0, 64);
              // The controller's refusals carry no pool data: its message says why, e.g. which
              // pools the token's pod follows.
              const m = parsed.error?.message;
              if (typeof m === 'string') message = m.slice(0, 500);
            } catch {
              // no error code: only the status is logged
            }
            if (!this.#closed) this.#logRefusal(status, code, message);
            req.destroy();
          });
          return;
        }
        const contentType = String(res.headers['content-type'] ?? '');
        if (!contentType.startsWith('text/event-stream')) {
          log.error(
            { contentType, controller },
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
        this.#session = next;
        log.info({ controller, sidecar: this.#options.sidecarId }, 'connected to the controller');
        if (res.headers['x-switchyard-api-keys'] === 'withheld')
          log.warn(
            { controller },
            'the controller withholds API keys from this sidecar: its token is bound to no pod (only a pod labelled switchyard.dev/pool=<pool> gets them); backends that need a key will refuse its requests',
          );
        this.#options.onConnected(next);
        const parser = new SseParser({ onEvent: (event) => this.#onEvent(event) }, maxEventSize);
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          if (this.#closed || ended !== undefined) return;
          delivered = true;
          watchdog.refresh();
          try {
            parser.push(chunk);
          } catch (err) {
            if (err instanceof SseEventTooLargeError)
              log.error({ maxEventSize }, `${err.message}; reconnecting`);
            else log.error({ err: describeError(err) }, 'handling the stream failed; reconnecting');
            end('stream error');
          }
        });
        res.on('end', () => {
          ended ??= 'closed by the controller';
        });
      });
      req.on('error', (err) => {
        if (this.#closed || ended !== undefined) return;
        ended = 'network error';
        const details = describeError(err);
        const hint =
          details.code !== undefined && TLS_HINT_CODES.has(details.code)
            ? ' (TLS: check --ca-file and that the certificate names the controller host)'
            : '';
        log.warn({ err: details, controller }, `cannot reach the controller${hint}; retrying`);
      });
      req.on('close', () => {
        clearTimeout(watchdog);
        if (open) {
          this.#session = undefined;
          this.#options.onDisconnected();
          if (!this.#closed)
            log.warn({ reason: ended ?? 'closed' }, 'disconnected from the controller');
        }
        this.#current = undefined;
        resolveStream(delivered);
      });
      req.end();
    });
  }

  #onEvent(event: SseEvent): void {
    const { log, namespace, pool } = this.#options;
    if (this.#closed) return;
    if (event.type === LOAD_EVENT) {
      this.#onLoad(event);
      return;
    }
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
    if (snapshot.pool.namespace !== namespace || snapshot.pool.name !== pool) {
      log.error(
        { id: event.id, got: `${snapshot.pool.namespace}/${snapshot.pool.name}` },
        'snapshot rejected: it is for another pool; the last good snapshot stays in force',
      );
      return;
    }
    this.#options.onSnapshot(snapshot);
  }

  /**
   * A `load` event: advisory, so a bad one is dropped at debug level (the next arrives within a
   * second) and never affects the snapshot in force.
   */
  #onLoad(event: SseEvent): void {
    const { log } = this.#options;
    let value: unknown;
    try {
      value = JSON.parse(event.data);
    } catch {
      log.debug({ size: event.data.length }, 'load event ignored: not valid JSON');
      return;
    }
    const parsed = parseLoad(value);
    if (!parsed.ok) {
      log.debug({ errors: parsed.errors }, 'load event ignored: it does not match the load schema');
      return;
    }
    this.#options.onLoad(parsed.value);
  }

  #logRefusal(status: number, code: string | undefined, message: string | undefined): void {
    const { log, controller, tokenFile, namespace, pool } = this.#options;
    const fields = { status, code, controller, ...(message === undefined ? {} : { message }) };
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
          `be in namespace "${namespace}" (a sidecar reads only pools of its own namespace; check --namespace), ` +
          `and the pod the token is bound to must be labelled switchyard.dev/pool=${pool} (message says which); retrying`,
      );
    else if (status === 404)
      log.error(
        fields,
        `pool ${namespace}/${pool} not found (404): check --namespace and --pool; retrying ` +
          '(the pool may not be created yet)',
      );
    else log.warn(fields, `the controller answered ${status} instead of a stream; retrying`);
  }
}
