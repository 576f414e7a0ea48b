/**
 * Power of two choices: draw two distinct candidates at random and take the one with the lower
 * score. Picking the global minimum instead would send every sidecar to the same endpoint
 * between two updates of its score (the herd); two random choices already get exponentially
 * close to the best possible spread (Mitzenmacher), and the endpoint with the worst score at
 * that moment is never chosen (an idle endpoint's score fades until it is tried again: score.ts).
 */
import { sampleTwoDistinct } from './rng.ts';
import type { Rng } from './types.ts';

/**
 * The P2C choice among `candidates`: the only one when there is one (no draw), else the
 * lower-scored of two distinct random ones, the first drawn on a tie. A NaN score counts as the
 * worst possible, so a broken estimate can only lose.
 *
 * @throws RangeError for no candidates: the caller sheds before it gets here.
 */
export function pickTwoChoices<T>(
  candidates: readonly T[],
  rng: Rng,
  scoreOf: (candidate: T) => number,
): T {
  if (candidates.length === 0) throw new RangeError('pickTwoChoices needs a candidate');
  if (candidates.length === 1) return candidates[0] as T;
  const [i, j] = sampleTwoDistinct(rng, candidates.length);
  const a = candidates[i] as T;
  const b = candidates[j] as T;
  return worstIfNaN(scoreOf(b)) < worstIfNaN(scoreOf(a)) ? b : a;
}

function worstIfNaN(value: number): number {
  return Number.isNaN(value) ? Infinity : value;
}

/**
 * The balancing step of the switchyard policy: among the candidates with the fewest attempts in
 * flight (this sidecar's own counts), the P2C choice by score. In-flight counts are local and
 * fresh, so taking their minimum cannot herd independent sidecars; the score (which carries the
 * shared, lagging EWMA) only decides between the equally loaded, by two random choices. The
 * routing benchmark measured it better than P2C over all candidates on both TTFT p50 and p99
 * (docs/routing-history.md).
 *
 * `priceClassOf` (the endpoint's cost term) keeps a price from being filtered out by load alone:
 * the fewest-in-flight step runs within each price class, and the least loaded of every class
 * compete by score, whose cost term is the pool's exchange rate. Without it, a cheap pool one request
 * busier than an expensive provider would never be considered, and `costWeightPerMs` would
 * change nothing (the benchmark's `mixed-cost` sweep found exactly that). With one price (or no
 * exchange rate) there is one class, and the step is the plain one.
 */
export function pickLeastLoaded<T>(
  candidates: readonly T[],
  rng: Rng,
  inFlightOf: (candidate: T, index: number) => number,
  scoreOf: (candidate: T) => number,
  priceClassOf: (candidate: T) => number = () => 0,
): T {
  if (candidates.length === 0) throw new RangeError('pickLeastLoaded needs a candidate');
  // Each count and price once: a count may weigh the server's reported speed (server-speed.ts),
  // and at thousands of endpoints a second pass over them is a measurable share of the pick.
  const counts = candidates.map((c, i) => inFlightOf(c, i));
  const prices = candidates.map(priceClassOf);
  const least = new Map<number, number>();
  prices.forEach((price, i) => {
    least.set(price, Math.min(least.get(price) ?? Infinity, counts[i] as number));
  });
  const tied = candidates.filter((_, i) => counts[i] === least.get(prices[i] as number));
  return pickTwoChoices(tied.length > 0 ? tied : candidates, rng, scoreOf);
}
