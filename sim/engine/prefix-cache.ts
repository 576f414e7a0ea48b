/**
 * The simulated prefix (KV) cache: block-granular, keyed by cumulative prefix, LRU-evicted.
 *
 * A prompt is cut into blocks of `blockChars` characters (blockTokens × charsPerToken). Block i's
 * key is a hash of the whole text of blocks 0..i, so two prompts share exactly the blocks of their
 * common prefix, and a block can only be reused together with everything before it — the way
 * vLLM's automatic prefix caching and SGLang's radix cache behave. Only full blocks are cached; the
 * trailing partial block is always computed.
 */
import { fmix32 } from './hash.ts';

const TWO_POW_21 = 2 ** 21;

/**
 * The cache keys of the full blocks of `text`, in order. One pass over the text with two running
 * 32-bit FNV-1a states (different offsets); the state at the end of block i is a hash of the
 * prefix 0..i. Each key packs 53 bits of both states into one safe integer (a cheap Map key).
 */
export function blockKeys(text: string, blockChars: number): number[] {
  const size = Math.max(1, Math.floor(blockChars));
  const full = Math.floor(text.length / size);
  const keys: number[] = new Array<number>(full);
  let a = 0x811c9dc5;
  let b = 0x050c5d1f;
  let i = 0;
  for (let block = 0; block < full; block++) {
    const end = i + size;
    for (; i < end; i++) {
      const c = text.charCodeAt(i);
      a = Math.imul(a ^ c, 0x01000193);
      b = Math.imul(b ^ c, 0x01000193);
    }
    const hi = fmix32(a ^ block);
    const lo = fmix32(b + Math.imul(block, 0x9e3779b9));
    keys[block] = hi * TWO_POW_21 + (lo >>> 11);
  }
  return keys;
}

/** An LRU set of block keys with a capacity in blocks (0 = caching disabled). */
export class PrefixCache {
  #capacity: number;
  // A Map iterates in insertion order: the first key is the least recently used one.
  readonly #blocks = new Map<number, true>();

  constructor(capacity: number) {
    this.#capacity = Math.max(0, Math.floor(capacity));
  }

  get size(): number {
    return this.#blocks.size;
  }

  get capacity(): number {
    return this.#capacity;
  }

  setCapacity(capacity: number): void {
    this.#capacity = Math.max(0, Math.floor(capacity));
    this.#evict();
  }

  clear(): void {
    this.#blocks.clear();
  }

  /**
   * How many leading blocks of `keys` are cached (stops at the first miss: a block is useless
   * without its predecessors). The hits are marked as recently used.
   */
  match(keys: readonly number[]): number {
    let hits = 0;
    while (hits < keys.length && this.#blocks.has(keys[hits]!)) hits++;
    this.#touch(keys, hits);
    return hits;
  }

  /** Store all `keys` (the blocks just computed by a prefill), evicting the least recently used. */
  insert(keys: readonly number[]): void {
    if (this.#capacity === 0) return;
    this.#touch(keys, keys.length);
    this.#evict();
  }

  // Touch in reverse so that block 0 ends up most recent: eviction then takes the tails of
  // chains first and never strands a later block behind an evicted earlier one (as vLLM does).
  #touch(keys: readonly number[], count: number): void {
    for (let i = count - 1; i >= 0; i--) {
      const key = keys[i]!;
      this.#blocks.delete(key);
      this.#blocks.set(key, true);
    }
  }

  // One iterator for the whole pass: V8 keeps deleted entries as holes at the front of the map,
  // and a fresh `keys().next()` per eviction would walk all of them every time.
  #evict(): void {
    if (this.#blocks.size <= this.#capacity) return;
    for (const key of this.#blocks.keys()) {
      if (this.#blocks.size <= this.#capacity) return;
      this.#blocks.delete(key);
    }
  }
}
