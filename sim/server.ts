/**
 * The backend simulator: an OpenAI-compatible HTTP server (node:http, no framework) whose
 * latency comes from a small model of an inference engine — a fixed number of batch slots, a
 * FIFO queue in front of them, prefill time for the prompt tokens that miss a block-granular
 * prefix cache, per-token decode time that grows with the number of busy slots, cold starts, and
 * injectable faults. See docs/simulator.md for the formulas.
 *
 * Cost: one timer per generation, re-armed per tick; a streaming tick writes every token that has
 * come due since the last one (at least MIN_TICK_MS apart), a non-streaming generation sleeps
 * until its end and is only re-armed when the load changes.
 */
import { createServer } from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { once } from 'node:events';
import { performance } from 'node:perf_hooks';
import { PrefixCache, blockKeys } from './engine/prefix-cache.ts';
import {
  ChunkWriter,
  WORDS,
  errorBody,
  fullResponse,
  isApiError,
  parseEmbedding,
  parseGeneration,
  usage,
} from './openai.ts';
import type {
  ApiError,
  EmbeddingRequest,
  FinishReason,
  GenerationKind,
  ResponseHead,
} from './openai.ts';
import { checkSimOptionsPatch, resolveSimOptions, SimOptionError } from './options.ts';
import type { SimOptions } from './options.ts';
import { mulberry32 } from '../lib/rng.ts';
import { hashString32 } from './engine/hash.ts';
import type { RandomFn } from '../lib/rng.ts';

/** Model name listed by GET /v1/models (and used when a request names none) if `model` is unset. */
export const ANY_MODEL_NAME = 'sim-model';
/** Minimum wall-clock gap between two writes of one stream: faster decodes are batched. */
export const MIN_TICK_MS = 1;
/** Output length when the request sets no max_tokens: uniform in [MIN, MAX]. */
export const DEFAULT_OUTPUT_MIN = 16;
export const DEFAULT_OUTPUT_MAX = 128;
const MAX_BODY_BYTES = 32 * 1024 * 1024;
const KEEP_ALIVE_MS = 65_000;

export interface SimStats {
  name: string;
  uptimeMs: number;
  /** Generation and embedding requests received (every outcome). */
  requests: number;
  /** Requests holding a slot (prefill, decode, or stalled). */
  inFlight: number;
  /** Requests waiting for a slot. */
  queued: number;
  /** Requests answered in full (generations and embeddings). */
  completed: number;
  /** Requests whose client went away before the answer was complete. */
  aborted: number;
  /** Injected 500s. */
  errors: number;
  /** Every 429: injected ones plus queue overflows. */
  rateLimited: number;
  /** The 429s caused by a full queue. */
  queueRejected: number;
  /** Requests chosen to stall. */
  stalled: number;
  /** 400s and model 404s on the generation and embedding endpoints. */
  badRequests: number;
  coldStarts: number;
  /** Prompt blocks found in the prefix cache / computed, summed over requests. */
  cacheHitBlocks: number;
  cacheMissBlocks: number;
  /** Blocks currently held by the cache. */
  cachedBlocks: number;
  promptTokens: number;
  cachedPromptTokens: number;
  completionTokens: number;
}

export interface SimHandle {
  /** `http://<host>:<port>`, without a trailing slash (the API is under `/v1`). */
  readonly url: string;
  readonly port: number;
  close(): Promise<void>;
  stats(): SimStats;
  /** Apply a run-time patch (anything but port/host). Throws `SimOptionError` naming the field. */
  configure(patch: Partial<SimOptions>): void;
  /** The effective options (name resolved, actual port). */
  options(): SimOptions;
}

/** The subset of a pino logger the simulator uses. */
export interface SimLogger {
  debug(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

export interface StartSimDeps {
  logger?: SimLogger | undefined;
}

type JobKind = GenerationKind | 'embedding';
type JobState = 'queued' | 'prefill' | 'decode' | 'stalled' | 'done';

interface Job {
  readonly seq: number;
  readonly kind: JobKind;
  readonly res: ServerResponse;
  readonly stream: boolean;
  readonly stall: boolean;
  readonly head: ResponseHead;
  readonly promptTokens: number;
  /** Prefix cache keys of the prompt's full blocks (none for embeddings). */
  readonly keys: number[];
  readonly outputTokens: number;
  readonly finish: FinishReason;
  readonly includeUsage: boolean;
  readonly rng: RandomFn;
  readonly embedding: EmbeddingRequest | undefined;
  readonly writer: ChunkWriter | undefined;
  state: JobState;
  holdsSlot: boolean;
  timer: NodeJS.Timeout | undefined;
  cachedTokens: number;
  emitted: number;
  /** Decode progress in tokens (fractional), as of `progressAt`, at `intervalMs` per token. */
  progress: number;
  progressAt: number;
  intervalMs: number;
  /** Non-streaming: the generated text so far. */
  text: string;
}

/** Per-request connection state, created before the body is read. */
interface Exchange {
  closed: boolean;
  job: Job | undefined;
}

function emptyCounters(): Omit<
  SimStats,
  'name' | 'uptimeMs' | 'inFlight' | 'queued' | 'cachedBlocks'
> {
  return {
    requests: 0,
    completed: 0,
    aborted: 0,
    errors: 0,
    rateLimited: 0,
    queueRejected: 0,
    stalled: 0,
    badRequests: 0,
    coldStarts: 0,
    cacheHitBlocks: 0,
    cacheMissBlocks: 0,
    promptTokens: 0,
    cachedPromptTokens: 0,
    completionTokens: 0,
  };
}

const NOOP_LOGGER: SimLogger = { debug() {}, info() {}, warn() {} };

function sendJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  if (res.headersSent || res.destroyed) return;
  const text = typeof body === 'string' ? body : JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': String(Buffer.byteLength(text)),
    ...headers,
  });
  res.end(text);
}

function sendError(res: ServerResponse, e: ApiError, headers: Record<string, string> = {}): void {
  sendJson(res, e.status, errorBody(e), headers);
}

const KNOWN_PATHS = new Set([
  '/healthz',
  '/v1/models',
  '/v1/chat/completions',
  '/v1/completions',
  '/v1/embeddings',
  '/admin/stats',
  '/admin/config',
  '/admin/reset',
]);

class Simulator {
  readonly #server: Server;
  readonly #log: SimLogger;
  readonly #startedAt = performance.now();
  #opts: SimOptions;
  #port = 0;
  #faultRng: RandomFn;
  readonly #cache: PrefixCache;
  #counters = emptyCounters();
  readonly #running = new Set<Job>();
  #queue: Job[] = [];
  #busy = 0;
  #seq = 0;
  /** When the server last became idle; undefined = it never served (the first request is cold). */
  #idleSince: number | undefined = undefined;
  /** Prefills may not start before this (wall clock, performance.now()). */
  #warmAt = 0;
  #closing = false;

  constructor(opts: SimOptions, log: SimLogger) {
    this.#opts = opts;
    this.#log = log;
    this.#faultRng = mulberry32(opts.seed);
    this.#cache = new PrefixCache(opts.cacheBlocks);
    // A long keep-alive: a proxy's pooled upstream socket should not be closed under it by the
    // server's idle timer (Node's default is 5 s), which would show up as spurious resets.
    this.#server = createServer({ keepAliveTimeout: KEEP_ALIVE_MS }, (req, res) =>
      this.#onRequest(req, res),
    );
  }

  async listen(): Promise<number> {
    this.#server.listen(this.#opts.port, this.#opts.host);
    await once(this.#server, 'listening');
    this.#port = (this.#server.address() as AddressInfo).port;
    this.#log.info({ port: this.#port, name: this.#name() }, 'simulator listening');
    return this.#port;
  }

  async close(): Promise<void> {
    if (this.#closing) return;
    this.#closing = true;
    const jobs = [...this.#running, ...this.#queue];
    this.#running.clear();
    this.#queue = [];
    this.#busy = 0;
    for (const job of jobs) {
      if (job.timer !== undefined) clearTimeout(job.timer);
      job.timer = undefined;
      job.state = 'done';
      job.holdsSlot = false;
      job.res.destroy();
    }
    const closed = once(this.#server, 'close');
    this.#server.close();
    this.#server.closeAllConnections();
    await closed;
  }

  #name(): string {
    return this.#opts.name ?? `sim-${this.#port}`;
  }

  effectiveOptions(): SimOptions {
    return { ...this.#opts, port: this.#port, name: this.#name() };
  }

  stats(): SimStats {
    return {
      name: this.#name(),
      uptimeMs: Math.round(performance.now() - this.#startedAt),
      inFlight: this.#busy,
      queued: this.#queue.length,
      cachedBlocks: this.#cache.size,
      ...this.#counters,
    };
  }

  /**
   * A fresh start without a new process: counters zeroed, prefix cache emptied, the fault sequence
   * started over from the seed, and cold again (when cold starts are on). What a benchmark does
   * between two policies, so that each meets the same backends. Requests in progress go on.
   */
  resetStats(): void {
    this.#counters = emptyCounters();
    this.#cache.clear();
    this.#faultRng = mulberry32(this.#opts.seed);
    if (this.#busy === 0) {
      this.#idleSince = undefined;
      this.#warmAt = 0;
    }
  }

  configure(patch: Partial<SimOptions>): SimOptions {
    const checked = checkSimOptionsPatch(patch, { runtime: true });
    if (!checked.ok) throw new SimOptionError(checked.field, checked.message);
    const before = this.#opts;
    const next = { ...before, ...checked.patch };
    this.#opts = next;
    if (next.seed !== before.seed) this.#faultRng = mulberry32(next.seed);
    if (next.blockTokens !== before.blockTokens || next.charsPerToken !== before.charsPerToken) {
      this.#cache.clear(); // old keys describe a different block partition
    }
    if (next.cacheBlocks !== before.cacheBlocks) this.#cache.setCapacity(next.cacheBlocks);
    this.#drain();
    this.#loadChanged(performance.now());
    this.#log.info({ patch: checked.patch }, 'options changed');
    return this.effectiveOptions();
  }

  // ---------------------------------------------------------------- HTTP

  #onRequest(req: IncomingMessage, res: ServerResponse): void {
    const ex: Exchange = { closed: false, job: undefined };
    res.once('close', () => {
      ex.closed = true;
      if (ex.job !== undefined) this.#onClientGone(ex.job);
    });
    req.on('error', () => {}); // a client that resets mid-body: res 'close' handles it
    res.setHeader('x-sim-backend', this.#name());
    try {
      this.#route(req, res, ex);
    } catch (err) {
      this.#log.warn({ err }, 'request handler failed');
      sendError(res, {
        status: 500,
        message: 'simulator bug',
        type: 'server_error',
        code: 'internal_error',
      });
    }
  }

  #route(req: IncomingMessage, res: ServerResponse, ex: Exchange): void {
    const path = (req.url ?? '/').split('?', 1)[0] ?? '/';
    const method = req.method ?? 'GET';
    if (method === 'POST') {
      switch (path) {
        case '/v1/chat/completions':
          return this.#withBody(req, res, ex, (body) => this.#generation('chat', body, res, ex));
        case '/v1/completions':
          return this.#withBody(req, res, ex, (body) =>
            this.#generation('completion', body, res, ex),
          );
        case '/v1/embeddings':
          return this.#withBody(req, res, ex, (body) => this.#embeddings(body, res, ex));
        case '/admin/config':
          return this.#withBody(req, res, ex, (body) => this.#adminConfig(body, res));
        case '/admin/reset':
          req.resume();
          this.resetStats();
          return sendJson(res, 200, this.stats());
      }
    } else if (method === 'GET' || method === 'HEAD') {
      if (path === '/healthz') return sendJson(res, 200, { status: 'ok', name: this.#name() });
      if (path === '/admin/stats') return sendJson(res, 200, this.stats());
      if (path === '/admin/config') return sendJson(res, 200, optionsJson(this.effectiveOptions()));
      if (path === '/v1/models') {
        return sendJson(res, 200, {
          object: 'list',
          data: [this.#modelObject(this.#listedModel())],
        });
      }
      if (path.startsWith('/v1/models/')) {
        const id = decodeURIComponent(path.slice('/v1/models/'.length));
        if (this.#opts.model === undefined || id === this.#opts.model) {
          return sendJson(res, 200, this.#modelObject(id));
        }
        return sendError(res, modelNotFound(id));
      }
    }
    req.resume();
    if (KNOWN_PATHS.has(path)) {
      return sendError(
        res,
        {
          status: 405,
          message: `Method ${method} is not allowed on ${path}`,
          type: 'invalid_request_error',
          code: 'method_not_allowed',
        },
        { allow: path.startsWith('/v1/') && path !== '/v1/models' ? 'POST' : 'GET, POST' },
      );
    }
    sendError(res, {
      status: 404,
      message: `Unknown request URL: ${method} ${path}`,
      type: 'invalid_request_error',
      code: 'unknown_url',
    });
  }

  #withBody(
    req: IncomingMessage,
    res: ServerResponse,
    ex: Exchange,
    then: (body: unknown) => void,
  ): void {
    const chunks: Buffer[] = [];
    let size = 0;
    let tooBig = false;
    req.on('data', (chunk: Buffer) => {
      if (tooBig) return;
      size += chunk.length;
      if (size > MAX_BODY_BYTES) {
        tooBig = true;
        chunks.length = 0;
        sendError(
          res,
          {
            status: 413,
            message: `request body larger than ${MAX_BODY_BYTES} bytes`,
            type: 'invalid_request_error',
            code: 'body_too_large',
          },
          { connection: 'close' },
        );
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => {
      if (tooBig || ex.closed || this.#closing) return;
      let body: unknown;
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch {
        if (req.url?.startsWith('/v1/') === true) {
          this.#counters.requests++;
          this.#counters.badRequests++;
        }
        sendError(res, {
          status: 400,
          message: 'We could not parse the JSON body of your request.',
          type: 'invalid_request_error',
          code: 'invalid_json',
        });
        return;
      }
      try {
        then(body);
      } catch (err) {
        this.#log.warn({ err }, 'request handler failed');
        sendError(res, {
          status: 500,
          message: 'simulator bug',
          type: 'server_error',
          code: 'internal_error',
        });
      }
    });
  }

  #listedModel(): string {
    return this.#opts.model ?? ANY_MODEL_NAME;
  }

  #modelObject(id: string): Record<string, unknown> {
    return { id, object: 'model', created: 0, owned_by: 'switchyard-sim' };
  }

  /** The model a request is served as, or a 404 when the simulator is restricted to another one. */
  #resolveModel(requested: string | undefined): string | ApiError {
    const only = this.#opts.model;
    if (only !== undefined && requested !== undefined && requested !== only) {
      return modelNotFound(requested);
    }
    return requested ?? this.#listedModel();
  }

  #adminConfig(body: unknown, res: ServerResponse): void {
    const checked = checkSimOptionsPatch(body, { runtime: true });
    if (!checked.ok) {
      return sendError(res, {
        status: 400,
        message: `invalid option ${checked.field}: ${checked.message}`,
        type: 'invalid_request_error',
        code: 'invalid_option',
        param: checked.field,
      });
    }
    sendJson(res, 200, optionsJson(this.configure(checked.patch)));
  }

  #tokens(chars: number): number {
    return Math.ceil(chars / this.#opts.charsPerToken);
  }

  #generation(kind: GenerationKind, body: unknown, res: ServerResponse, ex: Exchange): void {
    this.#counters.requests++;
    const parsed = parseGeneration(kind, body);
    if (isApiError(parsed)) return this.#badRequest(res, parsed);
    const model = this.#resolveModel(parsed.model);
    if (isApiError(model)) return this.#badRequest(res, model);

    const o = this.#opts;
    // Always three draws, so the fault sequence depends only on the seed and the request order.
    const uError = this.#faultRng();
    const uRateLimit = this.#faultRng();
    const uStall = this.#faultRng();
    if (uError < o.errorRate) {
      this.#counters.errors++;
      this.#log.debug({ kind }, 'injected error');
      return sendError(res, {
        status: 500,
        message: 'The server had an error while processing your request. (simulated)',
        type: 'server_error',
        code: 'internal_error',
      });
    }
    if (uRateLimit < o.rateLimitRate) {
      this.#counters.rateLimited++;
      this.#log.debug({ kind }, 'injected rate limit');
      return sendError(res, rateLimitError('Rate limit reached for requests. (simulated)'), {
        'retry-after': '1',
      });
    }
    if (!this.#canAdmit()) return this.#overflow(res);

    const seq = ++this.#seq;
    const promptTokens = this.#tokens(parsed.promptText.length);
    const rng = mulberry32((o.seed ^ hashString32(parsed.promptText)) >>> 0);
    const outputTokens =
      parsed.maxTokens ??
      DEFAULT_OUTPUT_MIN + Math.floor(rng() * (DEFAULT_OUTPUT_MAX - DEFAULT_OUTPUT_MIN + 1));
    const head: ResponseHead = {
      id: `${kind === 'chat' ? 'chatcmpl' : 'cmpl'}-sim${this.#port}-${seq}`,
      created: Math.floor(Date.now() / 1000),
      model,
      fingerprint: o.fingerprint,
    };
    const stall = uStall < o.stallRate;
    const job: Job = {
      seq,
      kind,
      res,
      stream: parsed.stream,
      stall,
      head,
      promptTokens,
      keys: blockKeys(parsed.promptText, o.blockTokens * o.charsPerToken),
      outputTokens,
      finish: parsed.maxTokens === undefined ? 'stop' : 'length',
      includeUsage: parsed.includeUsage,
      rng,
      embedding: undefined,
      writer: parsed.stream ? new ChunkWriter(kind, head, parsed.includeUsage) : undefined,
      state: 'queued',
      holdsSlot: false,
      timer: undefined,
      cachedTokens: 0,
      emitted: 0,
      progress: 0,
      progressAt: 0,
      intervalMs: 0,
      text: '',
    };
    if (stall) {
      this.#counters.stalled++;
      this.#log.debug({ kind }, 'injected stall');
    }
    if (job.stream || stall) {
      res.writeHead(200, {
        'content-type': job.stream ? 'text/event-stream; charset=utf-8' : 'application/json',
        'cache-control': 'no-cache',
      });
      res.flushHeaders();
    }
    this.#admit(job, ex);
  }

  #embeddings(body: unknown, res: ServerResponse, ex: Exchange): void {
    this.#counters.requests++;
    const parsed = parseEmbedding(body);
    if (isApiError(parsed)) return this.#badRequest(res, parsed);
    const model = this.#resolveModel(parsed.model);
    if (isApiError(model)) return this.#badRequest(res, model);
    if (!this.#canAdmit()) return this.#overflow(res);
    let promptTokens = 0;
    for (const input of parsed.inputs)
      promptTokens += input.tokens ?? this.#tokens(input.text.length);
    const seq = ++this.#seq;
    this.#admit(
      {
        seq,
        kind: 'embedding',
        res,
        stream: false,
        stall: false,
        head: { id: `emb-${seq}`, created: 0, model, fingerprint: undefined },
        promptTokens,
        keys: [],
        outputTokens: 0,
        finish: 'stop',
        includeUsage: false,
        rng: mulberry32(this.#opts.seed),
        embedding: parsed,
        writer: undefined,
        state: 'queued',
        holdsSlot: false,
        timer: undefined,
        cachedTokens: 0,
        emitted: 0,
        progress: 0,
        progressAt: 0,
        intervalMs: 0,
        text: '',
      },
      ex,
    );
  }

  #badRequest(res: ServerResponse, e: ApiError): void {
    this.#counters.badRequests++;
    sendError(res, e);
  }

  #overflow(res: ServerResponse): void {
    this.#counters.rateLimited++;
    this.#counters.queueRejected++;
    sendError(
      res,
      rateLimitError(
        `The server is at capacity (${this.#opts.slots} slots busy, ${this.#queue.length} queued). (simulated)`,
      ),
      { 'retry-after': '1' },
    );
  }

  // ---------------------------------------------------------------- engine

  #canAdmit(): boolean {
    return this.#busy < this.#opts.slots || this.#queue.length < this.#opts.queueLimit;
  }

  #admit(job: Job, ex: Exchange): void {
    ex.job = job;
    if (this.#busy < this.#opts.slots && this.#queue.length === 0) this.#start(job);
    else this.#queue.push(job);
  }

  #drain(): void {
    while (this.#busy < this.#opts.slots && this.#queue.length > 0) {
      this.#start(this.#queue.shift()!);
    }
  }

  #start(job: Job): void {
    const o = this.#opts;
    const now = performance.now();
    if (this.#busy === 0 && o.coldStartMs > 0) {
      const idle = this.#idleSince;
      if (idle === undefined || now - idle >= o.coldIdleMs / o.speed) {
        this.#warmAt = now + o.coldStartMs / o.speed;
        this.#counters.coldStarts++;
      }
    }
    this.#idleSince = now; // busy from now on: any later idle period starts counting again
    this.#busy++;
    this.#running.add(job);
    job.holdsSlot = true;
    if (job.stall) {
      job.state = 'stalled';
      this.#loadChanged(now);
      return;
    }
    const hits = job.keys.length > 0 ? this.#cache.match(job.keys) : 0;
    job.cachedTokens = Math.min(job.promptTokens, hits * o.blockTokens);
    this.#counters.cacheHitBlocks += hits;
    this.#counters.cacheMissBlocks += job.keys.length - hits;
    const prefillMs = ((job.promptTokens - job.cachedTokens) * o.prefillMsPerToken) / o.speed;
    const firstAt = Math.max(now, this.#warmAt) + prefillMs;
    job.state = 'prefill';
    job.timer = arm(() => this.#prefilled(job), firstAt - now);
    this.#loadChanged(now);
  }

  /** Wall-clock time per output token at the current load. */
  #interval(): number {
    const o = this.#opts;
    const others = Math.max(0, this.#busy - 1);
    return (o.decodeMsPerToken * (1 + (o.loadSlowdown * others) / o.slots)) / o.speed;
  }

  #prefilled(job: Job): void {
    job.timer = undefined;
    if (job.state !== 'prefill') return;
    if (job.keys.length > 0) this.#cache.insert(job.keys);
    if (job.embedding !== undefined) {
      this.#sendEmbeddings(job, job.embedding);
      return this.#finish(job);
    }
    // The prefill produces the first token.
    this.#emit(job, 1);
    if (job.emitted >= job.outputTokens) return this.#complete(job);
    job.state = 'decode';
    job.progress = 1;
    job.progressAt = performance.now();
    job.intervalMs = this.#interval();
    this.#schedule(job);
  }

  #advance(job: Job, now: number): void {
    if (job.intervalMs <= 0) job.progress = job.outputTokens;
    else job.progress += (now - job.progressAt) / job.intervalMs;
    job.progressAt = now;
  }

  /** Arm the job's timer for its next write (streaming) or its end (non-streaming). */
  #schedule(job: Job): void {
    if (job.timer !== undefined) clearTimeout(job.timer);
    let target = job.outputTokens;
    if (job.stream && job.intervalMs > 0) {
      const batch = Math.max(1, Math.ceil(MIN_TICK_MS / job.intervalMs));
      // Writes end on chunk boundaries: after the first token, every tokensPerChunk tokens.
      const per = this.#opts.tokensPerChunk;
      const boundary = 1 + Math.ceil((job.emitted + batch - 1) / per) * per;
      target = Math.min(job.outputTokens, per > 1 ? boundary : job.emitted + batch);
    }
    const delay = Math.max(0, (target - job.progress) * job.intervalMs);
    job.timer = arm(() => this.#tick(job), delay);
  }

  #tick(job: Job): void {
    job.timer = undefined;
    if (job.state !== 'decode') return;
    this.#advance(job, performance.now());
    job.intervalMs = this.#interval();
    let upto = Math.min(job.outputTokens, Math.floor(job.progress + 1e-6));
    // A tick that comes late, or after the rate changed with the load, lands between chunk
    // boundaries: write up to the last boundary reached and leave the rest for the next tick, so
    // that chunks keep their size whatever the timing (the end is always a boundary).
    const per = this.#opts.tokensPerChunk;
    if (job.stream && per > 1 && upto < job.outputTokens && upto > 1)
      upto = 1 + Math.floor((upto - 1) / per) * per;
    if (upto > job.emitted) this.#emit(job, upto);
    if (job.emitted >= job.outputTokens) this.#complete(job);
    else this.#schedule(job);
  }

  /** The number of busy slots changed: re-rate every decode from now on. */
  #loadChanged(now: number): void {
    const interval = this.#interval();
    for (const job of this.#running) {
      if (job.state !== 'decode') continue;
      this.#advance(job, now);
      job.intervalMs = interval;
      // A stream picks the new rate up at its next tick (at most one token later); a
      // non-streaming generation sleeps until its end, so its timer must move.
      if (!job.stream) this.#schedule(job);
    }
  }

  #word(job: Job, index: number): string {
    const word = WORDS[Math.floor(job.rng() * WORDS.length)] ?? 'the';
    return index === 0 ? word.charAt(0).toUpperCase() + word.slice(1) : ' ' + word;
  }

  /**
   * Produce tokens [emitted, upto): one write for a stream (the first token alone in its chunk,
   * then `tokensPerChunk` tokens a chunk), appended text otherwise.
   */
  #emit(job: Job, upto: number): void {
    const writer = job.writer;
    const per = this.#opts.tokensPerChunk;
    let out = '';
    let pending = '';
    for (let i = job.emitted; i < upto; i++) {
      const word = this.#word(job, i);
      if (writer === undefined) job.text += word;
      else if (i === 0) out += writer.first(word);
      else {
        pending += word;
        if (i % per === 0 || i === upto - 1) {
          out += writer.token(pending);
          pending = '';
        }
      }
    }
    job.emitted = upto;
    if (out !== '') job.res.write(out);
  }

  #complete(job: Job): void {
    const u = usage(job.promptTokens, job.outputTokens, job.cachedTokens);
    const kind = job.kind === 'embedding' ? 'chat' : job.kind;
    if (job.writer !== undefined) {
      let tail = job.writer.finish(job.finish);
      if (job.includeUsage) tail += job.writer.usage(u);
      job.res.end(tail + ChunkWriter.DONE);
    } else {
      sendJson(job.res, 200, fullResponse(kind, job.head, job.text, job.finish, u));
    }
    this.#counters.completionTokens += job.outputTokens;
    this.#finish(job);
  }

  #sendEmbeddings(job: Job, request: EmbeddingRequest): void {
    const data = request.inputs.map((input, index) => {
      const vector = embeddingVector(input.text, request.dimensions, this.#opts.seed);
      return {
        object: 'embedding',
        index,
        embedding: request.base64
          ? Buffer.from(vector.buffer).toString('base64')
          : Array.from(vector),
      };
    });
    sendJson(job.res, 200, {
      object: 'list',
      data,
      model: job.head.model,
      usage: { prompt_tokens: job.promptTokens, total_tokens: job.promptTokens },
    });
  }

  /** A job answered in full. */
  #finish(job: Job): void {
    this.#counters.completed++;
    this.#counters.promptTokens += job.promptTokens;
    this.#counters.cachedPromptTokens += job.cachedTokens;
    this.#release(job);
  }

  #onClientGone(job: Job): void {
    if (job.state === 'done') return;
    this.#counters.aborted++;
    this.#release(job);
  }

  /** Give back everything the job holds: its timer, its queue place or its slot. */
  #release(job: Job): void {
    if (job.timer !== undefined) clearTimeout(job.timer);
    job.timer = undefined;
    const state = job.state;
    job.state = 'done';
    if (state === 'queued') {
      const at = this.#queue.indexOf(job);
      if (at >= 0) this.#queue.splice(at, 1);
      return;
    }
    if (!job.holdsSlot) return;
    job.holdsSlot = false;
    this.#running.delete(job);
    this.#busy--;
    const now = performance.now();
    if (this.#busy === 0) this.#idleSince = now;
    if (this.#closing) return;
    this.#drain();
    this.#loadChanged(now);
  }
}

/** Node's setTimeout fires at once (with a warning) beyond 2^31 − 1 ms: clamp instead. */
const MAX_TIMER_MS = 2 ** 31 - 1;
function arm(fn: () => void, ms: number): NodeJS.Timeout {
  return setTimeout(fn, Math.min(MAX_TIMER_MS, Math.max(0, Math.ceil(ms))));
}

function modelNotFound(model: string): ApiError {
  return {
    status: 404,
    message: `The model \`${model}\` does not exist or you do not have access to it.`,
    type: 'invalid_request_error',
    code: 'model_not_found',
    param: 'model',
  };
}

function rateLimitError(message: string): ApiError {
  return { status: 429, message, type: 'requests', code: 'rate_limit_exceeded' };
}

/** Options as JSON: unset optional options appear as null rather than disappearing. */
function optionsJson(o: SimOptions): Record<string, unknown> {
  return Object.fromEntries(Object.entries(o).map(([k, v]) => [k, v ?? null]));
}

/** A deterministic unit vector for `text`. */
export function embeddingVector(text: string, dimensions: number, seed: number): Float32Array {
  const rng = mulberry32((hashString32(text) ^ seed) >>> 0);
  const v = new Float32Array(dimensions);
  let norm = 0;
  for (let i = 0; i < dimensions; i++) {
    const x = rng() * 2 - 1;
    v[i] = x;
    norm += x * x;
  }
  const scale = norm > 0 ? 1 / Math.sqrt(norm) : 0;
  for (let i = 0; i < dimensions; i++) v[i] = v[i]! * scale;
  return v;
}

/**
 * Start a simulator. Options not given take their defaults (`DEFAULT_SIM_OPTIONS`); invalid ones
 * throw `SimOptionError`. Resolves once the server listens.
 */
export async function startSim(
  options: Partial<SimOptions> = {},
  deps: StartSimDeps = {},
): Promise<SimHandle> {
  const opts = resolveSimOptions(options);
  const sim = new Simulator(opts, deps.logger ?? NOOP_LOGGER);
  const port = await sim.listen();
  const host = opts.host.includes(':') ? `[${opts.host}]` : opts.host;
  return {
    url: `http://${host}:${port}`,
    port,
    close: () => sim.close(),
    stats: () => sim.stats(),
    configure: (patch) => {
      sim.configure(patch);
    },
    options: () => sim.effectiveOptions(),
  };
}
