import https from 'node:https';
import type { ClientRequest, IncomingMessage, Server, ServerResponse } from 'node:http';
import { http } from '../../lib/node-http.ts';
import type { Socket } from 'node:net';
import type { Stream } from 'node:stream';
import { ProxyServer } from 'http-proxy-3';
import type { Logger } from 'pino';
import { affinityKeyFor } from '../policy/affinity.ts';
import { PassiveDriftCheck } from './drift-check.ts';
import type { Attempt, EndpointSpec, Outcome } from '../policy/types.ts';
import type { ActivePool } from '../pool-state.ts';
import { readBody, type BodyResult } from './body.ts';
import { sendError, sendRawError } from './errors.ts';
import type { CodeClass, EndpointMetrics, SidecarMetrics } from './metrics.ts';
import { parseRetryAfterMs } from './retry-after.ts';

/** The OpenAI routes the sidecar serves, and the method each accepts. */
const ROUTES: ReadonlyMap<string, 'GET' | 'POST'> = new Map([
  ['/v1/chat/completions', 'POST'],
  ['/v1/completions', 'POST'],
  ['/v1/embeddings', 'POST'],
  ['/v1/models', 'GET'],
]);

/** Request headers that describe this hop only (RFC 9110 §7.6.1), or that we set ourselves. */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'content-length',
  'host',
]);

/** Response headers not copied from the upstream: Node frames the client response itself. */
const RESPONSE_HOP_BY_HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'trailer']);

/**
 * Slow clients (slow-loris). The app is on the same pod and sends a request in microseconds, so
 * these are generous: a client that has not sent its complete head within 10 s, or its complete
 * request (head and body) within 30 s, gets a 408 and its connection is closed. Once the request
 * is in, the response may stream for as long as the upstream streams (`timeouts.idle` applies).
 * Node checks these every second. Documented in docs/sidecar.md (Client timeouts).
 */
export const CLIENT_HEADERS_TIMEOUT_MS = 10_000;
export const CLIENT_REQUEST_TIMEOUT_MS = 30_000;
const CLIENT_TIMEOUT_CHECK_EVERY_MS = 1_000;
/** How long the body of a retried 5xx/429 may take to drain before its connection is dropped. */
const UPSTREAM_DRAIN_TIMEOUT_MS = 1_000;
/** How long an idle kept-alive client connection stays open (longer than common client pools' 60 s). */
const CLIENT_KEEP_ALIVE_TIMEOUT_MS = 65_000;

export interface ProxyOptions {
  pool: () => ActivePool | undefined;
  metrics: SidecarMetrics;
  logger: Logger;
  maxBodyBytes: number;
  /** Monotonic ms, for TTFT metrics (the balancer has its own clock for decisions). */
  nowMs: () => number;
  isDraining: () => boolean;
}

interface AttemptState {
  readonly exchange: Exchange;
  readonly attempt: Attempt;
  readonly metrics: EndpointMetrics;
  readonly sentAtMs: number;
  proxyReq: ClientRequest | undefined;
  firstByteTimer: NodeJS.Timeout | undefined;
  /** Set once the balancer has been told how this attempt ended. */
  settled: boolean;
  /** Set once a body byte of this attempt went to the client: from then on, no retry. */
  committed: boolean;
  /** Set when the sidecar gave up on this attempt (timeout): its later stream events are noise. */
  abandoned: boolean;
}

/**
 * Parsed upstream URLs per endpoint and route: http-proxy-3 skips its own URL parsing when given a
 * URL object, and there are only a handful of distinct ones. Bounded, because endpoints come and go.
 */
const targetCache = new Map<string, URL>();
function targetUrl(endpointUrl: string, path: string): URL {
  const key = endpointUrl + path.slice(3);
  let url = targetCache.get(key);
  if (url === undefined) {
    if (targetCache.size >= 4096) targetCache.clear();
    url = new URL(key);
    targetCache.set(key, url);
  }
  return url;
}

/** A body source that http-proxy-3 can `pipe` into the upstream request without a stream per request. */
function bufferSource(body: Buffer): Stream {
  return {
    pipe<T extends NodeJS.WritableStream>(destination: T): T {
      destination.end(body);
      return destination;
    },
  } as unknown as Stream;
}

class TransportFailure {
  readonly kind: 'error' | 'timeout';
  readonly detail: string;
  constructor(kind: 'error' | 'timeout', detail: string) {
    this.kind = kind;
    this.detail = detail;
  }
}

/**
 * The proxy: one `Exchange` per client request, one `AttemptState` per upstream try.
 *
 * Responses are never buffered. The upstream response head is held back until its first body
 * byte, so a failure before that (refused, reset, 5xx, 429, a stall past `firstByteMs`) has reached
 * nothing of the client and may be retried on another endpoint; after it, never.
 */
export class SidecarProxy {
  readonly server: Server;
  private readonly proxy: ProxyServer;
  private readonly httpAgent = new http.Agent({
    keepAlive: true,
    maxSockets: Infinity,
    scheduling: 'lifo',
  });
  private readonly httpsAgent = new https.Agent({
    keepAlive: true,
    maxSockets: Infinity,
    scheduling: 'lifo',
  });
  private readonly attemptsByRequest = new WeakMap<ClientRequest, AttemptState>();
  /** The response in progress on each client connection, for `onClientError`. */
  private readonly responsesBySocket = new WeakMap<Socket, ServerResponse>();
  private activeExchanges = 0;
  private idleWaiters: (() => void)[] = [];

  private readonly options: ProxyOptions;

  constructor(options: ProxyOptions) {
    this.options = options;
    this.proxy = new ProxyServer({ xfwd: false, selfHandleResponse: true });
    this.proxy.on('proxyReq', (proxyReq: ClientRequest, _req, _res, opts) => {
      const state = (opts as { attemptState?: AttemptState }).attemptState;
      if (state !== undefined) {
        state.proxyReq = proxyReq;
        this.attemptsByRequest.set(proxyReq, state);
        if (state.settled) proxyReq.destroy();
      }
    });
    this.proxy.on('proxyRes', (proxyRes: IncomingMessage) => {
      const state = this.attemptsByRequest.get(
        (proxyRes as IncomingMessage & { req: ClientRequest }).req,
      );
      if (state === undefined) {
        proxyRes.destroy();
        return;
      }
      state.exchange.onResponse(state, proxyRes);
    });
    // Errors reach the per-attempt callbacks; this keeps a stray one from crashing the process.
    this.proxy.on('error', (err: Error) =>
      this.options.logger.debug({ err: err.message }, 'proxy error'),
    );
    this.server = http.createServer(
      {
        keepAliveTimeout: CLIENT_KEEP_ALIVE_TIMEOUT_MS,
        headersTimeout: CLIENT_HEADERS_TIMEOUT_MS,
        requestTimeout: CLIENT_REQUEST_TIMEOUT_MS,
        connectionsCheckingInterval: CLIENT_TIMEOUT_CHECK_EVERY_MS,
      },
      (req, res) => {
        try {
          this.handle(req, res);
        } catch (err) {
          this.internalError(res, err);
        }
      },
    );
    this.server.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) =>
      this.onClientError(err, socket),
    );
  }

  /**
   * Errors Node raises before or instead of a request: a malformed or oversized head, a client
   * too slow to send its request. Answered in OpenAI shape (Node's default is a bare status line).
   */
  private onClientError(err: NodeJS.ErrnoException, socket: Socket): void {
    const res = this.responsesBySocket.get(socket);
    if (res?.headersSent === true || !socket.writable) {
      socket.destroy();
      return;
    }
    const code = err.code ?? '';
    if (code === 'ERR_HTTP_REQUEST_TIMEOUT') {
      this.options.metrics.response(408);
      sendRawError(
        socket,
        408,
        'request_timeout',
        `The request did not arrive in time (head within ${CLIENT_HEADERS_TIMEOUT_MS / 1000}s, whole request within ${CLIENT_REQUEST_TIMEOUT_MS / 1000}s).`,
      );
    } else if (code === 'HPE_HEADER_OVERFLOW') {
      this.options.metrics.response(431);
      sendRawError(socket, 431, 'headers_too_large', 'The request headers are too large.');
    } else if (code.startsWith('HPE_')) {
      this.options.metrics.response(400);
      sendRawError(socket, 400, 'bad_request', 'The request is not valid HTTP/1.1.');
    } else {
      socket.destroy();
    }
  }

  /** A bug on the request path must cost one request, never the process (and every stream in it). */
  internalError(res: ServerResponse, err: unknown): void {
    this.options.logger.error(
      { err: err instanceof Error ? { name: err.name, message: err.message } : String(err) },
      'internal error while handling a request',
    );
    sendError(res, 500, 'internal_error', 'The sidecar failed to handle this request.');
  }

  /** Resolves when no client request is in progress (for graceful shutdown). */
  whenIdle(): Promise<void> {
    if (this.activeExchanges === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  get inProgress(): number {
    return this.activeExchanges;
  }

  close(): void {
    this.httpAgent.destroy();
    this.httpsAgent.destroy();
    this.proxy.close();
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const { metrics } = this.options;
    this.activeExchanges++;
    this.responsesBySocket.set(req.socket, res);
    // One listener per response: in-progress accounting, and the status the client saw.
    res.once('close', () => {
      if (res.writableFinished) metrics.response(res.statusCode);
      this.activeExchanges--;
      if (this.activeExchanges === 0) {
        const waiters = this.idleWaiters;
        this.idleWaiters = [];
        for (const w of waiters) w();
      }
    });
    const rawUrl = req.url ?? '/';
    const q = rawUrl.indexOf('?');
    const path = q === -1 ? rawUrl : rawUrl.slice(0, q);
    const method = ROUTES.get(path);
    if (method === undefined) {
      sendError(
        res,
        404,
        'unknown_url',
        `Unknown path ${JSON.stringify(path.slice(0, 200))}: the sidecar serves ${[...ROUTES.keys()].join(', ')}.`,
      );
      return;
    }
    if (req.method !== method) {
      sendError(res, 405, 'method_not_allowed', `${path} accepts ${method} only.`, {
        allow: method,
      });
      return;
    }
    if (this.options.isDraining()) {
      sendError(
        res,
        503,
        'shutting_down',
        'This sidecar is shutting down; retry on a fresh connection.',
        {
          connection: 'close',
          'retry-after': '1',
        },
      );
      return;
    }
    const pool = this.options.pool();
    if (pool === undefined) {
      sendError(res, 503, 'no_healthy_backend', 'No pool configuration has been applied yet.', {
        'retry-after': '1',
      });
      return;
    }
    if (method === 'GET') {
      this.serveModels(req, res, pool, path, rawUrl.slice(path.length));
      return;
    }
    readBody(req, this.options.maxBodyBytes).then(
      (result) => {
        try {
          this.onBody(req, res, pool, path, rawUrl.slice(path.length), result);
        } catch (err) {
          this.internalError(res, err);
        }
      },
      () => sendError(res, 400, 'invalid_request', 'Could not read the request body.'),
    );
  }

  private onBody(
    req: IncomingMessage,
    res: ServerResponse,
    pool: ActivePool,
    path: string,
    query: string,
    result: BodyResult,
  ): void {
    if (result.kind === 'aborted') return;
    if (result.kind === 'too-large') {
      sendError(
        res,
        413,
        'body_too_large',
        `Request body is larger than the sidecar's limit of ${this.options.maxBodyBytes} bytes (--max-body-bytes).`,
        result.drained ? {} : { connection: 'close' },
      );
      return;
    }
    this.serveGeneration(req, res, pool, path, query, result.body);
  }

  private serveModels(
    req: IncomingMessage,
    res: ServerResponse,
    pool: ActivePool,
    path: string,
    query: string,
  ): void {
    const models = pool.policy.models;
    if (models.length > 0) {
      const body = JSON.stringify({
        object: 'list',
        data: models.map((id) => ({
          id,
          object: 'model',
          created: 0,
          owned_by: `switchyard:${pool.name}`,
        })),
      });
      res.writeHead(200, {
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(body),
      });
      res.end(body);
      return;
    }
    // No declared model list: ask one live endpoint.
    pool.balancer.recordRequest();
    new Exchange({
      proxy: this,
      options: this.options,
      req,
      res,
      pool,
      path,
      query,
      raw: Buffer.alloc(0),
      fields: undefined,
      streamed: false,
      affinityKey: undefined,
    }).start();
  }

  private serveGeneration(
    req: IncomingMessage,
    res: ServerResponse,
    pool: ActivePool,
    path: string,
    query: string,
    raw: Buffer,
  ): void {
    let body: unknown;
    try {
      body = JSON.parse(raw.toString('utf8'));
    } catch {
      sendError(res, 400, 'invalid_json', 'The request body is not valid JSON.');
      return;
    }
    if (typeof body !== 'object' || body === null || Array.isArray(body)) {
      sendError(res, 400, 'invalid_request', 'The request body must be a JSON object.');
      return;
    }
    const fields = body as Record<string, unknown>;
    const models = pool.policy.models;
    if (models.length > 0) {
      const model = fields.model;
      if (typeof model !== 'string' || !models.includes(model)) {
        sendError(
          res,
          404,
          'model_not_found',
          `The model ${JSON.stringify(typeof model === 'string' ? model.slice(0, 200) : (model ?? null))} is not served by pool ${pool.name}; it serves ${models.join(', ')}.`,
        );
        return;
      }
    }
    const affinityKey =
      pool.policy.affinity.key === 'None'
        ? undefined
        : affinityKeyFor({ headers: req.headers, body }, pool.policy.affinity);
    const streamed = fields.stream === true;
    pool.balancer.recordRequest();
    new Exchange({
      proxy: this,
      options: this.options,
      req,
      res,
      pool,
      path,
      query,
      raw,
      fields,
      streamed,
      affinityKey,
    }).start();
  }

  /** Sends one attempt through http-proxy-3. */
  dispatch(
    state: AttemptState,
    req: IncomingMessage,
    res: ServerResponse,
    target: URL,
    body: Buffer,
    headers: Record<string, string>,
    timeouts: ActivePool['timeouts'],
  ): void {
    const options = {
      target,
      ignorePath: true,
      changeOrigin: true,
      selfHandleResponse: true,
      xfwd: false,
      agent: target.protocol === 'https:' ? this.httpsAgent : this.httpAgent,
      connectTimeout: timeouts.connectMs,
      buffer: bufferSource(body),
      headers,
      attemptState: state,
    };
    this.proxy.web(req, res, options, (err: Error) => {
      state.exchange.onTransportError(state, err);
    });
  }
}

interface ExchangeInit {
  proxy: SidecarProxy;
  options: ProxyOptions;
  req: IncomingMessage;
  res: ServerResponse;
  pool: ActivePool;
  /** `/v1/...` */
  path: string;
  /** `?...` or empty */
  query: string;
  raw: Buffer;
  fields: Record<string, unknown> | undefined;
  streamed: boolean;
  affinityKey: string | undefined;
}

/** One client request, across its attempts. */
class Exchange {
  private attempts = 0;
  private readonly tried = new Set<string>();
  private current: AttemptState | undefined;
  private clientGone = false;
  private finished = false;
  private readonly bodyByModel = new Map<string, Buffer>();

  private readonly proxy: SidecarProxy;
  private readonly options: ProxyOptions;
  private readonly req: IncomingMessage;
  private readonly res: ServerResponse;
  private readonly pool: ActivePool;
  private readonly path: string;
  private readonly query: string;
  private readonly raw: Buffer;
  private readonly fields: Record<string, unknown> | undefined;
  private readonly streamed: boolean;
  private readonly affinityKey: string | undefined;

  constructor(init: ExchangeInit) {
    this.proxy = init.proxy;
    this.options = init.options;
    this.req = init.req;
    this.res = init.res;
    this.pool = init.pool;
    this.path = init.path;
    this.query = init.query;
    this.raw = init.raw;
    this.fields = init.fields;
    this.streamed = init.streamed;
    this.affinityKey = init.affinityKey;
  }

  start(): void {
    // Forward the client's end-to-end headers; hop-by-hop ones and our own are dropped once,
    // into a fresh object (deleting keys would turn the original into a slow dictionary).
    const forwarded: IncomingMessage['headers'] = {};
    for (const [name, value] of Object.entries(this.req.headers)) {
      if (!HOP_BY_HOP.has(name) && !name.startsWith('x-switchyard-')) forwarded[name] = value;
    }
    this.req.headers = forwarded;
    if (this.res.destroyed || this.res.closed || this.req.socket.destroyed) {
      // The client left while its body was being read: nothing to send, nothing to count.
      this.clientGone = true;
      return;
    }
    this.res.once('close', () => {
      if (this.res.writableFinished) return;
      this.clientGone = true;
      const state = this.current;
      if (state !== undefined && !state.settled) {
        this.settle(state, { kind: 'neutral' }, 'aborted');
        state.proxyReq?.destroy();
      }
    });
    this.next();
  }

  /** The first attempt: pick (or shed at once) and dispatch. */
  private next(): void {
    const pick = this.pool.balancer.pick({
      affinityKey: this.affinityKey,
      exclude: this.tried,
      requestBytes: this.raw.length,
    });
    if (pick.kind === 'shed') {
      this.options.metrics.shed.inc();
      const seconds = Math.max(1, Math.ceil(pick.retryAfterMs / 1000));
      sendError(
        this.res,
        503,
        'no_healthy_backend',
        `Every endpoint of pool ${this.pool.name} is unavailable (circuit breakers open); retry after ${seconds}s.`,
        { 'retry-after': String(seconds), 'x-switchyard-attempts': '0' },
      );
      return;
    }
    this.options.metrics.affinityResult(pick.affinity);
    this.launch(pick.attempt);
  }

  private launch(attempt: Attempt): void {
    const endpoint = attempt.endpoint;
    const body = this.bodyFor(endpoint);
    if (body === undefined) {
      // Only a body with a model rewrite is re-serialised; JSON.stringify recurses, so a body
      // nested deeper than the stack allows (JSON.parse is iterative) cannot be rewritten.
      this.pool.balancer.finish(attempt, { kind: 'neutral' });
      sendError(
        this.res,
        400,
        'invalid_request',
        'The request body is nested too deeply to rewrite its model for this backend.',
        { 'x-switchyard-attempts': String(this.attempts) },
      );
      return;
    }
    this.attempts++;
    this.tried.add(endpoint.id);
    const state: AttemptState = {
      exchange: this,
      attempt,
      metrics: this.options.metrics.forEndpoint(endpoint),
      sentAtMs: this.options.nowMs(),
      proxyReq: undefined,
      firstByteTimer: undefined,
      settled: false,
      committed: false,
      abandoned: false,
    };
    this.current = state;
    const headers: Record<string, string> = { 'content-length': String(body.length) };
    if (endpoint.apiKey !== undefined) headers.authorization = `Bearer ${endpoint.apiKey}`;
    state.firstByteTimer = setTimeout(
      () => this.onFirstByteTimeout(state),
      this.pool.timeouts.firstByteMs,
    );
    // The client asked for /v1/<route>; the endpoint URL already ends in its API prefix.
    const target =
      this.query === ''
        ? targetUrl(endpoint.url, this.path)
        : new URL(endpoint.url + this.path.slice(3) + this.query);
    this.proxy.dispatch(state, this.req, this.res, target, body, headers, this.pool.timeouts);
  }

  /**
   * The request body for this endpoint: the client's bytes, or re-serialised with the backend's
   * model name; undefined when the body cannot be re-serialised.
   */
  private bodyFor(endpoint: EndpointSpec): Buffer | undefined {
    if (endpoint.model === undefined || this.fields === undefined) return this.raw;
    let body = this.bodyByModel.get(endpoint.model);
    if (body === undefined) {
      try {
        body = Buffer.from(JSON.stringify({ ...this.fields, model: endpoint.model }));
      } catch {
        return undefined;
      }
      this.bodyByModel.set(endpoint.model, body);
    }
    return body;
  }

  private settle(state: AttemptState, outcome: Outcome, code: CodeClass): void {
    if (state.settled) return;
    state.settled = true;
    if (state.firstByteTimer !== undefined) clearTimeout(state.firstByteTimer);
    state.metrics.requests[code].inc();
    this.pool.balancer.finish(state.attempt, outcome);
  }

  onResponse(state: AttemptState, proxyRes: IncomingMessage): void {
    proxyRes.on('error', () => this.onStreamBroken(state, proxyRes));
    proxyRes.once('close', () => {
      if (!proxyRes.complete) this.onStreamBroken(state, proxyRes);
    });
    if (state.settled || this.clientGone) {
      proxyRes.destroy();
      return;
    }
    const status = proxyRes.statusCode ?? 502;
    if (status === 429 || status >= 500) {
      const outcome: Outcome =
        status === 429
          ? {
              kind: 'rate-limited',
              retryAfterMs: parseRetryAfterMs(proxyRes.headers['retry-after'], Date.now()),
            }
          : { kind: 'error' };
      this.settle(state, outcome, status === 429 ? '429' : '5xx');
      if (this.retry()) {
        // Drain so the connection can be reused, but not from an upstream that stalls after its
        // error head: that would hold the socket for as long as the upstream does.
        const drainLimit = setTimeout(() => proxyRes.destroy(), UPSTREAM_DRAIN_TIMEOUT_MS);
        proxyRes.once('close', () => clearTimeout(drainLimit));
        proxyRes.resume();
        return;
      }
      // No retry possible: the client gets the upstream's own answer, if its body comes in time.
      this.relay(state, proxyRes, status, false);
      const leftMs = state.sentAtMs + this.pool.timeouts.firstByteMs - this.options.nowMs();
      state.firstByteTimer = setTimeout(
        () => this.onErrorBodyTimeout(state, proxyRes, status),
        Math.max(0, leftMs),
      );
      return;
    }
    this.relay(state, proxyRes, status, true);
  }

  /** Streams the upstream response to the client, writing the head with the first body byte. */
  private relay(
    state: AttemptState,
    proxyRes: IncomingMessage,
    status: number,
    feedsHealth: boolean,
  ): void {
    const { res } = this;
    const writeHead = (): void => {
      const headers: Record<string, string | string[]> = {};
      for (const [name, value] of Object.entries(proxyRes.headers)) {
        if (value !== undefined && !RESPONSE_HOP_BY_HOP.has(name)) headers[name] = value;
      }
      headers['x-switchyard-backend'] = state.attempt.endpoint.id;
      headers['x-switchyard-attempts'] = String(this.attempts);
      res.writeHead(status, headers);
    };
    const probe = state.attempt.endpoint.probe;
    const driftCheck =
      feedsHealth && status >= 200 && status < 300 && probe !== undefined
        ? new PassiveDriftCheck(probe)
        : undefined;
    const onData = (chunk: Buffer): void => {
      if (driftCheck?.feed(chunk) === true) {
        this.pool.balancer.noteDriftMismatch(state.attempt);
        state.metrics.driftMismatches.inc();
      }
      if (!state.committed) {
        state.committed = true;
        if (state.firstByteTimer !== undefined) clearTimeout(state.firstByteTimer);
        if (feedsHealth && !state.settled) {
          this.pool.balancer.firstByte(state.attempt);
          if (this.streamed)
            state.metrics.ttft.observe((this.options.nowMs() - state.sentAtMs) / 1000);
        }
        state.proxyReq?.setTimeout(this.pool.timeouts.idleMs, () => {
          state.proxyReq?.destroy(
            Object.assign(new Error('upstream idle timeout'), { code: 'ETIMEDOUT' }),
          );
        });
        writeHead();
      }
      if (!res.write(chunk)) {
        proxyRes.pause();
        res.once('drain', () => proxyRes.resume());
      }
    };
    proxyRes.on('data', onData);
    proxyRes.once('end', () => {
      if (!state.committed) {
        state.committed = true;
        if (state.firstByteTimer !== undefined) clearTimeout(state.firstByteTimer);
        writeHead();
      }
      res.end();
      this.finished = true;
      if (feedsHealth) {
        if (status >= 200 && status < 300)
          this.settle(state, { kind: 'success', streamed: this.streamed }, '2xx');
        else this.settle(state, { kind: 'neutral' }, '4xx');
      }
    });
  }

  /** The upstream response broke (reset, idle timeout) after its head arrived. */
  private onStreamBroken(state: AttemptState, proxyRes: IncomingMessage): void {
    if (this.clientGone || this.finished || state.abandoned || state !== this.current) return;
    state.abandoned = true; // 'error' and 'close' both report one break
    const wasSettled = state.settled;
    this.settle(state, { kind: 'error' }, 'error');
    proxyRes.destroy();
    if (!state.committed) {
      // Nothing reached the client yet: this is a failure like a refused connection.
      const failure = new TransportFailure(
        'error',
        `upstream reset before the first byte from ${state.attempt.endpoint.id}`,
      );
      if (wasSettled) this.failWith(failure);
      else this.failOrRetry(failure);
      return;
    }
    this.finished = true;
    const type = String(proxyRes.headers['content-type'] ?? '');
    if (type.startsWith('text/event-stream')) {
      // A clean SSE error event, then the end of the stream, so clients stop instead of hanging.
      const event = JSON.stringify({
        error: {
          message: 'The upstream stream broke off; the response is incomplete.',
          type: 'upstream_error',
          code: 'upstream_stream_broken',
        },
      });
      this.res.end(`data: ${event}\n\n`);
    } else {
      this.res.destroy();
    }
  }

  onTransportError(state: AttemptState, err: Error): void {
    if (state.settled || this.clientGone) return;
    if (state.committed) return; // handled by onStreamBroken
    const code = (err as NodeJS.ErrnoException).code ?? '';
    const timeout = code === 'ECONNECT_TIMEOUT' || code === 'ETIMEDOUT';
    this.settle(state, { kind: 'error' }, timeout ? 'timeout' : 'error');
    this.failOrRetry(
      new TransportFailure(
        timeout ? 'timeout' : 'error',
        `${code || err.message} from ${state.attempt.endpoint.id}`,
      ),
    );
  }

  /**
   * An error head (5xx, 429) that cannot be retried is relayed, but it too is held until its first
   * body byte: when none comes within `timeouts.firstByte`, nothing has reached the client yet
   * and it gets a 504 instead of waiting for as long as the upstream stalls.
   */
  private onErrorBodyTimeout(state: AttemptState, proxyRes: IncomingMessage, status: number): void {
    state.firstByteTimer = undefined;
    if (state.committed || state.abandoned || this.clientGone || this.finished) return;
    state.abandoned = true;
    proxyRes.destroy();
    state.proxyReq?.destroy();
    this.failWith(
      new TransportFailure(
        'timeout',
        `${state.attempt.endpoint.id} answered ${status} and sent no body within ${this.pool.timeouts.firstByteMs} ms`,
      ),
    );
  }

  private onFirstByteTimeout(state: AttemptState): void {
    state.firstByteTimer = undefined;
    if (state.settled || state.committed || this.clientGone) return;
    state.abandoned = true;
    this.settle(state, { kind: 'error' }, 'timeout');
    state.proxyReq?.destroy();
    this.failOrRetry(
      new TransportFailure(
        'timeout',
        `no response byte from ${state.attempt.endpoint.id} within ${this.pool.timeouts.firstByteMs} ms`,
      ),
    );
  }

  private failOrRetry(failure: TransportFailure): void {
    if (!this.retry()) this.failWith(failure);
  }

  /**
   * Starts another attempt if `maxAttempts` and the retry budget allow it and another endpoint is
   * live. Returns false when the caller must answer the client with what it has.
   */
  private retry(): boolean {
    if (this.clientGone || this.res.headersSent) return false;
    const decision = this.pool.balancer.tryRetry(this.attempts);
    if (decision.kind !== 'retry') {
      if (decision.kind === 'budget-exhausted') this.options.metrics.retryBudgetExhausted.inc();
      return false;
    }
    const pick = this.pool.balancer.pick({
      affinityKey: this.affinityKey,
      exclude: this.tried,
      requestBytes: this.raw.length,
    });
    if (pick.kind === 'shed') return false;
    this.options.metrics.retries.inc();
    this.options.logger.debug(
      { from: this.current?.attempt.endpoint.id, to: pick.attempt.endpoint.id },
      'retrying on another endpoint',
    );
    this.launch(pick.attempt);
    return true;
  }

  private failWith(failure: TransportFailure): void {
    const headers = { 'x-switchyard-attempts': String(this.attempts) };
    if (failure.kind === 'timeout') {
      sendError(
        this.res,
        504,
        'upstream_timeout',
        `Upstream timed out after ${this.attempts} attempt(s): ${failure.detail}.`,
        headers,
      );
    } else {
      sendError(
        this.res,
        502,
        'upstream_unreachable',
        `Upstream failed after ${this.attempts} attempt(s): ${failure.detail}.`,
        headers,
      );
    }
  }
}
