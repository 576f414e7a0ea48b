/**
 * Policy defaults that both the schema (as `default:` values users see in `kubectl explain`) and
 * the sidecar's policy core use. Kept free of imports so the policy core can depend on it without
 * pulling in the schema library.
 */

/**
 * Prefix affinity keeps the sticky endpoint unless its EWMA time to first token exceeds this
 * multiple of the pool median. 2.5× is where a cache hit (which saves the prefill of the shared
 * prefix) stops paying for the queueing behind a clearly slower endpoint.
 */
export const AFFINITY_MAX_SLOWDOWN = 2.5;

/**
 * Prefix affinity also gives up the sticky endpoint when it has more than this many requests in
 * flight (from this sidecar) beyond the least busy candidate: a cache hit saves the prefill of the
 * shared prefix, but not a wait in the queue behind the requests that followed the same key
 * there. 1 is what the routing benchmark found best on the Mooncake trace (docs/benchmarks.md).
 */
export const AFFINITY_MAX_EXTRA_IN_FLIGHT = 1;

/**
 * The load bound of affinity: an endpoint takes the requests it has affinity for while its load
 * is under this multiple of the candidates' average (consistent hashing with bounded loads). 1.25
 * is the factor of the original paper and of KubeAI's PrefixHash.
 */
export const AFFINITY_LOAD_FACTOR = 1.25;
