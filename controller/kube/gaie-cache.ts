/**
 * What the controller watches of the Gateway API inference extension (GAIE): its InferencePools
 * (`inference.networking.k8s.io/v1`) and the pods their selectors match, for the pools whose
 * backends reference one (`inferencePoolRef`).
 *
 * Nothing is watched until some pool references a GAIE pool, so a cluster without GAIE's CRD
 * never sees a request for it. Then one cluster-wide watch of GAIE pools (few, small objects),
 * and one label-selected pod watch per distinct (namespace, selector) of the referenced ones: only
 * member pods are listed and cached, never every pod of the cluster.
 *
 * GAIE's CRD may be missing (or removed): its list then answers 404, the informer retries with
 * its backoff (up to 30 s apart, no hot loop), and the referencing pools say so in ResolvedRefs
 * until a retry finds the CRD.
 */
import type { KubernetesObject } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { GAIE_GROUP, GAIE_PLURAL, GAIE_VERSION } from '../../crds/inference-pool.schema.ts';
import { gaieLabelSelector, type GaieLookup } from '../core/gaie-endpoints.ts';
import type { GaieInferencePool, Pod } from '../core/objects.ts';
import { splitKey, type PoolKey } from '../core/pool-index.ts';
import { KubeApiError, type KubeRaw } from './kube-raw.ts';
import type { KubeList } from './object-cache.ts';
import { SupervisedInformer, withSelectors } from './supervised-informer.ts';

/** The referenced GAIE pools as the reconciler reads them. */
export interface GaieCache {
  /** Follows exactly these GAIE pools (object keys `namespace/name`) and their pods from now on. */
  watchOnly(refs: readonly string[]): void;
  /** What is known of one GAIE pool and its pods; `pending` while a watch it needs still lists. */
  lookup(namespace: string, name: string): GaieLookup | 'pending';
}

export interface GaieWatchesOptions {
  api: Pick<KubeRaw, 'request' | 'stream'>;
  logger: Logger;
  /** Which pools reference a GAIE pool. */
  index: { poolsForGaiePool(namespace: string, name: string): PoolKey[] };
  queue: { add(key: PoolKey): void };
  onRestart: (informer: string, reason: 'error' | 'idle') => void;
}

type CachedGaiePool = GaieInferencePool & KubernetesObject;
type CachedPod = Pod & KubernetesObject;

/**
 * Why a list fails: in a way a retry alone will not fix (`crd-missing`, `forbidden`), or any other
 * way (`failing`: the API server answering 5xx, unreachable, timing out), which the informer
 * retries with backoff; undefined: it does not fail.
 */
type ListError = { kind: 'crd-missing' | 'forbidden' | 'failing'; why: string } | undefined;

/** A list failing otherwise, said for the pools' ResolvedRefs condition. */
function failing(what: string, err: unknown): ListError {
  const status = statusOf(err);
  const detail =
    status === undefined ? ((err as Error | null)?.message ?? String(err)) : `HTTP ${status}`;
  return {
    kind: 'failing',
    why: `listing ${what} failed (${detail}); the controller retries with backoff`,
  };
}

/**
 * The error a lookup reports: a `failing` list only matters before the first good one; after it
 * the cache still holds the last list and the watch, and routing goes on from them.
 */
function reported(error: ListError, synced: boolean): ListError {
  return error?.kind === 'failing' && synced ? undefined : error;
}

interface PodWatch {
  namespace: string;
  selector: string;
  informer: SupervisedInformer<CachedPod>;
  error: ListError;
}

const GAIE_RESOURCE = `${GAIE_PLURAL}.${GAIE_GROUP}`;

/** The HTTP status of a failed list; undefined when it did not get one. */
function statusOf(err: unknown): number | undefined {
  return err instanceof KubeApiError ? err.status : undefined;
}

export class GaieWatches implements GaieCache {
  readonly #options: GaieWatchesOptions;
  /** The referenced GAIE pools, object keys. */
  #refs = new Set<string>();
  #pools: SupervisedInformer<CachedGaiePool> | undefined;
  #poolsError: ListError;
  /** Pod watches by `namespace/selector`. */
  readonly #pods = new Map<string, PodWatch>();

  constructor(options: GaieWatchesOptions) {
    this.#options = options;
  }

  watchOnly(refs: readonly string[]): void {
    this.#refs = new Set(refs);
    if (this.#refs.size === 0) {
      void this.stop();
      return;
    }
    if (this.#pools === undefined) this.#startPoolWatch();
    const wanted = new Set<string>();
    for (const ref of this.#refs) {
      const { namespace, name } = splitKey(ref);
      const selector = this.#selectorOf(namespace, name);
      if (selector !== undefined) wanted.add(this.#ensurePodWatch(namespace, selector));
    }
    for (const [key, watch] of this.#pods) {
      if (wanted.has(key)) continue;
      this.#pods.delete(key);
      void watch.informer.stop();
    }
  }

  lookup(namespace: string, name: string): GaieLookup | 'pending' {
    const pools = this.#pools;
    if (pools === undefined) return 'pending';
    const error = reported(this.#poolsError, pools.hasSynced);
    if (error?.kind === 'crd-missing') return { kind: 'not-found', why: error.why };
    if (error !== undefined) return { kind: 'unreadable', why: error.why };
    if (!pools.hasSynced) return 'pending';
    const pool = pools.get(name, namespace);
    if (pool === undefined) return { kind: 'not-found' };
    const selector = gaieLabelSelector(pool);
    // No selector: the core says why it takes no pods; nothing to watch.
    if (selector === undefined) return { kind: 'found', pool, pods: [] };
    const watch = this.#pods.get(this.#ensurePodWatch(namespace, selector));
    const podError =
      watch === undefined ? undefined : reported(watch.error, watch.informer.hasSynced);
    if (podError !== undefined) return { kind: 'unreadable', why: podError.why };
    if (watch === undefined || !watch.informer.hasSynced) return 'pending';
    return { kind: 'found', pool, pods: watch.informer.list(namespace) };
  }

  async stop(): Promise<void> {
    const informers = [...this.#pods.values()].map((w) => w.informer);
    if (this.#pools !== undefined) informers.push(this.#pools);
    this.#pools = undefined;
    this.#poolsError = undefined;
    this.#pods.clear();
    await Promise.all(informers.map((i) => i.stop()));
  }

  /** The selector of a cached GAIE pool, once its watch has a trustworthy list. */
  #selectorOf(namespace: string, name: string): string | undefined {
    if (this.#pools?.hasSynced !== true) return undefined;
    if (reported(this.#poolsError, true) !== undefined) return undefined;
    const pool = this.#pools.get(name, namespace);
    return pool === undefined ? undefined : gaieLabelSelector(pool);
  }

  /** Enqueues the pools that reference any referenced GAIE pool matching `which`. */
  #enqueue(which: (namespace: string, name: string) => boolean): void {
    for (const ref of this.#refs) {
      const { namespace, name } = splitKey(ref);
      if (!which(namespace, name)) continue;
      for (const key of this.#options.index.poolsForGaiePool(namespace, name))
        this.#options.queue.add(key);
    }
  }

  #startPoolWatch(): void {
    const { api, logger, onRestart } = this.#options;
    const path = `/apis/${GAIE_GROUP}/${GAIE_VERSION}/${GAIE_PLURAL}`;
    const all = (): void => this.#enqueue(() => true);
    // A change of why the list fails (or that it stopped failing) is news for the pools concerned.
    const set = (error: ListError): void => {
      // A list of a watch stopped meanwhile (no pool references GAIE any more) says nothing.
      if (this.#pools !== informer) return;
      const changed = this.#poolsError?.kind !== error?.kind;
      this.#poolsError = error;
      if (changed) all();
    };
    const list = async (): Promise<KubeList<CachedGaiePool>> => {
      try {
        const result = await api.request<KubeList<CachedGaiePool>>('GET', path);
        set(undefined);
        return result;
      } catch (err) {
        const status = statusOf(err);
        const error: ListError =
          status === 404
            ? {
                kind: 'crd-missing',
                why:
                  `the API server does not serve ${GAIE_GROUP}/${GAIE_VERSION} ${GAIE_PLURAL}: ` +
                  `install the Gateway API inference extension's InferencePool CRD (${GAIE_RESOURCE})`,
              }
            : status === 403
              ? {
                  kind: 'forbidden',
                  why:
                    `the controller may not list ${GAIE_RESOURCE} (HTTP 403): ` +
                    `its ClusterRole needs list and watch on them (the chart grants both)`,
                }
              : failing(GAIE_RESOURCE, err);
        set(error);
        // The informer logs this at each retry: say it as a person on call would want it.
        throw new Error(error!.why, { cause: err });
      }
    };
    const informer = new SupervisedInformer<CachedGaiePool>({
      name: GAIE_RESOURCE,
      api,
      path,
      list,
      logger,
      onChange: (pool) => {
        const at = { ns: pool.metadata?.namespace ?? '', name: pool.metadata?.name ?? '' };
        this.#enqueue((namespace, name) => namespace === at.ns && name === at.name);
      },
      onRestart: (reason) => onRestart(GAIE_RESOURCE, reason),
      onSynced: all,
    });
    this.#pools = informer;
    void informer.start();
  }

  /** The pod watch of `selector` in `namespace`, started if new; returns its key. */
  #ensurePodWatch(namespace: string, selector: string): string {
    const key = `${namespace}/${selector}`;
    if (this.#pods.has(key)) return key;
    const { api, logger, onRestart } = this.#options;
    const path = `/api/v1/namespaces/${encodeURIComponent(namespace)}/pods`;
    // The GAIE pools this watch's pods belong to: those of its namespace with its selector.
    const members = (): void =>
      this.#enqueue((ns, name) => ns === namespace && this.#selectorOf(ns, name) === selector);
    const set = (error: ListError): void => {
      const changed = watch.error?.kind !== error?.kind;
      watch.error = error;
      if (changed) members();
    };
    const watch: PodWatch = {
      namespace,
      selector,
      error: undefined,
      informer: new SupervisedInformer<CachedPod>({
        name: `pods ${key}`,
        api,
        path,
        labelSelector: selector,
        list: async () => {
          try {
            const result = await api.request<KubeList<CachedPod>>(
              'GET',
              withSelectors(path, { labelSelector: selector }),
            );
            set(undefined);
            return result;
          } catch (err) {
            const error: ListError =
              statusOf(err) === 403
                ? {
                    kind: 'forbidden',
                    why:
                      `the controller may not list pods in namespace ${namespace} (HTTP 403): ` +
                      `its ClusterRole needs list and watch on pods (the chart grants both)`,
                  }
                : failing(`pods in namespace ${namespace}`, err);
            set(error);
            throw new Error(error!.why, { cause: err });
          }
        },
        logger,
        onChange: members,
        onRestart: (reason) => onRestart('pods', reason),
        onSynced: members,
      }),
    };
    this.#pods.set(key, watch);
    void watch.informer.start();
    return key;
  }
}
