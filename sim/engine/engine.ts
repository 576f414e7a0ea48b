/**
 * The model of an inference engine that gives the simulator its timing: a fixed number of batch
 * slots, a FIFO queue in front of them, prefill time for the prompt tokens that miss a
 * block-granular prefix cache, per-token decode time that grows with the number of busy slots,
 * cold starts, and injected faults. See docs/simulator.md for the formulas.
 *
 * Pure: it speaks no HTTP and reads no clock. Time comes in as an `EngineTime`; a request comes in
 * as `Work` plus a `JobSink`, the handler object through which its output leaves (the HTTP layer
 * turns it into bytes). Its load is readable at any time through `load()` and `counters()`.
 *
 * Cost: one timer per job, re-armed per tick; a streaming tick delivers every token that has come
 * due since the last one (at least MIN_TICK_MS apart), a non-streaming job sleeps until its end and
 * is only re-armed when the load changes.
 */
import { mulberry32 } from '../../lib/rng.ts';
import type { RandomFn } from '../../lib/rng.ts';
import type { EngineOptions } from './engine-options.ts';
import type { EngineTime, TimerId } from './engine-time.ts';
import { pickFault } from './faults.ts';
import type { Fault } from './faults.ts';
import { PrefixCache } from './prefix-cache.ts';
import { Histogram, PER_TOKEN_LATENCY_BUCKETS_S, type HistogramSnapshot } from './histogram.ts';

/** Minimum wall-clock gap between two deliveries of one stream: faster decodes are batched. */
export const MIN_TICK_MS = 1;

/** What one request asks of the engine. */
export interface Work {
  readonly promptTokens: number;
  /** Prefix cache keys of the prompt's full blocks; empty: the prompt is not cached. */
  readonly blockKeys: readonly number[];
  /** Tokens to generate; 0: the job is complete when its prefill ends (embeddings). */
  readonly outputTokens: number;
  /** True: deliver tokens as they come due. False: sleep until the last one is due. */
  readonly stream: boolean;
  /** An injected stall: hold a slot and produce nothing until abandoned. */
  readonly stall: boolean;
  /** The LoRA adapter the request names; undefined: the base model. */
  readonly adapter?: string | undefined;
}

/**
 * How a job's output leaves the engine (the HTTP layer's handler object for one request). Called
 * from the engine's timers, and `stopped` from `close()`; a sink does not call back into the engine.
 */
export interface JobSink {
  /**
   * Tokens [from, to) are due, to go out in one write. A stream's first token is alone in its
   * chunk, the following ones are grouped `tokensPerChunk` to a chunk (chunk ends at the indices
   * that are multiples of it, and at `to − 1`). A non-streaming job gets its tokens in larger
   * pieces, in order, and answers at `complete`.
   */
  tokens(from: number, to: number, tokensPerChunk: number): void;
  /** Every output token was delivered; `cachedTokens` of the prompt came from the prefix cache. */
  complete(cachedTokens: number): void;
  /** The engine was closed before the job completed. */
  stopped(): void;
}

/** A job as its requester holds it: the handle to give back to `abandon`. */
export interface JobHandle {
  readonly work: Work;
}

/**
 * The engine's load right now: what a load report (vLLM's `/metrics` gauges
 * `num_requests_waiting`, `num_requests_running`, `kv_cache_usage_perc`; ORCA's
 * `endpoint-load-metrics`) is made of.
 */
export interface EngineLoad {
  /** Requests waiting for a slot. */
  readonly waiting: number;
  /** Requests holding a slot (prefilling, decoding or stalled). */
  readonly running: number;
  readonly slots: number;
  /** Blocks held by the prefix cache, and its capacity in blocks (0: the cache is off). */
  readonly cachedBlocks: number;
  readonly cacheCapacityBlocks: number;
  /**
   * The KV cache the running requests occupy (prompt and generated tokens, in blocks) as a
   * fraction of its capacity: vLLM's `kv_cache_usage_perc`. 0 when the cache is off.
   */
  readonly kvCacheUsage: number;
  /** Adapters of the requests holding a slot, and of the queued ones (vLLM's lora_requests_info). */
  readonly runningAdapters: readonly string[];
  readonly waitingAdapters: readonly string[];
}

/** Counts since start or the last `reset()`. */
export interface EngineCounters {
  /** Jobs completed (every output token delivered). */
  completed: number;
  /** Jobs abandoned (their client went away) before completing. */
  aborted: number;
  /** Injected errors (500s). */
  errors: number;
  /** Every refusal answered 429: injected rate limits plus full queues. */
  rateLimited: number;
  /** The refusals caused by a full queue. */
  queueRejected: number;
  /** Jobs admitted as stalls. */
  stalled: number;
  coldStarts: number;
  /** Prompt blocks found in the prefix cache / computed, summed over started jobs. */
  cacheHitBlocks: number;
  cacheMissBlocks: number;
  /** Over completed jobs. */
  promptTokens: number;
  cachedPromptTokens: number;
  completionTokens: number;
  /** LoRA adapters loaded because a request needed one that was not resident. */
  loraAdapterLoads: number;
}

/** `room`: a slot or a queue place is free; `full`: refused (and counted as a 429). */
export type Room =
  | { readonly kind: 'room' }
  | { readonly kind: 'full'; readonly slots: number; readonly queued: number };

type JobState = 'queued' | 'prefill' | 'decode' | 'stalled' | 'done';

interface Job extends JobHandle {
  readonly sink: JobSink;
  state: JobState;
  timer: TimerId | undefined;
  cachedTokens: number;
  /** Tokens delivered to the sink. */
  emitted: number;
  /** Decode progress in tokens (fractional), as of `progressAt`, at `intervalMs` per token. */
  progress: number;
  progressAt: number;
  intervalMs: number;
  /** When the last tokens went to the sink (`EngineTime` ms): the start of the next interval. */
  emittedAtMs: number;
}

function emptyCounters(): EngineCounters {
  return {
    completed: 0,
    aborted: 0,
    errors: 0,
    rateLimited: 0,
    queueRejected: 0,
    stalled: 0,
    coldStarts: 0,
    cacheHitBlocks: 0,
    cacheMissBlocks: 0,
    promptTokens: 0,
    cachedPromptTokens: 0,
    completionTokens: 0,
    loraAdapterLoads: 0,
  };
}

/** A LoRA adapter resident in the engine. */
interface ResidentAdapter {
  /** When its load completes (`EngineTime` ms): requests using it prefill from then on. */
  readyAt: number;
  /** Requests holding a slot that use it: it cannot be evicted while any does. */
  inUse: number;
}

const ROOM: Room = { kind: 'room' };

/** A job holds a slot from its start until it is released (`done`). */
function holdsSlot(job: Job): boolean {
  return job.state === 'prefill' || job.state === 'decode' || job.state === 'stalled';
}

export class Engine {
  readonly #time: EngineTime;
  #opts: EngineOptions;
  #faultRng: RandomFn;
  readonly #cache: PrefixCache;
  #counters = emptyCounters();
  /**
   * Seconds between output tokens, for `vllm:inter_token_latency_seconds`: one observation per
   * token after the first, in wall time (what a client of this server sees). vLLM observes once
   * per step; the simulator's deliveries carry several tokens only because a timer cannot fire
   * faster than MIN_TICK_MS, so each of them counts, at the delivery's interval shared out.
   */
  readonly #interTokenLatency = new Histogram(PER_TOKEN_LATENCY_BUCKETS_S);
  readonly #running = new Set<Job>();
  #queue: Job[] = [];
  #busy = 0;
  /** When the engine last became idle; undefined = it never served (the first job is cold). */
  #idleSince: number | undefined = undefined;
  /** Prefills may not start before this (`EngineTime` milliseconds). */
  #warmAt = 0;
  #closed = false;
  /** Resident adapters, least recently used first (a Map keeps insertion order; use re-inserts). */
  readonly #adapters = new Map<string, ResidentAdapter>();

  constructor(opts: EngineOptions, time: EngineTime) {
    this.#opts = opts;
    this.#time = time;
    this.#faultRng = mulberry32(opts.seed);
    this.#cache = new PrefixCache(opts.cacheBlocks);
  }

  load(): EngineLoad {
    const capacity = this.#cache.capacity;
    let tokens = 0;
    for (const job of this.#running) tokens += job.work.promptTokens + job.emitted;
    const usedBlocks = Math.ceil(tokens / Math.max(1, this.#opts.blockTokens));
    return {
      waiting: this.#queue.length,
      running: this.#busy,
      slots: this.#opts.slots,
      cachedBlocks: this.#cache.size,
      cacheCapacityBlocks: capacity,
      kvCacheUsage: capacity > 0 ? Math.min(1, usedBlocks / capacity) : 0,
      runningAdapters: adaptersOf(this.#running),
      waitingAdapters: adaptersOf(this.#queue),
    };
  }

  /** The adapters resident now, least recently used first. */
  residentAdapters(): string[] {
    return [...this.#adapters.keys()];
  }

  /**
   * Forget a resident adapter (it was unloaded): at once when no running request uses it; one in
   * use stays until its requests end and LRU eviction takes it.
   */
  dropAdapter(name: string): void {
    if ((this.#adapters.get(name)?.inUse ?? 1) === 0) this.#adapters.delete(name);
  }

  counters(): EngineCounters {
    return { ...this.#counters };
  }

  /** The inter-token latency histogram since start or the last `reset()`. */
  interTokenLatency(): HistogramSnapshot {
    return this.#interTokenLatency.snapshot();
  }

  /**
   * New options, effective at once: new requests see the new faults, slots and queue limit;
   * raising `slots` starts queued jobs; decode-rate changes reach running jobs at their next token;
   * a prefill already scheduled keeps its time. Changing `blockTokens` or `charsPerToken` empties
   * the cache, lowering `cacheBlocks` evicts, changing `seed` restarts the fault sequence.
   */
  setOptions(next: EngineOptions): void {
    const before = this.#opts;
    this.#opts = next;
    if (next.seed !== before.seed) this.#faultRng = mulberry32(next.seed);
    if (next.blockTokens !== before.blockTokens || next.charsPerToken !== before.charsPerToken) {
      this.#cache.clear(); // old keys describe a different block partition
    }
    if (next.cacheBlocks !== before.cacheBlocks) this.#cache.setCapacity(next.cacheBlocks);
    this.#evictAdaptersBeyond(next.maxLoras);
    this.#drain();
    this.#loadChanged(this.#time.nowMs());
  }

  /**
   * A fresh start without a new engine: counters zeroed, prefix cache emptied, the fault sequence
   * started over from the seed, and cold again (when cold starts are on) unless a job holds a
   * slot. Jobs in progress go on.
   */
  reset(): void {
    this.#counters = emptyCounters();
    this.#interTokenLatency.reset();
    this.#cache.clear();
    this.#evictAdaptersBeyond(0);
    this.#faultRng = mulberry32(this.#opts.seed);
    if (this.#busy === 0) {
      this.#idleSince = undefined;
      this.#warmAt = 0;
    }
  }

  /** The faults a generation request meets (errors and rate limits are counted here). */
  drawFault(): Fault {
    const fault = pickFault(this.#faultRng, this.#opts);
    if (fault.kind === 'error') this.#counters.errors++;
    else if (fault.kind === 'rate-limit') this.#counters.rateLimited++;
    return fault;
  }

  /**
   * Whether a request can be admitted now: a free slot, or a place in the queue. A refusal is
   * counted (`rateLimited`, `queueRejected`); the caller answers it with a 429.
   */
  checkRoom(): Room {
    if (this.#busy < this.#opts.slots || this.#queue.length < this.#opts.queueLimit) return ROOM;
    this.#counters.rateLimited++;
    this.#counters.queueRejected++;
    return { kind: 'full', slots: this.#opts.slots, queued: this.#queue.length };
  }

  /** Take a job: it starts at once when a slot is free and nobody waits, else it queues. */
  admit(work: Work, sink: JobSink): JobHandle {
    const job: Job = {
      work,
      sink,
      state: 'queued',
      timer: undefined,
      cachedTokens: 0,
      emitted: 0,
      progress: 0,
      progressAt: 0,
      emittedAtMs: 0,
      intervalMs: 0,
    };
    if (work.stall) this.#counters.stalled++;
    // Queued first, then started in queue order as far as slots (and adapter room) allow.
    this.#queue.push(job);
    this.#drain();
    return job;
  }

  /** The requester went away: release the job's queue place or slot at once. */
  abandon(handle: JobHandle): void {
    const job = handle as Job; // every JobHandle is a Job that admit() made
    if (job.state === 'done') return;
    this.#counters.aborted++;
    this.#release(job);
  }

  /** Stop every job (each sink hears `stopped`) and leave no timer behind. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    const jobs = [...this.#running, ...this.#queue];
    this.#running.clear();
    this.#queue = [];
    this.#busy = 0;
    for (const job of jobs) {
      if (job.timer !== undefined) this.#time.clearTimer(job.timer);
      job.timer = undefined;
      job.state = 'done';
      job.sink.stopped();
    }
  }

  /**
   * Start queued jobs in order while slots are free. A job whose adapter cannot be made resident
   * (every resident adapter is in use and none may be evicted) is passed over, and the jobs behind
   * it go ahead, as vLLM's scheduler skips a request whose LoRA does not fit the batch.
   */
  #drain(): void {
    let i = 0;
    while (this.#busy < this.#opts.slots && i < this.#queue.length) {
      const job = this.#queue[i]!;
      if (!this.#adapterRoomFor(job.work.adapter)) {
        i++;
        continue;
      }
      this.#queue.splice(i, 1);
      this.#start(job);
    }
  }

  /** Whether a job for `adapter` could start now as far as adapter residency goes. */
  #adapterRoomFor(adapter: string | undefined): boolean {
    if (adapter === undefined || this.#adapters.has(adapter)) return true;
    if (this.#adapters.size < this.#opts.maxLoras) return true;
    for (const a of this.#adapters.values()) if (a.inUse === 0) return true;
    return false;
  }

  /** Evict least recently used adapters no running job uses until at most `max` stay. */
  #evictAdaptersBeyond(max: number): void {
    for (const [name, a] of this.#adapters) {
      if (this.#adapters.size <= max) return;
      if (a.inUse === 0) this.#adapters.delete(name);
    }
  }

  /**
   * Make the job's adapter resident (loading it when it is not, after evicting the least recently
   * used idle one if there is no room) and mark it used; returns when the job may prefill.
   */
  #useAdapter(adapter: string, now: number): number {
    const o = this.#opts;
    let a = this.#adapters.get(adapter);
    if (a === undefined) {
      this.#evictAdaptersBeyond(Math.max(0, o.maxLoras - 1));
      a = { readyAt: now + o.loraLoadMs / o.speed, inUse: 0 };
      this.#counters.loraAdapterLoads++;
    } else {
      this.#adapters.delete(adapter); // re-inserted below: most recently used
    }
    this.#adapters.set(adapter, a);
    a.inUse++;
    return a.readyAt;
  }

  #start(job: Job): void {
    const o = this.#opts;
    const now = this.#time.nowMs();
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
    const work = job.work;
    const adapterReadyAt = work.adapter === undefined ? now : this.#useAdapter(work.adapter, now);
    if (work.stall) {
      job.state = 'stalled';
      this.#loadChanged(now);
      return;
    }
    const hits = work.blockKeys.length > 0 ? this.#cache.match(work.blockKeys) : 0;
    job.cachedTokens = Math.min(work.promptTokens, hits * o.blockTokens);
    this.#counters.cacheHitBlocks += hits;
    this.#counters.cacheMissBlocks += work.blockKeys.length - hits;
    const prefillMs = ((work.promptTokens - job.cachedTokens) * o.prefillMsPerToken) / o.speed;
    // A non-resident adapter is loaded before the prefill (as vLLM loads it into the batch).
    const firstAt = Math.max(now, this.#warmAt, adapterReadyAt) + prefillMs;
    job.state = 'prefill';
    job.timer = this.#time.setTimer(() => this.#prefilled(job), firstAt - now);
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
    const work = job.work;
    if (work.blockKeys.length > 0) this.#cache.insert(work.blockKeys);
    if (work.outputTokens === 0) return this.#complete(job);
    // The prefill produces the first token.
    this.#emit(job, 1);
    if (job.emitted >= work.outputTokens) return this.#complete(job);
    job.state = 'decode';
    job.progress = 1;
    job.progressAt = this.#time.nowMs();
    job.intervalMs = this.#interval();
    this.#schedule(job);
  }

  #advance(job: Job, now: number): void {
    if (job.intervalMs <= 0) job.progress = job.work.outputTokens;
    else job.progress += (now - job.progressAt) / job.intervalMs;
    job.progressAt = now;
  }

  /** Arm the job's timer for its next delivery (streaming) or its end (non-streaming). */
  #schedule(job: Job): void {
    if (job.timer !== undefined) this.#time.clearTimer(job.timer);
    const outputTokens = job.work.outputTokens;
    let target = outputTokens;
    if (job.work.stream && job.intervalMs > 0) {
      const batch = Math.max(1, Math.ceil(MIN_TICK_MS / job.intervalMs));
      // Deliveries end on chunk boundaries: after the first token, every tokensPerChunk tokens.
      const per = this.#opts.tokensPerChunk;
      const boundary = 1 + Math.ceil((job.emitted + batch - 1) / per) * per;
      target = Math.min(outputTokens, per > 1 ? boundary : job.emitted + batch);
    }
    const delay = Math.max(0, (target - job.progress) * job.intervalMs);
    job.timer = this.#time.setTimer(() => this.#tick(job), delay);
  }

  #tick(job: Job): void {
    job.timer = undefined;
    if (job.state !== 'decode') return;
    const outputTokens = job.work.outputTokens;
    this.#advance(job, this.#time.nowMs());
    job.intervalMs = this.#interval();
    let upto = Math.min(outputTokens, Math.floor(job.progress + 1e-6));
    // A tick that comes late, or after the rate changed with the load, lands between chunk
    // boundaries: deliver up to the last boundary reached and leave the rest for the next tick,
    // so that chunks keep their size whatever the timing (the end is always a boundary).
    const per = this.#opts.tokensPerChunk;
    if (job.work.stream && per > 1 && upto < outputTokens && upto > 1)
      upto = 1 + Math.floor((upto - 1) / per) * per;
    if (upto > job.emitted) this.#emit(job, upto);
    if (job.emitted >= outputTokens) this.#complete(job);
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
      // non-streaming job sleeps until its end, so its timer must move.
      if (!job.work.stream) this.#schedule(job);
    }
  }

  /** Deliver tokens [emitted, upto). */
  #emit(job: Job, upto: number): void {
    const now = this.#time.nowMs();
    // Tokens after the first share the time since the last delivery (a delivery carries several
    // when a token takes less than MIN_TICK_MS): their mean is the server's inter-token latency.
    const after = upto - Math.max(1, job.emitted);
    if (after > 0) this.#interTokenLatency.observe((now - job.emittedAtMs) / 1000 / after, after);
    job.sink.tokens(job.emitted, upto, this.#opts.tokensPerChunk);
    job.emitted = upto;
    job.emittedAtMs = now;
  }

  /** Every token delivered: the sink answers, then the job gives its slot back. */
  #complete(job: Job): void {
    job.sink.complete(job.cachedTokens);
    this.#counters.completed++;
    this.#counters.completionTokens += job.work.outputTokens;
    this.#counters.promptTokens += job.work.promptTokens;
    this.#counters.cachedPromptTokens += job.cachedTokens;
    this.#release(job);
  }

  /** Give back everything the job holds: its timer, its queue place or its slot. */
  #release(job: Job): void {
    if (job.timer !== undefined) this.#time.clearTimer(job.timer);
    job.timer = undefined;
    const wasQueued = job.state === 'queued';
    const held = holdsSlot(job);
    job.state = 'done';
    if (wasQueued) {
      const at = this.#queue.indexOf(job);
      if (at >= 0) this.#queue.splice(at, 1);
      return;
    }
    if (!held) return;
    this.#running.delete(job);
    this.#busy--;
    const adapter =
      job.work.adapter === undefined ? undefined : this.#adapters.get(job.work.adapter);
    if (adapter !== undefined) adapter.inUse--;
    const now = this.#time.nowMs();
    if (this.#busy === 0) this.#idleSince = now;
    if (this.#closed) return;
    this.#drain();
    this.#loadChanged(now);
  }
}

/** The distinct adapters of these jobs, in order of first appearance. */
function adaptersOf(jobs: Iterable<Job>): string[] {
  const names = new Set<string>();
  for (const job of jobs) if (job.work.adapter !== undefined) names.add(job.work.adapter);
  return [...names];
}
