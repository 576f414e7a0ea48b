/**
 * One connection of the sidecar to the controller's snapshot stream (snapshot-stream.ts runs one
 * after the other): the request, its watchdog, a refusal's reason, the open stream's events.
 */
import type * as NodeHttp2 from 'node:http2';
import type { Logger } from 'pino';
import { SNAPSHOT_PROTOCOL_VERSION } from '../../../crds/snapshot.ts';
import { describeError } from './describe-error.ts';
import type { ControllerConnections, ControllerSession } from './controller-connections.ts';
import { SseEventTooLargeError, SseParser, type SseEvent } from './sse-parser.ts';

/** The stream's settings a connection uses. */
export interface ConnectionOptions {
  url: URL;
  /** The controller's origin, for log lines. */
  controller: string;
  /** The sidecar's connection to the controller, shared with its other pools. */
  connections: ControllerConnections;
  sidecarId: string;
  heartbeatTimeoutMs: number;
  maxEventSize: number;
  log: Logger;
}

const MAX_REFUSAL_BODY = 4096;

/**
 * A stream not answered within the heartbeat timeout, on a connection whose PING is answered (or
 * whose TLS handshake the controller has begun), waits this many more timeouts before it is given
 * up on (35 s × 4 = 140 s in all by default).
 */
const MAX_BUSY_WAITS = 3;

/** Certificate errors, for which the log line says what to check. */
const TLS_HINT_CODES = new Set([
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'ERR_TLS_CERT_ALTNAME_INVALID',
  'CERT_HAS_EXPIRED',
]);

/**
 * The TLS alert of a server that offers no HTTP/2 (ALPN): a controller older than this sidecar,
 * which speaks HTTP/1.1 only (docs/snapshot-protocol.md, "Transport").
 */
const NO_HTTP2 = 'ERR_SSL_TLSV1_ALERT_NO_APPLICATION_PROTOCOL';

/** What a connection tells its stream, and asks of it. */
export interface ConnectionHooks {
  /** The stream was closed: the connection's end is expected, and not logged. */
  closed(): boolean;
  /** The stream is open: an event stream of our protocol version (its response's headers). */
  opened(headers: NodeHttp2.IncomingHttpHeaders): void;
  /** The open stream closed. */
  lost(): void;
  event(event: SseEvent): void;
  refused(status: number, code: string | undefined, message: string | undefined): void;
}

/**
 * One snapshot stream of the controller, from request to close (an HTTP/2 stream on the sidecar's
 * shared connection), as a handler object (as upstream.ts calls each attempt through one): its
 * state is fields and each event of the request is a method, instead of closures in one function.
 * `done` resolves true when the stream delivered any data.
 */
export class StreamConnection {
  /** Undefined when no request could be made (the connections were closed). */
  readonly #request: NodeHttp2.ClientHttp2Stream | undefined;
  readonly done: Promise<boolean>;
  readonly #options: ConnectionOptions;
  readonly #hooks: ConnectionHooks;
  /** Covers connect, TLS, the response headers and silence on an open stream alike. */
  readonly #watchdog: NodeJS.Timeout;
  #resolve!: (delivered: boolean) => void;
  #delivered = false;
  /** Timeouts before the first answer that a PING showed the controller alive (busy). */
  #waitedForAnswers = 0;
  #pingTimer: NodeJS.Timeout | undefined;
  #open = false;
  /** Why the connection ends, once something ended it (the first reason wins). */
  #ended: string | undefined;

  constructor(options: ConnectionOptions, session: ControllerSession, hooks: ConnectionHooks) {
    this.#options = options;
    this.#hooks = hooks;
    this.done = new Promise((resolve) => (this.#resolve = resolve));
    let request: NodeHttp2.ClientHttp2Stream | undefined;
    try {
      request = options.connections.request(
        options.url,
        session,
        {
          ':method': 'GET',
          accept: 'text/event-stream',
          'cache-control': 'no-cache',
          'x-switchyard-protocol': String(SNAPSHOT_PROTOCOL_VERSION),
        },
        { endStream: true },
      );
    } catch {
      request = undefined; // closed meanwhile: nothing to stream
    }
    this.#request = request;
    this.#watchdog = setTimeout(() => this.#onTimeout(), options.heartbeatTimeoutMs);
    if (request === undefined) {
      this.#onClose();
      return;
    }
    request.on('response', (headers) => this.#onResponse(request, headers));
    request.on('error', (err: Error) => this.#onError(err));
    request.on('close', () => this.#onClose());
  }

  /** Ends this stream (the connection and the sidecar's other streams stay). */
  destroy(): void {
    this.#request?.destroy();
  }

  #end(why: string): void {
    this.#ended ??= why;
    this.#request?.destroy();
  }

  #onTimeout(): void {
    if (
      !this.#open &&
      this.#waitedForAnswers < MAX_BUSY_WAITS &&
      (this.#handshaking() || this.#pingController())
    )
      return;
    this.#giveUp();
  }

  /**
   * No answer yet because the connection is still being set up: TCP is connected and the TLS
   * handshake under way. A controller that answered the TCP handshake but not yet the TLS one is
   * alive and behind (at 10,000 sidecars, a replica that shares its cores with the fleet bench's
   * subscribers took tens of seconds per handshake), and a new connection would start its
   * handshake over at the back of the same queue. So it waits another timeout, as a busy one
   * does; a connection TCP never opened is given up on as before.
   */
  #handshaking(): boolean {
    const session = this.#request?.session;
    if (session === undefined || session.destroyed || session.closed || !session.connecting)
      return false;
    const socket = session.socket as { connecting?: boolean } | undefined | null;
    if (socket === undefined || socket === null || socket.connecting !== false) return false;
    this.#waitedForAnswers++;
    this.#options.log.info(
      { waitedMs: this.#waitedForAnswers * this.#options.heartbeatTimeoutMs },
      'the controller has not finished the TLS handshake yet (busy); waiting',
    );
    this.#watchdog.refresh();
    return true;
  }

  /**
   * No answer yet, on a connection that is up: asks the controller for an HTTP/2 PING. Answered,
   * it is alive and only slow (a replica that just took over a killed one's sidecars reviews and
   * greets thousands at once): the stream waits one more timeout instead of going to the back of
   * the queue with a new request, which is how a fleet turns a busy replica into a retry storm.
   * Unanswered within another heartbeat timeout, the connection is given up on as before: a
   * replica whose event loop turns once in 8-11 s (measured, 10,000 sidecars on this machine)
   * answers a PING that late too, and 10 s (as this was) gave up on it. False when no PING could
   * be sent.
   */
  #pingController(): boolean {
    const session = this.#request?.session;
    if (session === undefined || session.destroyed || session.closed || session.connecting)
      return false;
    // An answer that came meanwhile means the connection is alive after all.
    const pingTimer = setTimeout(() => {
      if (!this.#open && this.#ended === undefined) this.#giveUp();
    }, this.#options.heartbeatTimeoutMs);
    this.#pingTimer = pingTimer;
    let sent: boolean;
    try {
      sent = session.ping((err) => {
        clearTimeout(pingTimer);
        if (this.#hooks.closed() || this.#ended !== undefined || this.#open) return;
        if (err !== null) {
          this.#giveUp();
          return;
        }
        this.#waitedForAnswers++;
        this.#options.log.info(
          { waitedMs: this.#waitedForAnswers * this.#options.heartbeatTimeoutMs },
          'the controller is alive but has not answered yet (busy); waiting',
        );
        this.#watchdog.refresh();
      });
    } catch {
      sent = false;
    }
    if (!sent) clearTimeout(pingTimer);
    return sent;
  }

  #giveUp(): void {
    this.#options.log.warn(
      {
        timeoutMs: this.#options.heartbeatTimeoutMs,
        connected: this.#open,
        ...(this.#waitedForAnswers > 0 && {
          waitedMs: (this.#waitedForAnswers + 1) * this.#options.heartbeatTimeoutMs,
        }),
      },
      this.#open
        ? 'no snapshot or heartbeat from the controller in time; reconnecting'
        : 'the controller did not answer in time; retrying',
    );
    this.#ended ??= 'heartbeat timeout';
    // Silence on the stream means the connection under it is presumed dead: a new one, for every
    // pool of this sidecar (a stream of a live connection gets a heartbeat every 10 s).
    if (this.#request !== undefined) this.#options.connections.reset(this.#request);
  }

  #onResponse(res: NodeHttp2.ClientHttp2Stream, headers: NodeHttp2.IncomingHttpHeaders): void {
    const { log, controller } = this.#options;
    const status = Number(headers[':status'] ?? 0);
    if (status !== 200) {
      this.#onRefusal(res, status);
      return;
    }
    const contentType = String(headers['content-type'] ?? '');
    if (!contentType.startsWith('text/event-stream')) {
      log.error(
        { contentType, controller },
        'the controller answered 200 but not with an event stream; is --controller the right URL? retrying',
      );
      this.#end('not an event stream');
      return;
    }
    const protocol = headers['x-switchyard-protocol'];
    if (protocol !== undefined && protocol !== String(SNAPSHOT_PROTOCOL_VERSION)) {
      log.error(
        { theirs: protocol, ours: SNAPSHOT_PROTOCOL_VERSION },
        'the controller speaks another snapshot protocol version; retrying',
      );
      this.#end('protocol version');
      return;
    }
    this.#onOpen(res, headers);
  }

  /** A refusal: its body names the reason (the controller's refusals carry no pool data). */
  #onRefusal(res: NodeHttp2.ClientHttp2Stream, status: number): void {
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
      res.destroy();
    });
  }

  #onOpen(res: NodeHttp2.ClientHttp2Stream, headers: NodeHttp2.IncomingHttpHeaders): void {
    const { log, controller, sidecarId, maxEventSize } = this.#options;
    this.#open = true;
    log.info({ controller, sidecar: sidecarId }, 'connected to the controller');
    if (headers['x-switchyard-api-keys'] === 'withheld')
      log.warn(
        { controller },
        'the controller withholds API keys from this sidecar: its token is bound to no pod (only a pod labelled switchyard.dev/pool=<pool> gets them); backends that need a key will refuse its requests',
      );
    this.#hooks.opened(headers);
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
    // A stream of a connection that failed (refused, a TLS error) ends with ERR_HTTP2_STREAM_CANCEL
    // whose cause is the connection's error: that is the one worth logging.
    const cause = (err as { cause?: unknown }).cause;
    const details = describeError(
      (err as NodeJS.ErrnoException).code === 'ERR_HTTP2_STREAM_CANCEL' && cause instanceof Error
        ? cause
        : err,
    );
    const hint =
      details.code === NO_HTTP2
        ? ' (the controller speaks no HTTP/2: it is older than this sidecar; upgrade the controller first)'
        : details.code !== undefined && TLS_HINT_CODES.has(details.code)
          ? ' (TLS: check --ca-file and that the certificate names the controller host)'
          : '';
    this.#options.log.warn(
      { err: details, controller: this.#options.controller },
      `cannot reach the controller${hint}; retrying`,
    );
  }

  #onClose(): void {
    clearTimeout(this.#watchdog);
    clearTimeout(this.#pingTimer);
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
