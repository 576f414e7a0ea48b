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
 *   `rule.kvCacheSaturation` (× (1 − headroom));
 * - or no more than ceil(batch × headroom) free slots of its largest batch seen are left
 *   (`ReportedLoad.freeSlots`, which counts the server's waiting queue and this sidecar's
 *   requests since the report; without headroom: no free slot);
 * - or, its batch unknown, the report shows requests waiting;
 * - or, with no fresh report and no batch known, this sidecar has `maxInFlightPerEndpoint`
 *   (less its headroom) requests in flight there (unset: never saturated without reports).
 *
 * The headroom is what a sheddable request leaves free: batch work that fills every slot makes
 * an interactive request arriving a moment later wait for one of them to end, which for long
 * batch answers is seconds (docs/flow-control.md, "Saturation").
 */
export function isSaturated(
  reported: ReportedLoad,
  inFlight: number,
  rule: SaturationRule,
  nowMs: number,
  maxAgeMs: number,
): boolean {
  const headroom = rule.headroom ?? 0;
  const last = reported.last(nowMs, maxAgeMs);
  if (
    last?.kvCacheUsage !== undefined &&
    last.kvCacheUsage >= rule.kvCacheSaturation * (1 - headroom)
  )
    return true;
  const free = reported.freeSlots(inFlight, nowMs, maxAgeMs);
  // With a headroom, one request per fresh report: every sidecar sees the same free slots in
  // the same report, and each sending into them at once would queue the server (docs/flow-control.md).
  if (headroom > 0 && (reported.addedSinceReport(inFlight, nowMs, maxAgeMs) ?? 0) >= 1) return true;
  if (free !== undefined) return free <= reserved(reported.batch(nowMs) ?? 0, headroom);
  if (last !== undefined && (last.waiting ?? 0) > 0) return true;
  if (last !== undefined && (last.running !== undefined || last.waiting !== undefined))
    return false;
  const limit = rule.maxInFlightPerEndpoint;
  return limit !== undefined && inFlight >= limit - reserved(limit, headroom);
}

/** The slots of `size` a request with this headroom leaves free (at most all but none). */
function reserved(size: number, headroom: number): number {
  return headroom <= 0 ? 0 : Math.min(Math.ceil(size * headroom), Math.max(0, size - 1));
}
