/**
 * Consistent hashing with bounded loads (Mirrokni, Thorup and Zadimoghaddam, 2016; KubeAI's
 * PrefixHash applies it to LLM prefixes): a key's endpoints are ranked by rendezvous hashing, and
 * the request goes to the first one in that order whose load is under
 *
 *   capacity = ⌈loadFactor · (total load + 1) / endpoints⌉
 *
 * So a key keeps its home while the home is not clearly busier than the average, and when it is,
 * the overflow goes to the key's second endpoint, then its third — the same ones from every
 * sidecar — instead of to whichever endpoint is least busy. A hot prefix warms two or three
 * endpoints, not all of them; and no endpoint is ever asked to take more than its share.
 */
import { AFFINITY_LOAD_FACTOR, AFFINITY_MAX_EXTRA_IN_FLIGHT } from '../../crds/policy-defaults.ts';
import { fmix32, fnv1a64 } from './hash.ts';
import type { AffinityPolicy } from './types.ts';

/**
 * 1.25: the factor KubeAI and the original paper use (`affinity.loadFactor`'s default). Lower
 * keeps loads flatter and moves more keys off their home; higher keeps more cache hits and lets
 * queues grow on popular homes.
 */
export const DEFAULT_LOAD_FACTOR = AFFINITY_LOAD_FACTOR;

/** The most any endpoint should carry, counting the request being placed. */
export function loadCapacity(loads: readonly number[], loadFactor: number): number {
  if (loads.length === 0) return 0;
  let total = 0;
  for (const load of loads) total += Math.max(0, load);
  const factor = loadFactor >= 1 ? loadFactor : DEFAULT_LOAD_FACTOR;
  return Math.ceil((factor * (total + 1)) / loads.length);
}

/**
 * The load bound of prefix affinity over these candidates' loads: a load fits under the bound of
 * consistent hashing with bounded loads (`loadCapacity`, `loadFactor`), or at most
 * `maxExtraInFlight` above the least loaded candidate: the bound alone is strict while the pool
 * is nearly idle (one request in flight can exceed it), where a cache hit still beats an empty
 * queue. Affinity's home and a resident LoRA adapter are held to the same bound.
 */
export function affinityLoadBound(
  loads: readonly number[],
  affinity: AffinityPolicy,
): (load: number) => boolean {
  const capacity = loadCapacity(loads, affinity.loadFactor ?? DEFAULT_LOAD_FACTOR);
  const ceiling = Math.min(...loads) + (affinity.maxExtraInFlight ?? AFFINITY_MAX_EXTRA_IN_FLIGHT);
  return (load) => load < capacity || load <= ceiling;
}

/** A string key (an affinity header's value) as the 52-bit number prompt blocks use. */
export function keyNumber(key: string): number {
  const h = fnv1a64(key);
  return (h.hi & 0xfffff) * 0x100000000 + h.lo;
}

/** An endpoint id's hash, computed once per endpoint. */
export function idHash(id: string): number {
  const h = fnv1a64(id);
  return fmix32(h.hi ^ fmix32(h.lo));
}

/**
 * The rendezvous weight of an endpoint for a key: every sidecar computes the same, and when an
 * endpoint joins or leaves only the keys it ranks first for move.
 */
export function rendezvousWeight(key: number, endpointIdHash: number): number {
  const lo = key >>> 0;
  const hi = Math.floor(key / 0x100000000);
  return fmix32(fmix32(lo ^ endpointIdHash) ^ hi ^ 0x9e3779b9);
}

/**
 * `pool` ranked by rendezvous weight for `key`, heaviest first; equal weights (one in 2^32 per
 * pair) go to the smaller id, so the order never depends on the pool's order.
 */
export function rendezvousOrder<T extends { readonly id: string; readonly idHash: number }>(
  key: number,
  pool: readonly T[],
): T[] {
  const weighted = pool.map((item) => ({ item, weight: rendezvousWeight(key, item.idHash) }));
  weighted.sort((a, b) =>
    b.weight !== a.weight ? b.weight - a.weight : a.item.id < b.item.id ? -1 : 1,
  );
  return weighted.map((w) => w.item);
}

/**
 * Selection steps `rendezvousWalk` takes before it sorts what is left: a walk nearly always stops
 * at the key's first or second endpoint; each step scans the pool once, and a sort costs about
 * log2(n) scans' worth of comparisons (12 at 4,096 endpoints), so past a handful of steps the sort
 * is the cheaper way on.
 */
export const WALK_SELECTION_STEPS = 8;

/**
 * `rendezvousOrder(key, pool)`, one endpoint at a time: the weights once (O(n)), then each of the
 * first WALK_SELECTION_STEPS endpoints by a scan for the heaviest left, then the rest sorted. A
 * pick that stops at the first endpoint costs two passes over the pool instead of a sort (at
 * 4,096 endpoints the sort was half of an affinity pick, `npm run bench:pick-cost`).
 */
export function* rendezvousWalk<T extends { readonly id: string; readonly idHash: number }>(
  key: number,
  pool: readonly T[],
): Generator<T, void, undefined> {
  const n = pool.length;
  const weights = new Float64Array(n);
  for (let i = 0; i < n; i++) weights[i] = rendezvousWeight(key, (pool[i] as T).idHash);
  // Heavier first; equal weights to the smaller id, as rendezvousOrder.
  const before = (i: number, j: number): boolean => {
    const wi = weights[i] as number;
    const wj = weights[j] as number;
    return wi !== wj ? wi > wj : (pool[i] as T).id < (pool[j] as T).id;
  };
  const taken = new Uint8Array(n);
  const steps = Math.min(n, WALK_SELECTION_STEPS);
  for (let step = 0; step < steps; step++) {
    let best = -1;
    for (let i = 0; i < n; i++) if (taken[i] === 0 && (best < 0 || before(i, best))) best = i;
    taken[best] = 1;
    yield pool[best] as T;
  }
  if (steps === n) return;
  const rest: number[] = [];
  for (let i = 0; i < n; i++) if (taken[i] === 0) rest.push(i);
  rest.sort((i, j) => (before(i, j) ? -1 : 1));
  for (const i of rest) yield pool[i] as T;
}
