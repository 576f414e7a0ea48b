/**
 * Saturation (flow control, issue 43; docs/flow-control.md): whether an endpoint has room for one
 * more request now, or a request sent there would only wait in the server's own queue. A sidecar
 * that holds such a request in its own queue instead can order it by priority; the server cannot.
 */
import type { ReportedLoad } from './server-load.ts';
import type { SaturationRule } from './types.ts';

/**
 * True when the endpoint has no room:
 * - its server's fresh report (at most `maxAgeMs` old) shows the KV cache at or above
 *   `rule.kvCacheSaturation`;
 * - or no free slot of its largest batch seen is left (`ReportedLoad.freeSlots`, which counts the
 *   server's waiting queue and this sidecar's requests since the report);
 * - or, its batch unknown, the report shows requests waiting;
 * - or, with no fresh report and no batch known, this sidecar has `maxInFlightPerEndpoint`
 *   requests in flight there (unset: never saturated without reports).
 */
export function isSaturated(
  reported: ReportedLoad,
  inFlight: number,
  rule: SaturationRule,
  nowMs: number,
  maxAgeMs: number,
): boolean {
  const last = reported.last(nowMs, maxAgeMs);
  if (last?.kvCacheUsage !== undefined && last.kvCacheUsage >= rule.kvCacheSaturation) return true;
  const free = reported.freeSlots(inFlight, nowMs, maxAgeMs);
  if (free !== undefined) return free <= 0;
  if (last !== undefined && (last.waiting ?? 0) > 0) return true;
  if (last !== undefined && (last.running !== undefined || last.waiting !== undefined))
    return false;
  const limit = rule.maxInFlightPerEndpoint;
  return limit !== undefined && inFlight >= limit;
}
