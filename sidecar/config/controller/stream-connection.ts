/**
 * One connection of the sidecar to the controller's snapshot stream (snapshot-stream.ts runs one
 * after the other): the request, its watchdog, a refusal's reason, the open stream's events.
 */
import type http from 'node:http';
import type https from 'node:https';
import type { Logger } from 'pino';
import { SNAPSHOT_PROTOCOL_VERSION } from '../../../crds/snapshot.ts';
import { describeError } from './describe-error.ts';
import type { SocketTracker } from './socket-tracker.ts';
import { SseEventTooLargeError, SseParser, type SseEvent } from './sse-parser.ts';

/** What a connection was opened with: the reports of that connection use the same. */
export interface ControllerSession {
  token: string;
  ca: string | undefined;
}

/** The stream's settings a connection uses. */
export interface ConnectionOptions {
  url: URL;
  /** The controller's origin, for log lines. */
  controller: string;
  lib: typeof http | typeof https;
  sidecarId: string;
  heartbeatTimeoutMs: number;
  maxEventSize: number;
  tracker: SocketTracker;
  log: Logger;
}

const MAX_REFUSAL_BODY = 4096;

/** Certificate errors, for which the log line says what to check. */
const TLS_HINT_CODES = new Set([
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'ERR_TLS_CERT_ALTNAME_INVALID',
  'CERT_HAS_EXPIRED',
]);

/** What a connection tells its stream, and asks of it. */
export interface ConnectionHooks {
  /** The stream was closed: the connection's end is expected, and not logged. */
  closed(): boolean;
  /** The stream is open: an event stream of our protocol version (its response's headers). */
  opened(headers: http.IncomingHttpHeaders): void;
  /** The open stream closed. */
  lost(): void;
  event(event: SseEvent): void;
  refused(status: number, code: string | undefined, message: string | undefined): void;
}

/**
 * One connection to the controller, from request to close, as a handler object (as upstream.ts
 * calls each attempt through one): its state is fields and each event of the request is a method,
 * instead of closures in one function. `done` resolves true when the stream delivered any data.
 */
export class StreamConnection {
  readonly request: http.ClientRequest;
  readonly done: Promise<boolean>;
  readonly #options: ConnectionOptions;
  readonly #hooks: ConnectionHooks;
  /** Covers connect, TLS, the response headers and silence on an open stream alike. */
  readonly #watchdog: NodeJS.Timeout;
  #resolve!: (delivered: boolean) => void;
  #delivered = false;
  #open = false;
  /** Why the connection ends, once something ended it (the first reason wins). */
  #ended: string | undefined;

  constructor(options: ConnectionOptions, session: ControllerSession, hooks: ConnectionHooks) {
    this.#options = options;
    this.#hooks = hooks;
    this.done = new Promise((resolve) => (this.#resolve = resolve));
    this.request = options.lib.request(options.url, {
      method: 'GET',
      agent: false,
      ca: session.ca,
      headers: {
        authorization: `Bearer ${session.token}`,
        accept: 'text/event-stream',
        'cache-control': 'no-cache',
        'user-agent': 'switchyard-sidecar',
        'x-switchyard-protocol': String(SNAPSHOT_PROTOCOL_VERSION),
      },
    });
    options.tracker.track(this.request);
    this.#watchdog = setTimeout(() => this.#onTimeout(), options.heartbeatTimeoutMs);
    this.request.on('response', (res) => this.#onResponse(res));
    this.request.on('error', (err) => this.#onError(err));
    this.request.on('close', () => this.#onClose());
    this.request.end();
  }

  #end(why: string): void {
    this.#ended ??= why;
    this.request.destroy();
  }

  #onTimeout(): void {
    this.#options.log.warn(
      { timeoutMs: this.#options.heartbeatTimeoutMs, connected: this.#open },
      this.#open
        ? 'no snapshot or heartbeat from the controller in time; reconnecting'
        : 'the controller did not answer in time; retrying',
    );
    this.#end('heartbeat timeout');
  }

  #onResponse(res: http.IncomingMessage): void {
    const { log, controller } = this.#options;
    res.on('error', () => undefined); // the request's 'close' reports the end
    const status = res.statusCode ?? 0;
    if (status !== 200) {
      this.#onRefusal(res, status);
      return;
    }
    const contentType = String(res.headers['content-type'] ?? '');
    if (!contentType.startsWith('text/event-stream')) {
      log.error(
        { contentType, controller },
        'the controller answered 200 but not with an event stream; is --controller the right URL? retrying',
      );
      this.#end('not an event stream');
      return;
    }
    const protocol = res.headers['x-switchyard-protocol'];
    if (protocol !== undefined && protocol !== String(SNAPSHOT_PROTOCOL_VERSION)) {
      log.error(
        { theirs: protocol, ours: SNAPSHOT_PROTOCOL_VERSION },
        'the controller speaks another snapshot protocol version; retrying',
      );
      this.#end('protocol version');
      return;
    }
    this.#onOpen(res);
  }

  /** A refusal: its body names the reason (the controller's refusals carry no pool data). */
  #onRefusal(res: http.IncomingMessage, status: number): void {
    this.#ended ??= `status ${status}`;
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
        // e.g. which pools the token's pod follows
        const m = parsed.error?.message;
        if (typeof m === 'string') message = m.slice(0, 500);
      } catch {
        // no error code: only the status is logged
      }
      if (!this.#hooks.closed()) this.#hooks.refused(status, code, message);
      this.request.destroy();
    });
  }

  #onOpen(res: http.IncomingMessage): void {
    const { log, controller, sidecarId, maxEventSize } = this.#options;
    this.#open = true;
    log.info({ controller, sidecar: sidecarId }, 'connected to the controller');
    if (res.headers['x-switchyard-api-keys'] === 'withheld')
      log.warn(
        { controller },
        'the controller withholds API keys from this sidecar: its token is bound to no pod (only a pod labelled switchyard.dev/pool=<pool> gets them); backends that need a key will refuse its requests',
      );
    this.#hooks.opened(res.headers);
    const parser = new SseParser({ onEvent: (event) => this.#hooks.event(event) }, maxEventSize);
    res.setEncoding('utf8');
    res.on('data', (chunk: string) => this.#onData(parser, chunk));
    res.on('end', () => {
      this.#ended ??= 'closed by the controller';
    });
  }

  #onData(parser: SseParser, chunk: string): void {
    const { log, maxEventSize } = this.#options;
    if (this.#hooks.closed() || this.#ended !== undefined) return;
    this.#delivered = true;
    this.#watchdog.refresh();
    try {
      parser.push(chunk);
    } catch (err) {
      if (err instanceof SseEventTooLargeError)
        log.error({ maxEventSize }, `${err.message}; reconnecting`);
      else log.error({ err: describeError(err) }, 'handling the stream failed; reconnecting');
      this.#end('stream error');
    }
  }

  #onError(err: Error): void {
    if (this.#hooks.closed() || this.#ended !== undefined) return;
    this.#ended = 'network error';
    const details = describeError(err);
    const hint =
      details.code !== undefined && TLS_HINT_CODES.has(details.code)
        ? ' (TLS: check --ca-file and that the certificate names the controller host)'
        : '';
    this.#options.log.warn(
      { err: details, controller: this.#options.controller },
      `cannot reach the controller${hint}; retrying`,
    );
  }

  #onClose(): void {
    clearTimeout(this.#watchdog);
    if (this.#open) {
      this.#hooks.lost();
      if (!this.#hooks.closed())
        this.#options.log.warn(
          { reason: this.#ended ?? 'closed' },
          'disconnected from the controller',
        );
    }
    this.#resolve(this.#delivered);
  }
}
