import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { http } from '../../lib/node-http.ts';
import type { Socket } from 'node:net';
import type { Logger } from 'pino';
import { declaresModelRouting, type ActivePool } from '../config/active-pool.ts';
import { affinityFor, type ModelsServed } from '../policy/index.ts';
import { drainRest, readBody, type BodyResult } from './body.ts';
import {
  ConnectionQueue,
  decodeBody,
  MAX_PIPELINED_REQUESTS,
  SUPPORTED_ENCODINGS,
  withoutBom,
} from './client-request.ts';
import { sendError, sendShuttingDown, sendModelNotFound, sendRawError } from './errors.ts';
import type { ExchangeDeps, ResponseTap } from './exchange.ts';
import { Admission, type PoolSlot, type Routed } from './admission.ts';
import { knownPaths, matchRoute, type InferenceRoute } from './inference-routes.ts';
import { LimitedBody } from './limited-body.ts';
import type { SidecarMetrics } from './metrics.ts';
import {
  choosePool,
  findMultipartField,
  modelNotFoundMessage,
  multipartBoundary,
  replaceField,
  requestedModel,
  servedModels,
  type PoolChoice,
  type PoolModels,
} from './model-routing.ts';
import { sendList, serveModelsUnion, type ModelsUnionDeps } from './models-union.ts';
import { StoredResponses } from './stored-responses.ts';
import type { ProxyTracer } from '../telemetry/types.ts';
import { Upstream, type UpstreamClient } from './upstream.ts';
import { countsTokens, withUsageAsked } from './usage.ts';

/** A matched route and what its path says about stored responses (inference-routes.ts). */
type Matched = Extract<ReturnType<typeof matchRoute>, { kind: 'route' }>;

export type { PoolSlot } from './admission.ts';

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
/** How long an idle kept-alive client connection stays open (longer than common client pools' 60 s). */
const CLIENT_KEEP_ALIVE_TIMEOUT_MS = 65_000;

export interface ProxyOptions {
  /** The pool of a sidecar that follows one (and its metrics: `metrics`); see `pools`. */
  pool: () => ActivePool | undefined;
  metrics: SidecarMetrics;
  /**
   * Every pool the sidecar follows, in order (the first is the default), when it follows more
   * than one: then `pool` is not read, and `metrics` counts what belongs to no pool.
   */
  pools?: (() => readonly PoolSlot[]) | undefined;
  logger: Logger;
  maxBodyBytes: number;
  /** Monotonic ms, for TTFT metrics (the balancer has its own clock for decisions). */
  nowMs: () => number;
  isDraining: () => boolean;
  /** Sends the upstream requests; a keep-alive `Upstream` unless a test scripts one. */
  upstream?: UpstreamClient | undefined;
  /** Set when tracing is configured (OTEL_* variables); undefined costs nothing per request. */
  tracer?: ProxyTracer | undefined;
  /**
   * Flow control: the priority of a request without `x-switchyard-priority` (`--priority`, the
   * pod's default); undefined: the pool's `flowControl.defaultPriority`.
   */
  defaultPriority?: number | undefined;
}

/**
 * The proxy's HTTP server: routes, reads and parses each client request, answers what it can
 * itself (errors, a declared model list, the union of the backends' lists), and hands the rest
 * to an `Exchange` (exchange.ts), which sends it upstream through `Upstream` (upstream.ts).
 */
export class SidecarProxy {
  readonly server: Server;
  private readonly upstream: UpstreamClient;
  /** Shared by every exchange: built once, not per request. */
  private readonly exchangeDeps: ExchangeDeps;
  private readonly modelsUnionDeps: ModelsUnionDeps;
  /** Which endpoint holds which stored response (Responses API). */
  private readonly storedResponses: StoredResponses;
  /** The response in progress on each client connection, for `onClientError`. */
  private readonly responsesBySocket = new WeakMap<Socket, ServerResponse>();
  private activeExchanges = 0;
  private readonly inOrder = new ConnectionQueue();
  private idleWaiters: (() => void)[] = [];
  /** Holds, gates and starts routed requests (admission.ts). */
  readonly #admission: Admission;

  private readonly options: ProxyOptions;

  constructor(options: ProxyOptions) {
    this.options = options;
    this.upstream = options.upstream ?? new Upstream({ logger: options.logger });
    this.exchangeDeps = {
      upstream: this.upstream,
      metrics: options.metrics,
      logger: options.logger,
      nowMs: options.nowMs,
      servedModels: () =>
        servedModels(this.#slots().map(poolModels))
          .map((m) => m.id)
          .sort(),
    };
    this.modelsUnionDeps = {
      upstream: this.upstream,
      metrics: options.metrics,
      logger: options.logger,
      maxBodyBytes: options.maxBodyBytes,
    };
    this.storedResponses = new StoredResponses(options.nowMs);
    this.#admission = new Admission(this.exchangeDeps, options, () => this.#slots());
    this.server = http.createServer(
      {
        keepAliveTimeout: CLIENT_KEEP_ALIVE_TIMEOUT_MS,
        headersTimeout: CLIENT_HEADERS_TIMEOUT_MS,
        requestTimeout: CLIENT_REQUEST_TIMEOUT_MS,
        connectionsCheckingInterval: CLIENT_TIMEOUT_CHECK_EVERY_MS,
      },
      (req, res) => this.onRequest(req, res),
    );
    // A client may half-close (send FIN) once its request is out and still read the answer;
    // Node's default aborts the request and closes the connection, so the client got nothing.
    (this.server as Server & { httpAllowHalfOpen: boolean }).httpAllowHalfOpen = true;
    // TCP cannot tell that half-close from a client that left (both send FIN), and guessing by
    // timing cut half-closing clients' streams under load (the client probe found it). A client
    // that left is seen when a write to it fails: at the next chunk of a stream.

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

  /** Each request in its connection's turn (pipelining; see `ConnectionQueue`). */
  private onRequest(req: IncomingMessage, res: ServerResponse): void {
    const queued = this.inOrder.enqueue(
      req.socket,
      () => this.run(req, res, () => this.handle(req, res)),
      () => this.run(req, res, () => this.refusePipelined(res)),
    );
    // Past the limit: read no more of this connection (the bodies of the requests queued before
    // this one are all in, so they need nothing more from it); it closes after the refusal.
    if (!queued) req.socket.pause();
  }

  /** One connection's requests, one at a time. */
  private run(req: IncomingMessage, res: ServerResponse, serve: () => void): void {
    const socket = req.socket;
    if (socket.destroyed) {
      // A pipelined request whose client left while it waited: nothing to answer.
      this.inOrder.done(socket);
      return;
    }
    res.once('close', () => this.inOrder.done(socket));
    try {
      serve();
    } catch (err) {
      this.internalError(res, err);
    }
  }

  /** The connection's request past `MAX_PIPELINED_REQUESTS` queued, answered in its turn. */
  private refusePipelined(res: ServerResponse): void {
    this.options.metrics.response(503);
    sendError(
      res,
      503,
      'too_many_pipelined_requests',
      `This connection sent more than ${MAX_PIPELINED_REQUESTS} requests ahead of their answers; the rest were not read. Send them again on a new connection, or wait for answers before sending more.`,
      { connection: 'close' },
    );
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
    this.upstream.close();
  }

  /** Shutdown: requests held by scale from zero get their 503 now (admission.ts). */
  refuseHeld(): void {
    this.#admission.refuseHeld();
  }

  /** The pools routed for, in order: one unless the sidecar follows several. */
  #slots(): readonly PoolSlot[] {
    const { pools, pool, metrics } = this.options;
    return pools?.() ?? [{ name: '', current: pool(), metrics }];
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const { metrics } = this.options;
    this.activeExchanges++;
    this.responsesBySocket.set(req.socket, res);
    const rawUrl = req.url ?? '/';
    const q = rawUrl.indexOf('?');
    const path = q === -1 ? rawUrl : rawUrl.slice(0, q);
    const match = matchRoute(req.method ?? 'GET', path);
    const trace = this.options.tracer?.startRequest(
      req.method ?? 'GET',
      path,
      spanRoute(match, path),
      req.headers,
    );
    const account = { metrics };
    // One listener per response: in-progress accounting, and the status the client saw.
    res.once('close', () => {
      trace?.end(res.statusCode, res.writableFinished);
      if (res.writableFinished) account.metrics.response(res.statusCode);
      this.activeExchanges--;
      if (this.activeExchanges === 0) {
        const waiters = this.idleWaiters;
        this.idleWaiters = [];
        for (const w of waiters) w();
      }
    });
    if (match.kind === 'unknown') {
      sendError(
        res,
        404,
        'unknown_url',
        `Unknown path ${JSON.stringify(path.slice(0, 200))}: the sidecar serves ${knownPaths().join(', ')}.`,
      );
      return;
    }
    if (match.kind === 'wrong-method') {
      sendError(
        res,
        405,
        'method_not_allowed',
        `${path.slice(0, 200)} accepts ${match.allow} only.`,
        { allow: match.allow },
      );
      return;
    }
    if (this.options.isDraining()) {
      sendShuttingDown(res);
      return;
    }
    const slots = this.#slots();
    // Until the request's model says otherwise, the first pool; the first configured one when a
    // later pool's configuration came first (a model may route there).
    const first = slots.find((slot) => slot.current !== undefined);
    if (first === undefined) {
      // Only a sidecar fed by the controller can be here: a pool file must be valid to start.
      noConfiguration(res, slots[0]?.name);
      return;
    }
    // Counted under the pool it goes to; #routeTo moves it when the model picks another.
    account.metrics = first.metrics;
    const routed: Routed = {
      req,
      res,
      pool: first.current!,
      path,
      query: rawUrl.slice(path.length),
      trace,
      account,
    };
    if (match.route.body === 'models') {
      this.serveModels(routed, slots);
      return;
    }
    if (match.route.body === 'stream' && !this.declaredTooLarge(req)) {
      // A compressed upload's model field cannot be read: it streams to the first pool unread.
      if (needsModel(slots) && req.headers['content-encoding'] === undefined)
        this.readUpload(routed, slots);
      else this.streamThrough(routed);
      return;
    }
    readBody(req, this.options.maxBodyBytes).then(
      (result) => {
        try {
          this.onBody(routed, match, result, slots);
        } catch (err) {
          this.internalError(res, err);
        }
      },
      () => sendError(res, 400, 'invalid_request', 'Could not read the request body.'),
    );
  }

  private onBody(
    routed: Routed,
    match: Matched,
    result: BodyResult,
    slots: readonly PoolSlot[],
  ): void {
    const { res } = routed;
    if (result.kind === 'aborted') return;
    if (result.kind === 'too-large') {
      this.sendTooLarge(res, result.drained);
      return;
    }
    if (match.route.body === 'stream') {
      // Only a declared Content-Length over the limit is read here; a shorter body than declared
      // never completes, so this is not reached otherwise.
      sendError(res, 413, 'body_too_large', 'Request body is larger than the limit.');
      return;
    }
    if (match.route.body === 'json') {
      this.serveDecoded(routed, match.route, result.body, slots);
      return;
    }
    this.serveStoredResponse(routed, match, result.body, slots);
  }

  /**
   * A JSON body as sent, or decoded first when the client compressed it (gzip, deflate; the body
   * limit applies to the decoded size); a leading UTF-8 byte-order mark is dropped.
   */
  private serveDecoded(
    routed: Routed,
    route: InferenceRoute,
    body: Buffer,
    slots: readonly PoolSlot[],
  ): void {
    const { req, res } = routed;
    const encoding = req.headers['content-encoding'];
    if (encoding === undefined) {
      this.serveGeneration(routed, route, withoutBom(body), slots);
      return;
    }
    const limit = this.options.maxBodyBytes;
    void decodeBody(body, encoding, limit).then((decoded) => {
      try {
        if (decoded.kind === 'ok') {
          this.serveGeneration(routed, route, decoded.body, slots);
        } else if (decoded.kind === 'too-large') {
          sendError(
            res,
            413,
            'body_too_large',
            `Request body, decoded, is larger than the sidecar's limit of ${limit} bytes (--max-body-bytes).`,
          );
        } else if (decoded.kind === 'unsupported') {
          sendError(
            res,
            415,
            'unsupported_encoding',
            `Content-Encoding ${JSON.stringify(decoded.encoding.slice(0, 40))} is not supported: send the body uncompressed or as ${SUPPORTED_ENCODINGS.join(' or ')}.`,
            { 'accept-encoding': SUPPORTED_ENCODINGS.join(', ') },
          );
        } else {
          sendError(
            res,
            400,
            'invalid_request',
            `The request body is not valid ${decoded.encoding} data (Content-Encoding).`,
          );
        }
      } catch (err) {
        this.internalError(res, err);
      }
    });
  }

  /** A Content-Length over the limit: read (and dropped) by readBody, then a 413. */
  private declaredTooLarge(req: IncomingMessage): boolean {
    const declared = Number(req.headers['content-length']);
    return Number.isFinite(declared) && declared > this.options.maxBodyBytes;
  }

  /**
   * A body passed through as it arrives (multipart audio): no parsing, no holding it whole, no
   * affinity, no model rewrite; counted against the body limit on the way (413 past it).
   */
  private streamThrough(routed: Routed): void {
    const { req, res } = routed;
    const body = new LimitedBody(this.options.maxBodyBytes, () => {
      req.unpipe(body);
      // The upstream request ends now, unanswered; the client's 413 waits until it has stopped
      // sending (read and dropped, bounded), or the close would reset the connection under it.
      exchange.abandon(); // called on a later body chunk, when `exchange` is set
      body.end();
      void drainRest(req).then((drained) => {
        if (drained === 'aborted') return;
        sendError(
          res,
          413,
          'body_too_large',
          `Request body is larger than the sidecar's limit of ${this.options.maxBodyBytes} bytes (--max-body-bytes).`,
          drained === 'drained' ? {} : { connection: 'close' },
        );
      });
    });
    req.pipe(body);
    // Answered before the body was all sent (shed, an early upstream error): read and drop the
    // rest, or the connection would hang on a paused request.
    res.once('finish', () => {
      if (req.complete) return;
      req.unpipe(body);
      req.resume();
    });
    const exchange = this.#admission.startExchange(routed, {
      bodyStream: body,
      bodyCoding: req.headers['content-encoding'],
    });
  }

  /** `GET/DELETE /v1/responses/{id}`, `POST …/cancel`: to the endpoint that stores the response. */
  private serveStoredResponse(
    routed: Routed,
    match: Matched,
    raw: Buffer,
    slots: readonly PoolSlot[],
  ): void {
    const responseId = match.responseId as string;
    // Several pools: the one whose endpoint stores the response (else the first pool).
    if (slots.length > 1) {
      const home = slots.find(
        (slot) =>
          slot.current !== undefined &&
          this.storedResponses.routing(slot.current, responseId).kind === 'pinned',
      );
      if (home !== undefined) routed = this.#routeTo(routed, home);
    }
    const pinned = this.pinnedFor(routed.res, routed.pool, responseId);
    if (pinned === false) return;
    const tap =
      match.deletesResponse === true ? this.storedResponses.forgetOnSuccess(responseId) : undefined;
    this.#admission.send(routed, {
      raw,
      affinity: pinned === undefined ? {} : { pinnedEndpointId: pinned },
      tap,
      // Passed on as sent (not JSON the proxy reads): in the client's coding still.
      bodyCoding: routed.req.headers['content-encoding'],
    });
  }

  /**
   * The endpoint a request about a stored response must go to (undefined: unknown id, anywhere),
   * or false when it was answered here because that endpoint is gone.
   */
  private pinnedFor(
    res: ServerResponse,
    pool: ActivePool,
    responseId: string,
  ): string | undefined | false {
    const routing = this.storedResponses.routing(pool, responseId);
    if (routing.kind === 'anywhere') return undefined;
    if (routing.kind === 'pinned') return routing.endpointId;
    sendError(res, 409, 'response_endpoint_gone', routing.message);
    return false;
  }

  /**
   * `GET /v1/models`: every model the pools know (declared, served by their endpoints, alias
   * names), each once. A single pool that declares no aliases and no backend's `models` answers
   * as it always did: its `spec.models`, else the union of its backends' own lists, entries as
   * the servers wrote them (models-union.ts); so does the first pool when no pool knows a model.
   */
  private serveModels(routed: Routed, slots: readonly PoolSlot[]): void {
    const { res } = routed;
    const only = slots.length === 1 ? slots[0]!.current : undefined;
    if (only !== undefined && !declaresModelRouting(only)) {
      this.serveModelsOfOnePool(routed, only);
      return;
    }
    const known = servedModels(slots.map(poolModels));
    if (known.length > 0) {
      sendList(
        res,
        known.map((m) => ({
          id: m.id,
          object: 'model',
          created: 0,
          owned_by: `switchyard:${m.pool}`,
          ...(m.parent === undefined ? {} : { parent: m.parent }),
        })),
      );
      return;
    }
    const first = slots[0]?.current;
    if (first === undefined) {
      noConfiguration(res, slots[0]?.name);
      return;
    }
    this.serveModelsOfOnePool(routed, first);
  }

  /** `/v1/models` of one pool as before several: its declared list, else its backends' union. */
  private serveModelsOfOnePool(routed: Routed, pool: ActivePool): void {
    const { res } = routed;
    const models = pool.policy.models;
    if (models.length > 0) {
      sendList(
        res,
        models.map((id) => ({
          id,
          object: 'model',
          created: 0,
          owned_by: `switchyard:${pool.name}`,
        })),
      );
      return;
    }
    serveModelsUnion(this.modelsUnionDeps, routed.req, res, pool).catch((err: unknown) =>
      this.internalError(res, err),
    );
  }

  /** The request goes to `slot`'s pool: its exchange, and the response's metrics. */
  #routeTo(routed: Routed, slot: PoolSlot): Routed {
    routed.account.metrics = slot.metrics;
    return slot.current === routed.pool ? routed : { ...routed, pool: slot.current! };
  }

  /**
   * Which pool takes a request naming `model` (rule 1 of docs/sidecar.md, "Several pools"), or
   * undefined when it was answered here (404 for a model no pool serves, 503 while the pool it
   * needs has no configuration). One pool takes every request, as before pools were several:
   * the balancer refuses a model none of its endpoints serves (a 404 too, from the exchange).
   */
  #choose(
    routed: Routed,
    slots: readonly PoolSlot[],
    model: string | undefined,
  ): { routed: Routed; choice: Extract<PoolChoice, { kind: 'pool' }> } | undefined {
    const { res } = routed;
    if (slots.length === 1) {
      // Only the aliases: what the endpoints serve is the balancer's to check (one pool).
      const aliases = routed.pool.policy.aliases;
      const alias = model === undefined ? undefined : aliases?.find((a) => a.name === model);
      const resolved = alias?.model ?? model;
      return {
        routed: this.#routeTo(routed, slots[0]!),
        choice: { kind: 'pool', index: 0, resolved, aliased: resolved !== model },
      };
    }
    const choice = choosePool(model, slots.map(poolModels));
    if (choice.kind === 'not-configured') {
      noConfiguration(res, slots[choice.index]?.name);
      return undefined;
    }
    if (choice.kind === 'not-found') {
      sendModelNotFound(res, modelNotFoundMessage(model ?? '', choice.served));
      return undefined;
    }
    return { routed: this.#routeTo(routed, slots[choice.index]!), choice };
  }

  /** 413: the body is over `--max-body-bytes`; the connection closes unless it was drained. */
  private sendTooLarge(res: ServerResponse, drained: boolean): void {
    sendError(
      res,
      413,
      'body_too_large',
      `Request body is larger than the sidecar's limit of ${this.options.maxBodyBytes} bytes (--max-body-bytes).`,
      drained ? {} : { connection: 'close' },
    );
  }

  /**
   * A multipart upload (audio) when routing needs its `model` field: read whole (up to the
   * limit), its field read and, for an alias, rewritten; then sent like any buffered body. A
   * compressed or malformed body names no model (the first pool takes it, as it is).
   */
  private readUpload(routed: Routed, slots: readonly PoolSlot[]): void {
    const { req, res } = routed;
    readBody(req, this.options.maxBodyBytes).then(
      (result) => {
        try {
          if (result.kind === 'aborted') return;
          if (result.kind === 'too-large') {
            this.sendTooLarge(res, result.drained);
            return;
          }
          const coding = req.headers['content-encoding'];
          const boundary =
            coding === undefined ? multipartBoundary(req.headers['content-type']) : undefined;
          const field =
            boundary === undefined ? undefined : findMultipartField(result.body, boundary, 'model');
          const chosen = this.#choose(routed, slots, field?.value);
          if (chosen === undefined) return;
          const { choice } = chosen;
          const raw =
            choice.aliased && field !== undefined
              ? replaceField(result.body, field, choice.resolved!)
              : result.body;
          chosen.routed.trace?.generation(field?.value, false);
          this.#traceModel(chosen.routed, field?.value, choice);
          this.#admission.send(chosen.routed, {
            raw,
            bodyCoding: coding,
            model: choice.resolved,
            requestedModel: field?.value,
          });
        } catch (err) {
          this.internalError(res, err);
        }
      },
      () => sendError(res, 400, 'invalid_request', 'Could not read the request body.'),
    );
  }

  /** The pool and the model names on the request's span. */
  #traceModel(
    routed: Routed,
    requested: string | undefined,
    choice: Extract<PoolChoice, { kind: 'pool' }>,
  ): void {
    routed.trace?.routed?.(routed.pool.name, requested, choice.resolved);
  }

  private serveGeneration(
    routed: Routed,
    route: InferenceRoute,
    raw: Buffer,
    slots: readonly PoolSlot[],
  ): void {
    const { req, res } = routed;
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
    let fields = body as Record<string, unknown>;
    const requested = requestedModel(fields);
    const chosen = this.#choose(routed, slots, requested);
    if (chosen === undefined) return;
    const { choice } = chosen;
    routed = chosen.routed;
    const { pool, trace } = routed;
    const models = pool.policy.models;
    if (models.length > 0 && !(route.modelOptional === true && fields.model === undefined)) {
      const model = choice.resolved ?? fields.model;
      if (typeof model !== 'string' || !models.includes(model)) {
        sendModelNotFound(
          res,
          `The model ${JSON.stringify(typeof model === 'string' ? model.slice(0, 200) : (model ?? null))} is not served by pool ${pool.name}; it serves ${models.join(', ')}.`,
        );
        return;
      }
    }
    // A pool that charges tokens needs the usage of a stream, which chat and completions send
    // only when asked: the sidecar asks for a client that did not (and hides the answer's usage
    // chunk from it, exchange.ts). Other pools pay nothing for this.
    const usageAsked = countsTokens(pool.policy) ? withUsageAsked(routed.path, fields) : undefined;
    if (choice.aliased || usageAsked !== undefined) {
      // Sent with the served name and the usage asked for: the one body rewrite these make (a
      // backend's `model:` rewrites again per endpoint, exchange.ts).
      fields = usageAsked ?? fields;
      if (choice.aliased) fields = { ...fields, model: choice.resolved };
      try {
        raw = Buffer.from(JSON.stringify(fields));
      } catch {
        sendError(
          res,
          400,
          'invalid_request',
          choice.aliased
            ? 'The request body is nested too deeply to rewrite its model for this pool.'
            : 'The request body is nested too deeply to add stream_options.include_usage, which this pool needs to count tokens for its budgets.',
        );
        return;
      }
    }
    let affinity = affinityFor({ headers: req.headers, body }, pool.policy.affinity);
    let tap: ResponseTap | undefined;
    if (route.createsResponse === true) {
      tap = this.storedResponses.rememberCreated;
      const previous = fields.previous_response_id;
      if (typeof previous === 'string') {
        // The conversation so far lives on one server only: ahead of every other rule.
        const pinned = this.pinnedFor(res, pool, previous);
        if (pinned === false) return;
        if (pinned !== undefined) affinity = { pinnedEndpointId: pinned };
      }
    }
    const streamed = fields.stream === true;
    trace?.generation(requested ?? fields.model, streamed);
    this.#traceModel(routed, requested, choice);
    this.#admission.send(routed, {
      raw,
      fields,
      streamed,
      affinity,
      tap,
      model: choice.resolved,
      requestedModel: requested,
      usageAdded: usageAsked !== undefined,
    });
  }

  /**
   * A request whose body is read: held while its pool scales from zero (zero-gate.ts), else sent.
   * A passed-through body (streamThrough) is never held: it is not read, and the client could not
   * finish sending it within the request timeout while it waits.
   */
}

/**
 * The span's route: the path of a route the sidecar serves, with a stored response's id as a
 * template (span names must stay few); undefined for an unknown path.
 */
function spanRoute(match: ReturnType<typeof matchRoute>, path: string): string | undefined {
  if (match.kind !== 'route') return undefined;
  return match.responseId === undefined ? path : path.replace(match.responseId, '{response_id}');
}

/** What a slot's pool says about models; undefined while it has no configuration. */
function poolModels(slot: PoolSlot): PoolModels | undefined {
  const pool = slot.current;
  if (pool === undefined) return undefined;
  let served: ModelsServed | undefined;
  return {
    name: pool.name,
    declared: pool.policy.models,
    aliases: pool.policy.aliases ?? [],
    // Asked of the balancer only when routing gets to it (a pool that declares the model or an
    // alias of it answers first).
    get served() {
      return (served ??= pool.balancer.modelsServed());
    },
  };
}

/**
 * Whether an upload's `model` field must be read to route it: several pools, or aliases to
 * apply. Otherwise it streams through as it arrives (one pool takes it, unchanged).
 */
function needsModel(slots: readonly PoolSlot[]): boolean {
  if (slots.length > 1) return true;
  const aliases = slots[0]?.current?.policy.aliases;
  return aliases !== undefined && aliases.length > 0;
}

/** 503 while the pool a request needs has had no configuration applied. */
function noConfiguration(res: ServerResponse, pool: string | undefined): void {
  const which =
    pool === undefined || pool === ''
      ? 'No pool configuration'
      : `No configuration of pool ${pool}`;
  sendError(
    res,
    503,
    'no_configuration',
    `${which} has been applied yet: this sidecar is waiting for its first snapshot from the switchyard controller (its log says why none has come). Retry shortly.`,
    { 'retry-after': '1' },
  );
}
