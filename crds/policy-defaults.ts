/**
 * Policy defaults that both the schema (as `default:` values users see in `kubectl explain`) and
 * the sidecar's policy core use. Kept free of imports so the policy core can depend on it without
 * pulling in the schema library.
 */

/**
 * Prefix affinity keeps the sticky endpoint unless its measured time to first token exceeds this
 * multiple of the candidates' median (and AFFINITY_SLOWDOWN_MIN_MS above it). 2.5× is where a
 * cache hit (which saves the prefill of the shared prefix) stops paying for the queueing behind a
 * clearly slower endpoint.
 */
export const AFFINITY_MAX_SLOWDOWN = 2.5;

/**
 * Affinity's slowdown check passes an endpoint over only once its measured TTFT (the median of its
 * last five samples) rests on at least this many samples of its own: with fewer, a long prefill or
 * two is most of what the endpoint seems to be, and a conversation's home was passed over for it.
 */
export const AFFINITY_SLOWDOWN_MIN_SAMPLES = 5;

/**
 * Affinity's slowdown check also wants the endpoint this much slower than the median, not only
 * `maxSlowdown` times. A ratio alone fires on noise where TTFTs are a few milliseconds (a home at
 * 30 ms next to a median of 10 ms is "3× slower" for the prefill of one new conversation), and
 * each such pass sent a turn away from its KV cache: in the routing benchmark's conversations
 * scenario it was the main reason later turns left home (docs/routing-history.md). 100 ms is where a
 * user starts to notice, and less than one queue position on any server that streams (a 60-token
 * answer at 10 ms a token holds its slot 600 ms); a home that is really slow (seconds, the
 * slow-backend scenario) is far above it. SGLang's router pairs a relative and an absolute
 * threshold the same way for its load imbalance test.
 */
export const AFFINITY_SLOWDOWN_MIN_MS = 100;

/**
 * A verdict of affinity's slowdown check keeps the endpoint from getting the requests it is home
 * to, and with them the samples that would show it is fast again: it outlives its cause. An
 * endpoint judged slow still gets one of its homed requests — a recheck — when this sidecar has
 * nothing in flight there and its newest TTFT sample is at least this old. One second bounds what
 * a slow server gets this way to one request at a time, after a second without news of it, and
 * a server that is fast again clears its verdict within a few seconds (three fast samples move
 * the median of five). In the routing benchmark's conversations scenario, verdicts from the
 * router warm-up (long prompts, multi-second TTFTs) held for the whole replay: homes were passed
 * over to the end with nothing in flight there; the recheck keeps more later turns home (the
 * measurements: docs/routing-history.md).
 */
export const AFFINITY_SLOW_RECHECK_AFTER_MS = 1_000;

/**
 * Affinity keeps a request on its endpoint while that endpoint's load is at most this many
 * requests above the least loaded candidate, whatever the load bound says. Near idle the bound
 * (1.25 × the average) is one or two requests, and with a few conversations at a time two of them
 * often share a home: with 1 the second spilled and lost its KV cache; with 3 nearly every later
 * turn stayed home in the routing benchmark's conversations scenario. Under real load the bound
 * is the larger of the two and decides (docs/policy.md §3; the measurements:
 * docs/routing-history.md).
 */
export const AFFINITY_MAX_EXTRA_IN_FLIGHT = 3;

/**
 * Default of `health.consecutiveErrors`: a breaker opens after this many errors in a row,
 * whatever its window holds. The window's `minRequests` (20 in 10 s) keeps noise from ejecting an
 * endpoint, but a sidecar of one of many pods may never send an endpoint 20 requests in 10 s,
 * and an endpoint that fails at once holds nothing in flight, so it looks the least loaded and
 * gets first attempts over and over: with 16 sidecars on the routing benchmark's fast-failure
 * scenario it took several times its share of attempts (docs/routing-history.md). nginx's
 * `max_fails` and Envoy's `consecutive_5xx` count the same way; 5 is Envoy's default.
 */
export const HEALTH_CONSECUTIVE_ERRORS = 5;

/**
 * The load bound of affinity: an endpoint takes the requests it has affinity for while its load
 * is under this multiple of the candidates' average (consistent hashing with bounded loads). 1.25
 * is the factor of the original paper and of KubeAI's PrefixHash.
 */
export const AFFINITY_LOAD_FACTOR = 1.25;

/**
 * Default of `timeouts.clientStall`: how long a client's connection may stay full (the client
 * reads nothing) before the sidecar closes it and frees the upstream request. 60 s is nginx's
 * `send_timeout`, the bound proxies in front of model servers already apply; the sidecar also
 * uses it for a snapshot that has no value (one from an older controller).
 */
export const CLIENT_STALL_MS = 60_000;

/**
 * The part of an endpoint that sheddable requests leave free for higher priorities when a policy
 * does not say (`flowControl.saturation.sheddableHeadroom`, docs/flow-control.md).
 */
export const SHEDDABLE_HEADROOM = 0.2;

/**
 * The id of a pool's budget (flow control, issue 43): `pool` for the pool-wide one,
 * `workload:<value>` for a workload's; the key of shares, reports and metrics.
 */
export function budgetId(workload: string | undefined): string {
  return workload === undefined ? 'pool' : `workload:${workload}`;
}
