/**
 * Who may read which pool's snapshots, and with which of their parts. Snapshots carry provider
 * API keys, so the rule is the pod, not the namespace: a token bound to a pod (every projected
 * token a kubelet mounts is) reads the pools that pod follows, keys included, and nothing else; a
 * token bound to no pod (minted by hand with `kubectl create token`, a tool's) reads any pool of
 * its namespace but never a key. docs/controller.md ("Who gets API keys") says the same.
 */
import type { WorkloadSource } from '../../crds/policy-types.ts';
import type { PoolSnapshot } from '../../crds/snapshot.ts';
import {
  followedPools,
  POOL_LABEL,
  POOLS_ANNOTATION,
  type PoolMetadata,
} from '../injection/followed-pools.ts';

/** The part of a Pod the rule reads. */
export interface PodMetadata {
  metadata?: PoolMetadata | undefined;
}

/**
 * The pools a pod follows (its label's and its annotation's: followed-pools.ts): the ones its
 * sidecar routes with, so the ones whose keys it needs.
 */
export function poolsFollowedBy(pod: PodMetadata): ReadonlySet<string> {
  return new Set(followedPools(pod.metadata).pools);
}

/** A token's bound pod as the stream sees it; undefined for a token bound to no pod. */
export interface BoundPod {
  name: string;
  follows: ReadonlySet<string>;
  /**
   * `metadata.namespace` + `spec.serviceAccountName` (`namespace/name`) and `metadata.labels`:
   * the sidecar's workload, for budgets (issue 43).
   */
  serviceAccount?: string | undefined;
  labels?: Readonly<Record<string, string>> | undefined;
}

/**
 * The workload a sidecar's requests are, when the pool names it per sidecar: its pod's service
 * account as `namespace/name` (docs/configuration.md), or the value of one of its labels; undefined for a token bound to no pod, a pod
 * without that label, or a pool whose workloads come from a header (per request).
 */
export function workloadOf(pod: BoundPod | undefined, source: WorkloadSource): string | undefined {
  if (pod === undefined) return undefined;
  if (source.kind === 'ServiceAccount') return nonEmpty(pod.serviceAccount);
  if (source.kind === 'PodLabel') return nonEmpty(pod.labels?.[source.label]);
  return undefined;
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value === '' ? undefined : value;
}

export type StreamAccess =
  | { kind: 'with-keys' }
  /** The snapshot without its API keys: the token is bound to no pod. */
  | { kind: 'without-keys' }
  | { kind: 'refused'; message: string };

export function streamAccess(pod: BoundPod | undefined, pool: string): StreamAccess {
  if (pod === undefined) return { kind: 'without-keys' };
  if (pod.follows.has(pool)) return { kind: 'with-keys' };
  const follows = [...pod.follows];
  return {
    kind: 'refused',
    message:
      `Pod ${pod.name} does not follow pool ${pool} ` +
      `(${follows.length === 0 ? `it has no ${POOL_LABEL} label` : `it follows ${follows.join(', ')}`}): ` +
      `a sidecar reads the snapshots of its own pod's pools only. Label the pod ${POOL_LABEL}=${pool}, ` +
      `or add ${pool} to its annotation ${POOLS_ANNOTATION} (comma-separated).`,
  };
}

/** True when some endpoint of the snapshot carries an API key. */
export function holdsApiKeys(snapshot: PoolSnapshot): boolean {
  return snapshot.endpoints.some((e) => e.apiKey !== undefined);
}

/** The snapshot as a token bound to no pod gets it: the same, less every API key. */
export function withoutApiKeys(snapshot: PoolSnapshot): PoolSnapshot {
  if (!holdsApiKeys(snapshot)) return snapshot;
  return {
    ...snapshot,
    endpoints: snapshot.endpoints.map((e) => {
      if (e.apiKey === undefined) return e;
      const { apiKey: _withheld, ...rest } = e;
      return rest;
    }),
  };
}
