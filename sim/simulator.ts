/**
 * The simulated backend behind its HTTP routes: the options in force, the engine model, the
 * request counters, and what the admin API and `SimHandle` do with them (stats, run-time
 * configuration, reset). Every route gets this object; it knows nothing of HTTP.
 */
import { Engine } from './engine/engine.ts';
import type { EngineTime } from './engine/engine-time.ts';
import { checkSimOptionsPatch, loraNames, shownApiKey, SimOptionError } from './options.ts';
import type { SimOptions } from './options.ts';

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
  /** LoRA adapters loaded because a request needed one that was not resident. */
  loraAdapterLoads: number;
  /** LoRA adapters resident now, least recently used first. */
  residentAdapters: string[];
  /**
   * The W3C `traceparent` header of the last inference request, null when it had none: what a
   * tracing proxy in front propagated (its attempt span's context).
   */
  lastTraceparent: string | null;
}

/** The subset of a pino logger the simulator uses. */
export interface SimLogger {
  debug(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

export interface SimulatorDeps {
  log: SimLogger;
  time: EngineTime;
}

export class Simulator {
  readonly engine: Engine;
  readonly log: SimLogger;
  readonly #time: EngineTime;
  readonly #startedAtMs: number;
  #opts: SimOptions;
  #port = 0;
  /** Inference requests received / answered 400 or model 404 (the engine counts the rest). */
  #requests = 0;
  #badRequests = 0;
  /** Numbers the responses of admitted requests (their ids); never reset. */
  #seq = 0;
  #lastTraceparent: string | null = null;
  /**
   * The LoRA adapters it serves, name → path (`root` in /v1/models): `loras`, plus those loaded
   * and minus those unloaded at run time. Setting `loras` again starts over from the new list.
   */
  #adapters = new Map<string, string>();

  constructor(opts: SimOptions, deps: SimulatorDeps) {
    this.#opts = opts;
    this.#adapters = adapterMap(opts.loras);
    this.log = deps.log;
    this.#time = deps.time;
    this.#startedAtMs = deps.time.nowMs();
    this.engine = new Engine(opts, deps.time);
  }

  /** The options in force, `port` as configured (0 = any): see `effectiveOptions()`. */
  options(): SimOptions {
    return this.#opts;
  }

  get port(): number {
    return this.#port;
  }

  /** The server listens on `port` (a `sim-<port>` name is made of it). */
  listening(port: number): void {
    this.#port = port;
  }

  name(): string {
    return this.#opts.name ?? `sim-${this.#port}`;
  }

  /** The options in force with the actual port and the resolved name. */
  effectiveOptions(): SimOptions {
    return { ...this.#opts, port: this.#port, name: this.name() };
  }

  stats(): SimStats {
    const load = this.engine.load();
    const c = this.engine.counters();
    // Field order is the JSON order of GET /admin/stats.
    return {
      name: this.name(),
      uptimeMs: Math.round(this.#time.nowMs() - this.#startedAtMs),
      inFlight: load.running,
      queued: load.waiting,
      cachedBlocks: load.cachedBlocks,
      requests: this.#requests,
      completed: c.completed,
      aborted: c.aborted,
      errors: c.errors,
      rateLimited: c.rateLimited,
      queueRejected: c.queueRejected,
      stalled: c.stalled,
      badRequests: this.#badRequests,
      coldStarts: c.coldStarts,
      cacheHitBlocks: c.cacheHitBlocks,
      cacheMissBlocks: c.cacheMissBlocks,
      promptTokens: c.promptTokens,
      cachedPromptTokens: c.cachedPromptTokens,
      completionTokens: c.completionTokens,
      loraAdapterLoads: c.loraAdapterLoads,
      residentAdapters: this.engine.residentAdapters(),
      lastTraceparent: this.#lastTraceparent,
    };
  }

  /** Apply a run-time patch (anything but port/host). Throws `SimOptionError` naming the field. */
  configure(patch: Partial<SimOptions>): SimOptions {
    const checked = checkSimOptionsPatch(patch, { runtime: true });
    if (!checked.ok) throw new SimOptionError(checked.field, checked.message);
    this.#opts = { ...this.#opts, ...checked.patch };
    if ('loras' in checked.patch) this.#adapters = adapterMap(this.#opts.loras);
    this.engine.setOptions(this.#opts);
    const { apiKey, ...rest } = checked.patch;
    // The key itself stays out of the log.
    const logged = 'apiKey' in checked.patch ? { ...rest, apiKey: shownApiKey(apiKey) } : rest;
    this.log.info({ patch: logged }, 'options changed');
    return this.effectiveOptions();
  }

  /**
   * A fresh start without a new process: counters zeroed, prefix cache emptied, the fault sequence
   * started over from the seed, and cold again (when cold starts are on). What a benchmark does
   * between two policies, so that each meets the same backends. Requests in progress go on.
   */
  reset(): void {
    this.#requests = 0;
    this.#badRequests = 0;
    this.#lastTraceparent = null;
    this.engine.reset();
  }

  /** The LoRA adapters served now, name → path. */
  adapters(): ReadonlyMap<string, string> {
    return this.#adapters;
  }

  /** A runtime load (`POST /v1/load_lora_adapter`): false when the name is taken already. */
  addAdapter(name: string, path: string): boolean {
    if (this.#adapters.has(name) || name === this.#opts.model) return false;
    this.#adapters.set(name, path);
    this.log.info({ adapter: name }, 'LoRA adapter added');
    return true;
  }

  /** A runtime unload: false when no such adapter is served. */
  removeAdapter(name: string): boolean {
    if (!this.#adapters.delete(name)) return false;
    this.engine.dropAdapter(name);
    this.log.info({ adapter: name }, 'LoRA adapter removed');
    return true;
  }

  /** An inference request arrived, with this `traceparent` header (or none). */
  countRequest(traceparent?: string): void {
    this.#requests++;
    this.#lastTraceparent = traceparent ?? null;
  }

  countBadRequest(): void {
    this.#badRequests++;
  }

  /** The number of the next admitted request's response. */
  nextSeq(): number {
    return ++this.#seq;
  }
}

/** The adapters of a `loras` option: each one's path is its name (the simulator loads no files). */
function adapterMap(loras: string | undefined): Map<string, string> {
  return new Map(loraNames(loras).map((n) => [n, n]));
}
