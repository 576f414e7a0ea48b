/**
 * What the outside reads of a pool's endpoints (`/debug/backends`, metrics gauges, the health
 * report to the controller, a pick's trace), as functions of their state (endpoint-pool.ts) and
 * the pool's EWMAs. Pure readings: the balancer advances the breakers and finds the slow endpoints
 * before it asks, so a view changes nothing.
 */
import { isDrifted, loadOf, type EndpointState } from './endpoint-pool.ts';
import type { TtftEwmas } from './ewma.ts';
import { slowdownAgainstPeers, trustedSlowdownAgainstPeers } from './server-speed.ts';
import type { EndpointGauges, EndpointHealth, EndpointReading, EndpointStatus } from './types.ts';

/** The pool-wide state a view reads beside the endpoint's own. */
export interface ViewContext {
  readonly ewma: TtftEwmas;
  /** How old a server's load report may be and still count. */
  readonly reportMaxAgeMs: number;
}

/** What a status read works out once for all endpoints (`statusOf`). */
export interface StatusContext extends ViewContext {
  /** The endpoints slow next to their peers (slow-detection.ts). */
  readonly slow: ReadonlySet<EndpointState>;
  /** `reportedSlowdowns(…, 'as reported')` of the pool, or undefined when none reports a speed. */
  readonly slowdowns: ((s: EndpointState) => number) | undefined;
}

/**
 * Each endpoint's reported slowdown per token next to the others in `endpoints` (server-speed.ts;
 * 1: none), or undefined when none of them reports a speed, so the pick does no speed work at all.
 * Status shows what the servers say ('as reported'); the pick weighs what this sidecar's samples
 * support ('as trusted').
 */
export function reportedSlowdowns(
  endpoints: readonly EndpointState[],
  now: number,
  context: ViewContext,
  view: 'as reported' | 'as trusted',
): ((s: EndpointState) => number) | undefined {
  const latencyOf = (s: EndpointState): number | undefined =>
    s.reported.interTokenLatencyMs(now, context.reportMaxAgeMs);
  const latencies = endpoints.map(latencyOf);
  // No server reports its speed (scraping off, external providers): nothing to weigh.
  if (latencies.every((v) => v === undefined)) return undefined;
  if (view === 'as reported') {
    const reportedOf = slowdownAgainstPeers(latencies);
    return (s) => reportedOf(latencyOf(s));
  }
  // A report counts only as far as this sidecar's own TTFTs support it (server-speed.ts,
  // trustedSlowdown): one server's word must not outweigh what was measured.
  const measuredOf = (s: EndpointState): number | undefined => context.ewma.measured(s.id)?.ms;
  // O(n) once, O(1) a question (server-speed.ts): the step below asks for every candidate.
  const slowdownOf = trustedSlowdownAgainstPeers(latencies, endpoints.map(measuredOf));
  return (s) => slowdownOf(latencyOf(s), measuredOf(s));
}

/** What `statusOf` reads of the pool, worked out once for all of `endpoints`. */
export function statusContext(
  endpoints: readonly EndpointState[],
  now: number,
  context: ViewContext,
  slow: ReadonlySet<EndpointState>,
): StatusContext {
  const slowdowns = reportedSlowdowns(endpoints, now, context, 'as reported');
  return { ...context, slow, slowdowns };
}

/** One endpoint's row of `/debug/backends` (`PoolBalancer.status`). */
export function statusOf(s: EndpointState, now: number, context: StatusContext): EndpointStatus {
  const { ewma, reportMaxAgeMs, slowdowns } = context;
  const window = s.window.totals(now);
  const reportsSpeed = s.reported.interTokenLatencyMs(now, reportMaxAgeMs) !== undefined;
  const reported = s.reported.last(now, reportMaxAgeMs);
  const measured = ewma.measured(s.id);
  return {
    id: s.id,
    backend: s.spec.backend,
    url: s.spec.url,
    tier: s.spec.tier,
    inFlight: s.inFlight,
    load: loadOf(s, now, reportMaxAgeMs),
    ...(reported === undefined ? {} : { reported }),
    ewmaTtftMs: ewma.valueMs(s.id),
    ewmaSeeded: !ewma.hasSamples(s.id),
    ...(measured === undefined
      ? {}
      : { measuredTtft: { ms: measured.ms, samples: measured.samples } }),
    ...(Number.isFinite(s.lastTtftSampleAtMs)
      ? { lastTtftSampleAgeMs: Math.max(0, now - s.lastTtftSampleAtMs) }
      : {}),
    ...(slowdowns !== undefined && reportsSpeed ? { reportedSlowdown: slowdowns(s) } : {}),
    breaker: s.breaker.state,
    slow: context.slow.has(s),
    drifted: isDrifted(s.spec),
    ...(s.spec.probe === undefined ? {} : { fingerprint: s.spec.probe.fingerprint }),
    driftMismatches: s.driftMismatches,
    requests: s.requests,
    errors: s.errors,
    rateLimited: s.rateLimited,
    consecutiveErrors: s.errorStreak,
    window: {
      requests: window.requests,
      errors: window.errors,
      rateLimited: window.rateLimited,
    },
    costPerMTok: s.spec.costPerMTok,
  };
}

/** The metric gauges' fields of `statusOf`, the same values, without the rest. */
export function gaugesOf(s: EndpointState, ewma: TtftEwmas): EndpointGauges {
  return {
    id: s.id,
    backend: s.spec.backend,
    inFlight: s.inFlight,
    ewmaTtftMs: ewma.valueMs(s.id),
    breaker: s.breaker.state,
    drifted: isDrifted(s.spec),
  };
}

/** The fields of `statusOf` a report to the controller carries, the same values. */
export function healthOf(s: EndpointState, now: number, ewma: TtftEwmas): EndpointHealth {
  const window = s.window.totals(now);
  return {
    id: s.id,
    breaker: s.breaker.state,
    inFlight: s.inFlight,
    ewmaTtftMs: ewma.valueMs(s.id),
    driftMismatches: s.driftMismatches,
    window: {
      requests: window.requests,
      errors: window.errors,
      rateLimited: window.rateLimited,
    },
  };
}

/** The part of an endpoint's standing a pick weighed, for a trace of why it was picked. */
export function readingOf(s: EndpointState, now: number, context: ViewContext): EndpointReading {
  return {
    breaker: s.breaker.state,
    ewmaTtftMs: context.ewma.valueMs(s.id),
    ewmaSeeded: !context.ewma.hasSamples(s.id),
    load: loadOf(s, now, context.reportMaxAgeMs),
    inFlight: s.inFlight,
  };
}

/** When the endpoint can take a request again: its breaker's period and its cooldown, past. */
export function readyAtMs(s: EndpointState, now: number): number {
  return Math.max(s.breaker.availableAtMs(now), s.cooldownUntilMs);
}

/**
 * How long until the soonest of `endpoints` (not drifted, not excluded, serving the request's
 * model when `serves` is given) that is out now comes back, for a shed's Retry-After; undefined
 * when none has a known time of return.
 */
export function soonestReturnMs(
  endpoints: readonly EndpointState[],
  now: number,
  exclude: ReadonlySet<string> | undefined,
  serves?: (s: EndpointState) => boolean,
): number | undefined {
  let soonest = Infinity;
  for (const state of endpoints) {
    if (state.spec.drifted === true || (exclude?.has(state.id) ?? false)) continue;
    if (serves !== undefined && !serves(state)) continue; // another model's endpoint
    const readyAt = readyAtMs(state, now);
    if (readyAt > now && readyAt < soonest) soonest = readyAt;
  }
  return Number.isFinite(soonest) ? soonest - now : undefined;
}
