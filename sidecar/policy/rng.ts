/**
 * Randomness for the policy core. Production passes `Math.random` through the `Rng` interface;
 * tests and benchmarks pass `seededRng` so that every pick sequence can be replayed exactly.
 */
import { mulberry32 } from '../../lib/rng.ts';
import type { Rng } from './types.ts';

/** A seeded Rng (the project's one PRNG, mulberry32; see lib/rng.ts). */
export function seededRng(seed: number): Rng {
  return { next: mulberry32(seed) };
}

/**
 * Maps one draw to an index in [0, n). A scripted or foreign Rng may return values outside
 * [0, 1) (1, negative, NaN): clamp instead of indexing past the array, because a bad RNG must
 * degrade the spread, never crash a pick.
 */
export function indexFromDraw(draw: number, n: number): number {
  if (!(draw > 0)) return 0;
  const i = Math.floor(draw * n);
  return i >= n ? n - 1 : i;
}

/**
 * Two DISTINCT uniform indices in [0, n), for power-of-two-choices. Draws the second index from
 * the n − 1 remaining slots and skips over the first, so it costs exactly two draws (no
 * rejection loop) and every unordered pair is equally likely.
 *
 * @throws RangeError when n < 2: there is no pair to draw, and the caller must handle 0 and 1
 *   candidates itself (shed, or the only one).
 */
export function sampleTwoDistinct(rng: Rng, n: number): [number, number] {
  if (!(n >= 2) || !Number.isInteger(n)) {
    throw new RangeError(`sampleTwoDistinct needs an integer n >= 2, got ${n}`);
  }
  const first = indexFromDraw(rng.next(), n);
  let second = indexFromDraw(rng.next(), n - 1);
  if (second >= first) second += 1;
  return [first, second];
}
