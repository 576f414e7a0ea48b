/**
 * The project's one seeded PRNG, shared by the policy core (`seededRng`), the simulator and the
 * workloads of the demo, tests and benchmarks. Pure: no imports, no I/O.
 */

/** A source of uniform numbers in [0, 1). */
export type RandomFn = () => number;

/**
 * mulberry32: 32-bit state, period 2^32, same seed → same sequence on every platform. Not for
 * security: it only has to make benchmark runs, simulations and statistical tests reproducible,
 * and it passes the checks P2C needs (uniform draws, no short cycles at test sizes).
 */
export function mulberry32(seed: number): RandomFn {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
