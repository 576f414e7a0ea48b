/**
 * The oracle: one central router with perfect knowledge, the bound no real router reaches. It is
 * the only client of the simulators, so it knows each one's exact queue (its own dispatches), its
 * exact prefix cache (a shadow of the simulator's LRU, same capacity and order), its speed, its
 * cold state and its faults (their configuration), and sends each request where its estimated
 * time to first token is lowest. It runs inside the load generator: no proxy hop at all.
 */
import type { SimOptions } from '../../sim/options.ts';

/** A least-recently-used set of block ids, touched like the simulator touches its cache. */
class ShadowCache {
  readonly #capacity: number;
  readonly #blocks = new Map<number, true>();
  constructor(capacity: number) {
    this.#capacity = capacity;
  }
  /** Leading blocks of `ids` present (stopping at the first miss, as the simulator counts). */
  hits(ids: readonly number[]): number {
    let n = 0;
    for (const id of ids) {
      if (!this.#blocks.has(id)) break;
      n++;
    }
    return n;
  }
  /** Inserts the full blocks, last to first (heads stay the most recent, as in the simulator). */
  insert(ids: readonly number[]): void {
    if (this.#capacity <= 0) return;
    for (let i = ids.length - 1; i >= 0; i--) {
      const id = ids[i]!;
      this.#blocks.delete(id);
      this.#blocks.set(id, true);
    }
    // One iterator for the pass: a fresh keys().next() per eviction walks every deleted entry.
    if (this.#blocks.size <= this.#capacity) return;
    for (const oldest of this.#blocks.keys()) {
      if (this.#blocks.size <= this.#capacity) return;
      this.#blocks.delete(oldest);
    }
  }
}

interface OracleBackend {
  index: number;
  options: SimOptions;
  cache: ShadowCache;
  inFlight: number;
  /** EWMA of how long a request holds a slot here (simulated ms). */
  slotMs: number;
  /** Wall ms when it last became idle (for cold starts), undefined = never served. */
  idleSinceMs: number | undefined;
}

export interface OracleRequest {
  /** Prompt block ids (the trace's hash ids), empty when the trace has none. */
  hashIds: readonly number[];
  inputTokens: number;
  outputTokens: number;
}

export class Oracle {
  readonly #backends: OracleBackend[];
  readonly #speed: number;

  constructor(options: readonly SimOptions[], speed: number) {
    this.#speed = speed;
    this.#backends = options.map((o, index) => ({
      index,
      options: o,
      cache: new ShadowCache(o.cacheBlocks),
      inFlight: 0,
      slotMs: o.decodeMsPerToken * 150 + o.prefillMsPerToken * 8000,
      idleSinceMs: undefined,
    }));
  }

  /** The backend with the lowest estimated TTFT for `request`; call `done` when it ends. */
  route(request: OracleRequest, nowWallMs: number): { index: number; done: () => void } {
    const healthy = this.#backends.filter(
      (b) => b.options.errorRate === 0 && b.options.rateLimitRate === 0,
    );
    const candidates = healthy.length > 0 ? healthy : this.#backends;
    let best = candidates[0]!;
    let bestTtft = Infinity;
    for (const b of candidates) {
      const ttft = this.#estimateTtftMs(b, request, nowWallMs);
      if (ttft < bestTtft) {
        best = b;
        bestTtft = ttft;
      }
    }
    const chosen = best;
    const blockTokens = chosen.options.blockTokens;
    const fullBlocks = Math.floor(request.inputTokens / blockTokens);
    chosen.cache.insert(request.hashIds.slice(0, fullBlocks));
    chosen.inFlight++;
    const startedWallMs = nowWallMs;
    let finished = false;
    return {
      index: chosen.index,
      done: () => {
        if (finished) return;
        finished = true;
        chosen.inFlight--;
        const heldMs = (performance.now() - startedWallMs) * this.#speed;
        chosen.slotMs = 0.9 * chosen.slotMs + 0.1 * heldMs;
        if (chosen.inFlight === 0) chosen.idleSinceMs = performance.now();
      },
    };
  }

  #estimateTtftMs(b: OracleBackend, request: OracleRequest, nowWallMs: number): number {
    const o = b.options;
    const cachedTokens = Math.min(
      request.inputTokens,
      b.cache.hits(request.hashIds) * o.blockTokens,
    );
    const prefillMs = (request.inputTokens - cachedTokens) * o.prefillMsPerToken;
    // FIFO behind the requests that do not fit in the slots: each frees a slot every slotMs/slots.
    const waiting = Math.max(0, b.inFlight + 1 - o.slots);
    const queueMs = (waiting * b.slotMs) / o.slots;
    let coldMs = 0;
    if (o.coldStartMs > 0 && b.inFlight === 0) {
      const idleMs =
        b.idleSinceMs === undefined ? Infinity : (nowWallMs - b.idleSinceMs) * this.#speed;
      if (idleMs >= o.coldIdleMs) coldMs = o.coldStartMs;
    }
    return queueMs + prefillMs + coldMs;
  }
}
