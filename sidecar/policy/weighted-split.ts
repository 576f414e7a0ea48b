/**
 * The weighted split of a tier between its backends (docs/policy.md §2, "Weighted split"): when a
 * backend of the tier carries a `weight`, the pick first chooses a backend in proportion to the
 * weights, then balances among that backend's endpoints as it would without a split. A canary
 * gets its share of requests, and load-awareness still works inside each share.
 *
 * - A request with an affinity key (the header's value, or the prompt's conversation-stable home
 *   key) is placed by the key's hash on the weight line: the tier's backends with a positive
 *   weight, in name order, each as long as its weight. The same key lands on the same backend
 *   from every sidecar while the weights stay, so a conversation never flips between versions.
 * - A request without a key takes the next backend of a smooth weighted round-robin, per pool
 *   (nginx's): exact over every round of the weights, with the small share spread evenly.
 * - A chosen backend with no live candidate: the others by their weights (a key keeps its point
 *   on the shorter line, so its fallback is the same from every sidecar).
 * - Weight 0 takes nothing while a backend with a positive weight has a live candidate; when none
 *   has, every candidate may take the request (a backend with no weight counts as 0).
 */
import { keyNumber, rendezvousWeight } from './bounded-load.ts';
import type { AffinityPolicy, PickRequest } from './types.ts';

/** What the split reads of an endpoint. */
export interface SplitEndpoint {
  readonly spec: { readonly backend: string; readonly weight?: number | undefined };
}

/** Mixed into a key's hash for its point on the weight line, apart from its rendezvous weights. */
const WEIGHT_LINE_SALT = 0x5eed_11e5;

/**
 * The request's affinity key as a number, as affinity reads it (the header's value, or the
 * prompt's home key); undefined for a request without one.
 */
export function splitKey(affinity: AffinityPolicy, request: PickRequest): number | undefined {
  if (affinity.key === 'Header') {
    const key = request.affinityKey;
    return key === undefined || key === '' ? undefined : keyNumber(key);
  }
  if (affinity.key === 'Prefix' && request.prompt !== undefined)
    return request.prompt.hashes[request.prompt.homeDepth - 1];
  return undefined;
}

/** The key's point on the weight line, in [0, 1). */
export function linePoint(key: number): number {
  return rendezvousWeight(key, WEIGHT_LINE_SALT) / 0x1_0000_0000;
}

/** A weight as the split counts it: finite and positive, else 0. */
function weightOf(weight: number | undefined): number {
  return typeof weight === 'number' && Number.isFinite(weight) && weight > 0 ? weight : 0;
}

/** Whether some backend of the tier has a weight: only then is there a split to make. */
export function isWeighted(pool: readonly SplitEndpoint[]): boolean {
  return pool.some((s) => s.spec.weight !== undefined);
}

/**
 * How many lines' rounds a pool keeps (`WeightedSplit`): far more than the models of a pool times
 * the ways its backends can be down at once; past it the least recently used round is dropped.
 */
export const MAX_ROUNDS = 64;

export class WeightedSplit {
  /**
   * Smooth weighted round-robin: each backend's current weight (nginx's `current_weight`), per
   * line (its live backends and their weights, as a string), most recently used last. Requests
   * for different models of one pool run over different lines, and so does a tier with a backend
   * down: each line keeps its own round, so that interleaving them leaves every share exact.
   */
  readonly #rounds = new Map<string, Map<string, number>>();

  /**
   * `pool` and `candidates` (a tier's endpoints and the live ones among them, endpoint-pool.ts)
   * narrowed to the chosen backend's; unchanged when no backend of the tier has a weight, or when
   * no backend with a positive weight has a live candidate. `key`: the request's affinity key
   * (`splitKey`). `candidates` ⊆ `pool`; the result's candidates are never empty when they were
   * not.
   */
  narrow<S extends SplitEndpoint>(
    pool: readonly S[],
    candidates: readonly S[],
    key: number | undefined,
  ): { pool: readonly S[]; candidates: readonly S[] } {
    if (!isWeighted(pool)) return { pool, candidates };
    const weights = new Map<string, number>();
    for (const s of pool)
      if (!weights.has(s.spec.backend)) weights.set(s.spec.backend, weightOf(s.spec.weight));
    const live = new Set<string>();
    for (const s of candidates)
      if ((weights.get(s.spec.backend) ?? 0) > 0) live.add(s.spec.backend);
    if (live.size === 0) return { pool, candidates };

    const line = [...weights].filter(([, w]) => w > 0).sort(([a], [b]) => (a < b ? -1 : 1));
    const liveLine = line.filter(([backend]) => live.has(backend));
    let chosen: string;
    if (key !== undefined) {
      const point = linePoint(key);
      chosen = onLine(line, point);
      if (!live.has(chosen)) chosen = onLine(liveLine, point);
    } else {
      chosen = this.#roundRobin(liveLine);
    }
    return {
      pool: pool.filter((s) => s.spec.backend === chosen),
      candidates: candidates.filter((s) => s.spec.backend === chosen),
    };
  }

  /** The next backend of the smooth weighted round-robin over `line` (not empty). */
  #roundRobin(line: readonly (readonly [string, number])[]): string {
    const signature = line.map(([b, w]) => `${b}=${w}`).join('\n');
    let current = this.#rounds.get(signature);
    if (current === undefined) {
      current = new Map();
      // Lines are few (models × live sets); the cap only bounds a pathological churn of weights.
      if (this.#rounds.size >= MAX_ROUNDS) this.#rounds.delete(this.#rounds.keys().next().value!);
    } else {
      this.#rounds.delete(signature); // re-inserted below: most recently used last
    }
    this.#rounds.set(signature, current);
    let total = 0;
    let best: string | undefined;
    let bestCurrent = -Infinity;
    for (const [backend, weight] of line) {
      const credit = (current.get(backend) ?? 0) + weight;
      current.set(backend, credit);
      total += weight;
      if (credit > bestCurrent) {
        best = backend;
        bestCurrent = credit;
      }
    }
    const chosen = best as string;
    current.set(chosen, bestCurrent - total);
    return chosen;
  }
}

/** The backend at `point` ∈ [0, 1) of the line (its backends end to end, each its weight long). */
function onLine(line: readonly (readonly [string, number])[], point: number): string {
  let total = 0;
  for (const [, w] of line) total += w;
  const at = point * total;
  let end = 0;
  // The last backend takes the rest of the line, rounding included.
  for (let i = 0; i < line.length - 1; i++) {
    const [backend, w] = line[i] as readonly [string, number];
    end += w;
    if (at < end) return backend;
  }
  return (line[line.length - 1] as readonly [string, number])[0];
}
