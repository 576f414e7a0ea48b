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
 * armed only while a fresh socket connects, TLS handshake included (`ECONNECT_TIMEOUT`).
 * Certificates are checked as the endpoint's `tls` says (its CAs, the name to expect, or no
 * check), each such setting with its own keep-alive agent; a certificate that fails is reported as
 * the attempt's error with its reason. The client abort that leaked sockets under http-proxy 1.18
 * is the exchange's `destroy-upstream` effect (tested by counting sockets in /proc).
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
import type { Logger } from 'pino';
import type { EndpointTls } from '../../crds/policy-types.ts';

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
  /** How an https target's certificate is checked; unset: the system CAs and the URL's host. */
  tls?: EndpointTls | undefined;
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

/**
 * Distinct certificate settings kept with their agents. They come from the pool (a handful);
 * the bound only matters over a long life of CA rotations, and the oldest goes first.
 */
const MAX_TLS_AGENTS = 64;

/** How often one endpoint's certificate failure of one kind is logged (the rest are counted). */
const TLS_LOG_EVERY_MS = 30_000;

export interface UpstreamOptions {
  /** Where certificate failures are logged (warn, at most every 30 s per endpoint and reason). */
  logger?: Pick<Logger, 'warn'> | undefined;
}

/** The TLS options of an https request to an endpoint with the backend's `tls` settings. */
export function tlsOptions(tls: EndpointTls): {
  ca?: string;
  servername?: string;
  rejectUnauthorized?: boolean;
} {
  return {
    // Replaces the system CAs, as caCertificates of an Istio DestinationRule does.
    ...(tls.caBundle === undefined ? {} : { ca: tls.caBundle }),
    // Both the SNI sent and the name the certificate is checked against (tls.connect verifies
    // `servername` when it is given, the host otherwise).
    ...(tls.serverName === undefined ? {} : { servername: tls.serverName }),
    ...(tls.insecureSkipVerify === true ? { rejectUnauthorized: false } : {}),
  };
}

/** The agents every attempt's request goes through; one per sidecar. */
export class Upstream implements UpstreamClient {
  readonly #httpAgent = new http.Agent(KEEP_ALIVE);
  readonly #httpsAgent = new https.Agent(KEEP_ALIVE);
  /** An agent per certificate setting, by its content (a new snapshot has new objects). */
  readonly #tlsAgents = new Map<string, Agent>();
  /** The same agents by setting object: its content key is built once, not per request. */
  #tlsAgentOf = new WeakMap<EndpointTls, Agent>();
  readonly #tlsLog: TlsFailureLog | undefined;

  constructor(options: UpstreamOptions = {}) {
    this.#tlsLog = options.logger === undefined ? undefined : new TlsFailureLog(options.logger);
  }

  /** Sends a request; its events go to `handler`. Throws only for headers Node refuses to send. */
  request(init: UpstreamRequestInit, handler: UpstreamHandler): UpstreamRequest {
    const { target, tls } = init;
    const agent = !target.https
      ? this.#httpAgent
      : tls === undefined
        ? this.#httpsAgent
        : this.#tlsAgent(tls);
    return new UpstreamRequest(init, agent, handler, this.#tlsLog);
  }

  /** Closes every kept-alive connection. */
  close(): void {
    this.#httpAgent.destroy();
    this.#httpsAgent.destroy();
    for (const agent of this.#tlsAgents.values()) agent.destroy();
    this.#tlsAgents.clear();
    this.#tlsAgentOf = new WeakMap();
  }

  #tlsAgent(tls: EndpointTls): Agent {
    let agent = this.#tlsAgentOf.get(tls);
    if (agent !== undefined) return agent;
    const key = JSON.stringify([tls.caBundle, tls.serverName, tls.insecureSkipVerify === true]);
    agent = this.#tlsAgents.get(key);
    if (agent === undefined) {
      agent = new https.Agent({ ...KEEP_ALIVE, ...tlsOptions(tls) });
      if (this.#tlsAgents.size >= MAX_TLS_AGENTS) {
        const [oldestKey, oldest] = this.#tlsAgents.entries().next().value!;
        oldest.destroy();
        this.#tlsAgents.delete(oldestKey);
      }
      this.#tlsAgents.set(key, agent);
    }
    this.#tlsAgentOf.set(tls, agent);
    return agent;
  }
}

/**
 * Codes of a failed certificate check or TLS handshake (OpenSSL's verify results, Node's name
 * check, and handshake failures such as https to a plain http port).
 */
const CERTIFICATE_CODES = new Set([
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'CERT_REVOKED',
  'CERT_UNTRUSTED',
  'CERT_REJECTED',
  'CERT_SIGNATURE_FAILURE',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'INVALID_CA',
  'INVALID_PURPOSE',
  'HOSTNAME_MISMATCH',
]);

/** Whether an upstream error code is a failed certificate check or TLS handshake. */
export function isTlsFailure(code: string | undefined): boolean {
  return (
    code !== undefined &&
    (CERTIFICATE_CODES.has(code) || code.startsWith('ERR_TLS_') || code.startsWith('ERR_SSL_'))
  );
}

/**
 * What an attempt reports for a transport error: its code, and for a certificate failure also
 * Node's reason (`CERT_HAS_EXPIRED: certificate has expired`), which names what to fix; it goes
 * into the client's 502 message and the trace, never a key.
 */
export function upstreamErrorCode(err: NodeJS.ErrnoException): string {
  const code = err.code ?? err.message;
  if (!isTlsFailure(err.code)) return code;
  // Node's advice for its own CLI ("try running Node.js with --use-system-ca") is not the fix
  // here: the pool's tls.caBundle or caSecretRef is.
  const reason = err.message.replace(/; if the root CA is installed locally.*$/, '');
  return `${code}: ${reason}`;
}

/**
 * Logs certificate failures: one warn line per endpoint and reason at most every 30 s, with how
 * many were left out since, so a broken certificate under load is seen at once without a line per
 * request.
 */
export class TlsFailureLog {
  readonly #logger: Pick<Logger, 'warn'>;
  readonly #last = new Map<string, { atMs: number; suppressed: number }>();

  constructor(logger: Pick<Logger, 'warn'>) {
    this.#logger = logger;
  }

  note(target: UpstreamTarget, reason: string): void {
    const key = `${target.host} ${reason}`;
    const nowMs = Date.now();
    const last = this.#last.get(key);
    if (last !== undefined && nowMs - last.atMs < TLS_LOG_EVERY_MS) {
      last.suppressed++;
      return;
    }
    if (this.#last.size >= 1024) this.#last.clear();
    this.#last.set(key, { atMs: nowMs, suppressed: 0 });
    this.#logger.warn(
      {
        upstream: target.host,
        reason,
        ...(last === undefined ? {} : { sinceLastLogged: last.suppressed }),
      },
      'upstream certificate rejected: the attempt counts against the endpoint and is retried elsewhere',
    );
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

  readonly #target: UpstreamTarget;
  readonly #tlsLog: TlsFailureLog | undefined;

  constructor(
    init: UpstreamRequestInit,
    agent: Agent,
    handler: UpstreamHandler,
    tlsLog?: TlsFailureLog,
  ) {
    this.#handler = handler;
    this.#target = init.target;
    this.#tlsLog = tlsLog;
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
    // For https the connection is made once the handshake is done ('connect' is only TCP's): a
    // server that accepts and never answers the ClientHello is as unreachable as one that never
    // accepts, and must not hold the attempt until the first-byte deadline.
    const connected = this.#target.https ? 'secureConnect' : 'connect';
    const timer = setTimeout(() => {
      cleanup();
      socket.destroy(Object.assign(new Error('ECONNECT_TIMEOUT'), { code: 'ECONNECT_TIMEOUT' }));
    }, this.#connectTimeoutMs);
    timer.unref();
    const cleanup = (): void => {
      clearTimeout(timer);
      socket.off(connected, cleanup);
      socket.off('error', cleanup);
      socket.off('close', cleanup);
    };
    socket.once(connected, cleanup);
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
    const code = upstreamErrorCode(err);
    if (!this.#quiet && isTlsFailure(err.code)) this.#tlsLog?.note(this.#target, code);
    this.#fail(code);
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
