/**
 * Fakes for tests of the policy core and of code built on it (the proxy shell's tests may use
 * them too): a clock the test moves by hand, an Rng that replays a script, a complete
 * `PoolPolicy` with overridable fields, and a Balancer set up on them with the helpers its tests
 * share (`setupBalancer`). Not exported from index.ts: production never needs them.
 */
import { Balancer } from './balancer.ts';
import { seededRng } from './rng.ts';
import type {
  AffinityPolicy,
  Attempt,
  Clock,
  ColdStartPolicy,
  EndpointSpec,
  EndpointStatus,
  HealthPolicy,
  Outcome,
  PickRequest,
  PickResult,
  PolicyEvent,
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
      // Off here (the default is 5): most tests open a breaker by the window's rates, and a
      // test of the run of errors in a row asks for it.
      consecutiveErrors: 0,
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

export type Picked = Extract<PickResult, { kind: 'picked' }>;

/** An Rng that always draws the middle: open periods are exactly openForMs · 2^k. */
export const middleRng = (): Rng => ({ next: () => 0.5 });

export const OK: Outcome = { kind: 'success', streamed: true };
export const ERROR: Outcome = { kind: 'error' };
export const LIMITED: Outcome = { kind: 'rate-limited' };
export const NEUTRAL: Outcome = { kind: 'neutral' };

export function picked(result: PickResult): Picked {
  if (result.kind !== 'picked') throw new Error(`expected a pick, got ${JSON.stringify(result)}`);
  return result;
}

export function shedAfter(result: PickResult): number {
  if (result.kind !== 'shed') throw new Error(`expected a shed, got ${JSON.stringify(result)}`);
  return result.retryAfterMs;
}

/**
 * Streamed successes on `id` whose first token took `ttftMs`, until one is a TTFT sample of this
 * sidecar's own (a newcomer's first is dropped as a cold start). Reported speeds count only as far
 * as such samples support them (server-speed.ts).
 */
export function measureTtft(
  balancer: Balancer,
  clock: FakeClock,
  id: string,
  ttftMs: number,
): void {
  const samplesOf = () => balancer.status().find((s) => s.id === id)?.measuredTtft?.samples ?? 0;
  const before = samplesOf();
  const others = new Set(balancer.status().map((s) => s.id));
  others.delete(id);
  for (let tries = 0; tries < 2 && samplesOf() === before; tries++) {
    const attempt = picked(balancer.pick({ exclude: others })).attempt;
    if (attempt.endpoint.id !== id) throw new Error(`picked ${attempt.endpoint.id}, not ${id}`);
    clock.advance(ttftMs);
    balancer.firstByte(attempt, true);
    balancer.finish(attempt, OK);
  }
}

export interface SetupOptions {
  policy?: PolicyOverrides;
  endpoints?: EndpointSpec[];
  rng?: Rng;
}

/**
 * A Balancer on a fake clock, with the helpers the balancer's tests drive it by: the events it
 * emitted, an endpoint's status, a pick forced onto one endpoint, one served attempt, an update.
 */
export function setupBalancer(options: SetupOptions = {}) {
  const clock = fakeClock();
  const events: PolicyEvent[] = [];
  let specs = options.endpoints ?? [endpoint('a'), endpoint('b'), endpoint('c')];
  let policy = testPolicy(options.policy);
  const balancer = new Balancer(policy, specs, {
    clock,
    rng: options.rng ?? seededRng(1),
    onEvent: (e) => events.push(e),
  });
  const statusOf = (id: string) => {
    const s = balancer.status().find((x) => x.id === id);
    if (s === undefined) throw new Error(`no status for ${id}`);
    return s;
  };
  /** Picks `id` by excluding every other endpoint. */
  const pickOn = (id: string, request: PickRequest = {}): Attempt => {
    const exclude = new Set(specs.map((s) => s.id).filter((x) => x !== id));
    const result = picked(balancer.pick({ ...request, exclude }));
    if (result.attempt.endpoint.id !== id) {
      throw new Error(`picked ${result.attempt.endpoint.id}, not ${id}`);
    }
    return result.attempt;
  };
  /** One attempt on `id`: first byte after `ttftMs` (if given), then `outcome`. */
  const serve = (id: string, outcome: Outcome, ttftMs?: number): Attempt => {
    const attempt = pickOn(id);
    if (ttftMs !== undefined) {
      clock.advance(ttftMs);
      balancer.firstByte(attempt);
    }
    balancer.finish(attempt, outcome);
    return attempt;
  };
  const repeat = (n: number, id: string, outcome: Outcome, ttftMs?: number) => {
    for (let i = 0; i < n; i++) serve(id, outcome, ttftMs);
  };
  const update = (overrides: PolicyOverrides, endpoints: EndpointSpec[]) => {
    specs = endpoints;
    policy = testPolicy(overrides);
    balancer.update(policy, endpoints);
  };
  const breakerEvents = () =>
    events.filter((e): e is Extract<PolicyEvent, { kind: 'breaker' }> => e.kind === 'breaker');
  return { clock, events, balancer, statusOf, pickOn, serve, repeat, update, breakerEvents };
}
