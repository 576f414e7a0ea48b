/**
 * The baseline pickers the routing benchmark compares the switchyard policy with, run inside the
 * same sidecar so that only the choice differs (`switchyard sidecar --picker …`; docs/policy.md).
 * They replace affinity and P2C; breakers, cooldowns, retries and failover tiers still apply.
 *
 * - `round-robin`: the next candidate in pool order after the previous pick, from a random start
 *   (as Envoy does: routers that all started at the first endpoint would move in lockstep);
 * - `random`: a uniform random candidate;
 * - `least-connections`: the candidate with the fewest attempts in flight, ties broken at random
 *   (the best load-only policy without latency information).
 */
import type { Choice, Chooser } from './chooser.ts';
import type { Rng } from './types.ts';

export const PICKERS = ['p2c', 'round-robin', 'random', 'least-connections'] as const;
/** `p2c` is the switchyard policy itself: affinity, then P2C on score. */
export type Picker = (typeof PICKERS)[number];

export interface PickerCandidate {
  readonly id: string;
  readonly inFlight: number;
}

/** Round-robin by position in `pool` (all endpoints, in order): robust to candidates coming and going. */
export class RoundRobin {
  #next: number | undefined;

  pick<T extends PickerCandidate>(
    candidates: readonly T[],
    pool: readonly PickerCandidate[],
    rng: Rng,
  ): T {
    if (candidates.length === 0) throw new RangeError('round-robin needs a candidate');
    const n = pool.length;
    if (this.#next === undefined) {
      const u = rng.next();
      this.#next = Number.isFinite(u) ? Math.min(n - 1, Math.max(0, Math.floor(u * n))) : 0;
    }
    for (let step = 0; step < n; step++) {
      const at = pool[(this.#next + step) % n];
      const found = candidates.find((c) => c.id === at?.id);
      if (found !== undefined) {
        this.#next = (this.#next + step + 1) % n;
        return found;
      }
    }
    // Candidates outside the pool (not reached by the balancer): take the first.
    return candidates[0] as T;
  }
}

export function pickRandom<T>(candidates: readonly T[], rng: Rng): T {
  if (candidates.length === 0) throw new RangeError('random needs a candidate');
  const u = rng.next();
  const i = Number.isFinite(u)
    ? Math.min(candidates.length - 1, Math.max(0, Math.floor(u * candidates.length)))
    : 0;
  return candidates[i] as T;
}

export function pickLeastConnections<T extends PickerCandidate>(
  candidates: readonly T[],
  rng: Rng,
): T {
  if (candidates.length === 0) throw new RangeError('least-connections needs a candidate');
  let least = Infinity;
  for (const c of candidates) least = Math.min(least, c.inFlight);
  return pickRandom(
    candidates.filter((c) => c.inFlight === least),
    rng,
  );
}

/**
 * A baseline picker as a chooser (chooser.ts), a peer of the switchyard policy's
 * (default-chooser.ts): it has no affinity, so every pick says `none`. Kept in one file: three
 * one-line choices over the same candidate shape, compared as a family by the routing benchmark.
 */
export function baselineChooser<S extends PickerCandidate>(
  picker: Exclude<Picker, 'p2c'>,
  rng: Rng,
): Chooser<S> {
  const none = (endpoint: S): Choice<S> => ({ endpoint, affinity: 'none' });
  if (picker === 'round-robin') {
    const roundRobin = new RoundRobin();
    return { choose: ({ candidates, pool }) => none(roundRobin.pick(candidates, pool, rng)) };
  }
  if (picker === 'random') return { choose: ({ candidates }) => none(pickRandom(candidates, rng)) };
  return { choose: ({ candidates }) => none(pickLeastConnections(candidates, rng)) };
}
