import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import {
  AFFINITY_MAX_EXTRA_IN_FLIGHT,
  AFFINITY_SLOWDOWN_MIN_MS,
  AFFINITY_SLOWDOWN_MIN_SAMPLES,
  AFFINITY_SLOW_RECHECK_AFTER_MS,
} from './affinity.ts';
import { idHash, keyNumber, rendezvousOrder } from './bounded-load.ts';
import { BATCH_KNOWN_FOR_MS } from './server-load.ts';
import {
  ADDED_TEXT_AT_HOME_SHARE,
  AFFINITY_MAX_SLOWDOWN,
  Balancer,
  DEFAULT_SHED_RETRY_AFTER_MS,
  MAX_RETRY_AFTER_COOLDOWN_MS,
  normalisedTtftMs,
  REFERENCE_REQUEST_BYTES,
} from './balancer.ts';
import { seededRng } from './rng.ts';
import { endpoint, fakeClock, scriptedRng, testPolicy, type PolicyOverrides } from './testing.ts';
import type {
  Attempt,
  EndpointSpec,
  Outcome,
  PickRequest,
  PickResult,
  PolicyEvent,
  PromptBlocks,
  Rng,
} from './types.ts';

type Picked = Extract<PickResult, { kind: 'picked' }>;

/** An Rng that always draws the middle: open periods are exactly openForMs · 2^k. */
const middleRng = (): Rng => ({ next: () => 0.5 });

const OK: Outcome = { kind: 'success', streamed: true };
const ERROR: Outcome = { kind: 'error' };
const LIMITED: Outcome = { kind: 'rate-limited' };
const NEUTRAL: Outcome = { kind: 'neutral' };

function picked(result: PickResult): Picked {
  assert.equal(result.kind, 'picked', `expected a pick, got ${JSON.stringify(result)}`);
  return result;
}

function shedAfter(result: PickResult): number {
  assert.equal(result.kind, 'shed', `expected a shed, got ${JSON.stringify(result)}`);
  return result.retryAfterMs;
}

interface SetupOptions {
  policy?: PolicyOverrides;
  endpoints?: EndpointSpec[];
  rng?: Rng;
}

function setup(options: SetupOptions = {}) {
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
    assert.ok(s, `no status for ${id}`);
    return s;
  };
  /** Picks `id` by excluding every other endpoint. */
  const pickOn = (id: string, request: PickRequest = {}): Attempt => {
    const exclude = new Set(specs.map((s) => s.id).filter((x) => x !== id));
    const result = picked(balancer.pick({ ...request, exclude }));
    assert.equal(result.attempt.endpoint.id, id);
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

describe('candidates and shedding', () => {
  test('returns the only candidate without drawing a random number', () => {
    const rng = scriptedRng([]);
    const { balancer } = setup({ endpoints: [endpoint('solo')], rng });
    const result = picked(balancer.pick({}));
    assert.equal(result.attempt.endpoint.id, 'solo');
    assert.equal(result.affinity, 'none');
    assert.equal(result.attempt.halfOpenProbe, false);
    assert.equal(rng.drawn, 0);
  });

  test('picks the lower score of two P2C candidates', () => {
    const { balancer, pickOn } = setup({ endpoints: [endpoint('a'), endpoint('b')] });
    pickOn('a');
    pickOn('a'); // a: 2 in flight
    const busyFirst = new Balancer(testPolicy(), [endpoint('a'), endpoint('b')], {
      clock: fakeClock(),
      rng: scriptedRng([0, 0]),
    });
    assert.equal(picked(busyFirst.pick({})).attempt.endpoint.id, 'a'); // a fresh one: tie → first drawn
    const withScript = setup({
      endpoints: [endpoint('a'), endpoint('b')],
      rng: scriptedRng([0, 0]),
    });
    withScript.pickOn('a');
    assert.equal(picked(withScript.balancer.pick({})).attempt.endpoint.id, 'b');
    assert.equal(balancer.status()[0]!.inFlight, 2);
  });

  test('prefers the cheaper endpoint when cost has a weight', () => {
    const endpoints = [
      endpoint('dear', { costPerMTok: 0.6 }),
      endpoint('cheap', { costPerMTok: 0.2 }),
    ];
    const { balancer } = setup({
      endpoints,
      policy: { costWeightPerMs: 0.001 },
      rng: scriptedRng([0, 0]),
    });
    assert.equal(picked(balancer.pick({})).attempt.endpoint.id, 'cheap');
  });

  test('with an exchange rate, a cheaper endpoint one request busier is still weighed, not filtered out', () => {
    const endpoints = [
      endpoint('dear', { costPerMTok: 1 }),
      endpoint('cheap', { costPerMTok: 0.2 }),
    ];
    // 0.0001 $/Mtok per ms: cheap costs 2,000 ms, dear 10,000 ms; cheap's extra request in
    // flight adds one default TTFT (500 ms), far less than the 8,000 ms price gap.
    const { balancer } = setup({
      endpoints,
      policy: { costWeightPerMs: 0.0001 },
      rng: scriptedRng([0, 0, 0, 0.9]),
    });
    assert.equal(picked(balancer.pick({})).attempt.endpoint.id, 'cheap');
    assert.equal(picked(balancer.pick({})).attempt.endpoint.id, 'cheap');
  });

  test('without an exchange rate, the less loaded endpoint wins whatever its price', () => {
    const endpoints = [
      endpoint('dear', { costPerMTok: 1 }),
      endpoint('cheap', { costPerMTok: 0.2 }),
    ];
    const { balancer } = setup({ endpoints, rng: scriptedRng([0.9, 0]) });
    assert.equal(picked(balancer.pick({})).attempt.endpoint.id, 'cheap'); // tie → first drawn
    assert.equal(picked(balancer.pick({})).attempt.endpoint.id, 'dear'); // cheap is busier now
  });

  test('ignores cost for pure latency routing', () => {
    const endpoints = [
      endpoint('dear', { costPerMTok: 0.6 }),
      endpoint('cheap', { costPerMTok: 0.2 }),
    ];
    const { balancer } = setup({ endpoints, rng: scriptedRng([0, 0]) });
    assert.equal(picked(balancer.pick({})).attempt.endpoint.id, 'dear'); // tie → first drawn
  });

  test('returns shed with the default retry-after when the pool is empty', () => {
    const { balancer } = setup({ endpoints: [] });
    assert.equal(shedAfter(balancer.pick({})), DEFAULT_SHED_RETRY_AFTER_MS);
    assert.equal(DEFAULT_SHED_RETRY_AFTER_MS, 1000);
  });

  test('returns shed when every endpoint is ejected, until the soonest breaker half-opens', () => {
    const { balancer, repeat, clock } = setup({
      endpoints: [endpoint('a'), endpoint('b')],
      rng: middleRng(),
    });
    repeat(20, 'a', ERROR); // a opens at t=0 for 30 s
    clock.advance(10_000);
    repeat(20, 'b', ERROR); // b opens at t=10 s for 30 s
    assert.equal(shedAfter(balancer.pick({})), 20_000);
    clock.advance(19_999);
    assert.equal(shedAfter(balancer.pick({})), 1);
    clock.advance(1);
    assert.equal(picked(balancer.pick({})).attempt.endpoint.id, 'a');
  });

  test('never picks a drifted endpoint, and sheds with the default when only drifted ones remain', () => {
    const { balancer } = setup({ endpoints: [endpoint('a', { drifted: true }), endpoint('b')] });
    for (let i = 0; i < 50; i++) assert.equal(picked(balancer.pick({})).attempt.endpoint.id, 'b');
    const allDrifted = setup({ endpoints: [endpoint('a', { drifted: true })] });
    assert.equal(shedAfter(allDrifted.balancer.pick({})), DEFAULT_SHED_RETRY_AFTER_MS);
  });

  test('never goes back to an excluded endpoint, and does not wait for it when shedding', () => {
    const { balancer } = setup();
    for (let i = 0; i < 50; i++) {
      const id = picked(balancer.pick({ exclude: new Set(['a', 'c']) })).attempt.endpoint.id;
      assert.equal(id, 'b');
    }
    assert.equal(
      shedAfter(balancer.pick({ exclude: new Set(['a', 'b', 'c']) })),
      DEFAULT_SHED_RETRY_AFTER_MS,
    );
  });

  test('sheds with the default while the only endpoint is probing', () => {
    const { balancer, repeat, clock } = setup({ endpoints: [endpoint('a')], rng: middleRng() });
    repeat(20, 'a', ERROR);
    clock.advance(30_000);
    assert.equal(picked(balancer.pick({})).attempt.halfOpenProbe, true);
    assert.equal(shedAfter(balancer.pick({})), DEFAULT_SHED_RETRY_AFTER_MS);
  });
});

describe('in-flight accounting', () => {
  test('counts an attempt from pick until finish', () => {
    const { balancer, statusOf, pickOn } = setup();
    const attempt = pickOn('a');
    assert.equal(statusOf('a').inFlight, 1);
    balancer.finish(attempt, OK);
    assert.equal(statusOf('a').inFlight, 0);
  });

  test('ignores a second finish of the same attempt', () => {
    const { balancer, statusOf, pickOn } = setup();
    const first = pickOn('a');
    pickOn('a');
    balancer.finish(first, ERROR);
    balancer.finish(first, ERROR);
    assert.equal(statusOf('a').inFlight, 1);
    assert.equal(statusOf('a').errors, 1);
  });

  test('ignores attempts it did not hand out', () => {
    const { balancer, statusOf, pickOn } = setup();
    pickOn('a');
    const forged: Attempt = { endpoint: endpoint('a'), startedAtMs: 0, halfOpenProbe: false };
    balancer.firstByte(forged);
    balancer.finish(forged, ERROR);
    assert.equal(statusOf('a').inFlight, 1);
    assert.equal(statusOf('a').errors, 0);
  });

  test('hands out frozen attempts', () => {
    const { pickOn } = setup();
    assert.equal(Object.isFrozen(pickOn('a')), true);
  });
});

describe('Failover mode', () => {
  const tiers = () => [
    endpoint('a', { tier: 0 }),
    endpoint('c', { tier: 1 }),
    endpoint('b', { tier: 0 }),
    endpoint('d', { tier: 1 }),
  ];

  function spread(balancer: Balancer, picks = 400): Map<string, number> {
    const counts = new Map<string, number>();
    for (let i = 0; i < picks; i++) {
      const { attempt } = picked(balancer.pick({}));
      counts.set(attempt.endpoint.id, (counts.get(attempt.endpoint.id) ?? 0) + 1);
      balancer.finish(attempt, NEUTRAL);
    }
    return counts;
  }

  test('uses the first tier with a live endpoint and spreads only inside it', () => {
    const { balancer } = setup({ endpoints: tiers(), policy: { mode: 'Failover' } });
    const counts = spread(balancer);
    assert.deepEqual([...counts.keys()].sort(), ['a', 'b']);
    assert.ok(counts.get('a')! > 100 && counts.get('b')! > 100);
  });

  test('orders tiers by tier number, not by list position', () => {
    const endpoints = [endpoint('backup', { tier: 3 }), endpoint('primary', { tier: 1 })];
    const { balancer } = setup({ endpoints, policy: { mode: 'Failover' } });
    assert.equal(picked(balancer.pick({})).attempt.endpoint.id, 'primary');
  });

  test("falls to tier 2 when tier 1's breakers open, and returns when they recover", () => {
    const { balancer, repeat, clock } = setup({ endpoints: tiers(), policy: { mode: 'Failover' } });
    repeat(20, 'a', ERROR);
    repeat(20, 'b', ERROR);
    const during = spread(balancer);
    assert.deepEqual([...during.keys()].sort(), ['c', 'd']);

    clock.advance(36_000); // past any jittered 30 s period
    const probe = picked(balancer.pick({}));
    assert.equal(probe.attempt.halfOpenProbe, true);
    assert.equal(probe.attempt.endpoint.tier, 0);
    balancer.finish(probe.attempt, OK);
    const second = picked(balancer.pick({}));
    assert.equal(second.attempt.endpoint.tier, 0);
    balancer.finish(second.attempt, OK);

    const after = spread(balancer);
    assert.deepEqual([...after.keys()].sort(), ['a', 'b']);
  });

  test('moves to the next tier when a retry excludes every endpoint of the first', () => {
    const { balancer } = setup({ endpoints: tiers(), policy: { mode: 'Failover' } });
    const retry = picked(balancer.pick({ exclude: new Set(['a', 'b']) }));
    assert.equal(retry.attempt.endpoint.tier, 1);
  });

  test('spreads over every tier in Balance mode', () => {
    const { balancer } = setup({ endpoints: tiers() });
    assert.deepEqual([...spread(balancer).keys()].sort(), ['a', 'b', 'c', 'd']);
  });
});

describe('affinity', () => {
  const five = () => ['e1', 'e2', 'e3', 'e4', 'e5'].map((id) => endpoint(id));
  const withKey = (overrides: PolicyOverrides = {}): PolicyOverrides => ({
    ...overrides,
    affinity: { key: 'Header', ...overrides.affinity },
  });
  const orderOf = (key: string, specs: EndpointSpec[]) =>
    rendezvousOrder(
      keyNumber(key),
      specs.map((s) => ({ id: s.id, idHash: idHash(s.id) })),
    ).map((e) => e.id);
  const homeOf = (key: string, specs: EndpointSpec[]) => orderOf(key, specs)[0]!;

  test("reports 'none' without a key, with an empty key, or when affinity is off", () => {
    const on = setup({ policy: withKey() });
    assert.equal(picked(on.balancer.pick({})).affinity, 'none');
    assert.equal(picked(on.balancer.pick({ affinityKey: '' })).affinity, 'none');
    const off = setup({ policy: { affinity: { key: 'None' } } });
    assert.equal(picked(off.balancer.pick({ affinityKey: 'k', prompt: PROMPT })).affinity, 'none');
    const prefixOnly = setup();
    assert.equal(picked(prefixOnly.balancer.pick({ affinityKey: 'k' })).affinity, 'none');
  });

  test('keeps a key at home under the load bound, then spills to its second endpoint', () => {
    const specs = five();
    const { balancer, statusOf } = setup({ endpoints: specs, policy: withKey() });
    const [home, second] = orderOf('session-1', specs);
    // Idle pool: the home takes maxExtraInFlight + 1 (the last at maxExtraInFlight above the
    // least busy).
    for (let i = 0; i <= AFFINITY_MAX_EXTRA_IN_FLIGHT; i++) {
      const result = picked(balancer.pick({ affinityKey: 'session-1' }));
      assert.equal(result.affinity, 'hit');
      assert.equal(result.attempt.endpoint.id, home);
    }
    const next = picked(balancer.pick({ affinityKey: 'session-1' }));
    assert.equal(next.affinity, 'spill');
    assert.equal(next.attempt.endpoint.id, second, 'the same second home from every sidecar');
    assert.equal(statusOf(home!).inFlight, AFFINITY_MAX_EXTRA_IN_FLIGHT + 1);
  });

  test('under load the bound is loadFactor × the average, not the least busy + maxExtraInFlight', () => {
    const specs = five();
    const { balancer, pickOn } = setup({
      endpoints: specs,
      policy: withKey({ affinity: { key: 'Header', maxExtraInFlight: 0 } }),
    });
    const [home, second] = orderOf('k', specs);
    // Every endpoint at 4, the home at 5: capacity ⌈1.25 · 22 / 5⌉ = 6, so the home takes one
    // more (at least + maxExtraInFlight it would take none); then ⌈1.25 · 23 / 5⌉ = 6 again.
    for (const s of specs) for (let i = 0; i < 4; i++) pickOn(s.id);
    pickOn(home!);
    assert.equal(picked(balancer.pick({ affinityKey: 'k' })).attempt.endpoint.id, home);
    const spilled = picked(balancer.pick({ affinityKey: 'k' }));
    assert.equal(spilled.affinity, 'spill');
    assert.equal(spilled.attempt.endpoint.id, second);
  });

  test('balances a request whose home has a full batch, instead of queueing it there', () => {
    const specs = five();
    const { balancer } = setup({ endpoints: specs, policy: withKey() });
    const home = homeOf('k', specs);
    // The home runs a full batch of 6 and queues one: a request there would wait for a slot.
    balancer.reportLoad(home, { running: 6, waiting: 1 });
    for (const s of specs) if (s.id !== home) balancer.reportLoad(s.id, { running: 4, waiting: 0 });
    for (let i = 0; i < 20; i++) {
      const result = picked(balancer.pick({ affinityKey: 'k' }));
      assert.equal(result.affinity, 'overloaded', 'not spilled to the second home either');
      assert.notEqual(result.attempt.endpoint.id, home);
      balancer.finish(result.attempt, NEUTRAL);
    }
  });

  test('with its batch known, a home with a free slot takes the key however busy next to the others', () => {
    const specs = five();
    const { balancer } = setup({ endpoints: specs, policy: withKey() });
    const home = homeOf('k', specs);
    // It queued at a batch of 6; now it runs 4 while the others idle. The load bound (at most
    // maxExtraInFlight = 3 above the least busy) would pass it over; its two free slots do not.
    balancer.reportLoad(home, { running: 6, waiting: 1 });
    balancer.reportLoad(home, { running: 4, waiting: 0 });
    for (let i = 0; i < 2; i++) {
      const result = picked(balancer.pick({ affinityKey: 'k' }));
      assert.equal(result.affinity, 'hit');
      assert.equal(result.attempt.endpoint.id, home);
    }
    assert.equal(picked(balancer.pick({ affinityKey: 'k' })).affinity, 'overloaded', 'now full');
  });

  test('keeps a key at a busy home whose server has not queued anything lately', () => {
    const specs = five();
    const { balancer, clock } = setup({ endpoints: specs, policy: withKey() });
    const home = homeOf('k', specs);
    // Three running and none waiting: three is what it was given, not (as far as anyone knows)
    // its batch, and the load bound allows maxExtraInFlight above the idle others.
    balancer.reportLoad(home, { running: 3, waiting: 0 });
    const first = picked(balancer.pick({ affinityKey: 'k' }));
    assert.equal(first.affinity, 'hit');
    assert.equal(first.attempt.endpoint.id, home);
    balancer.finish(first.attempt, NEUTRAL);
    // It queued once, but more than BATCH_KNOWN_FOR_MS ago: the batch is no longer taken as known.
    balancer.reportLoad(home, { running: 3, waiting: 2 });
    const queued = picked(balancer.pick({ affinityKey: 'k' }));
    assert.equal(queued.affinity, 'overloaded', 'it queues: three is its batch');
    balancer.finish(queued.attempt, NEUTRAL);
    clock.advance(BATCH_KNOWN_FOR_MS + 1);
    balancer.reportLoad(home, { running: 3, waiting: 0 });
    const later = picked(balancer.pick({ affinityKey: 'k' }));
    assert.equal(later.affinity, 'hit');
    assert.equal(later.attempt.endpoint.id, home);
  });

  test('a large loadFactor keeps the key at home however busy it is', () => {
    const specs = five();
    const { balancer, statusOf } = setup({
      endpoints: specs,
      policy: withKey({ affinity: { key: 'Header', loadFactor: 1000 } }),
    });
    const home = homeOf('session-1', specs);
    for (let i = 0; i < 50; i++) {
      const result = picked(balancer.pick({ affinityKey: 'session-1' }));
      assert.equal(result.affinity, 'hit');
      assert.equal(result.attempt.endpoint.id, home);
    }
    assert.equal(statusOf(home).inFlight, 50);
  });

  test('sends different keys to different endpoints', () => {
    const { balancer } = setup({ endpoints: five(), policy: withKey() });
    const homes = new Set<string>();
    for (let k = 0; k < 100; k++) {
      const result = picked(balancer.pick({ affinityKey: `k${k}` }));
      balancer.finish(result.attempt, NEUTRAL);
      homes.add(result.attempt.endpoint.id);
    }
    assert.equal(homes.size, 5);
  });

  // Attempts that give AFFINITY_SLOWDOWN_MIN_SAMPLES samples: the first on an idle endpoint is a
  // cold start, and its TTFT is not a sample.
  const MEASURED = AFFINITY_SLOWDOWN_MIN_SAMPLES + 1;

  test(`passes over a home slower than ${AFFINITY_MAX_SLOWDOWN}× the candidates' median, to the next in order`, () => {
    const specs = five();
    const key = 'session-slow';
    const [home, second] = orderOf(key, specs);
    // maxTtftSlowdown 100: the breaker stays out of it, this is the affinity rule alone.
    const { balancer, repeat } = setup({
      endpoints: specs,
      policy: withKey({ health: { maxTtftSlowdown: 100 } }),
    });
    // The home's samples last: a verdict on samples a second old lapses for a recheck (below).
    for (const s of specs) if (s.id !== home) repeat(MEASURED, s.id, OK, 100);
    repeat(MEASURED, home!, OK, 2_000);
    const result = picked(balancer.pick({ affinityKey: key }));
    assert.equal(result.affinity, 'spill');
    assert.equal(result.attempt.endpoint.id, second);
  });

  test(`rechecks a home judged slow after ${AFFINITY_SLOW_RECHECK_AFTER_MS} ms without a sample, one request at a time`, () => {
    const specs = five();
    const key = 'session-recheck';
    const [home, second] = orderOf(key, specs);
    const { balancer, clock, repeat } = setup({
      endpoints: specs,
      policy: withKey({ health: { maxTtftSlowdown: 100 } }),
    });
    for (const s of specs) if (s.id !== home) repeat(MEASURED, s.id, OK, 100);
    repeat(MEASURED, home!, OK, 2_000);
    const spilled = picked(balancer.pick({ affinityKey: key }));
    assert.equal(spilled.attempt.endpoint.id, second, 'judged slow: passed over');
    balancer.finish(spilled.attempt, NEUTRAL);
    clock.advance(AFFINITY_SLOW_RECHECK_AFTER_MS - 1);
    assert.equal(
      picked(balancer.pick({ affinityKey: key })).attempt.endpoint.id,
      second,
      'its newest sample is not yet a second old',
    );
    clock.advance(1);
    // Nothing heard for a second: the only way to learn that it is fast again is to send it one.
    const recheck = picked(balancer.pick({ affinityKey: key }));
    assert.equal(recheck.affinity, 'hit');
    assert.equal(recheck.attempt.endpoint.id, home);
    // While the recheck is in flight, the verdict stands for the others.
    assert.equal(picked(balancer.pick({ affinityKey: key })).attempt.endpoint.id, second);
    // Fast again: each recheck's sample moves the median of five; three of them clear it.
    clock.advance(100);
    balancer.firstByte(recheck.attempt);
    balancer.finish(recheck.attempt, OK);
    for (let i = 0; i < 2; i++) {
      clock.advance(AFFINITY_SLOW_RECHECK_AFTER_MS);
      const next = picked(balancer.pick({ affinityKey: key }));
      assert.equal(next.attempt.endpoint.id, home);
      clock.advance(100);
      balancer.firstByte(next.attempt);
      balancer.finish(next.attempt, OK);
    }
    const cleared = picked(balancer.pick({ affinityKey: key }));
    assert.equal(cleared.affinity, 'hit', 'fast again: no verdict, no wait');
    assert.equal(cleared.attempt.endpoint.id, home);
  });

  test(`passes over a home whose server reports generating over ${AFFINITY_MAX_SLOWDOWN}× slower, before any sample`, () => {
    const specs = five();
    const key = 'session-reported-slow';
    const [home, second] = orderOf(key, specs);
    const { balancer } = setup({ endpoints: specs, policy: withKey() });
    for (const s of specs)
      balancer.reportLoad(s.id, { running: 0, interTokenLatencyMs: s.id === home ? 26 : 10 });
    const result = picked(balancer.pick({ affinityKey: key }));
    assert.equal(result.affinity, 'spill');
    assert.equal(result.attempt.endpoint.id, second);
    // 2.4× slower is within maxSlowdown: its cache is still worth it.
    balancer.reportLoad(home!, { interTokenLatencyMs: 24 });
    assert.equal(picked(balancer.pick({ affinityKey: key })).attempt.endpoint.id, home);
  });

  test(`keeps a slow home until it has ${AFFINITY_SLOWDOWN_MIN_SAMPLES} samples of its own`, () => {
    const specs = five();
    const key = 'session-young';
    const home = homeOf(key, specs);
    const { balancer, repeat } = setup({
      endpoints: specs,
      policy: withKey({ health: { maxTtftSlowdown: 100 } }),
    });
    for (const s of specs) {
      if (s.id !== home) repeat(MEASURED, s.id, OK, 100);
    }
    // One long prefill is not yet what the endpoint is.
    repeat(MEASURED - 1, home, OK, 2_000);
    const young = picked(balancer.pick({ affinityKey: key }));
    assert.equal(young.affinity, 'hit');
    assert.equal(young.attempt.endpoint.id, home);
    balancer.finish(young.attempt, NEUTRAL);
    repeat(1, home, OK, 2_000);
    assert.equal(picked(balancer.pick({ affinityKey: key })).affinity, 'spill');
  });

  test(`keeps a home more than maxSlowdown times slower but less than ${AFFINITY_SLOWDOWN_MIN_MS} ms`, () => {
    const specs = five();
    const key = 'session-ms';
    const home = homeOf(key, specs);
    const { balancer, repeat } = setup({
      endpoints: specs,
      policy: withKey({ health: { maxTtftSlowdown: 100 } }),
    });
    // 30 ms next to 10 ms: three times slower, for what one uncached turn's prefill costs.
    for (const s of specs) {
      repeat(MEASURED, s.id, OK, s.id === home ? 30 : 10);
    }
    const result = picked(balancer.pick({ affinityKey: key }));
    assert.equal(result.affinity, 'hit');
    assert.equal(result.attempt.endpoint.id, home);
  });

  test('judges a home by its own samples, not by what is left of its seed', () => {
    const specs = five();
    const key = 'session-seeded';
    const home = homeOf(key, specs);
    const { balancer, repeat, statusOf } = setup({
      endpoints: specs,
      policy: withKey({ defaultTtftMs: 5_000, health: { maxTtftSlowdown: 100 } }),
    });
    // The home is served first, from the 5 s default; the others start from its value after
    // a few samples and then get many more, so their EWMAs have left the seed and its has not.
    repeat(MEASURED, home, OK, 20);
    for (const s of specs) if (s.id !== home) repeat(40, s.id, OK, 20);
    const other = specs.find((s) => s.id !== home)!.id;
    assert.ok(
      statusOf(home).ewmaTtftMs > AFFINITY_MAX_SLOWDOWN * statusOf(other).ewmaTtftMs,
      `the seeded EWMAs: home ${statusOf(home).ewmaTtftMs}, other ${statusOf(other).ewmaTtftMs}`,
    );
    const result = picked(balancer.pick({ affinityKey: key }));
    assert.equal(result.affinity, 'hit');
    assert.equal(result.attempt.endpoint.id, home);
  });

  test('keeps a home that is slower, but within maxSlowdown', () => {
    const specs = five();
    const key = 'session-ok';
    const home = homeOf(key, specs);
    const { balancer, repeat } = setup({ endpoints: specs, policy: withKey() });
    for (const s of specs) repeat(10, s.id, OK, s.id === home ? 200 : 100);
    const result = picked(balancer.pick({ affinityKey: key }));
    assert.equal(result.affinity, 'hit');
    assert.equal(result.attempt.endpoint.id, home);
  });

  test('uses the default maxSlowdown when the policy has a non-positive one', () => {
    const specs = five();
    const key = 'session-2x';
    const home = homeOf(key, specs);
    const { balancer, repeat, statusOf } = setup({
      endpoints: specs,
      policy: withKey({ affinity: { maxSlowdown: 0 } }),
    });
    for (const s of specs) repeat(20, s.id, OK, s.id === home ? 200 : 100);
    const ratio =
      statusOf(home).ewmaTtftMs / statusOf(specs.find((s) => s.id !== home)!.id).ewmaTtftMs;
    assert.ok(ratio > 1.5 && ratio < AFFINITY_MAX_SLOWDOWN, `ratio ${ratio}`);
    assert.equal(picked(balancer.pick({ affinityKey: key })).affinity, 'hit');
  });

  test("spills to the key's second endpoint while its home's breaker is open or half-open", () => {
    const specs = five();
    const key = 'session-broken';
    const [home, second] = orderOf(key, specs);
    const { balancer, repeat, clock } = setup({ endpoints: specs, policy: withKey() });
    repeat(20, home!, ERROR);
    for (let i = 0; i < 5; i++) {
      const result = picked(balancer.pick({ affinityKey: key }));
      assert.equal(result.affinity, 'spill');
      assert.equal(result.attempt.endpoint.id, second);
      balancer.finish(result.attempt, NEUTRAL);
    }
    clock.advance(36_000); // half-open: the probe is for P2C traffic, not for this key
    const probing = picked(balancer.pick({ affinityKey: key }));
    assert.equal(probing.affinity, 'spill');
    assert.equal(probing.attempt.endpoint.id, second);
  });

  test('spills when the home is excluded (a retry) or cooling down after a 429', () => {
    const specs = five();
    const key = 'session-excluded';
    const [home, second] = orderOf(key, specs);
    const { balancer, serve } = setup({ endpoints: specs, policy: withKey() });
    const retry = picked(balancer.pick({ affinityKey: key, exclude: new Set([home!]) }));
    assert.equal(retry.affinity, 'spill');
    assert.equal(retry.attempt.endpoint.id, second);
    balancer.finish(retry.attempt, NEUTRAL);
    serve(home!, { kind: 'rate-limited', retryAfterMs: 5_000 });
    assert.equal(picked(balancer.pick({ affinityKey: key })).affinity, 'spill');
  });

  test("balances as 'overloaded' when no admissible endpoint fits under the bound", () => {
    const specs = [endpoint('a'), endpoint('b')];
    const { balancer, repeat, pickOn } = setup({
      endpoints: specs,
      policy: withKey({ health: { maxTtftSlowdown: 100 }, affinity: { maxSlowdown: 1.2 } }),
    });
    repeat(MEASURED, 'a', OK, 2_000);
    repeat(MEASURED, 'b', OK, 100);
    for (let i = 0; i < 5; i++) pickOn('b'); // b busy, a slow and idle
    const result = picked(balancer.pick({ affinityKey: 'anything' }));
    assert.equal(result.affinity, 'overloaded');
  });

  test('re-homes the keys of a drifted endpoint onto the remaining ones', () => {
    const specs = five();
    const key = 'session-drift';
    const home = homeOf(key, specs);
    const { balancer, update } = setup({ endpoints: specs, policy: withKey() });
    const drifted = specs.map((s) => (s.id === home ? { ...s, drifted: true } : s));
    update(withKey(), drifted);
    const result = picked(balancer.pick({ affinityKey: key }));
    assert.equal(result.affinity, 'hit');
    assert.equal(
      result.attempt.endpoint.id,
      homeOf(
        key,
        specs.filter((s) => s.id !== home),
      ),
    );
  });

  test('is stable under endpoint churn: only the keys of a leaving endpoint move', () => {
    const specs = five();
    const { balancer, update } = setup({ endpoints: specs, policy: withKey() });
    const keys = Array.from({ length: 300 }, (_, k) => `user-${k}`);
    const homeNow = (key: string) => {
      const result = picked(balancer.pick({ affinityKey: key }));
      balancer.finish(result.attempt, NEUTRAL);
      assert.equal(result.affinity, 'hit');
      return result.attempt.endpoint.id;
    };
    const before = new Map(keys.map((k) => [k, homeNow(k)]));
    update(
      withKey(),
      specs.filter((s) => s.id !== 'e3'),
    );
    for (const key of keys) {
      if (before.get(key) !== 'e3') assert.equal(homeNow(key), before.get(key));
    }
    update(withKey(), [...specs, endpoint('e6')]);
    let movedToNew = 0;
    for (const key of keys) {
      const now = homeNow(key);
      if (now !== before.get(key)) {
        assert.equal(now, 'e6');
        movedToNew += 1;
      }
    }
    assert.ok(movedToNew > 20 && movedToNew < 80, `moved ${movedToNew} of 300`);
  });

  test('hashes over the chosen tier only in Failover mode', () => {
    const endpoints = [
      endpoint('a'),
      endpoint('b'),
      endpoint('c', { tier: 1 }),
      endpoint('d', { tier: 1 }),
    ];
    const { balancer } = setup({
      endpoints,
      policy: withKey({ mode: 'Failover', affinity: { key: 'Header', loadFactor: 1000 } }),
    });
    for (let k = 0; k < 50; k++) {
      const result = picked(balancer.pick({ affinityKey: `k${k}` }));
      assert.equal(result.affinity, 'hit');
      assert.equal(result.attempt.endpoint.tier, 0);
    }
  });
});

/** A prompt of a conversation: system block 11, first user turn 12 (the home key), then more. */
const PROMPT: PromptBlocks = { hashes: [11, 12], ends: [256, 400], homeDepth: 2 };
const nextTurn = (prompt: PromptBlocks, ...more: number[]): PromptBlocks => ({
  hashes: [...prompt.hashes, ...more],
  ends: [...prompt.ends, ...more.map((_, i) => (prompt.ends.at(-1) ?? 0) + 100 * (i + 1))],
  homeDepth: prompt.homeDepth,
});

describe('prefix affinity', () => {
  const PREFIX: PolicyOverrides = { affinity: { key: 'Prefix' } };
  const eight = () => Array.from({ length: 8 }, (_, i) => endpoint(`e${i}`));
  const order = (key: number, specs: EndpointSpec[]) =>
    rendezvousOrder(
      key,
      specs.map((s) => ({ id: s.id, idHash: idHash(s.id) })),
    ).map((e) => e.id);

  test("a new conversation goes to the rendezvous home of its first turn's key", () => {
    const specs = eight();
    const { balancer } = setup({ endpoints: specs, policy: PREFIX });
    const result = picked(balancer.pick({ prompt: PROMPT }));
    assert.equal(result.affinity, 'hit');
    assert.equal(result.attempt.endpoint.id, order(12, specs)[0]);
  });

  test('a later turn goes where the earlier turn went, even when that was a spill', () => {
    const specs = eight();
    const { balancer, pickOn } = setup({ endpoints: specs, policy: PREFIX });
    const [home, second] = order(12, specs);
    // The home is busy when the first turn arrives.
    const busy = Array.from({ length: AFFINITY_MAX_EXTRA_IN_FLIGHT + 1 }, () => pickOn(home!));
    const turn1 = picked(balancer.pick({ prompt: PROMPT }));
    assert.equal(turn1.affinity, 'spill');
    assert.equal(turn1.attempt.endpoint.id, second);
    balancer.finish(turn1.attempt, OK);
    for (const attempt of busy) balancer.finish(attempt, OK);
    // The home is free again, but the second holds the conversation's KV blocks.
    const turn2 = picked(balancer.pick({ prompt: nextTurn(PROMPT, 13, 14) }));
    assert.equal(turn2.affinity, 'hit');
    assert.equal(turn2.attempt.endpoint.id, second);
  });

  test('a match shorter than the home key does not count: conversations sharing only a system prompt spread', () => {
    const specs = eight();
    const { balancer } = setup({ endpoints: specs, policy: PREFIX });
    const a = picked(balancer.pick({ prompt: PROMPT }));
    balancer.finish(a.attempt, OK);
    const other: PromptBlocks = { hashes: [11, 99], ends: [256, 400], homeDepth: 2 };
    const b = picked(balancer.pick({ prompt: other }));
    assert.equal(b.attempt.endpoint.id, order(99, specs)[0]);
  });

  test('a busy holder spills along the order of the matched prefix', () => {
    const specs = eight();
    const { balancer, pickOn } = setup({ endpoints: specs, policy: PREFIX });
    const turn1 = picked(balancer.pick({ prompt: PROMPT }));
    balancer.finish(turn1.attempt, OK);
    const holder = turn1.attempt.endpoint.id;
    for (let i = 0; i <= AFFINITY_MAX_EXTRA_IN_FLIGHT; i++) pickOn(holder);
    const turn2 = picked(balancer.pick({ prompt: nextTurn(PROMPT, 13) }));
    assert.equal(turn2.affinity, 'spill');
    assert.equal(
      turn2.attempt.endpoint.id,
      order(12, specs).find((id) => id !== holder),
    );
  });

  describe('a single message that nothing shares goes home only where balancing could go', () => {
    /** Eight endpoints; the home of PROMPT's key showed a batch of 6 and now runs 4 (2 free). */
    function freeHome() {
      const specs = eight();
      const t = setup({ endpoints: specs, policy: PREFIX });
      const home = order(12, specs)[0]!;
      t.balancer.reportLoad(home, { running: 6, waiting: 1 });
      t.balancer.reportLoad(home, { running: 4, waiting: 0 });
      return { ...t, specs, home };
    }

    test('with none of this sidecar’s requests there, a free slot takes it home', () => {
      const { balancer, home } = freeHome();
      const result = picked(balancer.pick({ prompt: PROMPT }));
      assert.equal(result.affinity, 'hit');
      assert.equal(result.attempt.endpoint.id, home);
    });

    test('with more of them there than at the least loaded, it is balanced despite the free slot', () => {
      const { balancer, pickOn, home } = freeHome();
      pickOn(home); // one of this sidecar's requests there, none elsewhere; still a slot free
      const result = picked(balancer.pick({ prompt: PROMPT }));
      assert.equal(result.affinity, 'overloaded');
      assert.notEqual(result.attempt.endpoint.id, home);
    });

    /** The speculative prompt's pick when its free home reports `homeItl` ms a token, its peers 10. */
    const withHomeReporting = (homeItl: number) => {
      const { balancer, specs, home } = freeHome();
      for (const s of specs)
        balancer.reportLoad(s.id, { interTokenLatencyMs: s.id === home ? homeItl : 10 });
      return { result: picked(balancer.pick({ prompt: PROMPT })), home };
    };

    test('a home reported 2× slower counts by its speed: balancing would not send it there', () => {
      // Its own prefill would take twice as long there: counted 0 + (2 − 1) · 1 against 0.
      const { result, home } = withHomeReporting(20);
      assert.equal(result.affinity, 'overloaded');
      assert.notEqual(result.attempt.endpoint.id, home);
    });

    test('a home reported 1.4× slower is not slower (SLOW_SERVER_RATIO): home, as without reports', () => {
      const { result, home } = withHomeReporting(14);
      assert.equal(result.affinity, 'hit');
      assert.equal(result.attempt.endpoint.id, home);
    });

    test('a later turn (history before its last message) still takes the free slot at home', () => {
      const { balancer, pickOn, home } = freeHome();
      pickOn(home);
      const result = picked(
        balancer.pick({ prompt: { ...nextTurn(PROMPT, 13), historyChars: 400 } }),
      );
      assert.equal(result.affinity, 'hit');
      assert.equal(result.attempt.endpoint.id, home);
    });

    test('a prompt an earlier request is known to share goes to its holder as before', () => {
      const { balancer, pickOn, home } = freeHome();
      const first = picked(balancer.pick({ prompt: PROMPT }));
      assert.equal(first.attempt.endpoint.id, home);
      balancer.finish(first.attempt, OK);
      pickOn(home);
      const again = picked(balancer.pick({ prompt: PROMPT }));
      assert.equal(again.affinity, 'hit');
      assert.equal(again.attempt.endpoint.id, home);
    });
  });

  test('forgets what a removed endpoint held', () => {
    const specs = eight();
    const { balancer, update } = setup({ endpoints: specs, policy: PREFIX });
    const turn1 = picked(balancer.pick({ prompt: PROMPT }));
    balancer.finish(turn1.attempt, OK);
    const holder = turn1.attempt.endpoint.id;
    update(
      {},
      specs.filter((s) => s.id !== holder),
    );
    update(PREFIX, specs);
    // Back, but empty: the next turn goes by its home key's order again, to the same home.
    const turn2 = picked(balancer.pick({ prompt: nextTurn(PROMPT, 13) }));
    assert.equal(turn2.attempt.endpoint.id, order(12, specs)[0]);
  });

  describe('a long known prefix buys queue positions at its full holder', () => {
    /** A conversation's later turn whose known prefix (through block 13) is `cachedChars` long. */
    const longTurn = (cachedChars: number): PromptBlocks => ({
      hashes: [11, 12, 13, 14],
      ends: [256, 400, cachedChars, cachedChars + 300],
      homeDepth: 2,
    });
    /** Three requests of 32 KiB on `id`: first token after 500 ms, slot held 1,200 ms. */
    function teachExchange(t: ReturnType<typeof setup>, id: string): void {
      for (let i = 0; i < 3; i++) {
        const attempt = t.pickOn(id, { requestBytes: 32_768 });
        t.clock.advance(500);
        t.balancer.firstByte(attempt);
        t.clock.advance(700);
        t.balancer.finish(attempt, OK);
      }
    }

    /**
     * A pool whose holder `e` of blocks 11–13 runs a full batch of 6 with one waiting (a request
     * there waits two positions), whose other servers report no batch; with `learned`, the pool
     * has seen requests of 32 KiB take 500 ms to their first token and hold a slot 1,200 ms: a
     * position is 200 ms, a KiB of prefill 15.6 ms.
     */
    function fullHolder(learned: boolean) {
      const specs = eight();
      const t = setup({ endpoints: specs, policy: PREFIX });
      const first = picked(t.balancer.pick({ prompt: { ...longTurn(0), hashes: [11, 12, 13] } }));
      t.balancer.finish(first.attempt, OK);
      const holder = first.attempt.endpoint.id;
      if (learned) teachExchange(t, specs.find((s) => s.id !== holder)?.id as string);
      t.balancer.reportLoad(holder, { running: 6, waiting: 1 });
      return { ...t, holder };
    }

    test('goes to the holder when the prefill it saves is worth more than the wait', () => {
      // 40,000 characters ≈ 610 ms of prefill, three positions; it would wait two.
      const { balancer, holder } = fullHolder(true);
      assert.deepEqual(balancer.prefillExchange(), { prefillMsPerKiB: 15.625, holdMs: 1200 });
      const result = picked(balancer.pick({ prompt: longTurn(40_000) }));
      assert.equal(result.affinity, 'hit');
      assert.equal(result.attempt.endpoint.id, holder);
    });

    test('is balanced when the prefix is worth less than the wait', () => {
      // 20,000 characters ≈ 305 ms, one position: not worth two.
      const { balancer, holder } = fullHolder(true);
      const result = picked(balancer.pick({ prompt: longTurn(20_000) }));
      assert.notEqual(result.attempt.endpoint.id, holder);
    });

    test('is balanced until the pool has measured what prefill and a position cost', () => {
      const { balancer, holder } = fullHolder(false);
      const result = picked(balancer.pick({ prompt: longTurn(400_000) }));
      assert.notEqual(result.attempt.endpoint.id, holder);
    });

    test('a match through every hashed block of a longer prompt is worth its earlier messages', () => {
      // The blocks matched cover only 1,000 characters, but the prompt was cut at its hashing cap
      // and 40,000 characters come before its last message.
      const { balancer, holder } = fullHolder(true);
      const cut: PromptBlocks = {
        hashes: [11, 12, 13],
        ends: [256, 400, 1000],
        homeDepth: 2,
        historyChars: 40_000,
        cut: true,
      };
      const result = picked(balancer.pick({ prompt: cut }));
      assert.equal(result.attempt.endpoint.id, holder);
      const whole = picked(balancer.pick({ prompt: { ...cut, cut: false } }));
      assert.notEqual(whole.attempt.endpoint.id, holder, 'all hashed: 1,000 characters matched');
    });

    test("a conversation's home is worth half its history, when another sidecar sent the earlier turns", () => {
      const specs = eight();
      const t = setup({ endpoints: specs, policy: PREFIX });
      const home = order(12, specs)[0] as string;
      teachExchange(t, order(12, specs)[1] as string);
      // The home runs a full batch of 6 and queues one: a request there waits two positions.
      t.balancer.reportLoad(home, { running: 6, waiting: 1 });
      // 80,000 characters of history: 40,000 taken as there, ≈ 610 ms, three positions.
      const later = picked(
        t.balancer.pick({ prompt: { ...nextTurn(PROMPT, 13), historyChars: 80_000 } }),
      );
      assert.equal(later.affinity, 'hit');
      assert.equal(later.attempt.endpoint.id, home);
      // 30,000 of history: 15,000 taken as there, ≈ 230 ms, one position; it would wait three.
      const short = picked(
        t.balancer.pick({ prompt: { ...nextTurn(PROMPT, 14), historyChars: 30_000 } }),
      );
      assert.equal(short.affinity, 'overloaded');
      assert.notEqual(short.attempt.endpoint.id, home);
    });

    test("a first turn's full home is worth the text it adds, a lone message's is not", () => {
      const specs = eight();
      const t = setup({ endpoints: specs, policy: PREFIX });
      teachExchange(t, order(12, specs)[1] as string);
      // Each home runs a full batch of 6 and queues one: a request there waits two positions.
      const fullHome = (key: number): string => {
        const home = order(key, specs)[0] as string;
        t.balancer.reportLoad(home, { running: 6, waiting: 1 });
        return home;
      };
      // A system prompt of 256 characters and a 40,000-character document nobody has sent yet:
      // 128 + 40,000 characters at stake for the requests that share its key, three positions.
      const home = fullHome(12);
      const document: PromptBlocks = {
        hashes: [11, 12, 13],
        ends: [256, 400, 40_256],
        homeDepth: 2,
        historyChars: 256,
      };
      const first = picked(t.balancer.pick({ prompt: document }));
      assert.equal(first.affinity, 'hit');
      assert.equal(first.attempt.endpoint.id, home);
      // A retry that may not go home meets the key's second endpoint full: no bet there, since
      // the other sidecars look for the document at the first.
      const second = order(12, specs)[1] as string;
      t.balancer.reportLoad(second, { running: 6, waiting: 1 });
      const retry = picked(t.balancer.pick({ prompt: document, exclude: new Set([home]) }));
      assert.equal(retry.affinity, 'overloaded');
      assert.notEqual(retry.attempt.endpoint.id, second);
      // The same text as a single message (speculative): no bet, balanced.
      const loneHome = fullHome(32);
      const lone = picked(
        t.balancer.pick({
          prompt: { hashes: [31, 32, 33], ends: [256, 400, 40_256], homeDepth: 2 },
        }),
      );
      assert.equal(lone.affinity, 'overloaded');
      assert.notEqual(lone.attempt.endpoint.id, loneHome);
      // 20,000 characters, counted once, are worth one position, not the two the home would cost;
      // the bet counts them ADDED_TEXT_AT_HOME_SHARE (2) times, for the later requests that share it.
      assert.equal(ADDED_TEXT_AT_HOME_SHARE, 2);
      const shortHome = fullHome(52);
      const shorter = picked(
        t.balancer.pick({
          prompt: {
            hashes: [51, 52, 53],
            ends: [256, 400, 20_256],
            homeDepth: 2,
            historyChars: 256,
          },
        }),
      );
      assert.equal(shorter.affinity, 'hit');
      assert.equal(shorter.attempt.endpoint.id, shortHome);
    });

    test('weighs only the wait beyond what balancing would meet', () => {
      // Every server reports a full batch: elsewhere the request would wait one position too, so
      // at the holder it waits one more than balancing, which 20,000 characters are worth.
      const { balancer, holder } = fullHolder(true);
      for (const s of eight()) {
        if (s.id === holder) continue;
        balancer.reportLoad(s.id, { running: 6, waiting: 1 });
        balancer.reportLoad(s.id, { running: 6, waiting: 0 });
      }
      const result = picked(balancer.pick({ prompt: longTurn(20_000) }));
      assert.equal(result.attempt.endpoint.id, holder);
    });
  });

  test('records nothing with a Header policy', () => {
    const specs = eight();
    const { balancer } = setup({ endpoints: specs, policy: { affinity: { key: 'Header' } } });
    const result = picked(balancer.pick({ prompt: PROMPT }));
    assert.equal(result.affinity, 'none');
  });
});

describe('server-reported load', () => {
  test('an endpoint whose queue other sidecars fill loses the ties, not its turn', () => {
    const { balancer, statusOf } = setup({ endpoints: [endpoint('a'), endpoint('b')] });
    balancer.reportLoad('a', { running: 6, waiting: 4, kvCacheUsage: 0.8 });
    // Equally loaded by this sidecar's own counts: the score, which carries the report, decides.
    for (let i = 0; i < 5; i++) {
      const first = picked(balancer.pick({})).attempt.endpoint.id;
      assert.equal(first, 'b');
      // Then b holds one more of this sidecar's requests: a is the least loaded by its counts.
      assert.equal(picked(balancer.pick({})).attempt.endpoint.id, 'a');
    }
    assert.equal(statusOf('a').load, 15);
    assert.equal(statusOf('b').load, 5);
    assert.deepEqual(statusOf('a').reported, {
      running: 6,
      waiting: 4,
      kvCacheUsage: 0.8,
      ageMs: 0,
    });
    assert.equal(statusOf('b').reported, undefined);
  });

  test('forgets a report after the maximum age', () => {
    const clock = fakeClock();
    const balancer = new Balancer(testPolicy(), [endpoint('a')], {
      clock,
      rng: seededRng(1),
      reportMaxAgeMs: 100,
    });
    balancer.reportLoad('a', { waiting: 9 });
    assert.equal(balancer.status()[0]!.load, 9);
    clock.advance(101);
    assert.equal(balancer.status()[0]!.load, 0);
  });

  test('a relayed report counts from when it was measured, and never undoes a fresher one', () => {
    const clock = fakeClock();
    const balancer = new Balancer(testPolicy(), [endpoint('a')], {
      clock,
      rng: seededRng(1),
      reportMaxAgeMs: 100,
    });
    clock.advance(1000);
    balancer.reportLoad('a', { waiting: 9 }, 60);
    assert.equal(balancer.status()[0]!.reported?.ageMs, 60);
    clock.advance(41);
    assert.equal(balancer.status()[0]!.load, 0, 'measured 101 ms ago: too old');
    balancer.reportLoad('a', { waiting: 2 });
    balancer.reportLoad('a', { waiting: 7 }, 30);
    assert.equal(balancer.status()[0]!.load, 2, 'the older relayed scrape is dropped');
  });

  test("a server reporting 4× its peers' time per token gets a request only when they are that much busier", () => {
    const { balancer, pickOn } = setup();
    balancer.reportLoad('a', { running: 0, interTokenLatencyMs: 40 });
    balancer.reportLoad('b', { running: 0, interTokenLatencyMs: 10 });
    balancer.reportLoad('c', { running: 0, interTokenLatencyMs: 10 });
    // Prefill not measured yet: the request counts as one hold. Idle, a counts as 4 × 1 − 1 = 3.
    const picks = Array.from({ length: 6 }, () => picked(balancer.pick({})).attempt.endpoint.id);
    assert.deepEqual(picks.toSorted(), ['b', 'b', 'b', 'c', 'c', 'c']);
    pickOn('b');
    pickOn('c');
    // b and c hold 4 each, a counts as 3: a's turn.
    assert.equal(picked(balancer.pick({})).attempt.endpoint.id, 'a');
    // One in flight makes it 4 × 2 − 1 = 7.
    for (let i = 0; i < 6; i++) assert.notEqual(picked(balancer.pick({})).attempt.endpoint.id, 'a');
  });

  test("status shows each server's reported slowdown, and none for a server that reports no speed", () => {
    const { balancer, statusOf } = setup();
    assert.equal(statusOf('a').reportedSlowdown, undefined, 'nobody reports a speed');
    balancer.reportLoad('a', { running: 0, interTokenLatencyMs: 40 });
    balancer.reportLoad('b', { running: 0, interTokenLatencyMs: 10 });
    balancer.reportLoad('c', { running: 0 });
    assert.equal(statusOf('a').reportedSlowdown, 4);
    assert.equal(statusOf('b').reportedSlowdown, 0.25);
    assert.equal(statusOf('c').reportedSlowdown, undefined);
  });

  test('a slower server with a free slot counts only its slower prefill, not the queue', () => {
    const { balancer, pickOn } = setup();
    pickOn('a');
    // a has shown a batch of 6 (it queued), and 2 run there now: 4 free slots.
    balancer.reportLoad('a', { running: 6, waiting: 1, interTokenLatencyMs: 40 });
    balancer.reportLoad('a', { running: 2, waiting: 0 });
    balancer.reportLoad('b', { running: 0, interTokenLatencyMs: 10 });
    balancer.reportLoad('c', { running: 0, interTokenLatencyMs: 10 });
    for (let i = 0; i < 5; i++) {
      pickOn('b');
      pickOn('c');
    }
    // With room, a counts 1 + 3 × 1 = 4, below b's and c's 5 (full, it would count 4 × 2 − 1 = 7).
    assert.equal(picked(balancer.pick({})).attempt.endpoint.id, 'a');
  });

  test('stops weighing a server once its speed is 2 s old, though its queue is still reported', () => {
    const clock = fakeClock();
    const balancer = new Balancer(testPolicy(), [endpoint('a'), endpoint('b')], {
      clock,
      rng: seededRng(1),
    });
    balancer.reportLoad('a', { running: 0, interTokenLatencyMs: 40 });
    balancer.reportLoad('b', { running: 0, interTokenLatencyMs: 10 });
    clock.advance(1000);
    // The scraper leaves the speed out of an idle server's reports after a while.
    balancer.reportLoad('a', { running: 0 });
    balancer.reportLoad('b', { running: 0 });
    const pick = () => picked(balancer.pick({})).attempt.endpoint.id;
    // Idle a counts 4 × 1 − 1 = 3: b takes three before a's turn.
    assert.deepEqual([pick(), pick(), pick()], ['b', 'b', 'b']);
    clock.advance(1001);
    balancer.reportLoad('a', { running: 0 });
    // a's speed is 2,001 ms old: plain counts, and a (0) is the least loaded.
    assert.equal(pick(), 'a');
  });

  test('weighs no server by speed while fewer than two report one', () => {
    const { balancer } = setup({ endpoints: [endpoint('a'), endpoint('b')] });
    balancer.reportLoad('a', { running: 0, interTokenLatencyMs: 40 });
    const picks = Array.from({ length: 4 }, () => picked(balancer.pick({})).attempt.endpoint.id);
    assert.deepEqual(picks.toSorted(), ['a', 'a', 'b', 'b']);
  });

  test('ignores reports for endpoints it does not know', () => {
    const { balancer } = setup();
    balancer.reportLoad('nobody', { waiting: 3 });
    assert.ok(balancer.status().every((s) => s.load === 0));
  });
});

describe('EWMA of time to first token', () => {
  test('feeds streamed successes into the EWMA with weight 0.2', () => {
    const { serve, statusOf } = setup({
      policy: { defaultTtftMs: 500, coldStart: { idleAfterMs: 0 } },
    });
    assert.equal(statusOf('a').ewmaTtftMs, 500);
    assert.equal(statusOf('a').ewmaSeeded, true);
    serve('a', OK, 100);
    assert.equal(statusOf('a').ewmaTtftMs, 420);
    assert.equal(statusOf('a').ewmaSeeded, false);
  });

  test('starts endpoints without samples at the pool median, never at zero', () => {
    const { serve, statusOf, update } = setup({
      policy: { defaultTtftMs: 500, coldStart: { idleAfterMs: 0 } },
    });
    serve('a', OK, 100); // 420
    serve('b', OK, 1_000); // seeded at 420 → 536
    assert.equal(statusOf('c').ewmaTtftMs, 478);
    // Beside the seeded EWMA, what each has measured itself.
    assert.deepEqual(statusOf('b').measuredTtft, { ms: 1_000, samples: 1 });
    assert.equal(statusOf('c').measuredTtft, undefined);
    // How long since each one's newest sample: a's came 1 s before b's.
    assert.equal(statusOf('a').lastTtftSampleAgeMs, 1_000);
    assert.equal(statusOf('b').lastTtftSampleAgeMs, 0);
    assert.equal(statusOf('c').lastTtftSampleAgeMs, undefined);
    update({ defaultTtftMs: 500, coldStart: { idleAfterMs: 0 } }, [
      endpoint('a'),
      endpoint('b'),
      endpoint('c'),
      endpoint('new'),
    ]);
    assert.equal(statusOf('new').ewmaTtftMs, 478);
    assert.equal(statusOf('new').ewmaSeeded, true);
  });

  test('does not feed non-streamed successes: their first byte is not a first token', () => {
    const { serve, statusOf } = setup();
    serve('a', { kind: 'success', streamed: false }, 5_000);
    assert.equal(statusOf('a').ewmaSeeded, true);
    assert.equal(statusOf('a').requests, 1);
  });

  test('feeds only successes: errors, 429s and neutral endings with a first byte do not count', () => {
    const { serve, statusOf } = setup();
    serve('a', ERROR, 1);
    serve('a', LIMITED, 1);
    serve('a', NEUTRAL, 1);
    assert.equal(statusOf('a').ewmaSeeded, true);
  });

  /** EWMAs seeded at 500 ms that keep every sample (no cold-start drop). */
  const keepingEverySample = (): ReturnType<typeof setup> =>
    setup({ policy: { defaultTtftMs: 500, coldStart: { idleAfterMs: 0 } } });

  /** An attempt on `a` whose first token arrived 100 ms after it started. */
  function firstTokenAfter100Ms(t: ReturnType<typeof setup>): Attempt {
    const attempt = t.pickOn('a');
    t.clock.advance(100);
    t.balancer.firstByte(attempt, true);
    return attempt;
  }

  test('takes a first token as a sample when it arrives, not when the stream ends, and once', () => {
    const t = keepingEverySample();
    const { balancer, clock, statusOf } = t;
    const attempt = firstTokenAfter100Ms(t);
    // The stream is still going: the sample is already in.
    assert.equal(statusOf('a').ewmaSeeded, false);
    assert.equal(statusOf('a').ewmaTtftMs, 420);
    clock.advance(60_000);
    balancer.finish(attempt, OK);
    assert.equal(statusOf('a').ewmaTtftMs, 420);
  });

  test('keeps a first token sampled even when its stream breaks off later', () => {
    const t = keepingEverySample();
    const { balancer, statusOf } = t;
    const attempt = firstTokenAfter100Ms(t);
    balancer.finish(attempt, ERROR);
    assert.equal(statusOf('a').ewmaTtftMs, 420);
    assert.equal(statusOf('a').errors, 1);
  });

  test('waits for the outcome of a first byte not known to be a token', () => {
    const { balancer, pickOn, clock, statusOf } = keepingEverySample();
    const failing = pickOn('a');
    clock.advance(1);
    balancer.firstByte(failing);
    assert.equal(statusOf('a').ewmaSeeded, true);
    balancer.finish(failing, ERROR);
    assert.equal(statusOf('a').ewmaSeeded, true);
    // The same first byte confirmed by a streamed success at the end is a sample then.
    const served = pickOn('a');
    clock.advance(100);
    balancer.firstByte(served);
    assert.equal(statusOf('a').ewmaSeeded, true);
    balancer.finish(served, OK);
    assert.equal(statusOf('a').ewmaTtftMs, 420);
  });

  test("drops a cold endpoint's first token like any first sample", () => {
    const { balancer, pickOn, clock, statusOf, events } = setup({
      policy: { defaultTtftMs: 500 },
    });
    const attempt = pickOn('a'); // a new endpoint: cold
    clock.advance(5_000);
    balancer.firstByte(attempt, true);
    // Dropped when the token arrived, not at the end of the stream.
    assert.deepEqual(events, [{ kind: 'cold-sample-dropped', endpointId: 'a' }]);
    assert.equal(statusOf('a').ewmaSeeded, true);
    balancer.finish(attempt, OK);
    assert.equal(events.length, 1);
    assert.equal(statusOf('a').ewmaSeeded, true);
  });

  test("takes no sample from a removed endpoint's first token", () => {
    const { balancer, pickOn, serve, statusOf, update, clock } = keepingEverySample();
    serve('a', OK, 100);
    serve('b', OK, 100);
    const leaving = pickOn('c');
    update({}, [endpoint('a'), endpoint('b')]);
    update({}, [endpoint('a'), endpoint('b'), endpoint('c')]);
    const seed = statusOf('c').ewmaTtftMs;
    clock.advance(5_000);
    balancer.firstByte(leaving, true);
    balancer.finish(leaving, OK);
    // The attempt belonged to the endpoint before it left: its sample must not reach the new one.
    assert.equal(statusOf('c').ewmaSeeded, true);
    assert.equal(statusOf('c').ewmaTtftMs, seed);
  });

  test('has no sample for a success that never reported a first byte', () => {
    const { serve, statusOf } = setup();
    serve('a', OK);
    assert.equal(statusOf('a').ewmaSeeded, true);
  });

  test('keeps the first first-byte time and ignores first bytes after the finish', () => {
    const { balancer, pickOn, clock, statusOf } = setup({
      policy: { defaultTtftMs: 500, coldStart: { idleAfterMs: 0 } },
    });
    const attempt = pickOn('a');
    clock.advance(100);
    balancer.firstByte(attempt);
    clock.advance(900);
    balancer.firstByte(attempt);
    balancer.finish(attempt, OK);
    balancer.firstByte(attempt);
    assert.equal(statusOf('a').ewmaTtftMs, 420);
  });
});

describe('cold starts', () => {
  test('drops the first sample after the endpoint was idle for idleAfterMs, and keeps the next', () => {
    const { serve, statusOf, clock, events } = setup({ policy: { defaultTtftMs: 500 } });
    serve('a', OK, 5_000); // a new endpoint: cold
    serve('a', OK, 100);
    assert.equal(statusOf('a').ewmaTtftMs, 420);
    clock.advance(60_000);
    serve('a', OK, 5_000);
    assert.equal(statusOf('a').ewmaTtftMs, 420);
    assert.deepEqual(events, [
      { kind: 'cold-sample-dropped', endpointId: 'a' },
      { kind: 'cold-sample-dropped', endpointId: 'a' },
    ]);
    serve('a', OK, 100);
    assert.equal(statusOf('a').ewmaTtftMs, 0.8 * 420 + 0.2 * 100);
  });

  test('keeps the sample of an endpoint idle for less than idleAfterMs', () => {
    const { serve, statusOf, clock, events } = setup({ policy: { defaultTtftMs: 500 } });
    serve('a', OK, 5_000); // a new endpoint: cold
    serve('a', OK, 100);
    clock.advance(59_899);
    serve('a', OK, 100);
    assert.equal(events.length, 1);
    assert.ok(statusOf('a').ewmaTtftMs < 420);
  });

  test('treats a new endpoint as cold: its first sample is dropped', () => {
    const { serve, statusOf, events } = setup({ policy: { defaultTtftMs: 500 } });
    serve('a', OK, 4_000);
    assert.deepEqual(events, [{ kind: 'cold-sample-dropped', endpointId: 'a' }]);
    assert.equal(statusOf('a').ewmaSeeded, true);
  });

  test('does not mistake a long stream in flight for idleness', () => {
    const { balancer, pickOn, serve, clock, events } = setup();
    serve('a', OK, 100); // warm-up: a new endpoint's first sample is dropped
    const longStream = pickOn('a');
    clock.advance(120_000);
    serve('a', OK, 100);
    balancer.finish(longStream, OK);
    assert.equal(events.length, 1);
  });

  test('drops only one sample when several attempts start after the idle period', () => {
    const { balancer, pickOn, clock, events, statusOf } = setup({ policy: { defaultTtftMs: 500 } });
    clock.advance(60_000);
    const first = pickOn('a');
    const second = pickOn('a');
    clock.advance(100);
    balancer.firstByte(first);
    balancer.firstByte(second);
    balancer.finish(first, OK);
    balancer.finish(second, OK);
    assert.equal(events.length, 1);
    assert.equal(statusOf('a').ewmaTtftMs, 420);
  });

  test('drops the first sample even when an error came back first', () => {
    const { serve, clock, events } = setup();
    clock.advance(60_000);
    const failing = serve('a', ERROR, 10);
    assert.ok(failing);
    serve('a', OK, 100);
    assert.deepEqual(events, [{ kind: 'cold-sample-dropped', endpointId: 'a' }]);
  });

  test('is disabled by idleAfterMs 0', () => {
    const { serve, clock, events } = setup({ policy: { coldStart: { idleAfterMs: 0 } } });
    clock.advance(600_000);
    serve('a', OK, 100);
    assert.equal(events.length, 0);
  });

  test('does not spend the drop on an unusable sample', () => {
    const { balancer, pickOn, serve, clock, events } = setup();
    clock.advance(60_000);
    const attempt = pickOn('a');
    clock.advance(-10); // clock went backwards: negative TTFT
    balancer.firstByte(attempt);
    balancer.finish(attempt, OK);
    assert.equal(events.length, 0);
    serve('a', OK, 100);
    assert.deepEqual(events, [{ kind: 'cold-sample-dropped', endpointId: 'a' }]);
  });
});

describe('breaker', () => {
  test('stays closed below minRequests, however many errors', () => {
    const { repeat, statusOf } = setup();
    repeat(19, 'a', ERROR);
    assert.equal(statusOf('a').breaker, 'closed');
  });

  test('opens at minRequests when the error rate reaches maxErrorRate', () => {
    const { repeat, statusOf, breakerEvents } = setup({ rng: middleRng() });
    repeat(10, 'a', OK);
    repeat(10, 'a', ERROR);
    assert.equal(statusOf('a').breaker, 'open');
    assert.deepEqual(breakerEvents(), [
      {
        kind: 'breaker',
        endpointId: 'a',
        from: 'closed',
        to: 'open',
        reason: 'errors',
        openForMs: 30_000,
      },
    ]);
  });

  test('stays closed with an error rate below maxErrorRate', () => {
    const { repeat, statusOf } = setup();
    repeat(11, 'a', OK);
    repeat(9, 'a', ERROR);
    repeat(10, 'a', OK);
    assert.equal(statusOf('a').breaker, 'closed');
    assert.deepEqual(statusOf('a').window, { requests: 30, errors: 9, rateLimited: 0 });
  });

  test('opens when the 429 rate reaches max429Rate', () => {
    const { repeat, statusOf, breakerEvents } = setup();
    repeat(14, 'a', OK);
    repeat(6, 'a', LIMITED);
    assert.equal(statusOf('a').breaker, 'open');
    assert.equal(breakerEvents()[0]!.reason, 'rate-limited');
  });

  test('does not count neutral endings toward health', () => {
    const { repeat, statusOf } = setup();
    repeat(100, 'a', NEUTRAL);
    repeat(19, 'a', ERROR);
    assert.equal(statusOf('a').breaker, 'closed');
    assert.equal(statusOf('a').requests, 19);
  });

  test('forgets errors older than the window', () => {
    const { repeat, statusOf, clock } = setup();
    repeat(15, 'a', ERROR);
    clock.advance(10_000);
    repeat(10, 'a', ERROR);
    assert.equal(statusOf('a').breaker, 'closed');
    assert.equal(statusOf('a').errors, 25);
  });

  test('opens a slow endpoint: EWMA above maxTtftSlowdown × the median of the others', () => {
    const { repeat, statusOf, breakerEvents } = setup();
    repeat(30, 'b', OK, 10); // converged near 10 ms (the seed's weight is 0.8^30)
    repeat(30, 'c', OK, 12);
    repeat(5, 'a', OK, 100);
    assert.equal(statusOf('a').slow, true);
    assert.equal(statusOf('b').slow, false);
    assert.equal(statusOf('a').breaker, 'closed'); // minRequests first
    repeat(15, 'a', OK, 100);
    assert.equal(statusOf('a').breaker, 'open');
    assert.equal(breakerEvents()[0]!.reason, 'slow');
  });

  test('judges every endpoint against the median of the others, equal EWMAs and even counts included', () => {
    const ids = ['a', 'b', 'c', 'd', 'e'];
    const { repeat, statusOf } = setup({
      endpoints: ids.map((id) => endpoint(id)),
      policy: { health: { minRequests: 1_000 } },
    });
    // a, b, c at ~10 ms, d at ~25, e at ~21: the others' median is 10 for d and e (slow at 3×
    // only past 30), 10 or 15.5 for a, b and c.
    for (const [id, ms] of [
      ['a', 10],
      ['b', 10],
      ['c', 10],
      ['d', 25],
      ['e', 21],
    ] as const)
      repeat(30, id, OK, ms);
    for (const id of ids) assert.equal(statusOf(id).slow, false, id);
    repeat(30, 'd', OK, 60); // now above 3 × 10
    assert.equal(statusOf('d').slow, true);
    for (const id of ['a', 'b', 'c', 'e']) assert.equal(statusOf(id).slow, false, id);
  });

  test('never calls an endpoint slow when no other endpoint has data', () => {
    const { repeat, statusOf } = setup();
    repeat(30, 'a', OK, 5_000);
    assert.equal(statusOf('a').slow, false);
    assert.equal(statusOf('a').breaker, 'closed');
  });

  test('compares only within the tier in Failover mode', () => {
    const endpoints = [
      endpoint('fast'),
      endpoint('backup1', { tier: 1 }),
      endpoint('backup2', { tier: 1 }),
    ];
    const { repeat, statusOf } = setup({ endpoints, policy: { mode: 'Failover' } });
    repeat(10, 'fast', OK, 10);
    repeat(10, 'backup1', OK, 300);
    assert.equal(statusOf('backup1').slow, false); // backup2 has no data: no reference
    repeat(10, 'backup2', OK, 280);
    assert.equal(statusOf('backup1').slow, false);
    assert.equal(statusOf('fast').slow, false);
  });

  test('turns half-open after openForMs with the drawn jitter, not before', () => {
    const { balancer, repeat, clock, breakerEvents } = setup({
      endpoints: [endpoint('a')],
      rng: scriptedRng([0]), // the lowest jitter: 0.8 × 30 s
    });
    repeat(20, 'a', ERROR);
    assert.equal(breakerEvents()[0]!.openForMs, 24_000);
    clock.advance(23_999);
    assert.equal(shedAfter(balancer.pick({})), 1);
    clock.advance(1);
    const probe = picked(balancer.pick({}));
    assert.equal(probe.attempt.halfOpenProbe, true);
    assert.deepEqual(breakerEvents()[1], {
      kind: 'breaker',
      endpointId: 'a',
      from: 'open',
      to: 'half-open',
      reason: 'open-expired',
    });
  });

  test('keeps the open period within ±20 % of openForMs', () => {
    for (let seed = 0; seed < 50; seed++) {
      const { repeat, breakerEvents } = setup({ rng: seededRng(seed) });
      repeat(20, 'a', ERROR);
      const openFor = breakerEvents()[0]!.openForMs!;
      assert.ok(openFor >= 24_000 && openFor <= 36_000, `${openFor}`);
    }
  });

  test('lets exactly one probe through while half-open', () => {
    const { balancer, repeat, clock, statusOf } = setup({ rng: middleRng() });
    repeat(20, 'a', ERROR);
    clock.advance(30_000);
    const probe = picked(balancer.pick({ exclude: new Set(['b', 'c']) }));
    assert.equal(probe.attempt.halfOpenProbe, true);
    assert.equal(statusOf('a').breaker, 'half-open');
    for (let i = 0; i < 20; i++) {
      assert.notEqual(picked(balancer.pick({})).attempt.endpoint.id, 'a');
    }
  });

  test('closes on a successful probe with a clean window', () => {
    const { balancer, repeat, clock, statusOf, breakerEvents } = setup({ rng: middleRng() });
    repeat(20, 'a', ERROR);
    clock.advance(30_000);
    const probe = picked(balancer.pick({ exclude: new Set(['b', 'c']) }));
    balancer.finish(probe.attempt, OK);
    assert.equal(statusOf('a').breaker, 'closed');
    assert.deepEqual(statusOf('a').window, { requests: 0, errors: 0, rateLimited: 0 });
    assert.equal(breakerEvents().at(-1)!.reason, 'probe-succeeded');
  });

  test('opens again for twice as long when the probe fails, up to maxOpenForMs', () => {
    const { balancer, repeat, clock, breakerEvents } = setup({
      endpoints: [endpoint('a')],
      rng: middleRng(),
      policy: { health: { maxOpenForMs: 100_000 } },
    });
    repeat(20, 'a', ERROR);
    const periods = [breakerEvents().at(-1)!.openForMs!];
    for (let i = 0; i < 3; i++) {
      clock.advance(periods.at(-1)!);
      const probe = picked(balancer.pick({}));
      assert.equal(probe.attempt.halfOpenProbe, true);
      balancer.finish(probe.attempt, i === 1 ? LIMITED : ERROR); // a 429 fails a probe too
      const reopened = breakerEvents().at(-1)!;
      assert.equal(reopened.reason, 'probe-failed');
      periods.push(reopened.openForMs!);
    }
    assert.deepEqual(periods, [30_000, 60_000, 100_000, 100_000]);
  });

  test('resets the doubling once a probe succeeds', () => {
    const { balancer, repeat, clock, breakerEvents } = setup({
      endpoints: [endpoint('a')],
      rng: middleRng(),
    });
    repeat(20, 'a', ERROR);
    clock.advance(30_000);
    balancer.finish(picked(balancer.pick({})).attempt, ERROR); // 60 s
    clock.advance(60_000);
    balancer.finish(picked(balancer.pick({})).attempt, OK); // closed
    repeat(20, 'a', ERROR);
    assert.equal(breakerEvents().at(-1)!.openForMs, 30_000);
  });

  test('frees the probe slot without a verdict when the probe ends neutral', () => {
    const { balancer, repeat, clock, statusOf } = setup({
      endpoints: [endpoint('a')],
      rng: middleRng(),
    });
    repeat(20, 'a', ERROR);
    clock.advance(30_000);
    balancer.finish(picked(balancer.pick({})).attempt, NEUTRAL);
    assert.equal(statusOf('a').breaker, 'half-open');
    const next = picked(balancer.pick({}));
    assert.equal(next.attempt.halfOpenProbe, true);
  });

  test('lets only the probe decide: attempts from before the opening do not', () => {
    const { balancer, pickOn, repeat, clock, statusOf } = setup({
      endpoints: [endpoint('a')],
      rng: middleRng(),
    });
    const old = pickOn('a');
    repeat(20, 'a', ERROR);
    clock.advance(30_000);
    const probe = picked(balancer.pick({}));
    balancer.finish(old, OK);
    assert.equal(statusOf('a').breaker, 'half-open');
    balancer.finish(probe.attempt, OK);
    assert.equal(statusOf('a').breaker, 'closed');
  });

  test('reports every transition through onEvent, in order', () => {
    const { balancer, repeat, clock, breakerEvents } = setup({
      endpoints: [endpoint('a')],
      rng: middleRng(),
    });
    repeat(20, 'a', ERROR);
    clock.advance(30_000);
    balancer.finish(picked(balancer.pick({})).attempt, OK);
    assert.deepEqual(
      breakerEvents().map((e) => `${e.from}>${e.to}:${e.reason}`),
      ['closed>open:errors', 'open>half-open:open-expired', 'half-open>closed:probe-succeeded'],
    );
  });

  test('works without an onEvent listener', () => {
    const balancer = new Balancer(testPolicy({ health: { minRequests: 1 } }), [endpoint('a')], {
      clock: fakeClock(),
      rng: middleRng(),
    });
    const attempt = picked(balancer.pick({})).attempt;
    balancer.finish(attempt, ERROR);
    assert.equal(balancer.status()[0]!.breaker, 'open');
  });
});

describe('Retry-After cooldown', () => {
  test('keeps a rate-limited endpoint out of the candidates until Retry-After has passed', () => {
    const { balancer, serve, clock } = setup({ endpoints: [endpoint('a')] });
    serve('a', { kind: 'rate-limited', retryAfterMs: 5_000 });
    assert.equal(shedAfter(balancer.pick({})), 5_000);
    clock.advance(4_999);
    assert.equal(shedAfter(balancer.pick({})), 1);
    clock.advance(1);
    picked(balancer.pick({}));
  });

  test(`honours Retry-After for at most ${MAX_RETRY_AFTER_COOLDOWN_MS / 1000} s`, () => {
    const { balancer, serve } = setup({ endpoints: [endpoint('a')] });
    serve('a', { kind: 'rate-limited', retryAfterMs: 3_600_000 });
    assert.equal(shedAfter(balancer.pick({})), 60_000);
    const inf = setup({ endpoints: [endpoint('a')] });
    inf.serve('a', { kind: 'rate-limited', retryAfterMs: Infinity });
    assert.equal(shedAfter(inf.balancer.pick({})), 60_000);
  });

  test('ignores a missing, zero, negative, NaN or non-numeric Retry-After', () => {
    const { balancer, serve } = setup({ endpoints: [endpoint('a')] });
    for (const retryAfterMs of [undefined, 0, -5, Number.NaN, '30' as unknown as number]) {
      serve('a', { kind: 'rate-limited', retryAfterMs });
      picked(balancer.pick({}));
    }
  });

  test('extends a cooldown but never shortens it', () => {
    const { balancer, serve, pickOn, clock } = setup({ endpoints: [endpoint('a')] });
    const inFlight = pickOn('a');
    serve('a', { kind: 'rate-limited', retryAfterMs: 10_000 });
    balancer.finish(inFlight, { kind: 'rate-limited', retryAfterMs: 1_000 });
    assert.equal(shedAfter(balancer.pick({})), 10_000);
    clock.advance(500);
    assert.equal(shedAfter(balancer.pick({})), 9_500);
  });

  test('waits for the later of cooldown and open breaker when shedding', () => {
    const { balancer, repeat, serve } = setup({ endpoints: [endpoint('a')], rng: middleRng() });
    repeat(19, 'a', ERROR);
    serve('a', { kind: 'rate-limited', retryAfterMs: 45_000 }); // 20th: opens for 30 s
    assert.equal(shedAfter(balancer.pick({})), 45_000);
  });
});

describe('pinned requests (stored responses)', () => {
  test('go to the pinned endpoint whatever affinity and load say', () => {
    const { balancer, pickOn } = setup();
    pickOn('b');
    pickOn('b'); // b is the busiest
    for (let i = 0; i < 5; i++) {
      const result = picked(balancer.pick({ pinnedEndpointId: 'b', affinityKey: 'k' }));
      assert.equal(result.attempt.endpoint.id, 'b');
      assert.equal(result.affinity, 'hit');
    }
  });

  test('shed rather than go elsewhere: an unknown, drifted, excluded or cooling endpoint', () => {
    const { balancer, serve, update } = setup();
    assert.equal(
      shedAfter(balancer.pick({ pinnedEndpointId: 'gone' })),
      DEFAULT_SHED_RETRY_AFTER_MS,
    );
    assert.equal(
      shedAfter(balancer.pick({ pinnedEndpointId: 'a', exclude: new Set(['a']) })),
      DEFAULT_SHED_RETRY_AFTER_MS,
    );
    serve('c', { kind: 'rate-limited', retryAfterMs: 5_000 });
    assert.equal(shedAfter(balancer.pick({ pinnedEndpointId: 'c' })), 5_000);
    update({}, [endpoint('a'), endpoint('b', { drifted: true }), endpoint('c')]);
    assert.equal(shedAfter(balancer.pick({ pinnedEndpointId: 'b' })), DEFAULT_SHED_RETRY_AFTER_MS);
  });

  test('shed until an open breaker lets a probe through, then take the probe slot', () => {
    const { balancer, repeat, clock } = setup({ endpoints: [endpoint('a')], rng: middleRng() });
    repeat(20, 'a', ERROR); // opens for 30 s
    assert.equal(shedAfter(balancer.pick({ pinnedEndpointId: 'a' })), 30_000);
    clock.advance(30_000);
    const result = picked(balancer.pick({ pinnedEndpointId: 'a' }));
    assert.equal(result.attempt.halfOpenProbe, true);
  });
});

describe('retries', () => {
  test("answers 'max-attempts' once attemptsSoFar reaches maxAttempts", () => {
    const { balancer } = setup();
    assert.equal(balancer.tryRetry(1).kind, 'retry');
    assert.equal(balancer.tryRetry(2).kind, 'retry');
    assert.equal(balancer.tryRetry(3).kind, 'max-attempts');
    assert.equal(balancer.tryRetry(Number.NaN).kind, 'max-attempts');
  });

  test("answers 'budget-exhausted' once the budget is spent, and refills with first attempts", () => {
    const { balancer } = setup({ policy: { retry: { minPerSecond: 0, budgetPercent: 20 } } });
    assert.equal(balancer.tryRetry(1).kind, 'budget-exhausted');
    for (let i = 0; i < 10; i++) balancer.recordRequest();
    assert.equal(balancer.tryRetry(1).kind, 'retry');
    assert.equal(balancer.tryRetry(1).kind, 'retry');
    assert.equal(balancer.tryRetry(1).kind, 'budget-exhausted');
    assert.deepEqual(balancer.retryBudget(), { firstAttempts: 10, retries: 2, allowance: 2 });
  });

  test('does not withdraw from the budget when maxAttempts already says no', () => {
    const { balancer } = setup({ policy: { retry: { minPerSecond: 0.1 } } });
    assert.equal(balancer.tryRetry(5).kind, 'max-attempts');
    assert.equal(balancer.retryBudget().retries, 0);
  });

  test('applies a new retry policy on update', () => {
    const { balancer, update } = setup();
    update({ retry: { maxAttempts: 1 } }, [endpoint('a')]);
    assert.equal(balancer.tryRetry(1).kind, 'max-attempts');
  });
});

describe('update', () => {
  test('keeps EWMA, in-flight and breaker state by endpoint id', () => {
    const { balancer, serve, repeat, pickOn, statusOf, update } = setup();
    serve('a', OK, 100);
    pickOn('a');
    repeat(20, 'b', ERROR);
    const before = statusOf('a').ewmaTtftMs;
    update({}, [endpoint('b', { url: 'http://moved/v1' }), endpoint('a')]);
    assert.deepEqual(
      balancer.status().map((s) => s.id),
      ['b', 'a'],
    );
    assert.equal(statusOf('a').ewmaTtftMs, before);
    assert.equal(statusOf('a').inFlight, 1);
    assert.equal(statusOf('b').breaker, 'open');
    assert.equal(statusOf('b').url, 'http://moved/v1');
  });

  test('stops picking removed endpoints but lets their attempts finish harmlessly', () => {
    const { balancer, pickOn, statusOf, update, events } = setup({ rng: middleRng() });
    const leaving = Array.from({ length: 25 }, () => pickOn('c'));
    update({}, [endpoint('a'), endpoint('b')]);
    for (let i = 0; i < 30; i++)
      assert.notEqual(picked(balancer.pick({})).attempt.endpoint.id, 'c');
    for (const attempt of leaving) {
      balancer.firstByte(attempt);
      balancer.finish(attempt, ERROR);
    }
    assert.equal(events.length, 0);
    assert.equal(balancer.status().length, 2);
    assert.equal(statusOf('a').errors, 0);
  });

  test('starts an endpoint that left and came back from scratch', () => {
    const { serve, statusOf, update } = setup();
    serve('c', OK, 100);
    serve('c', ERROR);
    update({}, [endpoint('a'), endpoint('b')]);
    update({}, [endpoint('a'), endpoint('b'), endpoint('c')]);
    assert.equal(statusOf('c').errors, 0);
    assert.equal(statusOf('c').ewmaSeeded, true);
  });

  test('counts the in-flight attempts of an endpoint that left and came back', () => {
    const { balancer, pickOn, statusOf, update } = setup({ rng: middleRng() });
    const earlier = [pickOn('c'), pickOn('c')];
    update({}, [endpoint('a'), endpoint('b')]);
    update({}, [endpoint('a'), endpoint('b'), endpoint('c')]);
    assert.equal(statusOf('c').inFlight, 2, 'its earlier streams still load it');
    // Gone and back once more while they run: still counted.
    update({}, [endpoint('a'), endpoint('b')]);
    update({}, [endpoint('a'), endpoint('b'), endpoint('c')]);
    const later = pickOn('c');
    assert.equal(statusOf('c').inFlight, 3);
    balancer.finish(earlier[0]!, ERROR);
    assert.equal(statusOf('c').inFlight, 2);
    assert.equal(statusOf('c').errors, 0, 'an earlier life says nothing about health');
    balancer.finish(earlier[1]!, OK);
    balancer.finish(later, OK);
    assert.equal(statusOf('c').inFlight, 0);
  });

  test('drops a removed endpoint from the pool median', () => {
    const { serve, statusOf, update } = setup({
      policy: { defaultTtftMs: 500, coldStart: { idleAfterMs: 0 } },
    });
    serve('a', OK, 100); // 420
    serve('b', OK, 2_500); // 836
    assert.equal(statusOf('c').ewmaTtftMs, 628);
    update({ defaultTtftMs: 500, coldStart: { idleAfterMs: 0 } }, [endpoint('a'), endpoint('c')]);
    assert.equal(statusOf('c').ewmaTtftMs, 420);
  });

  test('keeps the first of duplicated ids', () => {
    const { balancer } = setup({
      endpoints: [endpoint('a', { url: 'http://one/v1' }), endpoint('a', { url: 'http://two/v1' })],
    });
    assert.deepEqual(
      balancer.status().map((s) => s.url),
      ['http://one/v1'],
    );
  });

  test('restarts the health window when its length changes, and keeps it otherwise', () => {
    const { repeat, statusOf, update } = setup();
    repeat(5, 'a', ERROR);
    update({ health: { openForMs: 1_000 } }, [endpoint('a')]);
    assert.equal(statusOf('a').window.errors, 5);
    update({ health: { windowMs: 20_000 } }, [endpoint('a')]);
    assert.equal(statusOf('a').window.errors, 0);
    assert.equal(statusOf('a').errors, 5);
  });

  test('switches between Balance and Failover', () => {
    const endpoints = [endpoint('a'), endpoint('b', { tier: 1 })];
    const { balancer, update } = setup({ endpoints, rng: seededRng(3) });
    const seen = new Set<string>();
    for (let i = 0; i < 50; i++) seen.add(picked(balancer.pick({})).attempt.endpoint.id);
    assert.deepEqual([...seen].sort(), ['a', 'b']);
    update({ mode: 'Failover' }, endpoints);
    for (let i = 0; i < 50; i++) assert.equal(picked(balancer.pick({})).attempt.endpoint.id, 'a');
  });

  test('applies new breaker settings at the next opening', () => {
    const { repeat, update, breakerEvents } = setup({ rng: middleRng() });
    update({ health: { openForMs: 5_000 } }, [endpoint('a')]);
    repeat(20, 'a', ERROR);
    assert.equal(breakerEvents()[0]!.openForMs, 5_000);
  });
});

describe('status', () => {
  test('describes every endpoint in list order', () => {
    const endpoints = [
      endpoint('x', { backend: 'in-cluster', tier: 0, costPerMTok: 0.2 }),
      endpoint('y', { backend: 'provider', tier: 1, costPerMTok: 0.6, drifted: true }),
    ];
    const { balancer } = setup({ endpoints, policy: { defaultTtftMs: 700 } });
    assert.deepEqual(balancer.status(), [
      {
        id: 'x',
        backend: 'in-cluster',
        url: 'http://x/v1',
        tier: 0,
        inFlight: 0,
        load: 0,
        ewmaTtftMs: 700,
        ewmaSeeded: true,
        breaker: 'closed',
        slow: false,
        drifted: false,
        requests: 0,
        errors: 0,
        rateLimited: 0,
        window: { requests: 0, errors: 0, rateLimited: 0 },
        costPerMTok: 0.2,
        driftMismatches: 0,
      },
      {
        id: 'y',
        backend: 'provider',
        url: 'http://y/v1',
        tier: 1,
        inFlight: 0,
        load: 0,
        ewmaTtftMs: 700,
        ewmaSeeded: true,
        breaker: 'closed',
        slow: false,
        drifted: true,
        requests: 0,
        errors: 0,
        rateLimited: 0,
        window: { requests: 0, errors: 0, rateLimited: 0 },
        costPerMTok: 0.6,
        driftMismatches: 0,
      },
    ]);
  });

  test('shows the probe fingerprint and counts passive drift mismatches', () => {
    const probe = { fingerprint: 'm/fp/abc', model: 'm', systemFingerprint: 'fp', drifted: true };
    const { balancer, statusOf } = setup({ endpoints: [endpoint('a', { probe }), endpoint('b')] });
    assert.equal(statusOf('a').fingerprint, 'm/fp/abc');
    assert.equal(statusOf('a').drifted, true, 'the verdict, though not excluded');
    assert.equal(statusOf('b').fingerprint, undefined);
    const attempt = picked(balancer.pick({ exclude: new Set(['b']) })).attempt;
    balancer.noteDriftMismatch(attempt);
    balancer.noteDriftMismatch(attempt);
    assert.equal(statusOf('a').driftMismatches, 2);
    balancer.update(testPolicy(), [endpoint('b')]);
    balancer.noteDriftMismatch(attempt); // a left the pool: nothing to count on
    balancer.noteDriftMismatch({ endpoint: endpoint('z'), startedAtMs: 0, halfOpenProbe: false });
  });

  test('shows an expired open breaker as half-open', () => {
    const { repeat, clock, statusOf, breakerEvents } = setup({ rng: middleRng() });
    repeat(20, 'a', ERROR);
    clock.advance(30_000);
    assert.equal(statusOf('a').breaker, 'half-open');
    assert.equal(breakerEvents().at(-1)!.reason, 'open-expired');
  });

  test('counts lifetime totals and window totals separately', () => {
    const { repeat, statusOf, clock } = setup();
    repeat(3, 'a', OK);
    repeat(2, 'a', ERROR);
    repeat(1, 'a', LIMITED);
    clock.advance(20_000);
    const s = statusOf('a');
    assert.deepEqual([s.requests, s.errors, s.rateLimited], [6, 2, 1]);
    assert.deepEqual(s.window, { requests: 0, errors: 0, rateLimited: 0 });
  });
});

describe('robustness', () => {
  test('survives a clock going backwards without negative counts or samples', () => {
    const { balancer, pickOn, serve, statusOf, clock } = setup();
    clock.set(100_000);
    serve('a', ERROR);
    const attempt = pickOn('a');
    clock.set(50_000);
    balancer.firstByte(attempt);
    balancer.finish(attempt, OK);
    serve('a', ERROR);
    const s = statusOf('a');
    assert.equal(s.inFlight, 0);
    assert.equal(s.ewmaSeeded, true);
    assert.deepEqual(s.window, { requests: 3, errors: 2, rateLimited: 0 });
  });

  test('uses the last good reading when the clock returns NaN or Infinity', () => {
    let now = 0;
    const clock = { nowMs: () => now };
    const events: PolicyEvent[] = [];
    const balancer = new Balancer(testPolicy({ health: { minRequests: 1 } }), [endpoint('a')], {
      clock,
      rng: middleRng(),
      onEvent: (e) => events.push(e),
    });
    now = 1_000;
    const attempt = picked(balancer.pick({})).attempt;
    now = Number.NaN;
    balancer.finish(attempt, ERROR); // opens at the last good time, 1 000
    now = Infinity;
    assert.equal(shedAfter(balancer.pick({})), 30_000);
    now = 31_000;
    assert.equal(picked(balancer.pick({})).attempt.halfOpenProbe, true);
  });

  test('treats an unknown outcome kind as neutral', () => {
    const { balancer, pickOn, statusOf } = setup();
    balancer.finish(pickOn('a'), { kind: 'mystery' } as unknown as Outcome);
    balancer.finish(pickOn('a'), undefined as unknown as Outcome);
    assert.equal(statusOf('a').requests, 0);
    assert.equal(statusOf('a').inFlight, 0);
  });

  test('survives NaN prices and weights by routing on latency', () => {
    const endpoints = [
      endpoint('a', { costPerMTok: Number.NaN }),
      endpoint('b', { costPerMTok: 1 }),
    ];
    const { balancer } = setup({
      endpoints,
      policy: { costWeightPerMs: Number.NaN },
      rng: scriptedRng([0, 0]),
    });
    assert.equal(picked(balancer.pick({})).attempt.endpoint.id, 'a');
  });

  test('defaults the pick request when the shell passes none', () => {
    const { balancer } = setup({ endpoints: [endpoint('a')] });
    assert.equal(picked(balancer.pick()).attempt.endpoint.id, 'a');
  });
});

describe('TTFT samples normalised by request size', () => {
  test('a sample of a large request counts as that of a reference-size one', () => {
    assert.equal(normalisedTtftMs(300, undefined), 300);
    assert.equal(normalisedTtftMs(300, 100), 300, 'small requests count as they are');
    assert.equal(normalisedTtftMs(300, REFERENCE_REQUEST_BYTES), 300);
    assert.equal(normalisedTtftMs(300, REFERENCE_REQUEST_BYTES * 10), 30);
  });

  test('the EWMA is fed the normalised sample when the shell gives the size', () => {
    const { balancer, statusOf, clock } = setup({
      endpoints: [endpoint('a')],
      policy: { defaultTtftMs: 500, coldStart: { idleAfterMs: 0 } },
    });
    const first = picked(balancer.pick({ requestBytes: REFERENCE_REQUEST_BYTES * 4 })).attempt;
    clock.advance(400);
    balancer.firstByte(first);
    balancer.finish(first, OK);
    // 400 ms for four times the reference size: 100 ms fed, 0.8 × 500 + 0.2 × 100 = 420.
    assert.equal(statusOf('a').ewmaTtftMs, 420);
  });
});
