/**
 * One client request's exchange with the upstreams, across its attempts. The state of each
 * attempt and every transition of it are in attempt-state.ts; this module sends the requests,
 * feeds the attempt's state machine what happened, and performs the effects it returns.
 *
 * Responses are never buffered. The upstream's head is held until its first body byte, so a
 * failure before that (refused, reset, 5xx, 429, a stall past `firstByteMs`) has reached nothing
 * of the client and may be retried on another endpoint; after it, never. While the client's
 * socket is full the upstream is paused; a client that leaves it full for `clientStallMs` is
 * disconnected, which frees the upstream request (and its slot on the model server).
 */
import type {
  IncomingHttpHeaders,
  IncomingMessage,
  OutgoingHttpHeaders,
  ServerResponse,
} from 'node:http';
import type { Readable } from 'node:stream';
import type { Logger } from 'pino';
import { CLIENT_STALL_MS } from '../../crds/policy-defaults.ts';
import { MAX_TIMER_MS } from '../../lib/duration.ts';
import {
  ORCA_REQUEST_HEADER,
  ORCA_RESPONSE_HEADER,
  parseOrcaHeader,
} from '../../lib/model-server-load.ts';
import type { ActivePool } from '../config/active-pool.ts';
import type {
  AffinityInput,
  AffinityResult,
  Attempt,
  EndpointSpec,
  PickRequest,
  PickResult,
} from '../policy/index.ts';
import type { AttemptTrace, RequestTrace } from '../telemetry/types.ts';
import {
  INITIAL_STATE,
  awaitsFirstByte,
  isPreemptable,
  outcomeOf,
  transition,
  type AttemptEvent,
  type AttemptState,
  type Effect,
  type Failure,
} from './attempt-state.ts';
import { forwardedHeaders } from './client-request.ts';
import { applyBackendKey } from './backend-key.ts';
import { PassiveDriftCheck } from './drift-check.ts';
import { sendError, sendModelNotFound } from './errors.ts';
import { upstreamUrl } from './inference-routes.ts';
import type { EndpointMetrics, SidecarMetrics } from './metrics.ts';
import { backendHeader, modelNotFoundMessage } from './model-routing.ts';
import { parseRetryAfterMs } from './retry-after.ts';
import {
  cachedUpstreamTarget,
  upstreamTarget,
  type UpstreamCall,
  type UpstreamClient,
  type UpstreamHandler,
  type UpstreamTarget,
} from './upstream.ts';
import { countsTokens, readsUsage, UsageChunkFilter, UsageScanner } from './usage.ts';

/** Response headers not copied from the upstream: Node frames the client response itself. */
const RESPONSE_HOP_BY_HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'trailer']);

/**
 * How long after a client let a paused stream go on a break of that stream is still the client's
 * doing (see `ExchangeAttempt.#heldByClient`): what the upstream sent before it gave up on the
 * stalled reader is read back within moments, its reset right after.
 */
const CLIENT_HELD_GRACE_MS = 1_000;

/** How long the body of a retried 5xx/429 may take to drain before its connection is dropped. */
const UPSTREAM_DRAIN_TIMEOUT_MS = 1_000;

/**
 * A configured timeout as a timer delay: the schema takes durations up to 999999h, and a Node
 * timer of more than ~24.8 days fires at once, so a `firstByte: 720h` meant as "never" would time
 * out every attempt at its first millisecond.
 */
function timerMs(ms: number): number {
  return Math.min(ms, MAX_TIMER_MS);
}

/** What every exchange of one proxy shares (one object, built once). */
export interface ExchangeDeps {
  readonly upstream: UpstreamClient;
  readonly metrics: SidecarMetrics;
  readonly logger: Logger;
  /** Monotonic ms, for TTFT metrics (the balancer has its own clock for decisions). */
  readonly nowMs: () => number;
  /** Every model the sidecar's pools serve: the list in a 404 for a model none serves. */
  readonly servedModels?: (() => readonly string[]) | undefined;
}

/** A client request, read and parsed by the proxy server. */
export interface ExchangeInit {
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
  /** What affinity hashes on: the prompt's blocks (`Prefix`) or the header's value (`Header`). */
  affinity: AffinityInput;
  /** The request's server span, when tracing is on. */
  trace?: RequestTrace | undefined;
  /**
   * A body passed through as it arrives instead of `raw` (multipart uploads): it can be sent
   * once only, so such a request is never retried.
   */
  bodyStream?: Readable | undefined;
  /** Sees the first bytes of a successful answer (the stored-response id, for instance). */
  tap?: ResponseTap | undefined;
  /** The metrics of the request's pool; `deps.metrics` when not given. */
  metrics?: SidecarMetrics | undefined;
  /**
   * The model the request is sent with, an alias resolved (undefined: it names none): only
   * endpoints that serve it are candidates (`PickRequest.model`).
   */
  model?: string | undefined;
  /** The model the client named, before an alias was resolved (`x-switchyard-backend`). */
  requestedModel?: string | undefined;
  /**
   * The client's `Content-Encoding` of a body passed on undecoded (a streamed upload, an opaque
   * body), which goes with it; forwardedHeaders drops it for the JSON bodies the proxy decodes.
   */
  bodyCoding?: string | undefined;
  /**
   * Called once when the exchange is over (answered in full, failed, shed, refused, or the client
   * gone), with the prompt + completion tokens of the `usage` seen on the answer the client got;
   * undefined when none was seen, or when the pool charges no tokens (usage.ts `countsTokens`).
   */
  onEnd?: ((end: ExchangeEnd) => void) | undefined;
  /**
   * The sidecar added `stream_options.include_usage` to this request (the client did not ask):
   * the usage-only chunk is taken out of the stream the client sees.
   */
  usageAdded?: boolean | undefined;
}

/** How an exchange ended, for whoever charges it (the flow gate's budgets). */
export interface ExchangeEnd {
  /** Prompt + completion tokens of the answer the client got; undefined: no usage seen. */
  readonly tokens: number | undefined;
}

/** Called on a 2xx head; returns what each body chunk of that answer is fed to, if anything. */
export type ResponseTap = (
  endpoint: EndpointSpec,
  status: number,
) => ((chunk: Buffer) => void) | undefined;

const DATA: AttemptEvent = { kind: 'data' };
const END: AttemptEvent = { kind: 'end' };
const DEADLINE: AttemptEvent = { kind: 'deadline' };
const CLIENT_GONE: AttemptEvent = { kind: 'client-gone' };
const SUPERSEDED: AttemptEvent = { kind: 'superseded' };
const PREEMPTED: AttemptEvent = { kind: 'preempted' };

/** One client request, across its attempts. */
export class Exchange {
  readonly deps: ExchangeDeps;
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly pool: ActivePool;
  readonly streamed: boolean;
  readonly trace: RequestTrace | undefined;
  /** The metrics of the request's pool. */
  readonly metrics: SidecarMetrics;
  readonly model: string | undefined;
  readonly requestedModel: string | undefined;
  /** Attempts sent so far (the `x-switchyard-attempts` header). */
  attempts = 0;
  readonly #path: string;
  readonly #query: string;
  readonly #raw: Buffer;
  readonly #fields: Record<string, unknown> | undefined;
  readonly #affinity: AffinityInput;
  readonly #bodyStream: Readable | undefined;
  readonly #bodyCoding: string | undefined;
  readonly tap: ResponseTap | undefined;
  readonly #tried = new Set<string>();
  /** Every attempt sent, the last one current: a client that leaves ends them all. */
  readonly #sent: ExchangeAttempt[] = [];
  #clientGone = false;
  /** The client's end-to-end headers, forwarded to every attempt. */
  #forwarded: IncomingHttpHeaders = {};
  /**
   * The client asked for the servers' ORCA load report itself: it gets the header. Otherwise the
   * sidecar asks for it (the balancer's server-reported load) and keeps it out of the answer.
   */
  clientAskedForLoad = false;
  readonly #bodyByModel = new Map<string, Buffer>();
  /** Read the usage of the answer: the pool charges tokens and the path's answers carry it. */
  readonly readsUsage: boolean;
  /** The sidecar asked for the usage chunk on the client's behalf: it is not the client's. */
  readonly usageAdded: boolean;
  /** The usage read from the answer the client got (set when its head is written). */
  usage: UsageScanner | undefined;
  /**
   * Where a preempted attempt's request goes back to (the flow gate, admission.ts): set for a
   * request that flow control may preempt; `preempt()` refuses without it.
   */
  onPreempted: (() => void) | undefined;

  constructor(deps: ExchangeDeps, init: ExchangeInit) {
    this.deps = deps;
    this.req = init.req;
    this.res = init.res;
    this.pool = init.pool;
    this.streamed = init.streamed;
    this.trace = init.trace;
    this.metrics = init.metrics ?? deps.metrics;
    this.model = init.model;
    this.requestedModel = init.requestedModel;
    this.#path = init.path;
    this.#query = init.query;
    this.#raw = init.raw;
    this.#fields = init.fields;
    this.#affinity = init.affinity;
    this.#bodyStream = init.bodyStream;
    this.#bodyCoding = init.bodyCoding;
    this.tap = init.tap;
    this.usageAdded = init.usageAdded === true;
    this.readsUsage = countsTokens(init.pool.policy) && readsUsage(init.path);
    this.#watchEnd(init.onEnd);
  }

  /**
   * Reports the end of the exchange when the client's response closes: that is once, whatever
   * ended it (the answer sent in full, an error or refusal sent, the client gone), and after the
   * last byte of the answer went through the usage scanner.
   */
  #watchEnd(onEnd: ((end: ExchangeEnd) => void) | undefined): void {
    if (onEnd === undefined && !this.readsUsage) return;
    const report = (): void => {
      const tokens = this.usage?.tokens;
      if (this.readsUsage)
        this.deps.logger.debug(
          { pool: this.pool.name, path: this.#path, tokens: tokens ?? null },
          'exchange over: tokens used',
        );
      onEnd?.({ tokens });
    };
    if (this.res.closed) queueMicrotask(report);
    else this.res.once('close', report);
  }

  /** The sidecar answered the client itself (a streamed body over the limit): end every attempt. */
  abandon(): void {
    this.#clientGone = true;
    for (const attempt of this.#sent) attempt.clientGone();
  }

  /**
   * The current attempt while nothing of its answer has reached the client (attempt-state.ts
   * `isPreemptable`: no body byte yet) and the client is still there: where and when (the
   * balancer's clock) it was sent. Undefined once it answers, or with none under way.
   */
  unanswered(): { endpointId: string; startedAtMs: number } | undefined {
    const current = this.#sent.at(-1);
    if (current === undefined || this.#clientGone || !current.preemptable()) return undefined;
    return { endpointId: current.attempt.endpoint.id, startedAtMs: current.attempt.startedAtMs };
  }

  /**
   * Ends the current attempt to free its slot for a request of a higher priority, and gives the
   * request back to the flow gate (`onPreempted`), which sends it again when there is room.
   * False (nothing done) without `onPreempted`, or once the answer has started (`unanswered`).
   */
  preempt(): boolean {
    if (this.onPreempted === undefined || this.unanswered() === undefined) return false;
    this.#sent.at(-1)!.preempt();
    return true;
  }

  /** Internal to the attempt: it was preempted; its endpoint did nothing wrong, it may serve it again. */
  requeue(endpointId: string): void {
    this.#tried.delete(endpointId);
    if (this.#clientGone) return;
    this.onPreempted?.();
  }

  /**
   * Sends the request again after a preemption, on `pick` (the flow gate picked it once there
   * was room), as its first attempt was.
   */
  resume(pick: PickResult): void {
    if (this.#clientGone || this.res.closed) {
      if (pick.kind === 'picked') this.pool.balancer.finish(pick.attempt, { kind: 'neutral' });
      return;
    }
    this.#first(pick);
  }

  /**
   * What the first attempt's pick asks of the balancer: the flow gate (flow-gate.ts) picks with
   * it (`pickWithRoom`) and starts the exchange with its pick.
   */
  pickRequest(): PickRequest {
    return {
      ...this.#affinity,
      exclude: this.#tried,
      requestBytes: this.#raw.length,
      model: this.model,
    };
  }

  /**
   * Sends the first attempt: on `pick` when given (the flow gate picked it), else on the
   * balancer's pick now.
   */
  start(pick?: PickResult): void {
    this.#forwarded = forwardedHeaders(this.req.headers);
    this.clientAskedForLoad = this.#forwarded[ORCA_REQUEST_HEADER] !== undefined;
    if (this.res.destroyed || this.res.closed || this.req.socket.destroyed) {
      // The client left while its body was being read: nothing to send, nothing to count.
      this.#clientGone = true;
      if (pick?.kind === 'picked') this.pool.balancer.finish(pick.attempt, { kind: 'neutral' });
      return;
    }
    this.res.once('close', () => {
      if (this.res.writableFinished) return;
      this.#clientGone = true;
      for (const attempt of this.#sent) attempt.clientGone();
    });
    this.#first(pick);
  }

  /** The first attempt: pick (or shed at once) and send. */
  #first(given: PickResult | undefined): void {
    const { metrics } = this;
    const pick = given ?? this.pool.balancer.pick(this.pickRequest());
    if (pick.kind === 'shed' && pick.reason === 'model-not-served') {
      // No endpoint of the pool serves the model at all, whatever its health: not a 503 to retry.
      const model = this.requestedModel ?? this.model ?? '';
      const served = this.deps.servedModels?.() ?? [];
      // A name the pool declares (or an alias of one) that none of its endpoints lists now: say
      // so, or the list below would name the very model refused.
      const why = served.includes(model)
        ? ` Pool ${this.pool.name} knows it, but none of its endpoints serves ${this.model ?? model} now (their /v1/models lists lack it).`
        : '';
      sendModelNotFound(this.res, modelNotFoundMessage(model, served) + why, {
        'x-switchyard-attempts': '0',
      });
      return;
    }
    if (pick.kind === 'shed') {
      metrics.shed.inc();
      this.pool.demand?.shed();
      this.trace?.shed();
      const seconds = Math.max(1, Math.ceil(pick.retryAfterMs / 1000));
      const pinned = this.#affinity.pinnedEndpointId;
      sendError(
        this.res,
        503,
        'no_healthy_backend',
        pinned === undefined
          ? `Every endpoint of pool ${this.pool.name} is unavailable (circuit breakers open); retry after ${seconds}s.`
          : `Endpoint ${pinned}, which holds the stored response this request refers to, is unavailable (circuit breaker open or rate-limited); retry after ${seconds}s.`,
        { 'retry-after': String(seconds), 'x-switchyard-attempts': '0' },
      );
      return;
    }
    metrics.affinityResult(pick.affinity);
    this.#send(pick.attempt, pick.affinity);
  }

  /**
   * Starts another attempt if `maxAttempts` and the retry budget allow it and another endpoint is
   * live. Returns false when the caller must answer the client with what it has.
   */
  retry(): boolean {
    if (this.#clientGone || this.res.headersSent) return false;
    // A passed-through body went to the first attempt and is gone.
    if (this.#bodyStream !== undefined) return false;
    const { logger } = this.deps;
    const { metrics } = this;
    const decision = this.pool.balancer.tryRetry(this.attempts);
    if (decision.kind !== 'retry') {
      this.trace?.retryVerdict(decision.kind);
      if (decision.kind === 'budget-exhausted') metrics.retryBudgetExhausted.inc();
      return false;
    }
    const pick = this.pool.balancer.pick({
      ...this.#affinity,
      exclude: this.#tried,
      requestBytes: this.#raw.length,
      model: this.model,
    });
    if (pick.kind === 'shed') {
      this.trace?.retryVerdict('no-endpoint');
      return false;
    }
    this.trace?.retryVerdict('retry');
    metrics.retries.inc();
    logger.debug(
      { from: this.#sent.at(-1)?.attempt.endpoint.id, to: pick.attempt.endpoint.id },
      'retrying on another endpoint',
    );
    this.#send(pick.attempt, pick.affinity);
    return true;
  }

  /** Answers the client with a 502, or a 504 for a timeout. */
  fail(failure: Failure, endpointId: string): void {
    if (this.res.writableEnded) return; // already answered (a streamed body over the limit)
    const headers = { 'x-switchyard-attempts': String(this.attempts) };
    const detail = describeFailure(failure, endpointId, this.pool.timeouts.firstByteMs);
    if (failure.timeout) {
      sendError(
        this.res,
        504,
        'upstream_timeout',
        `Upstream timed out after ${this.attempts} attempt(s): ${detail}.`,
        headers,
      );
    } else {
      sendError(
        this.res,
        502,
        'upstream_unreachable',
        `Upstream failed after ${this.attempts} attempt(s): ${detail}.`,
        headers,
      );
    }
  }

  #send(attempt: Attempt, affinity: AffinityResult): void {
    const endpoint = attempt.endpoint;
    const body = this.#bodyFor(endpoint);
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
    this.#tried.add(endpoint.id);
    const stream = this.#bodyStream;
    const headers: OutgoingHttpHeaders = { ...this.#forwarded };
    if (stream === undefined) headers['content-length'] = body.length;
    else if (this.req.headers['content-length'] !== undefined) {
      headers['content-length'] = this.req.headers['content-length'];
    }
    if (this.#bodyCoding !== undefined) headers['content-encoding'] = this.#bodyCoding;
    // vLLM answers with its queue and KV-cache use (on non-streamed responses) when asked.
    if (!this.clientAskedForLoad) headers[ORCA_REQUEST_HEADER] = 'TEXT';
    applyBackendKey(headers, endpoint);
    const url = upstreamUrl(endpoint.url, this.#path);
    const target =
      this.#query === '' ? cachedUpstreamTarget(url) : upstreamTarget(url + this.#query);
    const attemptTrace = this.trace?.startAttempt(
      {
        attempt,
        number: this.attempts,
        affinity,
        balancer: this.pool.balancer,
        host: target.hostname,
        port: target.port,
      },
      headers,
    );
    try {
      this.#sent.push(
        new ExchangeAttempt(this, attempt, affinity, target, headers, stream ?? body, attemptTrace),
      );
    } catch (err) {
      attemptTrace?.end();
      // Node refused to send these headers: a bug of ours or a header it cannot forward.
      this.pool.balancer.finish(attempt, { kind: 'neutral' });
      this.deps.logger.error(
        { err: err instanceof Error ? { name: err.name, message: err.message } : String(err) },
        'internal error while handling a request',
      );
      sendError(this.res, 500, 'internal_error', 'The sidecar failed to handle this request.');
    }
  }

  /**
   * The model the request went to `endpoint` with: the backend's `model:` when the body was
   * rewritten for it (a JSON body), else the pool's resolved name (undefined: none named).
   */
  sentModel(endpoint: EndpointSpec): string | undefined {
    if (
      endpoint.model !== undefined &&
      this.#bodyStream === undefined &&
      this.#fields !== undefined
    )
      return endpoint.model;
    return this.model;
  }

  /**
   * The request body for this endpoint: the client's bytes, or re-serialised with the backend's
   * model name; undefined when the body cannot be re-serialised.
   */
  #bodyFor(endpoint: EndpointSpec): Buffer | undefined {
    if (
      endpoint.model === undefined ||
      this.#bodyStream !== undefined ||
      this.#fields === undefined
    )
      return this.#raw;
    let body = this.#bodyByModel.get(endpoint.model);
    if (body === undefined) {
      try {
        body = Buffer.from(JSON.stringify({ ...this.#fields, model: endpoint.model }));
      } catch {
        return undefined;
      }
      this.#bodyByModel.set(endpoint.model, body);
    }
    return body;
  }
}

/**
 * One attempt of an exchange: its upstream request (whose handler it is), its state, and the
 * first-byte deadline. Every event goes through `#step`, which applies `transition`.
 */
class ExchangeAttempt implements UpstreamHandler {
  readonly attempt: Attempt;
  /** How affinity placed this attempt: the `x-switchyard-affinity` header of its answer. */
  readonly #affinity: AffinityResult;
  #state: AttemptState = INITIAL_STATE;
  readonly #exchange: Exchange;
  readonly #metrics: EndpointMetrics;
  readonly #sentAtMs: number;
  readonly #upstream: UpstreamCall;
  #deadline: NodeJS.Timeout | undefined;
  #status = 0;
  #headers: IncomingHttpHeaders = {};
  #driftCheck: PassiveDriftCheck | undefined;
  #tap: ((chunk: Buffer) => void) | undefined;
  /** Reads the usage of a 2xx answer, when the exchange charges tokens. */
  #usage: UsageScanner | undefined;
  /** Takes the usage chunk the sidecar asked for out of a streamed 2xx answer. */
  #usageFilter: UsageChunkFilter | undefined;
  #onClientDrain: (() => void) | undefined;
  /** Runs while the client's socket is full: from the write that filled it to its `drain`. */
  #clientStall: NodeJS.Timeout | undefined;
  /** The client holds the stream paused: a write filled its socket, which has not drained. */
  #clientHolds = false;
  /** When the client last let the stream go on (its socket drained), monotonic ms; -∞: never held. */
  #clientReleasedAtMs = Number.NEGATIVE_INFINITY;
  #trailers: Readonly<Record<string, string>> | undefined;
  /** This attempt's span while it is open (when tracing is on and it is sampled). */
  #trace: AttemptTrace | undefined;

  constructor(
    exchange: Exchange,
    attempt: Attempt,
    affinity: AffinityResult,
    target: UpstreamTarget,
    headers: OutgoingHttpHeaders,
    body: Buffer | Readable,
    trace: AttemptTrace | undefined,
  ) {
    const { deps, pool } = exchange;
    this.#trace = trace;
    this.#exchange = exchange;
    this.attempt = attempt;
    this.#affinity = affinity;
    this.#metrics = exchange.metrics.forEndpoint(attempt.endpoint);
    this.#sentAtMs = deps.nowMs();
    this.#upstream = deps.upstream.request(
      {
        target,
        method: exchange.req.method ?? 'GET',
        headers,
        body,
        connectTimeoutMs: timerMs(pool.timeouts.connectMs),
        tls: attempt.endpoint.tls,
      },
      this,
    );
    this.#deadline = setTimeout(this.#onDeadline, timerMs(pool.timeouts.firstByteMs));
  }

  clientGone(): void {
    this.#step(CLIENT_GONE);
  }

  preemptable(): boolean {
    return isPreemptable(this.#state);
  }

  preempt(): void {
    this.#step(PREEMPTED);
  }

  onResponseHead(status: number, headers: IncomingHttpHeaders): void {
    this.#status = status;
    this.#headers = headers;
    const retryAfterMs =
      status === 429 ? parseRetryAfterMs(headers['retry-after'], Date.now()) : undefined;
    this.#step({ kind: 'head', status, retryAfterMs });
    const orca = headers[ORCA_RESPONSE_HEADER];
    if (typeof orca === 'string') {
      const load = parseOrcaHeader(orca);
      if (load !== undefined)
        this.#exchange.pool.balancer.reportLoad(this.attempt.endpoint.id, load);
    }
    const probe = this.attempt.endpoint.probe;
    if (
      this.#state.kind === 'awaiting-first-byte' &&
      status >= 200 &&
      status < 300 &&
      probe !== undefined
    )
      this.#driftCheck = new PassiveDriftCheck(probe);
    if (status >= 200 && status < 300) {
      const exchange = this.#exchange;
      this.#tap = exchange.tap?.(this.attempt.endpoint, status);
      if (exchange.readsUsage) this.#usage = new UsageScanner();
      if (
        exchange.usageAdded &&
        String(headers['content-type'] ?? '').startsWith('text/event-stream')
      )
        this.#usageFilter = new UsageChunkFilter();
    }
  }

  onData(chunk: Buffer): void {
    this.#trace?.data(chunk);
    if (this.#driftCheck?.feed(chunk) === true) {
      this.#exchange.pool.balancer.noteDriftMismatch(this.attempt);
      this.#metrics.driftMismatches.inc();
    }
    this.#tap?.(chunk);
    this.#step(DATA);
    const kind = this.#state.kind;
    if (kind !== 'streaming' && kind !== 'streaming-error') return;
    const { res } = this.#exchange;
    this.#usage?.feed(chunk);
    if (this.#usageFilter !== undefined) {
      chunk = this.#usageFilter.feed(chunk);
      if (chunk.length === 0) return; // all of it held, or the usage chunk dropped
    }
    if (!res.write(chunk)) {
      this.#clientHolds = true;
      this.#upstream.pause();
      res.once(
        'drain',
        (this.#onClientDrain ??= () => {
          this.#clientHolds = false;
          this.#clientReleasedAtMs = this.#exchange.deps.nowMs();
          this.#stopClientStall();
          this.#upstream.resume();
        }),
      );
      this.#watchClientStall();
    }
  }

  onEnd(trailers?: Readonly<Record<string, string>>): void {
    this.#trailers = trailers;
    this.#step(END);
  }

  onError(code: string): void {
    this.#trace?.upstreamError(code);
    this.#step({ kind: 'upstream-error', code, clientHeld: this.#heldByClient() });
  }

  /**
   * Whether an upstream error now ends what the client held: it holds the stream paused, or let
   * it go on less than `CLIENT_HELD_GRACE_MS` ago. While paused the sidecar reads nothing from
   * the upstream, so a server that dropped the stalled reader meanwhile (its send timeout, a
   * proxy's stream timeout) is heard only once reading resumes, after the bytes it had sent
   * before; those come within moments of the drain.
   */
  #heldByClient(): boolean {
    if (this.#clientHolds) return true;
    return this.#exchange.deps.nowMs() - this.#clientReleasedAtMs < CLIENT_HELD_GRACE_MS;
  }

  readonly #onDeadline = (): void => {
    // Timers run before the loop polls sockets: after a stall of our own (docs/policy.md, "Whose
    // fault an attempt is") the answer may be waiting unread. setImmediate runs after that poll;
    // a deadline that comes once the attempt moved on changes nothing.
    setImmediate(() => {
      this.#deadline = undefined;
      this.#step(DEADLINE);
    });
  };

  /**
   * The client's socket is full: start the clock of `clientStallMs`, unless it runs already (the
   * socket has not drained since an earlier write filled it).
   */
  #watchClientStall(): void {
    if (this.#clientStall !== undefined) return;
    const { deps, pool } = this.#exchange;
    const sinceMs = deps.nowMs();
    const limitMs = timerMs(pool.timeouts.clientStallMs ?? CLIENT_STALL_MS);
    const arm = (delayMs: number): void => {
      const timer = setTimeout(() => {
        // As for the first-byte deadline: after a stall of our own the drain may be waiting
        // unread, so judge after one more poll. Drained or ended meanwhile: the timer is no
        // longer this one, and nothing happens.
        setImmediate(() => {
          if (this.#clientStall !== timer) return;
          // Node counts a timer from the event loop's clock as the iteration began, so it can
          // fire a millisecond early by ours (CI measured 199 of 200): never cut a client early.
          const stalledMs = deps.nowMs() - sinceMs;
          if (stalledMs < limitMs) {
            arm(Math.max(1, Math.ceil(limitMs - stalledMs)));
            return;
          }
          this.#clientStall = undefined;
          this.#disconnectStalledClient(stalledMs);
        });
      }, delayMs);
      this.#clientStall = timer;
    };
    arm(limitMs);
  }

  #stopClientStall(): void {
    if (this.#clientStall === undefined) return;
    clearTimeout(this.#clientStall);
    this.#clientStall = undefined;
  }

  /**
   * The client read nothing for `clientStallMs`. Destroying its connection takes the path of a
   * client that left: the attempt reports `aborted` (neutral to the balancer, docs/policy.md
   * "Whose fault an attempt is") and its upstream request is aborted, so the model server frees
   * the request's slot.
   */
  #disconnectStalledClient(stalledMs: number): void {
    const { res, deps, pool } = this.#exchange;
    if (res.destroyed) return;
    this.#exchange.metrics.clientStalled.inc();
    deps.logger.warn(
      { pool: pool.name, endpoint: this.attempt.endpoint.id, stalledMs: Math.round(stalledMs) },
      'client stopped reading; connection closed',
    );
    // A reset rather than a FIN, as nginx's reset_timedout_connection: the response still in the
    // socket's buffers (megabytes) is dropped at once instead of lingering in the kernel for a
    // peer that does not read.
    const socket = res.socket;
    try {
      if (socket === null) res.destroy();
      else socket.resetAndDestroy();
    } catch {
      socket?.destroy(); // not a TCP socket: it cannot send a reset
    }
  }

  #step(event: AttemptEvent): void {
    const next = transition(this.#state, event);
    if (next === undefined) return;
    this.#state = next.state;
    if (this.#deadline !== undefined && !awaitsFirstByte(next.state)) {
      clearTimeout(this.#deadline);
      this.#deadline = undefined;
    }
    for (const effect of next.effects) this.#perform(effect);
    const kind = this.#state.kind;
    if (kind === 'done' || kind === 'draining') {
      // An attempt that ended writes nothing more to the client: its stall is no longer ours.
      this.#stopClientStall();
      // A drained attempt hears nothing more from its upstream, so its span ends here too.
      if (this.#trace !== undefined) {
        this.#trace.end();
        this.#trace = undefined;
      }
    }
  }

  #perform(effect: Effect): void {
    const exchange = this.#exchange;
    const { pool, res } = exchange;
    switch (effect.kind) {
      case 'report':
        this.#trace?.report(effect.code, this.#status);
        this.#metrics.requests[effect.code].inc();
        pool.balancer.finish(
          this.attempt,
          outcomeOf(effect.code, exchange.streamed, effect.retryAfterMs),
        );
        return;
      case 'first-byte':
        this.#trace?.firstByte();
        // A streamed 2xx's first byte is its first token: a TTFT sample now, not at the end of
        // a generation that may stream for minutes (docs/policy.md §5).
        pool.balancer.firstByte(
          this.attempt,
          exchange.streamed && this.#status >= 200 && this.#status < 300,
        );
        if (exchange.streamed)
          this.#metrics.ttft.observe((exchange.deps.nowMs() - this.#sentAtMs) / 1000);
        return;
      case 'watch-idle':
        this.#upstream.watchIdle(timerMs(pool.timeouts.idleMs));
        return;
      case 'write-head':
        // This attempt's answer is the client's: its usage is the exchange's.
        exchange.usage = this.#usage;
        this.#writeHead();
        return;
      case 'end-client':
        this.#flushHeld();
        // Trailers go out only on a chunked response (Node drops them otherwise), which is what
        // a response that had them upstream becomes: the upstream's framing is not copied.
        if (this.#trailers !== undefined) res.addTrailers(this.#trailers);
        res.end();
        return;
      case 'break-client':
        this.#flushHeld();
        this.#breakOff();
        return;
      case 'destroy-upstream':
        this.#upstream.abort();
        return;
      case 'drain-upstream':
        this.#upstream.drain(UPSTREAM_DRAIN_TIMEOUT_MS);
        return;
      case 'retry-or-fail':
        if (!exchange.retry()) exchange.fail(effect.failure, this.attempt.endpoint.id);
        return;
      case 'retry-or-relay':
        if (exchange.retry()) this.#step(SUPERSEDED);
        return;
      case 'fail':
        exchange.fail(effect.failure, this.attempt.endpoint.id);
        return;
      case 'requeue':
        exchange.requeue(this.attempt.endpoint.id);
        return;
    }
  }

  /** What the usage filter held of an event never finished goes out as it came. */
  #flushHeld(): void {
    const held = this.#usageFilter?.flush();
    if (held !== undefined && held.length > 0) this.#exchange.res.write(held);
  }

  #writeHead(): void {
    const exchange = this.#exchange;
    const upstreamHeaders = this.#headers;
    const headers: OutgoingHttpHeaders = {};
    for (const name in upstreamHeaders) {
      const value = upstreamHeaders[name];
      if (value !== undefined && !RESPONSE_HOP_BY_HOP.has(name)) headers[name] = value;
    }
    if (!exchange.clientAskedForLoad) delete headers[ORCA_RESPONSE_HEADER];
    // The usage chunk may be taken out: the length is no longer the upstream's (Node chunks it).
    if (this.#usageFilter !== undefined) delete headers['content-length'];
    const endpoint = this.attempt.endpoint;
    // The model the request went with, when not the name the client asked for: a backend's
    // `model:` (exchange.#bodyFor), else the pool's alias.
    headers['x-switchyard-backend'] = backendHeader(
      endpoint.id,
      exchange.requestedModel,
      exchange.sentModel(endpoint),
    );
    headers['x-switchyard-attempts'] = String(exchange.attempts);
    headers['x-switchyard-affinity'] = this.#affinity;
    exchange.res.writeHead(this.#status, headers);
  }

  /** A stream the upstream broke after its first byte: end it so clients stop instead of hanging. */
  #breakOff(): void {
    const { res } = this.#exchange;
    const type = String(this.#headers['content-type'] ?? '');
    if (type.startsWith('text/event-stream')) {
      // A clean SSE error event, then the end of the stream.
      const event = JSON.stringify({
        error: {
          message: 'The upstream stream broke off; the response is incomplete.',
          type: 'upstream_error',
          code: 'upstream_stream_broken',
        },
      });
      res.end(`data: ${event}\n\n`);
    } else {
      res.destroy();
    }
  }
}

/** The detail of a 502 or 504 message: what went wrong, and where. */
export function describeFailure(failure: Failure, endpointId: string, firstByteMs: number): string {
  switch (failure.kind) {
    case 'transport':
      return `${failure.code} from ${endpointId}`;
    case 'reset-before-first-byte':
      return `upstream reset before the first byte from ${endpointId}`;
    case 'no-first-byte':
      return `no response byte from ${endpointId} within ${firstByteMs} ms`;
    case 'no-error-body':
      return `${endpointId} answered ${failure.status} and sent no body within ${firstByteMs} ms`;
  }
}
