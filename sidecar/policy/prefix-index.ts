/**
 * Which endpoint this sidecar sent which prompt prefixes to: an approximate, local map of the
 * pool's prefix caches. A request goes where its longest known prefix went, because that is where
 * the inference server most likely still holds the prefix's KV blocks.
 *
 * Memory is bounded the way the servers bound their caches: each endpoint holds at most
 * `blocksPerEndpoint` block hashes (the Gateway API inference extension's prefix scorer does the
 * same, sized at a GPU's worth of 16-token blocks), so one busy endpoint cannot push out what the
 * others hold, and the index forgets roughly when the server's own cache would have. Entries
 * older than `maxAgeMs` no longer count (an idle pool's servers may have restarted or been
 * refilled by other clients since).
 *
 * Eviction is by two generations, not an exact LRU: an endpoint's new and refreshed hashes go
 * into its young map; when that holds half the endpoint's share, the old map is dropped whole
 * and the young one becomes old. So an entry lives between half and all of the share's worth of
 * later insertions, and a request costs a few map operations per block, however full the index.
 * (An exact LRU on a JavaScript Map evicts from the front of the map, and V8 leaves every
 * deleted entry as a hole that each later front lookup walks over: at 256 blocks a request, that
 * made recording cost milliseconds once the index was full.) A request's blocks are recorded
 * deepest first, so that when a generation turns over mid-request its shorter prefixes — shared
 * by more requests, worth more — are the ones kept longer, as vLLM evicts a sequence's tail
 * blocks first.
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

/** One endpoint's block hashes → when each was last sent there, in two generations. */
interface Generations {
  young: Map<number, number>;
  old: Map<number, number>;
}

/** Endpoints holding a block: one id (the common case, no array), or several, most recent first. */
type Holders = string | string[];

export class PrefixIndex {
  /** block hash → endpoints that hold it (a few at most: the home and its spills). */
  readonly #holders = new Map<number, Holders>();
  readonly #byEndpoint = new Map<string, Generations>();
  readonly #options: PrefixIndexOptions;
  #capacity: number;

  constructor(options: PrefixIndexOptions, endpointCount = 1) {
    this.#options = options;
    this.#capacity = capacityFor(options, endpointCount);
  }

  /** The pool changed size: per-endpoint capacity shrinks so the whole index stays bounded. */
  setEndpointCount(count: number): void {
    this.#capacity = capacityFor(this.#options, count);
    for (const [id, gens] of this.#byEndpoint) this.#trim(id, gens);
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
      const held = this.#holders.get(hash);
      if (held === undefined) continue;
      const holders: string[] = [];
      const consider = (id: string): void => {
        const usedAt = this.#usedAt(id, hash);
        if (usedAt !== undefined && usedAt >= oldest && admissible(id)) holders.push(id);
      };
      if (typeof held === 'string') consider(held);
      else for (const id of held) consider(id);
      if (holders.length > 0) return { depth: i + 1, holders };
    }
    return undefined;
  }

  /** The request with these blocks was sent to `endpointId`: it holds them now. */
  record(hashes: readonly number[], endpointId: string, nowMs: number): void {
    this.recordAt(hashes, endpointId, nowMs);
  }

  /**
   * `endpointId` has held these blocks since `atMs`, which may be in the past: another sidecar's
   * placement (issue 45, the fleet-wide view), `ageMs` old when it arrived. An entry this index
   * already has with a later time keeps it: a report of an old placement must not make a fresh
   * one look stale. A block's holders stay ordered by time. (An old placement still counts as
   * just used for its endpoint's eviction: it joins the young generation.)
   */
  recordAt(hashes: readonly number[], endpointId: string, atMs: number): void {
    let gens = this.#byEndpoint.get(endpointId);
    if (gens === undefined) {
      gens = { young: new Map(), old: new Map() };
      this.#byEndpoint.set(endpointId, gens);
    }
    const half = Math.ceil(this.#capacity / 2);
    for (let i = hashes.length - 1; i >= 0; i--) {
      const hash = hashes[i] as number;
      const young = gens.young.get(hash);
      if (young !== undefined) {
        if (atMs >= young) {
          gens.young.set(hash, atMs);
          this.#placeHolder(hash, endpointId, atMs);
        }
        continue;
      }
      if (gens.young.size >= half) this.#turnOver(endpointId, gens);
      const old = gens.old.get(hash);
      if (old !== undefined) gens.old.delete(hash);
      if (old === undefined || atMs >= old) this.#placeHolder(hash, endpointId, atMs);
      gens.young.set(hash, old === undefined ? atMs : Math.max(old, atMs));
    }
    if (gens.young.size + gens.old.size > this.#capacity) this.#trim(endpointId, gens);
  }

  /** The endpoint left the pool (or restarted): it holds nothing any more. */
  forget(endpointId: string): void {
    const gens = this.#byEndpoint.get(endpointId);
    if (gens === undefined) return;
    for (const hash of gens.young.keys()) this.#dropHolder(hash, endpointId);
    for (const hash of gens.old.keys()) this.#dropHolder(hash, endpointId);
    this.#byEndpoint.delete(endpointId);
  }

  /** Entries in all (for metrics and tests). */
  size(): number {
    let n = 0;
    for (const gens of this.#byEndpoint.values()) n += gens.young.size + gens.old.size;
    return n;
  }

  #usedAt(endpointId: string, hash: number): number | undefined {
    const gens = this.#byEndpoint.get(endpointId);
    return gens === undefined ? undefined : (gens.young.get(hash) ?? gens.old.get(hash));
  }

  /** The old generation is forgotten; the young one becomes old. */
  #turnOver(endpointId: string, gens: Generations): void {
    for (const hash of gens.old.keys()) this.#dropHolder(hash, endpointId);
    gens.old = gens.young;
    gens.young = new Map();
  }

  /** Over capacity (a smaller share, or a tiny one): forget the oldest entries until it fits. */
  #trim(endpointId: string, gens: Generations): void {
    while (gens.young.size + gens.old.size > this.#capacity) {
      if (gens.old.size === 0) {
        gens.old = gens.young;
        gens.young = new Map();
      }
      // One iterator for the whole pass: deleting behind it costs nothing more.
      for (const hash of gens.old.keys()) {
        if (gens.young.size + gens.old.size <= this.#capacity) break;
        gens.old.delete(hash);
        this.#dropHolder(hash, endpointId);
      }
    }
  }

  /**
   * `endpointId` holds `hash` since `atMs`: it goes before every holder used no later than that
   * (first, for this sidecar's own placements: their time is now), after the fresher ones.
   */
  #placeHolder(hash: number, endpointId: string, atMs: number): void {
    const held = this.#holders.get(hash);
    if (held === undefined || held === endpointId) {
      this.#holders.set(hash, endpointId);
      return;
    }
    let list: string[];
    if (typeof held === 'string') list = [held];
    else {
      if (held[0] === endpointId) return;
      list = held;
      const at = list.indexOf(endpointId);
      if (at >= 0) list.splice(at, 1);
    }
    let i = 0;
    // Every listed holder has a time for the hash: the generations and this list change together.
    while (i < list.length && (this.#usedAt(list[i] as string, hash) as number) > atMs) i++;
    list.splice(i, 0, endpointId);
    this.#holders.set(hash, list);
  }

  #dropHolder(hash: number, endpointId: string): void {
    const held = this.#holders.get(hash);
    if (held === undefined) return;
    if (typeof held === 'string') {
      if (held === endpointId) this.#holders.delete(hash);
      return;
    }
    const at = held.indexOf(endpointId);
    if (at >= 0) held.splice(at, 1);
    if (held.length === 1) this.#holders.set(hash, held[0] as string);
    else if (held.length === 0) this.#holders.delete(hash);
  }
}

function capacityFor(options: PrefixIndexOptions, endpointCount: number): number {
  const share = Math.floor(MAX_INDEX_ENTRIES / Math.max(1, endpointCount));
  return Math.max(1, Math.min(options.blocksPerEndpoint, share));
}
