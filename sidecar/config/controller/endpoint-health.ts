import type { EndpointHealthReport } from '../../../crds/snapshot.ts';
import type { EndpointHealth } from '../../policy/index.ts';

/**
 * The per-endpoint part of a `SidecarReport`, from the balancer's `health()` (or its `status()`,
 * of which those are fields): breaker state, error and 429 rates in the current health window,
 * EWMA TTFT, in-flight count and drift mismatches.
 */
export function endpointHealth(status: readonly EndpointHealth[]): EndpointHealthReport[] {
  return status.map((s) => {
    const { requests, errors, rateLimited } = s.window;
    return {
      id: s.id,
      breaker: s.breaker,
      errorRate: requests > 0 ? Math.min(1, errors / requests) : 0,
      rateLimitRate: requests > 0 ? Math.min(1, rateLimited / requests) : 0,
      ewmaTtftMs: Number.isFinite(s.ewmaTtftMs) ? Math.max(0, s.ewmaTtftMs) : 0,
      inFlight: Math.max(0, Math.trunc(s.inFlight)),
      ...(s.driftMismatches > 0 ? { driftMismatches: s.driftMismatches } : {}),
    };
  });
}
