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
import {
  ChunkWriter,
  errorBody,
  fullResponse,
  isApiError,
  parseEmbedding,
  parseGeneration,
  usage,
} from './openai.ts';
import type { ApiError, GenerationKind, ResponseHead } from './openai.ts';
import { checkSimOptionsPatch, resolveSimOptions, SimOptionError } from './options.ts';
import type { SimOptions } from './options.ts';
import { Answer } from './engine/answer.ts';
import { embeddingVector } from './engine/embedding.ts';
import { Engine } from './engine/engine.ts';
import type { JobHandle, JobSink } from './engine/engine.ts';
import { estimateTokens, tokenizePrompt } from './engine/prompt.ts';
import { wallTime } from './wall-time.ts';

/** Model name listed by GET /v1/models (and used when a request names none) if `model` is unset. */
export const ANY_MODEL_NAME = 'sim-model';
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

/** Per-request connection state, created before the body is read. */
interface Exchange {
  closed: boolean;
  job: JobHandle | undefined;
}

interface RequestCounters {
  requests: number;
  badRequests: number;
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
  readonly #engine: Engine;
  #counters: RequestCounters = { requests: 0, badRequests: 0 };
  #seq = 0;
  #closing = false;

  constructor(opts: SimOptions, log: SimLogger) {
    this.#opts = opts;
    this.#log = log;
    this.#engine = new Engine(opts, wallTime);
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
    this.#engine.close();
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
    const load = this.#engine.load();
    const c = this.#engine.counters();
    return {
      name: this.#name(),
      uptimeMs: Math.round(performance.now() - this.#startedAt),
      inFlight: load.running,
      queued: load.waiting,
      cachedBlocks: load.cachedBlocks,
      requests: this.#counters.requests,
      completed: c.completed,
      aborted: c.aborted,
      errors: c.errors,
      rateLimited: c.rateLimited,
      queueRejected: c.queueRejected,
      stalled: c.stalled,
      badRequests: this.#counters.badRequests,
      coldStarts: c.coldStarts,
      cacheHitBlocks: c.cacheHitBlocks,
      cacheMissBlocks: c.cacheMissBlocks,
      promptTokens: c.promptTokens,
      cachedPromptTokens: c.cachedPromptTokens,
      completionTokens: c.completionTokens,
    };
  }

  /**
   * A fresh start without a new process: counters zeroed, prefix cache emptied, the fault sequence
   * started over from the seed, and cold again (when cold starts are on). What a benchmark does
   * between two policies, so that each meets the same backends. Requests in progress go on.
   */
  resetStats(): void {
    this.#counters = { requests: 0, badRequests: 0 };
    this.#engine.reset();
  }

  configure(patch: Partial<SimOptions>): SimOptions {
    const checked = checkSimOptionsPatch(patch, { runtime: true });
    if (!checked.ok) throw new SimOptionError(checked.field, checked.message);
    const next = { ...this.#opts, ...checked.patch };
    this.#opts = next;
    this.#engine.setOptions(next);
    this.#log.info({ patch: checked.patch }, 'options changed');
    return this.effectiveOptions();
  }

  // ---------------------------------------------------------------- HTTP

  #onRequest(req: IncomingMessage, res: ServerResponse): void {
    const ex: Exchange = { closed: false, job: undefined };
    res.once('close', () => {
      ex.closed = true;
      if (ex.job !== undefined) this.#engine.abandon(ex.job);
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

  #generation(kind: GenerationKind, body: unknown, res: ServerResponse, ex: Exchange): void {
    this.#counters.requests++;
    const parsed = parseGeneration(kind, body);
    if (isApiError(parsed)) return this.#badRequest(res, parsed);
    const model = this.#resolveModel(parsed.model);
    if (isApiError(model)) return this.#badRequest(res, model);

    const fault = this.#engine.drawFault();
    if (fault.kind === 'error') {
      this.#log.debug({ kind }, 'injected error');
      return sendError(res, {
        status: 500,
        message: 'The server had an error while processing your request. (simulated)',
        type: 'server_error',
        code: 'internal_error',
      });
    }
    if (fault.kind === 'rate-limit') {
      this.#log.debug({ kind }, 'injected rate limit');
      return sendError(res, rateLimitError('Rate limit reached for requests. (simulated)'), {
        'retry-after': '1',
      });
    }
    const room = this.#engine.checkRoom();
    if (room.kind === 'full') return this.#overflow(res, room);

    const o = this.#opts;
    const seq = ++this.#seq;
    const prompt = tokenizePrompt(parsed.promptText, o);
    const answer = new Answer(parsed.promptText, parsed.maxTokens, o.seed);
    const head: ResponseHead = {
      id: `${kind === 'chat' ? 'chatcmpl' : 'cmpl'}-sim${this.#port}-${seq}`,
      created: Math.floor(Date.now() / 1000),
      model,
      fingerprint: o.fingerprint,
    };
    const stall = fault.kind === 'stall';
    const writer = parsed.stream ? new ChunkWriter(kind, head, parsed.includeUsage) : undefined;
    let text = '';
    const sink: JobSink = {
      tokens: (from, to, per) => {
        let out = '';
        let pending = '';
        for (let i = from; i < to; i++) {
          const word = answer.token(i);
          if (writer === undefined) text += word;
          else if (i === 0) out += writer.first(word);
          else {
            pending += word;
            if (i % per === 0 || i === to - 1) {
              out += writer.token(pending);
              pending = '';
            }
          }
        }
        if (out !== '') res.write(out);
      },
      complete: (cachedTokens) => {
        const u = usage(prompt.tokens, answer.outputTokens, cachedTokens);
        if (writer !== undefined) {
          let tail = writer.finish(answer.finish);
          if (parsed.includeUsage) tail += writer.usage(u);
          res.end(tail + ChunkWriter.DONE);
        } else {
          sendJson(res, 200, fullResponse(kind, head, text, answer.finish, u));
        }
      },
      stopped: () => res.destroy(),
    };
    if (stall) this.#log.debug({ kind }, 'injected stall');
    if (parsed.stream || stall) {
      res.writeHead(200, {
        'content-type': parsed.stream ? 'text/event-stream; charset=utf-8' : 'application/json',
        'cache-control': 'no-cache',
      });
      res.flushHeaders();
    }
    ex.job = this.#engine.admit(
      {
        promptTokens: prompt.tokens,
        blockKeys: prompt.blockKeys,
        outputTokens: answer.outputTokens,
        stream: parsed.stream,
        stall,
      },
      sink,
    );
  }

  #embeddings(body: unknown, res: ServerResponse, ex: Exchange): void {
    this.#counters.requests++;
    const parsed = parseEmbedding(body);
    if (isApiError(parsed)) return this.#badRequest(res, parsed);
    const model = this.#resolveModel(parsed.model);
    if (isApiError(model)) return this.#badRequest(res, model);
    const room = this.#engine.checkRoom();
    if (room.kind === 'full') return this.#overflow(res, room);
    let promptTokens = 0;
    for (const input of parsed.inputs)
      promptTokens += input.tokens ?? estimateTokens(input.text.length, this.#opts);
    ++this.#seq;
    ex.job = this.#engine.admit(
      { promptTokens, blockKeys: [], outputTokens: 0, stream: false, stall: false },
      {
        tokens: () => {},
        complete: () => {
          const data = parsed.inputs.map((input, index) => {
            const vector = embeddingVector(input.text, parsed.dimensions, this.#opts.seed);
            return {
              object: 'embedding',
              index,
              embedding: parsed.base64
                ? Buffer.from(vector.buffer).toString('base64')
                : Array.from(vector),
            };
          });
          sendJson(res, 200, {
            object: 'list',
            data,
            model,
            usage: { prompt_tokens: promptTokens, total_tokens: promptTokens },
          });
        },
        stopped: () => res.destroy(),
      },
    );
  }

  #badRequest(res: ServerResponse, e: ApiError): void {
    this.#counters.badRequests++;
    sendError(res, e);
  }

  #overflow(res: ServerResponse, room: { slots: number; queued: number }): void {
    sendError(
      res,
      rateLimitError(
        `The server is at capacity (${room.slots} slots busy, ${room.queued} queued). (simulated)`,
      ),
      { 'retry-after': '1' },
    );
  }
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
