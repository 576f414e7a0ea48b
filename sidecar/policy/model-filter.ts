/**
 * What each endpoint serves, and the candidate filter by the request's model (docs/policy.md §1,
 * "By model"). An endpoint's list is its backend's declared `models` when there is one, else what
 * its own `/v1/models` said last (`report`), else unknown: an endpoint whose list is unknown may
 * serve anything, so it stays a candidate until discovery has spoken. A discovered LoRA adapter's
 * entry makes its base model served too: vLLM lists the adapter with its `parent`, and a server
 * that applies an adapter to a base model serves the base model as well.
 *
 * Keyed by endpoint id, like the rest of the balancer's state; the caller forgets departed ids.
 */
import type { ModelsServed, PickResult, ServedModel } from './types.ts';

/** What the filter reads of an endpoint: its id and its backend's declared list. */
export interface ModelEndpoint {
  readonly id: string;
  readonly spec: { readonly models?: readonly string[] | undefined; readonly drifted?: boolean };
}

/** A discovered list, as `report` keeps it. */
interface DiscoveredList {
  /** Every id it serves: the entries and their parents. */
  readonly served: ReadonlySet<string>;
  /** Adapter id → its base model, for the entries with a parent other than themselves. */
  readonly parents: ReadonlyMap<string, string>;
}

/**
 * The request's model, or undefined for a request that names none (an empty name is none: no
 * endpoint lists it, and the shell routes a body without a model as if it had none).
 */
export function requestedModel(model: string | undefined): string | undefined {
  return model === undefined || model === '' ? undefined : model;
}

/**
 * False when a request must be shed as `model-not-served` (the shell answers 404): no endpoint of
 * the pool serves its model, whatever their health (drifted, open, excluded ones count), or the
 * endpoint it is pinned to has a list without it (the stored response it refers to was made by
 * another model: that endpoint would answer 404 too). True when the request names no model
 * (`serves` undefined) or some endpoint may serve it.
 */
export function servedAnywhere<S>(
  serves: ((s: S) => boolean) | undefined,
  endpoints: readonly S[],
  pinnedId: string | undefined,
  stateOf: (id: string) => S | undefined,
): boolean {
  if (serves === undefined) return true;
  const pinned = pinnedId === undefined ? undefined : stateOf(pinnedId);
  return pinned === undefined ? endpoints.some(serves) : serves(pinned);
}

/** The shed of a request whose model the pool does not serve: the shell answers 404. */
export function modelNotServed(retryAfterMs: number): PickResult {
  return { kind: 'shed', retryAfterMs, reason: 'model-not-served' };
}

export class ModelLists {
  /** The last discovered list of each endpoint id. */
  readonly #discovered = new Map<string, DiscoveredList>();
  /** A declared `models` array as a set, built once per array (a pool update brings new ones). */
  readonly #declared = new WeakMap<readonly string[], ReadonlySet<string>>();
  /** Adapter → base model across every discovered list; rebuilt after a list changed. */
  #parents: Map<string, string> | undefined;

  /**
   * The endpoint's own `/v1/models` said this now: it replaces the previous list. Entries without
   * an id are skipped; a parent equal to the id (vLLM's base model) is no parent.
   */
  report(endpointId: string, models: readonly ServedModel[]): void {
    const list: unknown = models;
    if (!Array.isArray(list)) return; // a JS caller's garbage says nothing
    const served = new Set<string>();
    const parents = new Map<string, string>();
    for (const entry of models as readonly (ServedModel | null | undefined)[]) {
      if (typeof entry?.id !== 'string' || entry.id === '') continue;
      served.add(entry.id);
      const parent = entry.parent;
      if (typeof parent === 'string' && parent !== '' && parent !== entry.id) {
        served.add(parent);
        parents.set(entry.id, parent);
      }
    }
    const previous = this.#discovered.get(endpointId);
    if (previous !== undefined && sameList(previous, served, parents)) return;
    this.#discovered.set(endpointId, { served, parents });
    this.#parents = undefined;
  }

  /** The endpoint left the pool: its discovered list goes with it. */
  forget(endpointId: string): void {
    if (this.#discovered.delete(endpointId)) this.#parents = undefined;
  }

  /** What the endpoint serves: declared, else discovered; undefined while unknown. */
  listOf(endpoint: ModelEndpoint): ReadonlySet<string> | undefined {
    const declared = endpoint.spec.models;
    if (declared !== undefined) {
      let set = this.#declared.get(declared);
      if (set === undefined) {
        set = new Set(declared);
        this.#declared.set(declared, set);
      }
      return set;
    }
    return this.#discovered.get(endpoint.id)?.served;
  }

  /**
   * The candidate filter for a request naming `model`: true for an endpoint whose list holds it
   * or is unknown. Undefined when the request names no model: every endpoint may take it.
   */
  servesFilter<S extends ModelEndpoint>(
    model: string | undefined,
  ): ((s: S) => boolean) | undefined {
    const wanted = requestedModel(model);
    if (wanted === undefined) return undefined;
    return (s) => this.listOf(s)?.has(wanted) ?? true;
  }

  /** The base model a discovered list names for this adapter; undefined for none known. */
  parentOf(model: string): string | undefined {
    if (this.#parents === undefined) {
      this.#parents = new Map();
      for (const list of this.#discovered.values())
        for (const [id, parent] of list.parents) this.#parents.set(id, parent);
    }
    return this.#parents.get(model);
  }

  /**
   * What the endpoints serve (`PoolBalancer.modelsServed`): each model with the number of
   * endpoints serving it, and the number whose list is unknown. Drifted endpoints (excluded from
   * picks) count in neither: they take no traffic.
   */
  modelsServed(endpoints: readonly ModelEndpoint[]): ModelsServed {
    const counts = new Map<string, number>();
    let unknownEndpoints = 0;
    for (const endpoint of endpoints) {
      if (endpoint.spec.drifted === true) continue;
      const list = this.listOf(endpoint);
      if (list === undefined) {
        unknownEndpoints += 1;
        continue;
      }
      for (const id of list) counts.set(id, (counts.get(id) ?? 0) + 1);
    }
    const models = new Map<string, { endpoints: number; parent?: string }>();
    for (const [id, count] of counts) {
      const parent = this.parentOf(id);
      models.set(id, parent === undefined ? { endpoints: count } : { endpoints: count, parent });
    }
    return { models, unknownEndpoints };
  }
}

function sameList(
  previous: DiscoveredList,
  served: ReadonlySet<string>,
  parents: ReadonlyMap<string, string>,
): boolean {
  if (previous.served.size !== served.size || previous.parents.size !== parents.size) return false;
  for (const id of served) if (!previous.served.has(id)) return false;
  for (const [id, parent] of parents) if (previous.parents.get(id) !== parent) return false;
  return true;
}
