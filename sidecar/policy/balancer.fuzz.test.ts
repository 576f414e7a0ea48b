/**
 * Fuzzing the policy core with the inputs the shell cannot vouch for: a clock that jumps (forward
 * by days, backwards, to NaN or ±Infinity), Retry-After values that are NaN, infinite, negative
 * or huge, an Rng that returns values outside [0, 1), attempts finished twice or never, and pools
 * of zero, one and a thousand endpoints. `balancer.property.test.ts` checks what a pick must be;
 * this checks that nothing breaks whatever the inputs, and that the balancer recovers once time
 * is sane again.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { Balancer, MAX_RETRY_AFTER_COOLDOWN_MS } from './balancer.ts';
import { endpoint, testPolicy } from './testing.ts';
import type { Attempt, Clock, EndpointSpec, Outcome, Rng } from './types.ts';

const WEIRD_NUMBERS = [Number.NaN, Infinity, -Infinity, -1, 0, -0, 1e308, Number.MAX_SAFE_INTEGER];

/** Clock moves: small and huge steps both ways, and readings no real clock gives. */
const clockMove = fc.oneof(
  fc.record({ kind: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 120_000 }) }),
  fc.record({
    kind: fc.constant('advance' as const),
    ms: fc.integer({ min: -3_600_000, max: -1 }),
  }),
  fc.record({ kind: fc.constant('advance' as const), ms: fc.constantFrom(86_400_000, 1e12) }),
  fc.record({ kind: fc.constant('set' as const), ms: fc.constantFrom(...WEIRD_NUMBERS) }),
);

const retryAfter = fc.option(
  fc.oneof(fc.constantFrom(...WEIRD_NUMBERS, 60_001, 3_600_000), fc.double()),
  { nil: undefined },
);

const outcome: fc.Arbitrary<Outcome> = fc.oneof(
  fc.record({ kind: fc.constant('success' as const), streamed: fc.boolean() }),
  fc.constant({ kind: 'error' as const }),
  fc.record({ kind: fc.constant('rate-limited' as const), retryAfterMs: retryAfter }),
  fc.constant({ kind: 'neutral' as const }),
);

type Op =
  | { op: 'pick'; key: string | undefined; excludeFirst: boolean }
  | { op: 'firstByte'; index: number; firstToken: boolean }
  | { op: 'finish'; index: number; outcome: Outcome }
  | { op: 'clock'; move: ClockMove }
  | { op: 'retry'; attempts: number }
  | { op: 'update'; keep: number };

type ClockMove = { kind: 'advance' | 'set'; ms: number };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.record({
      op: fc.constant('pick' as const),
      key: fc.option(fc.constantFrom('k1', 'k2', 'x'.repeat(100)), { nil: undefined }),
      excludeFirst: fc.boolean(),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      op: fc.constant('firstByte' as const),
      index: fc.nat(),
      firstToken: fc.boolean(),
    }),
  },
  {
    weight: 5,
    arbitrary: fc.record({ op: fc.constant('finish' as const), index: fc.nat(), outcome }),
  },
  { weight: 3, arbitrary: fc.record({ op: fc.constant('clock' as const), move: clockMove }) },
  {
    weight: 1,
    arbitrary: fc.record({
      op: fc.constant('retry' as const),
      attempts: fc.oneof(fc.integer({ min: -1, max: 12 }), fc.constantFrom(NaN, Infinity)),
    }),
  },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('update' as const), keep: fc.nat() }) },
);

/** Draws replayed from a script that may hold NaN, 1, negatives and values above 1. */
const rngScript = fc.array(
  fc.oneof(
    { weight: 6, arbitrary: fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }) },
    { weight: 1, arbitrary: fc.constantFrom(Number.NaN, 1, -0.5, 1.5, Infinity, -Infinity) },
  ),
  { minLength: 1, maxLength: 64 },
);

function looping(script: readonly number[]): Rng {
  let i = 0;
  return { next: () => script[i++ % script.length]! };
}

function specs(count: number): EndpointSpec[] {
  return Array.from({ length: count }, (_, i) =>
    endpoint(`e${i}`, { tier: i % 3, costPerMTok: (i % 5) * 0.5 }),
  );
}

interface Open {
  attempt: Attempt;
  finished: boolean;
}

/** Runs `ops` and checks the invariants after every one of them. */
function run(count: number, mode: 'Balance' | 'Failover', script: number[], ops: Op[]): void {
  let t = 1_000;
  const clock: Clock = { nowMs: () => t };
  let maxFinite = t;
  const policy = testPolicy({
    mode,
    affinity: { key: 'Header' },
    health: { minRequests: 2, openForMs: 1_000, maxOpenForMs: 8_000, windowMs: 5_000 },
  });
  let current = specs(count);
  const balancer = new Balancer(policy, current, { clock, rng: looping(script) });
  const open: Open[] = [];
  const ids = (): Set<string> => new Set(current.map((s) => s.id));

  const check = (): void => {
    const live = ids();
    for (const s of balancer.status()) {
      assert.ok(live.has(s.id), `status shows ${s.id}, not in the pool`);
      const mine = open.filter((o) => !o.finished && o.attempt.endpoint.id === s.id).length;
      assert.ok(s.inFlight >= 0 && s.inFlight <= mine, `inFlight of ${s.id}: ${s.inFlight}`);
      assert.ok(Number.isFinite(s.ewmaTtftMs) && s.ewmaTtftMs > 0, `ewma ${s.ewmaTtftMs}`);
      for (const v of [s.requests, s.errors, s.rateLimited, ...Object.values(s.window)])
        assert.ok(Number.isFinite(v) && v >= 0);
      assert.ok(s.window.requests >= s.window.errors + s.window.rateLimited);
      assert.ok(['closed', 'open', 'half-open'].includes(s.breaker));
    }
  };

  for (const op of ops) {
    if (op.op === 'clock') {
      t = op.move.kind === 'set' ? op.move.ms : t + op.move.ms;
      if (Number.isFinite(t)) maxFinite = Math.max(maxFinite, t);
    } else if (op.op === 'pick') {
      const exclude =
        op.excludeFirst && current[0] !== undefined ? new Set([current[0].id]) : undefined;
      const result = balancer.pick({ affinityKey: op.key, exclude });
      if (result.kind === 'shed') {
        assert.ok(Number.isFinite(result.retryAfterMs) && result.retryAfterMs > 0);
      } else {
        assert.ok(ids().has(result.attempt.endpoint.id), 'a pick is an endpoint of the pool');
        assert.ok(exclude === undefined || !exclude.has(result.attempt.endpoint.id));
        open.push({ attempt: result.attempt, finished: false });
      }
    } else if (op.op === 'firstByte' && open.length > 0) {
      balancer.firstByte(open[op.index % open.length]!.attempt, op.firstToken);
    } else if (op.op === 'finish' && open.length > 0) {
      const o = open[op.index % open.length]!;
      balancer.finish(o.attempt, op.outcome); // twice for some: the second must change nothing
      o.finished = true;
    } else if (op.op === 'retry') {
      const decision = balancer.tryRetry(op.attempts);
      assert.ok(['retry', 'max-attempts', 'budget-exhausted'].includes(decision.kind));
    } else if (op.op === 'update') {
      current = specs(count).filter((_, i) => count <= 1 || (i + op.keep) % 4 !== 0);
      balancer.update(policy, current);
    }
    check();
  }

  // Recovery: every attempt ends, time goes past every open period and cooldown from the latest
  // finite reading, and then every endpoint of the pool is pickable again.
  for (const o of open) balancer.finish(o.attempt, { kind: 'success', streamed: false });
  t = maxFinite + 8_000 + MAX_RETRY_AFTER_COOLDOWN_MS + 1;
  const seen = new Set<string>();
  for (let i = 0; i < current.length * 4 + 4 && seen.size < current.length; i++) {
    const result = balancer.pick({ exclude: seen });
    if (result.kind === 'shed') break;
    seen.add(result.attempt.endpoint.id);
    balancer.finish(result.attempt, { kind: 'success', streamed: false });
  }
  assert.equal(seen.size, current.length, `pickable again: ${seen.size} of ${current.length}`);
}

describe('Balancer under hostile inputs', () => {
  test('with 0, 1 or a few endpoints: no throw, sane state, full recovery', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(0, 1, 2, 3, 7),
        fc.constantFrom<'Balance' | 'Failover'>('Balance', 'Failover'),
        rngScript,
        fc.array(opArb, { minLength: 10, maxLength: 200, size: 'max' }),
        (count, mode, script, ops) => run(count, mode, script, ops),
      ),
      { numRuns: 1000 },
    );
  });

  test('with 1,000 endpoints', () => {
    fc.assert(
      fc.property(
        fc.constantFrom<'Balance' | 'Failover'>('Balance', 'Failover'),
        rngScript,
        fc.array(opArb, { minLength: 10, maxLength: 80, size: 'max' }),
        (mode, script, ops) => run(1_000, mode, script, ops),
      ),
      { numRuns: 15 },
    );
  });

  test('a clock that jumps back an hour keeps breakers and cooldowns bounded by the latest reading', () => {
    let t = 10_000_000;
    const balancer = new Balancer(
      testPolicy({ health: { minRequests: 1, openForMs: 1_000, maxOpenForMs: 1_000 } }),
      [endpoint('a')],
      { clock: { nowMs: () => t }, rng: looping([0.5]) },
    );
    const first = balancer.pick({});
    assert.equal(first.kind, 'picked');
    balancer.finish(first.attempt, { kind: 'rate-limited', retryAfterMs: Infinity });
    t -= 3_600_000;
    assert.equal(balancer.pick({}).kind, 'shed', 'still cooling down');
    t += 3_600_000 + MAX_RETRY_AFTER_COOLDOWN_MS + 1;
    assert.equal(balancer.pick({}).kind, 'picked', 'back a minute after the latest reading');
  });
});
