/**
 * Fakes for tests of the policy core and of code built on it (the proxy shell's tests may use
 * them too): a clock the test moves by hand, an Rng that replays a script, and a complete
 * `PoolPolicy` with overridable fields. Not exported from index.ts: production never needs them.
 */
import type {
  AffinityPolicy,
  Clock,
  ColdStartPolicy,
  EndpointSpec,
  EndpointStatus,
  HealthPolicy,
  PoolPolicy,
  RetryPolicy,
  Rng,
} from './types.ts';

export interface FakeClock extends Clock {
  /** Moves time forward (or backward, for a negative `ms`). */
  advance(ms: number): void;
  set(ms: number): void;
}

export function fakeClock(startMs = 0): FakeClock {
  let t = startMs;
  return {
    nowMs: () => t,
    advance: (ms) => {
      t += ms;
    },
    set: (ms) => {
      t = ms;
    },
  };
}

export interface ScriptedRng extends Rng {
  /** How many values were drawn so far. */
  readonly drawn: number;
}

/**
 * Replays `values` in order and throws once they are used up, so a test notices when the code
 * draws more (or other) random numbers than the test expects.
 */
export function scriptedRng(values: readonly number[]): ScriptedRng {
  let i = 0;
  return {
    next(): number {
      if (i >= values.length) throw new Error(`scriptedRng: script of ${values.length} used up`);
      return values[i++] as number;
    },
    get drawn(): number {
      return i;
    },
  };
}

export interface PolicyOverrides extends Partial<
  Omit<PoolPolicy, 'affinity' | 'health' | 'retry' | 'coldStart'>
> {
  affinity?: Partial<AffinityPolicy>;
  health?: Partial<HealthPolicy>;
  retry?: Partial<RetryPolicy>;
  coldStart?: Partial<ColdStartPolicy>;
}

/** A plausible resolved policy (the design's example values), with `overrides` applied. */
export function testPolicy(overrides: PolicyOverrides = {}): PoolPolicy {
  return {
    mode: overrides.mode ?? 'Balance',
    costWeightPerMs: overrides.costWeightPerMs,
    defaultTtftMs: overrides.defaultTtftMs ?? 500,
    models: overrides.models ?? [],
    affinity: {
      key: 'None',
      header: 'x-session-id',
      prefixChars: 4096,
      maxSlowdown: 2.5,
      ...overrides.affinity,
    },
    health: {
      windowMs: 10_000,
      minRequests: 20,
      maxErrorRate: 0.5,
      max429Rate: 0.3,
      maxTtftSlowdown: 3,
      openForMs: 30_000,
      maxOpenForMs: 300_000,
      ...overrides.health,
    },
    retry: { budgetPercent: 20, minPerSecond: 10, maxAttempts: 3, ...overrides.retry },
    coldStart: { idleAfterMs: 60_000, ...overrides.coldStart },
  };
}

/** An endpoint spec with id `id`, backend and tier derived or overridden. */
export function endpoint(id: string, overrides: Partial<EndpointSpec> = {}): EndpointSpec {
  return {
    id,
    backend: overrides.backend ?? `backend-${overrides.tier ?? 0}`,
    tier: 0,
    url: `http://${id}/v1`,
    costPerMTok: 0,
    ...overrides,
  };
}

/** The fields `Balancer.gauges()` reads, picked out of `status()`: what the two must agree on. */
export const gaugesOf = (statuses: readonly EndpointStatus[]) =>
  statuses.map(({ id, backend, inFlight, ewmaTtftMs, breaker, drifted }) => ({
    id,
    backend,
    inFlight,
    ewmaTtftMs,
    breaker,
    drifted,
  }));

/** The fields `Balancer.health()` reads (a report to the controller), picked out of `status()`. */
export const healthOf = (statuses: readonly EndpointStatus[]) =>
  statuses.map(({ id, breaker, inFlight, ewmaTtftMs, driftMismatches, window }) => ({
    id,
    breaker,
    inFlight,
    ewmaTtftMs,
    driftMismatches,
    window,
  }));
