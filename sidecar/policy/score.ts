/**
 * The P2C score of an endpoint: lower is better.
 *
 *   score = (inFlight + 1) · ewmaTtftMs + costPerMTok / costWeightPerMs
 *
 * The first term estimates how long a new request would wait for its first token: the requests
 * ahead of it plus itself, times the observed TTFT (linkerd's `rtt · (pending + 1)`). The second
 * converts price into milliseconds with the pool's exchange rate, so "0.40 $/Mtok cheaper" can
 * outweigh "80 ms slower" when the operator says it should.
 */

/**
 * How fast an idle endpoint's score fades: by e per 10 s without anything of this sidecar's in
 * flight there (linkerd's default for its Peak-EWMA, whose latency estimate decays toward 0 the
 * same way between samples). The balancer multiplies the score by `idleFade` (docs/policy.md §4,
 * "Idle fade"). Without it an endpoint is sampled only while it wins picks, so under light load
 * (every endpoint idle at each pick, the tie going to two random choices on the score) the
 * slowest of three never wins a pair and never gets the sample that would show it has recovered.
 * Faded, its score drops below a peer's after about `ln(ratio of the scores)` × 10 s idle, one
 * request goes there, and the fresh sample restores it. The whole score fades, the cost term
 * included, so that equally idle endpoints keep the pool's exchange rate between them and an
 * expensive one is tried again too.
 */
export const IDLE_FADE_MS = 10_000;

/**
 * The factor an endpoint idle for `idleForMs` has its score multiplied by: e^(−idle / 10 s)
 * (IDLE_FADE_MS); 1 for no idleness, a negative one (a clock gone back) or NaN.
 */
export function idleFade(idleForMs: number): number {
  return idleForMs > 0 ? Math.exp(-idleForMs / IDLE_FADE_MS) : 1;
}

/**
 * The inputs of a score; `EndpointStatus` has these fields. The balancer multiplies the score of
 * an endpoint idle from its view by `idleFade`, which the status does not show.
 */
export interface ScoreInputs {
  inFlight: number;
  ewmaTtftMs: number;
  costPerMTok: number;
}

/**
 * The cost term is 0 (pure latency routing) when `costWeightPerMs` is undefined, and also when
 * it is 0, negative or non-finite: dividing by those would give Infinity or negative
 * milliseconds, and Infinity is documented as "pure latency" anyway. A missing or negative price
 * counts as 0.
 */
export function costTermMs(costPerMTok: number, costWeightPerMs: number | undefined): number {
  if (costWeightPerMs === undefined || !Number.isFinite(costWeightPerMs) || costWeightPerMs <= 0) {
    return 0;
  }
  if (!Number.isFinite(costPerMTok) || costPerMTok <= 0) return 0;
  return costPerMTok / costWeightPerMs;
}

export function score(endpoint: ScoreInputs, costWeightPerMs: number | undefined): number {
  const queue = Math.max(0, endpoint.inFlight) + 1;
  return queue * endpoint.ewmaTtftMs + costTermMs(endpoint.costPerMTok, costWeightPerMs);
}
