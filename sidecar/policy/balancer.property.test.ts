/**
 * Model-based property tests: random pools and random sequences of pick / firstByte / finish /
 * clock moves / updates, checked against a small independent model of what a candidate is.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { Balancer } from './balancer.ts';
import { tripReason } from './breaker.ts';
import { median } from './median.ts';
import { seededRng } from './rng.ts';
import { endpoint, fakeClock, gaugesOf, healthOf, testPolicy } from './testing.ts';
import type {
  Attempt,
  EndpointSpec,
  EndpointStatus,
  HealthPolicy,
  Mode,
  Outcome,
  PolicyEvent,
} from './types.ts';

const IDS = ['e0', 'e1', 'e2', 'e3', 'e4', 'e5'];

const outcomeArb: fc.Arbitrary<Outcome> = fc.oneof(
  fc.record({ kind: fc.constant('success' as const), streamed: fc.boolean() }),
  fc.constant({ kind: 'error' as const }),
  fc.record({
    kind: fc.constant('rate-limited' as const),
    retryAfterMs: fc.option(
      fc.oneof(fc.integer({ min: -10, max: 90_000 }), fc.constant(Number.NaN)),
      {
        nil: undefined,
      },
    ),
  }),
  fc.constant({ kind: 'neutral' as const }),
);

type Op =
  | { op: 'pick'; exclude: string[]; key: string | undefined }
  | { op: 'firstByte'; index: number; firstToken: boolean }
  | { op: 'finish'; index: number; outcome: Outcome }
  | { op: 'advance'; ms: number }
  | { op: 'update'; present: boolean[]; drifted: boolean[] };

/** The clock moves on by up to `maxMs`. */
const advanceArb = (maxMs: number) =>
  fc.record({ op: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: maxMs }) });

/** A pool update: which of the six endpoints are present, and which are drifted. */
const updateArb = fc.record({
  op: fc.constant('update' as const),
  present: fc.array(fc.boolean(), { minLength: 6, maxLength: 6 }),
  drifted: fc.array(fc.boolean(), { minLength: 6, maxLength: 6 }),
});

const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({
      op: fc.constant('pick' as const),
      exclude: fc.subarray(IDS, { maxLength: 3 }),
      key: fc.option(fc.constantFrom('k1', 'k2', 'k3'), { nil: undefined }),
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
    weight: 4,
    arbitrary: fc.record({
      op: fc.constant('finish' as const),
      index: fc.nat(),
      outcome: outcomeArb,
    }),
  },
  { weight: 2, arbitrary: advanceArb(8_000) },
  { weight: 1, arbitrary: updateArb },
);

const scenarioArb = fc.record({
  mode: fc.constantFrom<Mode>('Balance', 'Failover'),
  tiers: fc.array(fc.integer({ min: 0, max: 2 }), { minLength: 6, maxLength: 6 }),
  present: fc.array(fc.boolean(), { minLength: 6, maxLength: 6 }),
  drifted: fc.array(fc.boolean(), { minLength: 6, maxLength: 6 }),
  minRequests: fc.integer({ min: 1, max: 4 }),
  seed: fc.integer(),
  ops: fc.array(opArb, { minLength: 20, maxLength: 150, size: 'max' }),
});

interface ModelAttempt {
  attempt: Attempt;
  /** The endpoint state generation the attempt belongs to; a removed id starts a new one. */
  generation: number;
  finished: boolean;
}

/** The endpoints of IDS that are present, each with its tier and drift flag. */
function specsOf(tiers: number[], present: boolean[], drifted: boolean[]): EndpointSpec[] {
  return IDS.flatMap((id, i) =>
    present[i] ? [endpoint(id, { tier: tiers[i]!, drifted: drifted[i]! })] : [],
  );
}

describe('Balancer properties', () => {
  test('a pick is always a live candidate of the right tier; a shed means there was none', () => {
    fc.assert(
      fc.property(scenarioArb, (s) => {
        const clock = fakeClock(1_000);
        const specsFor = (present: boolean[], drifted: boolean[]) =>
          specsOf(s.tiers, present, drifted);
        const policy = testPolicy({
          mode: s.mode,
          affinity: { key: 'Header' },
          health: {
            minRequests: s.minRequests,
            openForMs: 2_000,
            maxOpenForMs: 10_000,
            maxTtftSlowdown: 2,
          },
          coldStart: { idleAfterMs: 5_000 },
        });
        let specs = specsFor(s.present, s.drifted);
        const events: PolicyEvent[] = [];
        const balancer = new Balancer(policy, specs, {
          clock,
          rng: seededRng(s.seed),
          onEvent: (e) => events.push(e),
        });

        const attempts: ModelAttempt[] = [];
        const generation = new Map<string, number>();
        let nextGeneration = 0;
        const cooldownUntil = new Map<string, number>();
        for (const spec of specs) generation.set(spec.id, nextGeneration++);

        const current = (a: ModelAttempt) => generation.get(a.attempt.endpoint.id) === a.generation;

        for (const op of s.ops) {
          if (op.op === 'advance') clock.advance(op.ms);
          else if (op.op === 'update') {
            const next = specsFor(op.present, op.drifted);
            for (const spec of specs) {
              if (!next.some((n) => n.id === spec.id)) {
                generation.delete(spec.id);
                cooldownUntil.delete(spec.id);
              }
            }
            for (const spec of next)
              if (!generation.has(spec.id)) generation.set(spec.id, nextGeneration++);
            specs = next;
            balancer.update(policy, specs);
          } else if (op.op === 'firstByte' && attempts.length > 0) {
            balancer.firstByte(attempts[op.index % attempts.length]!.attempt, op.firstToken);
          } else if (op.op === 'finish' && attempts.length > 0) {
            const a = attempts[op.index % attempts.length]!;
            events.length = 0;
            balancer.finish(a.attempt, op.outcome);
            // The clock has not moved since the last status(): no other breaker moved since.
            if (!a.finished && current(a))
              checkVerdict(balancer, events, a.attempt.endpoint.id, s.mode, policy.health);
            const ra = op.outcome.kind === 'rate-limited' ? op.outcome.retryAfterMs : undefined;
            if (!a.finished && current(a) && ra !== undefined && ra > 0) {
              const id = a.attempt.endpoint.id;
              const until = clock.nowMs() + Math.min(ra, 60_000);
              cooldownUntil.set(id, Math.max(cooldownUntil.get(id) ?? -Infinity, until));
            }
            a.finished = true;
          } else if (op.op === 'pick') {
            const now = clock.nowMs();
            const status = balancer.status();
            const exclude = new Set(op.exclude);
            const live = status.filter((e) => {
              if (e.drifted || exclude.has(e.id)) return false;
              if ((cooldownUntil.get(e.id) ?? -Infinity) > now) return false;
              if (e.breaker === 'closed') return true;
              const probing = attempts.some(
                (a) =>
                  !a.finished &&
                  a.attempt.halfOpenProbe &&
                  current(a) &&
                  a.attempt.endpoint.id === e.id,
              );
              return e.breaker === 'half-open' && !probing;
            });
            const result = balancer.pick({ exclude, affinityKey: op.key });
            if (result.kind === 'shed') {
              assert.equal(live.length, 0, `shed with live ${live.map((e) => e.id).join()}`);
              assert.ok(result.retryAfterMs > 0 && Number.isFinite(result.retryAfterMs));
              continue;
            }
            const chosen = live.find((e) => e.id === result.attempt.endpoint.id);
            assert.ok(
              chosen,
              `picked ${result.attempt.endpoint.id}, live: ${live.map((e) => e.id).join()}`,
            );
            assert.equal(result.attempt.halfOpenProbe, chosen.breaker === 'half-open');
            if (s.mode === 'Failover') {
              assert.equal(chosen.tier, Math.min(...live.map((e) => e.tier)));
            }
            attempts.push({
              attempt: result.attempt,
              generation: generation.get(chosen.id)!,
              finished: false,
            });
          }

          const statuses = balancer.status();
          // In slices, status() is the same.
          for (const perSlice of [1, 2])
            assert.deepEqual([...balancer.statusSlices(perSlice)].flat(), statuses);
          // The gauges are status()'s fields, read without the rest of it.
          assert.deepEqual(balancer.gauges(), gaugesOf(statuses));
          // So is what a report to the controller carries.
          assert.deepEqual(balancer.health(), healthOf(statuses));
          for (const e of statuses) {
            // status() computes every `slow` at once: the same verdict as one endpoint at a time.
            assert.equal(e.slow, slowByDefinition(e, statuses, s.mode), `slow of ${e.id}`);
            // Every unfinished attempt of the id, earlier generations' included: an endpoint
            // that left and came back is still loaded by the streams it had.
            const open = attempts.filter((a) => !a.finished && a.attempt.endpoint.id === e.id);
            assert.equal(e.inFlight, open.length, `inFlight of ${e.id}`);
            assert.ok(e.inFlight >= 0);
            assert.ok(e.window.requests >= e.window.errors + e.window.rateLimited);
            assert.ok(Number.isFinite(e.ewmaTtftMs) && e.ewmaTtftMs > 0);
          }
        }
      }),
      { numRuns: 300 },
    );
  });

  test('every finish opens a closed breaker exactly when the rules say, slow by the median rule', () => {
    const verdicts = new Map<string, number>();
    const serveArb = fc.record({
      op: fc.constant('serve' as const),
      index: fc.nat({ max: IDS.length - 1 }),
      jitter: fc.integer({ min: 50, max: 150 }), // % of the endpoint's speed
      outcome: fc.constantFrom<Outcome['kind']>(
        ...Array<'success'>(8).fill('success'),
        'error',
        'neutral',
      ),
    });
    const slowScenarioArb = fc.record({
      mode: fc.constantFrom<Mode>('Balance', 'Failover'),
      tiers: fc.array(fc.integer({ min: 0, max: 1 }), { minLength: 6, maxLength: 6 }),
      drifted: fc.array(fc.boolean(), { minLength: 6, maxLength: 6 }),
      /** Each endpoint's TTFT, ms: some several times slower than others. */
      speeds: fc.array(fc.constantFrom(10, 20, 60, 200), { minLength: 6, maxLength: 6 }),
      minRequests: fc.integer({ min: 1, max: 3 }),
      seed: fc.integer(),
      ops: fc.array(
        fc.oneof(
          { weight: 12, arbitrary: serveArb },
          {
            weight: 1,
            arbitrary: fc.record({
              op: fc.constant('speed' as const),
              index: fc.nat({ max: IDS.length - 1 }),
              ms: fc.constantFrom(10, 20, 60, 200),
            }),
          },
          { weight: 2, arbitrary: advanceArb(6_000) },
          { weight: 1, arbitrary: updateArb },
        ),
        { minLength: 20, maxLength: 200, size: 'max' },
      ),
    });
    fc.assert(
      fc.property(slowScenarioArb, (s) => {
        const clock = fakeClock(1_000);
        const specsFor = (present: boolean[], drifted: boolean[]) =>
          specsOf(s.tiers, present, drifted);
        const policy = testPolicy({
          mode: s.mode,
          defaultTtftMs: 20,
          health: {
            minRequests: s.minRequests,
            openForMs: 2_000,
            maxOpenForMs: 10_000,
            maxTtftSlowdown: 2,
          },
          coldStart: { idleAfterMs: 0 },
        });
        const events: PolicyEvent[] = [];
        const balancer = new Balancer(
          policy,
          specsFor(
            IDS.map(() => true),
            s.drifted,
          ),
          {
            clock,
            rng: seededRng(s.seed),
            onEvent: (e) => events.push(e),
          },
        );
        const speeds = [...s.speeds];
        for (const op of s.ops) {
          if (op.op === 'advance') clock.advance(op.ms);
          else if (op.op === 'speed') speeds[op.index] = op.ms;
          else if (op.op === 'update') balancer.update(policy, specsFor(op.present, op.drifted));
          else {
            const id = IDS[op.index]!;
            const picked = balancer.pick({ exclude: new Set(IDS.filter((x) => x !== id)) });
            if (picked.kind === 'shed') continue;
            clock.advance((speeds[op.index]! * op.jitter) / 100);
            balancer.firstByte(picked.attempt);
            balancer.status(); // every breaker moved to now: finish() moves only its own
            events.length = 0;
            const outcome: Outcome =
              op.outcome === 'success' ? { kind: 'success', streamed: true } : { kind: op.outcome };
            balancer.finish(picked.attempt, outcome);
            const verdict = checkVerdict(balancer, events, id, s.mode, policy.health);
            verdicts.set(verdict, (verdicts.get(verdict) ?? 0) + 1);
          }
          const statuses = balancer.status();
          for (const e of statuses)
            assert.equal(e.slow, slowByDefinition(e, statuses, s.mode), `slow of ${e.id}`);
        }
      }),
      { numRuns: 200 },
    );
    // The runs reached the rule under test, not only the other verdicts.
    assert.ok((verdicts.get('slow') ?? 0) > 20, `verdicts: ${JSON.stringify([...verdicts])}`);
  });

  test('the retry budget never grants more than the formula at one instant', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 500 }),
        fc.integer({ min: 0, max: 100 }),
        fc.integer({ min: 0, max: 20 }),
        (requests, budgetPercent, minPerSecond) => {
          const balancer = new Balancer(
            testPolicy({ retry: { budgetPercent, minPerSecond, maxAttempts: 10 } }),
            [endpoint('a')],
            { clock: fakeClock(), rng: seededRng(1) },
          );
          for (let i = 0; i < requests; i++) balancer.recordRequest();
          let granted = 0;
          while (balancer.tryRetry(1).kind === 'retry') granted += 1;
          const allowance = (budgetPercent / 100) * requests + minPerSecond * 10;
          assert.equal(granted, Math.ceil(allowance));
        },
      ),
    );
  });
});

/**
 * The breaker verdict of the finish just made on `id` (its events in `events`), against the
 * definitions: a closed breaker opens for what `tripReason` says of its window and of
 * slowByDefinition, and stays closed otherwise. No other breaker may have moved since the last
 * status() (the clock stood still), so status() now shows what finish() judged by. Returns the
 * verdict, for counting.
 */
function checkVerdict(
  balancer: Balancer,
  events: readonly PolicyEvent[],
  id: string,
  mode: Mode,
  health: HealthPolicy,
): string {
  const opened = events.find(
    (e) => e.kind === 'breaker' && e.endpointId === id && e.from === 'closed' && e.to === 'open',
  );
  // As finish() judged it: closed, if it opened just now.
  const judged = balancer
    .status()
    .map((e) => (e.id === id && opened !== undefined ? { ...e, breaker: 'closed' as const } : e));
  const e = judged.find((x) => x.id === id);
  if (e === undefined || e.breaker !== 'closed') return 'not judged'; // only a closed one is
  const slow = slowByDefinition(e, judged, mode);
  const expected = tripReason({ ...e.window, slow }, health);
  assert.equal(
    opened?.kind === 'breaker' ? opened.reason : undefined,
    expected,
    `verdict on ${id}`,
  );
  return expected ?? (slow ? 'slow, under minRequests' : 'none');
}

/**
 * docs/policy.md's slow rule, endpoint by endpoint (maxTtftSlowdown 2): its EWMA over twice the
 * median of its serving, non-drifted peers with samples (of its tier in Failover); never the last
 * closed one.
 */
function slowByDefinition(e: EndpointStatus, all: EndpointStatus[], mode: Mode): boolean {
  if (e.ewmaSeeded) return false;
  const serving = all.filter(
    (p) => !p.drifted && p.breaker !== 'open' && (mode !== 'Failover' || p.tier === e.tier),
  );
  if (e.breaker === 'closed' && !serving.some((p) => p !== e && p.breaker === 'closed'))
    return false;
  const reference = median(
    serving.filter((p) => p !== e && !p.ewmaSeeded).map((p) => p.ewmaTtftMs),
  );
  return reference !== undefined && e.ewmaTtftMs > 2 * reference;
}
