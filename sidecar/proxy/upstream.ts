/**
 * The upstream side of the proxy: keep-alive agents, and one HTTP request per attempt whose
 * events go straight to a handler object (undici's dispatcher style), with no event emitter or
 * lookup table in between.
 *
 * This replaces the sidecar's use of http-proxy-3, whose only per-call hook is an error
 * callback: its response arrived as a server-wide `proxyRes` event that had to be routed back to
 * its attempt through a WeakMap, with the attempt smuggled through the options by a cast. What
 * http-proxy-3 did for the sidecar's options (`target` URL, `changeOrigin`, `ignorePath`,
 * `xfwd: false`, `selfHandleResponse`, `connectTimeout`, a buffered body) is done here:
 * the client's end-to-end headers plus ours, `Host` set to the target's, `trailer` never sent
 * (the exchange drops every hop-by-hop header before), no `x-forwarded-*`, the path and query of
 * the target URL, an IPv6 host without its brackets, certificates verified, and a connect timeout
 * armed only while a fresh socket connects (`ECONNECT_TIMEOUT`). The client abort that leaked
 * sockets under http-proxy 1.18 is the exchange's `destroy-upstream` effect (tested by counting
 * sockets in /proc).
 */
import type {
  Agent,
  ClientRequest,
  IncomingHttpHeaders,
  IncomingMessage,
  OutgoingHttpHeaders,
  RequestOptions,
} from 'node:http';
import { http, https } from '../../lib/node-http.ts';
import type { Socket } from 'node:net';
import type { Readable } from 'node:stream';

/** What an upstream request reports, once each at most (`onData` per chunk). */
export interface UpstreamHandler {
  onResponseHead(status: number, headers: IncomingHttpHeaders): void;
  onData(chunk: Buffer): void;
  /** `trailers`: the upstream's trailer fields, when it sent any (passed on to the client). */
  onEnd(trailers?: Readonly<Record<string, string>>): void;
  /**
   * The request failed, or the response broke off before its end: `code` is the error's code
   * (ECONNREFUSED, ECONNRESET, ECONNECT_TIMEOUT, ETIMEDOUT for the idle timeout) or its message.
   * Nothing is reported after this, nor after `abort()` or `drain()`.
   */
  onError(code: string): void;
}

/** Where an attempt goes: a parsed URL, kept in the form `http.request` takes. */
export interface UpstreamTarget {
  readonly https: boolean;
  /** Without IPv6 brackets (getaddrinfo does not take them). */
  readonly hostname: string;
  readonly port: number;
  /** Path and query. */
  readonly path: string;
  /** The `Host` header: the target's host and port as the URL writes them. */
  readonly host: string;
}

export function upstreamTarget(url: string): UpstreamTarget {
  const parsed = new URL(url);
  const https = parsed.protocol === 'https:';
  const hostname =
    parsed.hostname.startsWith('[') && parsed.hostname.endsWith(']')
      ? parsed.hostname.slice(1, -1)
      : parsed.hostname;
  return {
    https,
    hostname,
    port: parsed.port === '' ? (https ? 443 : 80) : Number(parsed.port),
    path: parsed.pathname + parsed.search,
    host: parsed.host,
  };
}

export interface UpstreamRequestInit {
  target: UpstreamTarget;
  method: string;
  /** Every header to send but `host`, which comes from the target. */
  headers: OutgoingHttpHeaders;
  /** The whole body, or a stream passed through as it arrives (multipart uploads). */
  body: Buffer | Readable;
  connectTimeoutMs: number;
}

/** One request in flight, as its attempt drives it. */
export interface UpstreamCall {
  /** Stops reading the response (the client is slow); `resume()` goes on. */
  pause(): void;
  resume(): void;
  /** From now on, a silence of `ms` between body chunks fails the request with ETIMEDOUT. */
  watchIdle(ms: number): void;
  /** Destroys request and response; the handler hears nothing more. */
  abort(): void;
  /** Reads and drops the rest of the response for at most `limitMs`; the handler hears nothing more. */
  drain(limitMs: number): void;
}

/** What sends the requests (`Upstream`; tests script a fake). */
export interface UpstreamClient {
  request(init: UpstreamRequestInit, handler: UpstreamHandler): UpstreamCall;
  /** Closes every kept-alive connection. */
  close(): void;
}

const KEEP_ALIVE = { keepAlive: true, maxSockets: Infinity, scheduling: 'lifo' } as const;

/** The agents every attempt's request goes through; one per sidecar. */
export class Upstream implements UpstreamClient {
  readonly #httpAgent = new http.Agent(KEEP_ALIVE);
  readonly #httpsAgent = new https.Agent(KEEP_ALIVE);

  /** Sends a request; its events go to `handler`. Throws only for headers Node refuses to send. */
  request(init: UpstreamRequestInit, handler: UpstreamHandler): UpstreamRequest {
    return new UpstreamRequest(
      init,
      init.target.https ? this.#httpsAgent : this.#httpAgent,
      handler,
    );
  }

  /** Closes every kept-alive connection. */
  close(): void {
    this.#httpAgent.destroy();
    this.#httpsAgent.destroy();
  }
}

/**
 * One upstream HTTP request and its response. The listeners are bound once per request; the
 * streaming path per chunk is one call of `handler.onData`.
 */
export class UpstreamRequest implements UpstreamCall {
  readonly #handler: UpstreamHandler;
  readonly #req: ClientRequest;
  readonly #connectTimeoutMs: number;
  #res: IncomingMessage | undefined;
  /** Set once the handler was told the end or an error, or must hear nothing more. */
  #quiet = false;
  /** Aborted before it had a socket: destroy the socket as soon as it has one. */
  #abortOnSocket = false;
  /** `watchIdle`'s limit (0: not watching); the timer is off while paused. */
  #idleMs = 0;
  #paused = false;
  /** Body chunks received so far (the idle timer's check that nothing came). */
  #chunks = 0;

  constructor(init: UpstreamRequestInit, agent: Agent, handler: UpstreamHandler) {
    this.#handler = handler;
    this.#connectTimeoutMs = init.connectTimeoutMs;
    const { target } = init;
    init.headers.host = target.host;
    const options: RequestOptions = {
      hostname: target.hostname,
      port: target.port,
      path: target.path,
      method: init.method,
      headers: init.headers,
      agent,
    };
    this.#req = (target.https ? https : http).request(options);
    this.#req.on('socket', this.#onSocket);
    this.#req.on('response', this.#onResponse);
    this.#req.on('error', this.#onError);
    if (Buffer.isBuffer(init.body)) this.#req.end(init.body);
    else init.body.pipe(this.#req);
  }

  /**
   * Stops reading the response (the client is slow); `resume()` goes on. The idle timer stops
   * too: the upstream is silent because we stopped reading, which is the client's doing, not the
   * endpoint's (docs/policy.md, "Whose fault an attempt is").
   */
  pause(): void {
    this.#paused = true;
    if (this.#idleMs > 0) this.#req.setTimeout(0);
    this.#res?.pause();
  }

  resume(): void {
    this.#paused = false;
    if (this.#idleMs > 0) this.#req.setTimeout(this.#idleMs);
    this.#res?.resume();
  }

  /** From now on, a silence of `ms` between body chunks fails the request with ETIMEDOUT. */
  watchIdle(ms: number): void {
    // One listener for the request's life: pause/resume only re-arm the socket's timer.
    if (this.#idleMs === 0) this.#req.on('timeout', this.#onIdle);
    this.#idleMs = ms;
    if (!this.#paused) this.#req.setTimeout(ms);
  }

  /** Destroys request and response; the handler hears nothing more. */
  abort(): void {
    this.#quiet = true;
    if (this.#req.socket === null) {
      // Destroyed before it has its socket, a request hands that socket to the agent's pool
      // instead (a new connection left open and idle): destroy the request once it has one.
      this.#abortOnSocket = true;
      return;
    }
    this.#req.destroy();
    this.#res?.destroy();
  }

  /**
   * Reads and drops the rest of the response so its connection returns to the pool, but for at
   * most `limitMs`: an upstream that stalls after its head must not hold the socket. The handler
   * hears nothing more.
   */
  drain(limitMs: number): void {
    this.#quiet = true;
    const res = this.#res;
    if (res === undefined) {
      this.abort();
      return;
    }
    const limit = setTimeout(() => res.destroy(), limitMs);
    res.once('close', () => clearTimeout(limit));
    res.resume();
  }

  readonly #onSocket = (socket: Socket): void => {
    if (this.#abortOnSocket) {
      this.#req.destroy();
      return;
    }
    // Only while a fresh connection is being made: a kept-alive socket is already connected.
    if (this.#connectTimeoutMs <= 0 || !socket.connecting) return;
    const timer = setTimeout(() => {
      cleanup();
      socket.destroy(Object.assign(new Error('ECONNECT_TIMEOUT'), { code: 'ECONNECT_TIMEOUT' }));
    }, this.#connectTimeoutMs);
    timer.unref();
    const cleanup = (): void => {
      clearTimeout(timer);
      socket.off('connect', cleanup);
      socket.off('error', cleanup);
      socket.off('close', cleanup);
    };
    socket.once('connect', cleanup);
    socket.once('error', cleanup);
    socket.once('close', cleanup);
  };

  readonly #onResponse = (res: IncomingMessage): void => {
    this.#res = res;
    res.on('data', this.#onData);
    res.on('end', this.#onEnd);
    res.on('error', this.#onError);
    res.on('close', this.#onClose);
    if (this.#quiet) {
      res.destroy();
      return;
    }
    this.#handler.onResponseHead(res.statusCode ?? 502, res.headers);
  };

  readonly #onData = (chunk: Buffer): void => {
    this.#chunks++;
    if (!this.#quiet) this.#handler.onData(chunk);
  };

  readonly #onEnd = (): void => {
    if (this.#quiet) return;
    this.#quiet = true;
    const res = this.#res;
    this.#handler.onEnd(
      res !== undefined && res.rawTrailers.length > 0 ? trailersOf(res) : undefined,
    );
  };

  readonly #onError = (err: NodeJS.ErrnoException): void => {
    this.#fail(err.code ?? err.message);
  };

  readonly #onClose = (): void => {
    if (this.#res?.complete === false) this.#fail('ECONNRESET');
  };

  readonly #onIdle = (): void => {
    // Timers run before the loop polls sockets: after a stall of our own, chunks that came in
    // meanwhile are still unread. Judge only after one more poll (setImmediate runs after it).
    const seen = this.#chunks;
    setImmediate(() => {
      if (this.#quiet) return;
      if (this.#chunks !== seen || this.#paused) {
        // Node hands only a socket's first timeout to its request: hear the next one directly,
        // or an upstream that goes silent after this one set aside is never timed out.
        this.#req.socket?.once('timeout', this.#onIdle);
        return;
      }
      this.#req.destroy(Object.assign(new Error('upstream idle timeout'), { code: 'ETIMEDOUT' }));
    });
  };

  #fail(code: string): void {
    if (this.#quiet) return;
    this.#quiet = true;
    this.#handler.onError(code);
  }
}

/** The response's trailer fields, as Node parsed them (repeated fields joined by Node). */
function trailersOf(res: IncomingMessage): Record<string, string> {
  const trailers: Record<string, string> = {};
  for (const [name, value] of Object.entries(res.trailers)) {
    if (value !== undefined) trailers[name] = value;
  }
  return trailers;
}

/**
 * Targets by URL, for URLs without a client query: there are only a handful of distinct ones
 * (endpoints × routes), and parsing one costs more than the rest of a request's setup. Bounded,
 * because endpoints come and go.
 */
const targetCache = new Map<string, UpstreamTarget>();

export function cachedUpstreamTarget(url: string): UpstreamTarget {
  let target = targetCache.get(url);
  if (target === undefined) {
    if (targetCache.size >= 4096) targetCache.clear();
    target = upstreamTarget(url);
    targetCache.set(url, target);
  }
  return target;
}
