/**
 * Which pools an event concerns: a change of a Service, an EndpointSlice, a Secret or a GAIE
 * InferencePool (or one of its pods) enqueues the keys of the pools that reference it, and nothing else (level-triggered: the event carries no
 * payload, the reconcile re-reads the caches).
 *
 * Incremental: `setPool` on every pool add or update, `deletePool` on delete. References are
 * read from the spec as it is, before any validation, so that even an invalid pool is
 * reconciled again when the object it names appears.
 */
import { compareStrings } from './hash.ts';
import { SERVICE_NAME_LABEL, type EndpointSlice, type ObjectMeta } from './objects.ts';

/** The parts of a pool the index reads; an `InferencePool` is one, and so is a raw object. */
export interface IndexablePool {
  metadata?: { namespace?: string | null | undefined } | null | undefined;
  spec?: {
    backends?:
      | readonly (
          | {
              service?: { name?: unknown } | null | undefined;
              inferencePoolRef?: { name?: unknown } | null | undefined;
              apiKeySecretRef?: { name?: unknown } | null | undefined;
              tls?: { caSecretRef?: { name?: unknown } | null | undefined } | null | undefined;
            }
          | null
          | undefined
        )[]
      | null
      | undefined;
  } | null;
}

/** A pool's key on the work queue and everywhere the controller tracks a pool: `namespace/name`. */
export type PoolKey = string;

/** The work-queue key of a namespaced object: `namespace/name`, as client-go spells it. */
export function objectKey(namespace: string, name: string): string {
  return `${namespace}/${name}`;
}

/** `namespace/name` → its parts; a key without `/` is a name in namespace `''`. */
export function splitKey(key: string): { namespace: string; name: string } {
  const slash = key.indexOf('/');
  return slash === -1
    ? { namespace: '', name: key }
    : { namespace: key.slice(0, slash), name: key.slice(slash + 1) };
}

/** What one pool references: names in its own namespace. */
interface Refs {
  namespace: string;
  services: Set<string>;
  secrets: Set<string>;
  /** GAIE InferencePools (inference.networking.k8s.io). */
  gaiePools: Set<string>;
}

export class PoolIndex {
  /** Pool key → what it references. */
  readonly #refs = new Map<string, Refs>();
  /** Service key → pool keys. */
  readonly #byService = new Map<string, Set<string>>();
  /** Secret key → pool keys. */
  readonly #bySecret = new Map<string, Set<string>>();
  /** GAIE InferencePool key → pool keys. */
  readonly #byGaiePool = new Map<string, Set<string>>();

  /**
   * Records (or replaces) what the pool `key` references. The namespace is the pool's own
   * (references never cross namespaces); without one in the object, the key's.
   */
  setPool(key: string, pool: IndexablePool): void {
    this.deletePool(key);
    const namespace = pool.metadata?.namespace ?? splitKey(key).namespace;
    const refs: Refs = { namespace, services: new Set(), secrets: new Set(), gaiePools: new Set() };
    for (const backend of pool.spec?.backends ?? []) {
      const service = backend?.service?.name;
      if (typeof service === 'string' && service !== '') refs.services.add(service);
      const gaiePool = backend?.inferencePoolRef?.name;
      if (typeof gaiePool === 'string' && gaiePool !== '') refs.gaiePools.add(gaiePool);
      const secret = backend?.apiKeySecretRef?.name;
      if (typeof secret === 'string' && secret !== '') refs.secrets.add(secret);
      const caSecret = backend?.tls?.caSecretRef?.name;
      if (typeof caSecret === 'string' && caSecret !== '') refs.secrets.add(caSecret);
    }
    this.#refs.set(key, refs);
    for (const s of refs.services) link(this.#byService, objectKey(namespace, s), key);
    for (const s of refs.secrets) link(this.#bySecret, objectKey(namespace, s), key);
    for (const g of refs.gaiePools) link(this.#byGaiePool, objectKey(namespace, g), key);
  }

  deletePool(key: string): void {
    const refs = this.#refs.get(key);
    if (refs === undefined) return;
    this.#refs.delete(key);
    for (const s of refs.services) unlink(this.#byService, objectKey(refs.namespace, s), key);
    for (const s of refs.secrets) unlink(this.#bySecret, objectKey(refs.namespace, s), key);
    for (const g of refs.gaiePools) unlink(this.#byGaiePool, objectKey(refs.namespace, g), key);
  }

  /** Keys of the pools that reference the Service `namespace/name`, sorted. */
  poolsForService(namespace: string, name: string): string[] {
    return sorted(this.#byService.get(objectKey(namespace, name)));
  }

  /** Keys of the pools that reference the Secret `namespace/name`, sorted. */
  poolsForSecret(namespace: string, name: string): string[] {
    return sorted(this.#bySecret.get(objectKey(namespace, name)));
  }

  /** Keys of the pools that reference the GAIE InferencePool `namespace/name`, sorted. */
  poolsForGaiePool(namespace: string, name: string): string[] {
    return sorted(this.#byGaiePool.get(objectKey(namespace, name)));
  }

  /**
   * Keys of the pools whose Service owns this EndpointSlice (by its service-name label); none
   * for a slice without the label.
   */
  poolsForSlice(slice: { metadata?: ObjectMeta | null | undefined } | EndpointSlice): string[] {
    const service = slice.metadata?.labels?.[SERVICE_NAME_LABEL];
    if (service === undefined || service === '') return [];
    return this.poolsForService(slice.metadata?.namespace ?? '', service);
  }

  /**
   * Names of the Services the pool `key` references, sorted: what its reconcile looks up, in the
   * pool's own namespace (references never cross namespaces).
   */
  serviceNamesOf(key: string): string[] {
    return sorted(this.#refs.get(key)?.services);
  }

  /** Names of the Secrets the pool `key` references, sorted, in the pool's namespace. */
  secretNamesOf(key: string): string[] {
    return sorted(this.#refs.get(key)?.secrets);
  }

  /** Names of the GAIE InferencePools the pool `key` references, sorted, in its namespace. */
  gaiePoolNamesOf(key: string): string[] {
    return sorted(this.#refs.get(key)?.gaiePools);
  }

  /**
   * Object keys of every GAIE InferencePool some pool references, sorted: what decides whether
   * GAIE pools (and which pods) are watched at all.
   */
  referencedGaiePools(): string[] {
    return sorted(new Set(this.#byGaiePool.keys()));
  }

  /** Object keys of every Secret some pool references, sorted: the Secrets worth watching. */
  referencedSecrets(): string[] {
    return sorted(new Set(this.#bySecret.keys()));
  }

  /** Object keys of every Service some pool references, sorted. */
  referencedServices(): string[] {
    return sorted(new Set(this.#byService.keys()));
  }

  /** Keys of all indexed pools, sorted (for a full resync). */
  pools(): string[] {
    return sorted(new Set(this.#refs.keys()));
  }
}

function link(index: Map<string, Set<string>>, ref: string, pool: string): void {
  let pools = index.get(ref);
  if (pools === undefined) {
    pools = new Set();
    index.set(ref, pools);
  }
  pools.add(pool);
}

/** Every `unlink` follows the `link` of the same pair, so the set exists. */
function unlink(index: Map<string, Set<string>>, ref: string, pool: string): void {
  const pools = index.get(ref) as Set<string>;
  pools.delete(pool);
  if (pools.size === 0) index.delete(ref);
}

function sorted(keys: ReadonlySet<string> | undefined): string[] {
  return keys === undefined ? [] : [...keys].sort(compareStrings);
}
