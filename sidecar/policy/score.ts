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

/** The inputs of a score; `EndpointStatus` has these fields. */
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
