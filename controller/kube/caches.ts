/**
 * The informer caches the controller reconciles from, behind small typed interfaces: the
 * reconciler reads pools, Services, EndpointSlices, Secrets and GAIE pools through `PoolCache`,
 * `ServiceCache`, `EndpointSliceCache`, `SecretCache` and `GaieCache` (gaie-cache.ts), so a unit
 * test passes plain maps instead.
 *
 * Every change only enqueues the keys of the pools it concerns (level-triggered: the event
 * carries no payload; the reconcile re-reads the caches).
 */
import type { KubernetesObject } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { GROUP, PLURAL, VERSION, type InferencePool } from '../../crds/inference-pool.schema.ts';
import {
  SERVICE_NAME_LABEL,
  type EndpointSlice,
  type Secret,
  type Service,
} from '../core/objects.ts';
import { objectKey, splitKey, type PoolIndex, type PoolKey } from '../core/pool-index.ts';
import { GaieWatches, type GaieCache } from './gaie-cache.ts';
import type { KubeRaw } from './kube-raw.ts';
import { SupervisedInformer } from './supervised-informer.ts';

/** A pool as the informer holds it: the API's object, metadata (uid, generation) included. */
export type CachedPool = InferencePool & KubernetesObject;

export interface PoolCache {
  get(key: PoolKey): CachedPool | undefined;
}

export interface ServiceCache {
  get(namespace: string, name: string): Service | undefined;
}

export interface EndpointSliceCache {
  /** The slices of one Service (by their `kubernetes.io/service-name` label). */
  ofService(namespace: string, service: string): readonly EndpointSlice[];
}

/** Only the Secrets some pool references are watched, each on its own (a field selector). */
export interface SecretCache {
  /** Watches exactly these Secrets (object keys `namespace/name`) from now on. */
  watchOnly(refs: readonly string[]): void;
  /** Whether the watch of this Secret has applied its first list (false when it is not watched). */
  hasSynced(namespace: string, name: string): boolean;
  get(namespace: string, name: string): Secret | undefined;
}

/** The pool cache as the rest of the controller reads it. */
export interface PoolInformerCache extends PoolCache {
  has(key: PoolKey): boolean;
  keys(): PoolKey[];
  readonly hasSynced: boolean;
}

export interface InformerCachesOptions {
  api: KubeRaw;
  logger: Logger;
  /** Which pools a Service, an EndpointSlice, a Secret or a GAIE pool concerns. */
  index: Pick<PoolIndex, 'poolsForService' | 'poolsForSecret' | 'poolsForGaiePool'>;
  /** A change concerns this pool: reconcile it. */
  queue: { add(key: PoolKey): void };
  onRestart: (informer: string, reason: 'error' | 'idle') => void;
}

type Informed<T> = T & KubernetesObject;

const keyOf = (o: KubernetesObject): PoolKey =>
  objectKey(o.metadata?.namespace ?? '', o.metadata?.name ?? '');

export class InformerCaches {
  readonly pools: PoolInformerCache;
  readonly services: ServiceCache;
  readonly slices: EndpointSliceCache;
  readonly secrets: SecretCache;
  /** Started only once some pool references a GAIE pool, and not part of `synced`. */
  readonly gaie: GaieCache;
  readonly #gaie: GaieWatches;
  readonly #options: InformerCachesOptions;
  readonly #pools: SupervisedInformer<CachedPool>;
  readonly #services: SupervisedInformer<Informed<Service>>;
  readonly #slices: SupervisedInformer<Informed<EndpointSlice>>;
  readonly #secrets = new Map<string, SupervisedInformer<Informed<Secret>>>();

  constructor(options: InformerCachesOptions) {
    this.#options = options;
    const { api, index, queue } = options;

    this.#pools = this.#informer<CachedPool>(
      PLURAL,
      `/apis/${GROUP}/${VERSION}/${PLURAL}`,
      (pool) => queue.add(keyOf(pool)),
    );
    this.#services = this.#informer<Informed<Service>>('services', '/api/v1/services', (svc) => {
      for (const key of index.poolsForService(
        svc.metadata?.namespace ?? '',
        svc.metadata?.name ?? '',
      ))
        queue.add(key);
    });
    this.#slices = this.#informer<Informed<EndpointSlice>>(
      'endpointslices',
      '/apis/discovery.k8s.io/v1/endpointslices',
      (slice) => {
        const service = slice.metadata?.labels?.[SERVICE_NAME_LABEL];
        if (service === undefined) return;
        for (const key of index.poolsForService(slice.metadata?.namespace ?? '', service))
          queue.add(key);
      },
      { labelSelector: SERVICE_NAME_LABEL },
    );

    const pools = this.#pools;
    this.pools = {
      get: (key) => {
        const { namespace, name } = splitKey(key);
        return pools.get(name, namespace);
      },
      has: (key) => this.pools.get(key) !== undefined,
      keys: () => pools.list().map(keyOf),
      get hasSynced() {
        return pools.hasSynced;
      },
    };
    this.services = { get: (namespace, name) => this.#services.get(name, namespace) };
    this.slices = {
      ofService: (namespace, service) =>
        this.#slices
          .list(namespace)
          .filter((slice) => slice.metadata?.labels?.[SERVICE_NAME_LABEL] === service),
    };
    this.#gaie = new GaieWatches({
      api,
      logger: options.logger,
      index,
      queue,
      onRestart: options.onRestart,
    });
    this.gaie = this.#gaie;
    this.secrets = {
      watchOnly: (refs) => this.#watchSecrets(refs),
      hasSynced: (namespace, name) =>
        this.#secrets.get(objectKey(namespace, name))?.hasSynced === true,
      get: (namespace, name) => this.#secrets.get(objectKey(namespace, name))?.get(name, namespace),
    };
  }

  /** Whether the pool, Service and EndpointSlice caches have all applied their first list. */
  get synced(): boolean {
    return this.#pools.hasSynced && this.#services.hasSynced && this.#slices.hasSynced;
  }

  /** Resolves once the pool, Service and EndpointSlice caches have applied their first list. */
  async waitForSync(): Promise<void> {
    await Promise.all([
      this.#pools.waitForSync(),
      this.#services.waitForSync(),
      this.#slices.waitForSync(),
    ]);
  }

  async start(): Promise<void> {
    await Promise.all([this.#pools.start(), this.#services.start(), this.#slices.start()]);
  }

  async stop(): Promise<void> {
    await Promise.all([
      this.#pools.stop(),
      this.#services.stop(),
      this.#slices.stop(),
      this.#gaie.stop(),
      ...[...this.#secrets.values()].map((i) => i.stop()),
    ]);
  }

  #informer<T extends KubernetesObject>(
    name: string,
    path: string,
    onChange: (o: T) => void,
    selectors: { labelSelector?: string; fieldSelector?: string } = {},
  ): SupervisedInformer<T> {
    const { api, logger, queue, onRestart } = this.#options;
    return new SupervisedInformer<T>({
      name,
      api,
      path,
      logger,
      onChange,
      ...selectors,
      onRestart: (reason) => onRestart(name, reason),
      // A restarted informer cannot report what was deleted meanwhile: reconcile every pool.
      onSynced: () => {
        for (const key of this.pools.keys()) queue.add(key);
      },
    });
  }

  /** One small watch per referenced Secret, so no Secret a pool does not use is listed or cached. */
  #watchSecrets(refs: readonly string[]): void {
    const wanted = new Set(refs);
    for (const [ref, informer] of this.#secrets) {
      if (wanted.has(ref)) continue;
      this.#secrets.delete(ref);
      void informer.stop();
    }
    for (const ref of wanted) {
      if (this.#secrets.has(ref)) continue;
      const { namespace, name } = splitKey(ref);
      const fieldSelector = `metadata.name=${name}`;
      const informer = this.#informer<Informed<Secret>>(
        `secret ${ref}`,
        `/api/v1/namespaces/${encodeURIComponent(namespace)}/secrets`,
        () => {
          for (const key of this.#options.index.poolsForSecret(namespace, name))
            this.#options.queue.add(key);
        },
        { fieldSelector },
      );
      this.#secrets.set(ref, informer);
      void informer.start();
    }
  }
}
