/**
 * The digest of a prompt's block-hash chain that travels between sidecars (issue 45, the
 * fleet-wide view): which depths of the chain a placement names, and how its hashes are written.
 *
 * A block hash identifies the whole prefix through its block (sidecar/policy/prompt-blocks.ts), so
 * a placement need not name every block. It names the deepest block (the next turn of the same
 * conversation repeats the whole prompt, so its chain contains that hash), the end of the home
 * key (the system prompt and first user message: where conversations that start alike meet), and
 * the depths 1, 2, 4, 8, … in between (a prompt that shares only part of another still finds a
 * prefix within half of what it shares). That is at most 11 hashes for the 256-block cap, 77 bytes,
 * instead of 256 × 7.
 *
 * Pure: no I/O, no clock.
 */

/** Bytes per hash on the wire: the hashes are 52-bit integers (exact in a double). */
export const HASH_BYTES = 7;

/** The most hashes one placement carries (the schema's bound). */
export const MAX_PLACEMENT_HASHES = 64;

/**
 * The depths (1-based block counts) a placement of a prompt with `count` blocks names, ascending:
 * the powers of two below `count`, `homeDepth` (when within the chain), and `count` itself.
 */
export function placementDepths(count: number, homeDepth: number): number[] {
  if (count <= 0) return [];
  const depths = new Set<number>();
  for (let d = 1; d < count; d *= 2) depths.add(d);
  if (homeDepth >= 1 && homeDepth <= count) depths.add(homeDepth);
  depths.add(count);
  return [...depths].sort((a, b) => a - b).slice(-MAX_PLACEMENT_HASHES);
}

/** The hashes of `chain` at `placementDepths(chain.length, homeDepth)`, shallowest first. */
export function placementDigest(chain: readonly number[], homeDepth: number): number[] {
  return placementDepths(chain.length, homeDepth).map((d) => chain[d - 1] as number);
}

/** `hashes` (52-bit non-negative integers) as 7-byte big-endian units, base64url, no padding. */
export function encodeHashes(hashes: readonly number[]): string {
  const bytes = Buffer.alloc(hashes.length * HASH_BYTES);
  for (const [i, h] of hashes.entries()) {
    if (!Number.isSafeInteger(h) || h < 0 || h >= 2 ** 56)
      throw new RangeError(`hash ${h} is not a 52-bit non-negative integer`);
    // High 3 bytes, then low 4: a double's integer bits do not fit JavaScript's 32-bit shifts.
    const high = Math.floor(h / 2 ** 32);
    bytes.writeUIntBE(high, i * HASH_BYTES, 3);
    bytes.writeUInt32BE(h - high * 2 ** 32, i * HASH_BYTES + 3);
  }
  return bytes.toString('base64url');
}

/**
 * The hashes of `encodeHashes`' output; undefined when `text` is not a whole number of 7-byte
 * units of base64url (a placement to ignore, not a crash).
 */
export function decodeHashes(text: string): number[] | undefined {
  if (!/^[A-Za-z0-9_-]*$/.test(text)) return undefined;
  const bytes = Buffer.from(text, 'base64url');
  if (bytes.length % HASH_BYTES !== 0 || bytes.toString('base64url') !== text) return undefined;
  const out: number[] = [];
  for (let at = 0; at < bytes.length; at += HASH_BYTES)
    out.push(bytes.readUIntBE(at, 3) * 2 ** 32 + bytes.readUInt32BE(at + 3));
  return out;
}
