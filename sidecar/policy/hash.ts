/**
 * Fast non-cryptographic hashing for affinity: FNV-1a 64 over UTF-8, computed in two 32-bit
 * halves because JavaScript numbers cannot multiply 64-bit integers exactly and BigInt is ~20×
 * slower. Nothing here needs to resist an adversary: a client that crafts colliding prompts only
 * gets worse cache locality for itself.
 */

/** A 64-bit hash as two unsigned 32-bit halves. */
export interface Hash64 {
  readonly hi: number;
  readonly lo: number;
}

/** The FNV-1a 64 offset basis 0xcbf29ce484222325. */
export const FNV1A64_OFFSET: Hash64 = { hi: 0xcbf29ce4, lo: 0x84222325 };

/** The FNV 64 prime is 2^40 + 0x1b3: multiplying by it is (h · 0x1b3) + (h << 40). */
const PRIME_LOW = 0x1b3;
const TWO_POW_32 = 4294967296;

/**
 * FNV-1a 64 of the UTF-8 encoding of `text`, continuing from `from` (the offset basis by
 * default). Continuing lets rendezvous hashing hash the key once and then only each endpoint id.
 * Lone surrogates are encoded as U+FFFD, as TextEncoder does.
 */
export function fnv1a64(text: string, from: Hash64 = FNV1A64_OFFSET): Hash64 {
  let hi = from.hi;
  let lo = from.lo;
  const step = (byte: number): void => {
    lo = (lo ^ byte) >>> 0;
    const loProduct = lo * PRIME_LOW; // < 2^41: exact in a double
    const carry = Math.floor(loProduct / TWO_POW_32);
    hi = (hi * PRIME_LOW + carry + ((lo << 8) >>> 0)) >>> 0;
    lo = loProduct >>> 0;
  };
  for (let i = 0; i < text.length; i++) {
    let c = text.charCodeAt(i);
    if (c < 0x80) {
      step(c);
      continue;
    }
    if (c < 0x800) {
      step(0xc0 | (c >> 6));
      step(0x80 | (c & 0x3f));
      continue;
    }
    if (c >= 0xd800 && c <= 0xdfff) {
      const next = text.charCodeAt(i + 1); // NaN past the end
      if (c <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
        const cp = 0x10000 + ((c - 0xd800) << 10) + (next - 0xdc00);
        i += 1;
        step(0xf0 | (cp >> 18));
        step(0x80 | ((cp >> 12) & 0x3f));
        step(0x80 | ((cp >> 6) & 0x3f));
        step(0x80 | (cp & 0x3f));
        continue;
      }
      c = 0xfffd;
    }
    step(0xe0 | (c >> 12));
    step(0x80 | ((c >> 6) & 0x3f));
    step(0x80 | (c & 0x3f));
  }
  return { hi, lo };
}

/** The hash as 16 lower-case hex digits, high half first (the usual spelling of FNV-1a 64). */
export function toHex64(hash: Hash64): string {
  return hash.hi.toString(16).padStart(8, '0') + hash.lo.toString(16).padStart(8, '0');
}

/**
 * The murmur3 32-bit finaliser: full avalanche, so that inputs differing in one late byte (ids
 * like `10.0.0.7:8000` and `10.0.0.8:8000`) give unrelated outputs. FNV alone mixes the last
 * bytes poorly into the high bits.
 */
export function fmix32(h: number): number {
  let x = h >>> 0;
  x ^= x >>> 16;
  x = Math.imul(x, 0x85ebca6b);
  x ^= x >>> 13;
  x = Math.imul(x, 0xc2b2ae35);
  x ^= x >>> 16;
  return x >>> 0;
}
