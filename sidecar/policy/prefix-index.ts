/**
 * Which endpoint this sidecar sent which prompt prefixes to: an approximate, local map of the
 * pool's prefix caches. A request goes where its longest known prefix went, because that is where
 * the inference server most likely still holds the prefix's KV blocks.
 *
 * Memory is bounded the way the servers bound their caches: each endpoint has its own LRU of at
 * most `blocksPerEndpoint` block hashes (the Gateway API inference extension's prefix scorer does
 * the same, sized at a GPU's worth of 16-token blocks), so one busy endpoint cannot push out what
 * the others hold, and the index forgets roughly when the server's own cache would have. A
 * request's blocks are recorded deepest first, so that its shorter prefixes — shared by more
 * requests, worth more — are the most recently used and evicted last, as vLLM evicts a
 * sequence's tail blocks first. Entries older than `maxAgeMs` no longer count (an idle pool's
 * servers may have restarted or been refilled by other clients since).
 */

export interface PrefixIndexOptions {
  blocksPerEndpoint: number;
  maxAgeMs: number;
}

/**
 * 4,096 blocks of 256 characters per endpoint: about a million characters (~260k tokens) of
 * prompts, the prefix cache of a mid-size GPU. At ~100 bytes an entry that is ~0.4 MB per
 * endpoint at most, and only once traffic has filled it.
 */
export const DEFAULT_BLOCKS_PER_ENDPOINT = 4096;

/** The index of a pool with many endpoints is capped at this many entries in all. */
export const MAX_INDEX_ENTRIES = 131_072;

/** Ten minutes: a busy server's prefix cache turns over well within it. */
export const DEFAULT_PREFIX_MAX_AGE_MS = 600_000;

export interface PrefixMatch {
  /** Blocks matched: the prompt's `hashes[depth - 1]` is held. */
  depth: number;
  /** Endpoints holding that prefix (candidates only), most recently used first. */
  holders: string[];
}

export class PrefixIndex {
  /** block hash → endpoints that hold it (a few at most: the home and its spills). */
  readonly #holders = new Map<number, string[]>();
  /** endpoint → its LRU of block hash → last use (Map order is the LRU order). */
  readonly #byEndpoint = new Map<string, Map<number, number>>();
  readonly #options: PrefixIndexOptions;
  #capacity: number;

  constructor(options: PrefixIndexOptions, endpointCount = 1) {
    this.#options = options;
    this.#capacity = capacityFor(options, endpointCount);
  }

  /** The pool changed size: per-endpoint capacity shrinks so the whole index stays bounded. */
  setEndpointCount(count: number): void {
    this.#capacity = capacityFor(this.#options, count);
    for (const id of this.#byEndpoint.keys()) this.#trim(id);
  }

  /**
   * The deepest block of `hashes` that some admissible endpoint holds (fresh entries only), and
   * which endpoints hold it; undefined when none holds even the first block.
   */
  longestMatch(
    hashes: readonly number[],
    admissible: (endpointId: string) => boolean,
    nowMs: number,
  ): PrefixMatch | undefined {
    const oldest = nowMs - this.#options.maxAgeMs;
    for (let i = hashes.length - 1; i >= 0; i--) {
      const hash = hashes[i] as number;
      const ids = this.#holders.get(hash);
      if (ids === undefined) continue;
      const holders: string[] = [];
      for (const id of ids) {
        const usedAt = this.#byEndpoint.get(id)?.get(hash);
        if (usedAt !== undefined && usedAt >= oldest && admissible(id)) holders.push(id);
      }
      if (holders.length > 0) return { depth: i + 1, holders };
    }
    return undefined;
  }

  /** The request with these blocks was sent to `endpointId`: it holds them now. */
  record(hashes: readonly number[], endpointId: string, nowMs: number): void {
    let lru = this.#byEndpoint.get(endpointId);
    if (lru === undefined) {
      lru = new Map();
      this.#byEndpoint.set(endpointId, lru);
    }
    for (let i = hashes.length - 1; i >= 0; i--) {
      const hash = hashes[i] as number;
      if (lru.delete(hash)) {
        // Already held: refresh, and move to the front of the holder list.
        const ids = this.#holders.get(hash) as string[];
        if (ids[0] !== endpointId) {
          ids.splice(ids.indexOf(endpointId), 1);
          ids.unshift(endpointId);
        }
      } else {
        const ids = this.#holders.get(hash);
        if (ids === undefined) this.#holders.set(hash, [endpointId]);
        else ids.unshift(endpointId);
      }
      lru.set(hash, nowMs);
    }
    this.#trim(endpointId);
  }

  /** The endpoint left the pool (or restarted): it holds nothing any more. */
  forget(endpointId: string): void {
    const lru = this.#byEndpoint.get(endpointId);
    if (lru === undefined) return;
    for (const hash of lru.keys()) this.#drop(hash, endpointId);
    this.#byEndpoint.delete(endpointId);
  }

  /** Entries in all (for metrics and tests). */
  size(): number {
    let n = 0;
    for (const lru of this.#byEndpoint.values()) n += lru.size;
    return n;
  }

  #trim(endpointId: string): void {
    const lru = this.#byEndpoint.get(endpointId);
    if (lru === undefined) return;
    while (lru.size > this.#capacity) {
      const oldest = lru.keys().next().value as number;
      lru.delete(oldest);
      this.#drop(oldest, endpointId);
    }
  }

  #drop(hash: number, endpointId: string): void {
    const ids = this.#holders.get(hash);
    if (ids === undefined) return;
    const at = ids.indexOf(endpointId);
    if (at >= 0) ids.splice(at, 1);
    if (ids.length === 0) this.#holders.delete(hash);
  }
}

function capacityFor(options: PrefixIndexOptions, endpointCount: number): number {
  const share = Math.floor(MAX_INDEX_ENTRIES / Math.max(1, endpointCount));
  return Math.max(1, Math.min(options.blocksPerEndpoint, share));
}
