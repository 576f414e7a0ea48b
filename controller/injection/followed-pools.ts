/**
 * Which pools a pod's sidecar follows: the one rule the webhook (which `--pool` flags the sidecar
 * gets), the stream's authorisation (whose API keys the pod's token may read) and the docs share.
 *
 * The label `switchyard.dev/pool` selects a pod for injection (the webhook's object selector can
 * match labels only) and names its first pool: the one a request without a `model` goes to. The
 * annotation `switchyard.dev/pools` names more, comma-separated (a label value cannot hold a
 * list): `chat,embed`. The label's pool comes first; a name given twice counts once. Pure.
 */

export const POOL_LABEL = 'switchyard.dev/pool';
export const POOLS_ANNOTATION = 'switchyard.dev/pools';

/**
 * Pools one sidecar may follow: each is a stream to the controller and a balancer in the pod, and
 * an app calling more models than this is better served by fewer, larger pools.
 */
export const MAX_FOLLOWED_POOLS = 16;

/** A DNS-1123 subdomain, as InferencePool names are. */
const POOL_NAME = /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/;

/** The part of a pod's metadata the rule reads. */
export interface PoolMetadata {
  labels?: Record<string, string> | undefined;
  annotations?: Record<string, string> | undefined;
}

export interface FollowedPools {
  /** In order: the label's pool, then the annotation's; empty when the pod has no label. */
  pools: string[];
  /** Why the names cannot be used as they are (an invalid name, too many); undefined if fine. */
  problem?: string | undefined;
}

/** The pools a pod follows, and what is wrong with its label or annotation, if anything. */
export function followedPools(metadata: PoolMetadata | undefined): FollowedPools {
  const label = metadata?.labels?.[POOL_LABEL];
  if (label === undefined || label === '') return { pools: [] };
  const listed = (metadata?.annotations?.[POOLS_ANNOTATION] ?? '')
    .split(',')
    .map((name) => name.trim())
    .filter((name) => name !== '');
  const pools = [...new Set([label, ...listed])];
  const invalid = pools.find((name) => !POOL_NAME.test(name) || name.length > 253);
  if (invalid !== undefined) {
    const where =
      invalid === label
        ? `label ${POOL_LABEL}=${JSON.stringify(invalid)}`
        : `annotation ${POOLS_ANNOTATION} names ${JSON.stringify(invalid.slice(0, 80))}, which`;
    return {
      pools,
      problem: `${where} is not a valid InferencePool name (lower-case letters, digits, '-' and '.')`,
    };
  }
  if (pools.length > MAX_FOLLOWED_POOLS) {
    return {
      pools,
      problem: `the pod follows ${pools.length} pools (label ${POOL_LABEL} and annotation ${POOLS_ANNOTATION}); a sidecar follows at most ${MAX_FOLLOWED_POOLS}`,
    };
  }
  return { pools };
}
