import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import {
  Balancer,
  DEFAULT_SHED_RETRY_AFTER_MS,
  MAX_RETRY_AFTER_COOLDOWN_MS,
  normalisedTtftMs,
  REFERENCE_REQUEST_BYTES,
} from './balancer.ts';
import { seededRng } from './rng.ts';
import { BALANCE_REPORT_MAX_AGE_MS } from './server-load.ts';
import {
  endpoint,
  ERROR,
  fakeClock,
  LIMITED,
  measureTtft,
  middleRng,
  NEUTRAL,
  OK,
  picked,
  scriptedRng,
  setupBalancer,
  shedAfter,
  testPolicy,
} from './testing.ts';
import type { Attempt, Outcome, PolicyEvent } from './types.ts';

describe('candidates and shedding', () => {
  test('returns the only candidate without drawing a random number', () => {
    const rng = scriptedRng([]);
    const { balancer } = setupBalancer({ endpoints: [endpoint('solo')], rng });
    const result = picked(balancer.pick({}));
    assert.equal(result.attempt.endpoint.id, 'solo');
    assert.equal(result.affinity, 'none');
    assert.equal(result.attempt.halfOpenProbe, false);
    assert.equal(rng.drawn, 0);
  });

  test('picks the lower score of two P2C candidates', () => {
    const { balancer, pickOn } = setupBalancer({ endpoints: [endpoint('a'), endpoint('b')] });
    pickOn('a');
    pickOn('a'); // a: 2 in flight
    const busyFirst = new Balancer(testPolicy(), [endpoint('a'), endpoint('b')], {
      clock: fakeClock(),
      rng: scriptedRng([0, 0]),
    });
    assert.equal(picked(busyFirst.pick({})).attempt.endpoint.id, 'a'); // a fresh one: tie → first drawn
    const withScript = setupBalancer({
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
    const { balancer } = setupBalancer({
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
    const { balancer } = setupBalancer({
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
    const { balancer } = setupBalancer({ endpoints, rng: scriptedRng([0.9, 0]) });
    assert.equal(picked(balancer.pick({})).attempt.endpoint.id, 'cheap'); // tie → first drawn
    assert.equal(picked(balancer.pick({})).attempt.endpoint.id, 'dear'); // cheap is busier now
  });

  test('ignores cost for pure latency routing', () => {
    const endpoints = [
      endpoint('dear', { costPerMTok: 0.6 }),
      endpoint('cheap', { costPerMTok: 0.2 }),
    ];
    const { balancer } = setupBalancer({ endpoints, rng: scriptedRng([0, 0]) });
    assert.equal(picked(balancer.pick({})).attempt.endpoint.id, 'dear'); // tie → first drawn
  });

  test('returns shed with the default retry-after when the pool is empty', () => {
    const { balancer } = setupBalancer({ endpoints: [] });
    assert.equal(shedAfter(balancer.pick({})), DEFAULT_SHED_RETRY_AFTER_MS);
    assert.equal(DEFAULT_SHED_RETRY_AFTER_MS, 1000);
  });

  test('returns shed when every endpoint is ejected, until the soonest breaker half-opens', () => {
    const { balancer, repeat, clock } = setupBalancer({
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
    const { balancer } = setupBalancer({
      endpoints: [endpoint('a', { drifted: true }), endpoint('b')],
    });
    for (let i = 0; i < 50; i++) assert.equal(picked(balancer.pick({})).attempt.endpoint.id, 'b');
    const allDrifted = setupBalancer({ endpoints: [endpoint('a', { drifted: true })] });
    assert.equal(shedAfter(allDrifted.balancer.pick({})), DEFAULT_SHED_RETRY_AFTER_MS);
  });

  test('never goes back to an excluded endpoint, and does not wait for it when shedding', () => {
    const { balancer } = setupBalancer();
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
    const { balancer, repeat, clock } = setupBalancer({
      endpoints: [endpoint('a')],
      rng: middleRng(),
    });
    repeat(20, 'a', ERROR);
    clock.advance(30_000);
    assert.equal(picked(balancer.pick({})).attempt.halfOpenProbe, true);
    assert.equal(shedAfter(balancer.pick({})), DEFAULT_SHED_RETRY_AFTER_MS);
  });
});

describe('in-flight accounting', () => {
  test('counts an attempt from pick until finish', () => {
    const { balancer, statusOf, pickOn } = setupBalancer();
    const attempt = pickOn('a');
    assert.equal(statusOf('a').inFlight, 1);
    balancer.finish(attempt, OK);
    assert.equal(statusOf('a').inFlight, 0);
  });

  test('ignores a second finish of the same attempt', () => {
    const { balancer, statusOf, pickOn } = setupBalancer();
    const first = pickOn('a');
    pickOn('a');
    balancer.finish(first, ERROR);
    balancer.finish(first, ERROR);
    assert.equal(statusOf('a').inFlight, 1);
    assert.equal(statusOf('a').errors, 1);
  });

  test('ignores attempts it did not hand out', () => {
    const { balancer, statusOf, pickOn } = setupBalancer();
    pickOn('a');
    const forged: Attempt = { endpoint: endpoint('a'), startedAtMs: 0, halfOpenProbe: false };
    balancer.firstByte(forged);
    balancer.finish(forged, ERROR);
    assert.equal(statusOf('a').inFlight, 1);
    assert.equal(statusOf('a').errors, 0);
  });

  test('hands out frozen attempts', () => {
    const { pickOn } = setupBalancer();
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
    const { balancer } = setupBalancer({ endpoints: tiers(), policy: { mode: 'Failover' } });
    const counts = spread(balancer);
    assert.deepEqual([...counts.keys()].sort(), ['a', 'b']);
    assert.ok(counts.get('a')! > 100 && counts.get('b')! > 100);
  });

  test('orders tiers by tier number, not by list position', () => {
    const endpoints = [endpoint('backup', { tier: 3 }), endpoint('primary', { tier: 1 })];
    const { balancer } = setupBalancer({ endpoints, policy: { mode: 'Failover' } });
    assert.equal(picked(balancer.pick({})).attempt.endpoint.id, 'primary');
  });

  test("falls to tier 2 when tier 1's breakers open, and returns when they recover", () => {
    const { balancer, repeat, clock } = setupBalancer({
      endpoints: tiers(),
      policy: { mode: 'Failover' },
    });
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
    const { balancer } = setupBalancer({ endpoints: tiers(), policy: { mode: 'Failover' } });
    const retry = picked(balancer.pick({ exclude: new Set(['a', 'b']) }));
    assert.equal(retry.attempt.endpoint.tier, 1);
  });

  test('spreads over every tier in Balance mode', () => {
    const { balancer } = setupBalancer({ endpoints: tiers() });
    assert.deepEqual([...spread(balancer).keys()].sort(), ['a', 'b', 'c', 'd']);
  });
});

describe('server-reported load', () => {
  test('an endpoint whose queue other sidecars fill loses the ties, not its turn', () => {
    const { balancer, statusOf } = setupBalancer({ endpoints: [endpoint('a'), endpoint('b')] });
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

  test('with every server reporting within half a second, the least-loaded step counts the estimate', () => {
    const { balancer, statusOf } = setupBalancer({ endpoints: [endpoint('a'), endpoint('b')] });
    balancer.reportLoad('a', { running: 6, waiting: 4 });
    balancer.reportLoad('b', { running: 2, waiting: 0 });
    // Other sidecars fill a: b takes this sidecar's requests until b looks as busy (10 each).
    for (let i = 0; i < 8; i++) assert.equal(picked(balancer.pick({})).attempt.endpoint.id, 'b');
    assert.equal(statusOf('b').load, 10);
    assert.equal(statusOf('a').inFlight, 0);
    // Equally loaded by the estimate: both stay in play.
    const next = new Set([0, 1, 2, 3].map(() => picked(balancer.pick({})).attempt.endpoint.id));
    assert.deepEqual([...next].sort(), ['a', 'b']);
  });

  test('a report older than half a second, or a server without one, leaves the step to the own counts', () => {
    const { balancer, clock } = setupBalancer({ endpoints: [endpoint('a'), endpoint('b')] });
    balancer.reportLoad('a', { running: 6, waiting: 4 });
    balancer.reportLoad('b', { running: 2, waiting: 0 });
    clock.advance(BALANCE_REPORT_MAX_AGE_MS + 1);
    // Still within the reports' maximum age (they score the ties), but too old to balance on,
    // which would send every sidecar holding them to b: the own counts alternate.
    const ids = [0, 1, 2, 3].map(() => picked(balancer.pick({})).attempt.endpoint.id);
    assert.deepEqual(ids, ['b', 'a', 'b', 'a']);

    // A fresh report from one server only: the other (an external provider, say) would look
    // emptier than any server whose report counts everyone's requests.
    const mixed = setupBalancer({ endpoints: [endpoint('a'), endpoint('b'), endpoint('p')] });
    mixed.balancer.reportLoad('a', { running: 0, waiting: 0 });
    mixed.balancer.reportLoad('b', { running: 9, waiting: 3 });
    const counts = new Map<string, number>();
    for (let i = 0; i < 9; i++) {
      const id = picked(mixed.balancer.pick({})).attempt.endpoint.id;
      counts.set(id, (counts.get(id) ?? 0) + 1);
    }
    assert.deepEqual(Object.fromEntries(counts), { a: 3, b: 3, p: 3 });
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

  /** This sidecar's own samples: a 4× slower than b and c (a report counts only as far as that). */
  const measureAFourTimesSlower = (balancer: Balancer, clock: ReturnType<typeof fakeClock>) => {
    measureTtft(balancer, clock, 'a', 40);
    measureTtft(balancer, clock, 'b', 10);
    measureTtft(balancer, clock, 'c', 10);
  };

  test("a server reporting 4× its peers' time per token gets a request only when they are that much busier", () => {
    const { balancer, clock, pickOn } = setupBalancer();
    measureAFourTimesSlower(balancer, clock);
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
    const { balancer, statusOf } = setupBalancer();
    assert.equal(statusOf('a').reportedSlowdown, undefined, 'nobody reports a speed');
    balancer.reportLoad('a', { running: 0, interTokenLatencyMs: 40 });
    balancer.reportLoad('b', { running: 0, interTokenLatencyMs: 10 });
    balancer.reportLoad('c', { running: 0 });
    assert.equal(statusOf('a').reportedSlowdown, 4);
    assert.equal(statusOf('b').reportedSlowdown, 0.25);
    assert.equal(statusOf('c').reportedSlowdown, undefined);
  });

  /** a reports 4× b's and c's time per token, has shown a batch of 6 (it queued), runs 2: 4 free. */
  const slowServerWithRoom = (balancer: Balancer): void => {
    balancer.reportLoad('a', { running: 6, waiting: 1, interTokenLatencyMs: 40 });
    balancer.reportLoad('a', { running: 2, waiting: 0 });
    balancer.reportLoad('b', { running: 0, interTokenLatencyMs: 10 });
    balancer.reportLoad('c', { running: 0, interTokenLatencyMs: 10 });
  };

  test('a slower server with a free slot counts only its slower prefill, not the queue', () => {
    const { balancer, clock, pickOn } = setupBalancer();
    measureAFourTimesSlower(balancer, clock);
    pickOn('a');
    slowServerWithRoom(balancer);
    for (let i = 0; i < 5; i++) {
      pickOn('b');
      pickOn('c');
    }
    // With room, a counts 1 + 3 × 1 = 4, below b's and c's 5 (full, it would count 4 × 2 − 1 = 7).
    assert.equal(picked(balancer.pick({})).attempt.endpoint.id, 'a');
  });

  test("a long prompt weighs its prefill in the slower server's queue positions, not in holds", () => {
    const { balancer, clock, pickOn } = setupBalancer();
    measureAFourTimesSlower(balancer, clock);
    // The prefill exchange measures 100 ms for 64 KiB and a 600 ms hold.
    const sample = pickOn('b', { requestBytes: 65_536 });
    clock.advance(100);
    balancer.firstByte(sample, true);
    clock.advance(500);
    balancer.finish(sample, OK);
    slowServerWithRoom(balancer);
    // b and c run 8 each.
    for (let i = 0; i < 8; i++) {
      pickOn('b');
      pickOn('c');
    }
    // A 640 KiB prompt: 1,000 ms of prefill, 1.67 holds, 10 of a's positions. Its first token at
    // a takes 4 s, or 2 positions deep at b or c about 1.2 s: a counts 2 + 3 × 10 = 32 against 8.
    // (Counted in holds it was 2 + 3 × 1.67 = 7, and a took it.)
    const long = picked(balancer.pick({ requestBytes: 655_360 })).attempt.endpoint.id;
    assert.notEqual(long, 'a');
    // A 16 KiB one (a quarter of a position) still goes to a's free slot: 2 + 0.75 against 8.
    assert.equal(picked(balancer.pick({ requestBytes: 16_384 })).attempt.endpoint.id, 'a');
  });

  test('stops weighing a server once its speed is 2 s old, though its queue is still reported', () => {
    const clock = fakeClock();
    const balancer = new Balancer(testPolicy(), [endpoint('a'), endpoint('b')], {
      clock,
      rng: seededRng(1),
    });
    measureTtft(balancer, clock, 'a', 40);
    measureTtft(balancer, clock, 'b', 10);
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
    const { balancer } = setupBalancer({ endpoints: [endpoint('a'), endpoint('b')] });
    balancer.reportLoad('a', { running: 0, interTokenLatencyMs: 40 });
    const picks = Array.from({ length: 4 }, () => picked(balancer.pick({})).attempt.endpoint.id);
    assert.deepEqual(picks.toSorted(), ['a', 'a', 'b', 'b']);
  });

  test('ignores reports for endpoints it does not know', () => {
    const { balancer } = setupBalancer();
    balancer.reportLoad('nobody', { waiting: 3 });
    assert.ok(balancer.status().every((s) => s.load === 0));
  });
});

describe('EWMA of time to first token', () => {
  test('feeds streamed successes into the EWMA with weight 0.2', () => {
    const { serve, statusOf } = setupBalancer({
      policy: { defaultTtftMs: 500, coldStart: { idleAfterMs: 0 } },
    });
    assert.equal(statusOf('a').ewmaTtftMs, 500);
    assert.equal(statusOf('a').ewmaSeeded, true);
    serve('a', OK, 100);
    assert.equal(statusOf('a').ewmaTtftMs, 420);
    assert.equal(statusOf('a').ewmaSeeded, false);
  });

  test('starts endpoints without samples at the pool median, never at zero', () => {
    const { serve, statusOf, update } = setupBalancer({
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

  /** One request every `everyMs`, each finished before the next; how many each endpoint served. */
  const lightLoad = (
    setup: ReturnType<typeof setupBalancer>,
    n: number,
    ttftOf: (id: string) => number,
    everyMs = 1_000,
  ): Record<string, number> => {
    const counts: Record<string, number> = {};
    for (let i = 0; i < n; i++) {
      setup.clock.advance(everyMs);
      const attempt = picked(setup.balancer.pick({})).attempt;
      const id = attempt.endpoint.id;
      counts[id] = (counts[id] ?? 0) + 1;
      setup.clock.advance(ttftOf(id));
      setup.balancer.firstByte(attempt, true);
      setup.balancer.finish(attempt, OK);
    }
    return counts;
  };

  test('under light load the slowest endpoint is still tried now and then, so a recovery shows', () => {
    const setup = setupBalancer({ policy: { coldStart: { idleAfterMs: 0 } } });
    setup.repeat(30, 'a', OK, 10);
    setup.repeat(30, 'b', OK, 20);
    setup.repeat(30, 'c', OK, 40); // 2.7× the others' median: slow, not slow enough to eject
    // Every endpoint is idle at each pick, so the least-loaded step ties them all and two random
    // choices on the score decide. Without the idle fade c, the slowest, lost every pair it was
    // drawn into, for ever (0 of 60 picks at the build before it).
    const ttftMs: Record<string, number> = { a: 10, b: 20, c: 40 };
    const slow = lightLoad(setup, 600, (id) => ttftMs[id] as number);
    // Tried again now and then, but seldom while it stays 2.7× slower (about one pick in twelve;
    // b, 2× slower than a, about one in four).
    assert.ok((slow.c ?? 0) >= 20 && (slow.c ?? 0) <= 90, JSON.stringify(slow));
    assert.ok((slow.a ?? 0) > (slow.b ?? 0) && (slow.b ?? 0) > (slow.c ?? 0), JSON.stringify(slow));
    // It recovers: its samples show it, its EWMA comes down, and it gets its share again.
    ttftMs.c = 10;
    lightLoad(setup, 600, (id) => ttftMs[id] as number);
    assert.ok(setup.statusOf('c').ewmaTtftMs < 15, String(setup.statusOf('c').ewmaTtftMs));
    const later = lightLoad(setup, 120, (id) => ttftMs[id] as number);
    assert.ok((later.c ?? 0) >= 20, JSON.stringify(later));
  });

  test('a recovery shows even when every request is a cold start (a request a minute)', () => {
    const setup = setupBalancer({ policy: { defaultTtftMs: 500 } });
    for (const [id, ms] of [
      ['a', 10],
      ['b', 20],
      ['c', 40],
    ] as const) {
      setup.serve(id, OK, ms); // a new endpoint's first sample is dropped
      setup.repeat(30, id, OK, ms);
    }
    // Every endpoint idles past coldStart.idleAfterMs (60 s) between requests, so every sample is
    // a cold start. c recovered: its samples, faster than its EWMA, are kept, not dropped as cold.
    lightLoad(setup, 120, (id) => (id === 'b' ? 20 : 10), 70_000);
    assert.ok(setup.statusOf('c').ewmaTtftMs < 15, String(setup.statusOf('c').ewmaTtftMs));
  });

  test('the whole score fades: an expensive endpoint is tried again, and equals keep their exchange rate', () => {
    const setup = setupBalancer({
      policy: { coldStart: { idleAfterMs: 0 }, costWeightPerMs: 0.001 },
      endpoints: [endpoint('cheap'), endpoint('pricey', { costPerMTok: 0.3 })],
    });
    setup.repeat(30, 'cheap', OK, 100);
    setup.repeat(30, 'pricey', OK, 100);
    // pricey's score is cheap's + 300 ms. Had only the EWMA faded, pricey could never score below
    // its 300 ms cost term, which cheap's faded EWMA is under after 12 s idle: never tried again.
    const counts = lightLoad(setup, 300, () => 100);
    assert.ok((counts.pricey ?? 0) >= 10, JSON.stringify(counts));
    assert.ok((counts.cheap ?? 0) > 2 * (counts.pricey ?? 0), JSON.stringify(counts));
  });

  test('an endpoint failing before its first token is not favoured: each error in a row halves its fade', () => {
    const setup = setupBalancer({
      policy: { coldStart: { idleAfterMs: 0 } },
      endpoints: [endpoint('ok'), endpoint('stall')],
    });
    setup.repeat(30, 'ok', OK, 10);
    // Each request that goes to stall fails there first (the shell then retries it on ok): the
    // failed attempt ends before the retry, so stall has idled longer at the next pick.
    const served: string[] = [];
    for (let i = 0; i < 40; i++) {
      setup.clock.advance(1_000);
      const first = picked(setup.balancer.pick({})).attempt;
      served.push(first.endpoint.id);
      if (first.endpoint.id === 'stall') {
        setup.clock.advance(300);
        setup.balancer.finish(first, ERROR);
        setup.serve('ok', OK, 10);
      } else {
        setup.clock.advance(10);
        setup.balancer.firstByte(first, true);
        setup.balancer.finish(first, OK);
      }
    }
    const stall = served.filter((id) => id === 'stall').length;
    // Tried again (a backoff, not a stop), but not on every request, as it would be if its
    // longer idleness counted in full.
    assert.ok(stall >= 2 && stall <= 12, served.join(' '));
  });

  test('under light load a newcomer without samples is tried too: its seed fades from when it joined', () => {
    const setup = setupBalancer({
      policy: { coldStart: { idleAfterMs: 0 } },
      endpoints: [endpoint('a')],
    });
    setup.repeat(30, 'a', OK, 10);
    setup.update({ coldStart: { idleAfterMs: 0 } }, [endpoint('a'), endpoint('b')]);
    // b reads as the pool median (a's EWMA); a idles between requests like b, so neither may
    // fade below the other for good: left unfaded, the seed lost every pick to a's faded EWMA.
    const served = lightLoad(setup, 10, () => 10);
    assert.ok((served.b ?? 0) >= 1, JSON.stringify(served));
  });

  test("fades only the score: the EWMA everyone else reads is the samples' own, idle or not", () => {
    const { balancer, clock, repeat, statusOf } = setupBalancer({
      policy: { coldStart: { idleAfterMs: 0 } },
    });
    repeat(30, 'a', OK, 60);
    const ewma = statusOf('a').ewmaTtftMs;
    clock.advance(60_000);
    assert.equal(statusOf('a').ewmaTtftMs, ewma);
    assert.equal(balancer.gauges().find((g) => g.id === 'a')?.ewmaTtftMs, ewma);
    assert.equal(balancer.health().find((h) => h.id === 'a')?.ewmaTtftMs, ewma);
    assert.equal(balancer.endpointReading('a')?.ewmaTtftMs, ewma);
  });

  test('an endpoint back while its earlier streams ran is not idle or cold once they end', () => {
    const { balancer, clock, pickOn, statusOf, update } = setupBalancer({ rng: middleRng() });
    const earlier = pickOn('c');
    update({}, [endpoint('a'), endpoint('b')]);
    update({}, [endpoint('a'), endpoint('b'), endpoint('c')]);
    clock.advance(30_000);
    balancer.finish(earlier, OK); // its previous life's stream ends: the server was busy
    const next = pickOn('c');
    clock.advance(100);
    balancer.firstByte(next, true);
    balancer.finish(next, OK);
    assert.equal(statusOf('c').ewmaSeeded, false, 'the sample is kept, not dropped as cold');
  });

  test('does not feed non-streamed successes: their first byte is not a first token', () => {
    const { serve, statusOf } = setupBalancer();
    serve('a', { kind: 'success', streamed: false }, 5_000);
    assert.equal(statusOf('a').ewmaSeeded, true);
    assert.equal(statusOf('a').requests, 1);
  });

  test('feeds only successes: errors, 429s and neutral endings with a first byte do not count', () => {
    const { serve, statusOf } = setupBalancer();
    serve('a', ERROR, 1);
    serve('a', LIMITED, 1);
    serve('a', NEUTRAL, 1);
    assert.equal(statusOf('a').ewmaSeeded, true);
  });

  /** EWMAs seeded at 500 ms that keep every sample (no cold-start drop). */
  const keepingEverySample = (): ReturnType<typeof setupBalancer> =>
    setupBalancer({ policy: { defaultTtftMs: 500, coldStart: { idleAfterMs: 0 } } });

  /** An attempt on `a` whose first token arrived 100 ms after it started. */
  function firstTokenAfter100Ms(t: ReturnType<typeof setupBalancer>): Attempt {
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
    const { balancer, pickOn, clock, statusOf, events } = setupBalancer({
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
    const { serve, statusOf } = setupBalancer();
    serve('a', OK);
    assert.equal(statusOf('a').ewmaSeeded, true);
  });

  test('keeps the first first-byte time and ignores first bytes after the finish', () => {
    const { balancer, pickOn, clock, statusOf } = setupBalancer({
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
    const { serve, statusOf, clock, events } = setupBalancer({ policy: { defaultTtftMs: 500 } });
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

  test("keeps a cold sample faster than the endpoint's own EWMA: a cold start only slows", () => {
    const { serve, statusOf, clock, events } = setupBalancer({ policy: { defaultTtftMs: 500 } });
    serve('a', OK, 5_000); // a new endpoint: cold
    serve('a', OK, 2_000);
    assert.equal(statusOf('a').ewmaTtftMs, 0.8 * 500 + 0.2 * 2_000);
    clock.advance(60_000);
    serve('a', OK, 100); // idle: cold, but faster than its EWMA
    assert.equal(statusOf('a').ewmaTtftMs, 0.8 * 800 + 0.2 * 100);
    assert.equal(events.length, 1, "only the newcomer's first sample was dropped");
    clock.advance(60_000);
    serve('a', OK, 5_000); // cold and slower: dropped
    assert.equal(statusOf('a').ewmaTtftMs, 0.8 * 800 + 0.2 * 100);
    assert.equal(events.length, 2);
  });

  test('keeps the sample of an endpoint idle for less than idleAfterMs', () => {
    const { serve, statusOf, clock, events } = setupBalancer({ policy: { defaultTtftMs: 500 } });
    serve('a', OK, 5_000); // a new endpoint: cold
    serve('a', OK, 100);
    clock.advance(59_899);
    serve('a', OK, 100);
    assert.equal(events.length, 1);
    assert.ok(statusOf('a').ewmaTtftMs < 420);
  });

  test('treats a new endpoint as cold: its first sample is dropped', () => {
    const { serve, statusOf, events } = setupBalancer({ policy: { defaultTtftMs: 500 } });
    serve('a', OK, 4_000);
    assert.deepEqual(events, [{ kind: 'cold-sample-dropped', endpointId: 'a' }]);
    assert.equal(statusOf('a').ewmaSeeded, true);
  });

  test('does not mistake a long stream in flight for idleness', () => {
    const { balancer, pickOn, serve, clock, events } = setupBalancer();
    serve('a', OK, 100); // warm-up: a new endpoint's first sample is dropped
    const longStream = pickOn('a');
    clock.advance(120_000);
    serve('a', OK, 100);
    balancer.finish(longStream, OK);
    assert.equal(events.length, 1);
  });

  test('drops only one sample when several attempts start after the idle period', () => {
    const { balancer, pickOn, clock, events, statusOf } = setupBalancer({
      policy: { defaultTtftMs: 500 },
    });
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
    const { serve, clock, events } = setupBalancer();
    clock.advance(60_000);
    const failing = serve('a', ERROR, 10);
    assert.ok(failing);
    serve('a', OK, 100);
    assert.deepEqual(events, [{ kind: 'cold-sample-dropped', endpointId: 'a' }]);
  });

  test('is disabled by idleAfterMs 0', () => {
    const { serve, clock, events } = setupBalancer({ policy: { coldStart: { idleAfterMs: 0 } } });
    clock.advance(600_000);
    serve('a', OK, 100);
    assert.equal(events.length, 0);
  });

  test('does not spend the drop on an unusable sample', () => {
    const { balancer, pickOn, serve, clock, events } = setupBalancer();
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
  // The window's rules alone (testPolicy's default); `inARow` adds the run of errors in a row.
  const windowOnly = { policy: { health: { consecutiveErrors: 0 } } };
  const inARow = { health: { consecutiveErrors: 5 } };

  test('stays closed below minRequests, however many errors', () => {
    const { repeat, statusOf } = setupBalancer(windowOnly);
    repeat(19, 'a', ERROR);
    assert.equal(statusOf('a').breaker, 'closed');
  });

  test('opens after consecutiveErrors errors in a row, however few the window holds', () => {
    const { repeat, statusOf, breakerEvents } = setupBalancer({ rng: middleRng(), policy: inARow });
    repeat(4, 'a', ERROR);
    assert.equal(statusOf('a').breaker, 'closed');
    assert.equal(statusOf('a').consecutiveErrors, 4);
    repeat(1, 'a', ERROR);
    assert.equal(statusOf('a').breaker, 'open');
    assert.equal(breakerEvents()[0]!.reason, 'errors');
    assert.deepEqual(statusOf('a').window, { requests: 5, errors: 5, rateLimited: 0 });
  });

  test('a success ends a run of errors; 429s and neutral endings neither add to it nor end it', () => {
    const { repeat, statusOf } = setupBalancer({ policy: inARow });
    repeat(4, 'a', ERROR);
    repeat(1, 'a', OK);
    assert.equal(statusOf('a').consecutiveErrors, 0);
    repeat(4, 'a', ERROR);
    assert.equal(statusOf('a').breaker, 'closed');
    repeat(1, 'a', NEUTRAL);
    repeat(1, 'a', LIMITED);
    repeat(1, 'a', ERROR);
    assert.equal(statusOf('a').breaker, 'open');
  });

  test('consecutiveErrors 0 leaves only the window to open a breaker', () => {
    const { repeat, statusOf } = setupBalancer(windowOnly);
    repeat(15, 'a', ERROR);
    assert.equal(statusOf('a').breaker, 'closed');
  });

  test('opens at minRequests when the error rate reaches maxErrorRate', () => {
    const { repeat, statusOf, breakerEvents } = setupBalancer({ rng: middleRng() });
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
    const { repeat, statusOf } = setupBalancer();
    repeat(11, 'a', OK);
    repeat(9, 'a', ERROR);
    repeat(10, 'a', OK);
    assert.equal(statusOf('a').breaker, 'closed');
    assert.deepEqual(statusOf('a').window, { requests: 30, errors: 9, rateLimited: 0 });
  });

  test('opens when the 429 rate reaches max429Rate', () => {
    const { repeat, statusOf, breakerEvents } = setupBalancer();
    repeat(14, 'a', OK);
    repeat(6, 'a', LIMITED);
    assert.equal(statusOf('a').breaker, 'open');
    assert.equal(breakerEvents()[0]!.reason, 'rate-limited');
  });

  test('does not count neutral endings toward health', () => {
    const { repeat, statusOf } = setupBalancer(windowOnly);
    repeat(100, 'a', NEUTRAL);
    repeat(19, 'a', ERROR);
    assert.equal(statusOf('a').breaker, 'closed');
    assert.equal(statusOf('a').requests, 19);
  });

  test('forgets errors older than the window', () => {
    const { repeat, statusOf, clock } = setupBalancer(windowOnly);
    repeat(15, 'a', ERROR);
    clock.advance(10_000);
    repeat(10, 'a', ERROR);
    assert.equal(statusOf('a').breaker, 'closed');
    assert.equal(statusOf('a').errors, 25);
  });

  test('opens a slow endpoint: EWMA above maxTtftSlowdown × the median of the others', () => {
    const { repeat, statusOf, breakerEvents } = setupBalancer();
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
    const { repeat, statusOf } = setupBalancer({
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
    const { repeat, statusOf } = setupBalancer();
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
    const { repeat, statusOf } = setupBalancer({ endpoints, policy: { mode: 'Failover' } });
    repeat(10, 'fast', OK, 10);
    repeat(10, 'backup1', OK, 300);
    assert.equal(statusOf('backup1').slow, false); // backup2 has no data: no reference
    repeat(10, 'backup2', OK, 280);
    assert.equal(statusOf('backup1').slow, false);
    assert.equal(statusOf('fast').slow, false);
  });

  test('turns half-open after openForMs with the drawn jitter, not before', () => {
    const { balancer, repeat, clock, breakerEvents } = setupBalancer({
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
      const { repeat, breakerEvents } = setupBalancer({ rng: seededRng(seed) });
      repeat(20, 'a', ERROR);
      const openFor = breakerEvents()[0]!.openForMs!;
      assert.ok(openFor >= 24_000 && openFor <= 36_000, `${openFor}`);
    }
  });

  test('lets exactly one probe through while half-open', () => {
    const { balancer, repeat, clock, statusOf } = setupBalancer({ rng: middleRng() });
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
    const { balancer, repeat, clock, statusOf, breakerEvents } = setupBalancer({
      rng: middleRng(),
    });
    repeat(20, 'a', ERROR);
    clock.advance(30_000);
    const probe = picked(balancer.pick({ exclude: new Set(['b', 'c']) }));
    balancer.finish(probe.attempt, OK);
    assert.equal(statusOf('a').breaker, 'closed');
    assert.deepEqual(statusOf('a').window, { requests: 0, errors: 0, rateLimited: 0 });
    assert.equal(breakerEvents().at(-1)!.reason, 'probe-succeeded');
  });

  test('opens again for twice as long when the probe fails, up to maxOpenForMs', () => {
    const { balancer, repeat, clock, breakerEvents } = setupBalancer({
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
    const { balancer, repeat, clock, breakerEvents } = setupBalancer({
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
    const { balancer, repeat, clock, statusOf } = setupBalancer({
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
    const { balancer, pickOn, repeat, clock, statusOf } = setupBalancer({
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
    const { balancer, repeat, clock, breakerEvents } = setupBalancer({
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
    const { balancer, serve, clock } = setupBalancer({ endpoints: [endpoint('a')] });
    serve('a', { kind: 'rate-limited', retryAfterMs: 5_000 });
    assert.equal(shedAfter(balancer.pick({})), 5_000);
    clock.advance(4_999);
    assert.equal(shedAfter(balancer.pick({})), 1);
    clock.advance(1);
    picked(balancer.pick({}));
  });

  test(`honours Retry-After for at most ${MAX_RETRY_AFTER_COOLDOWN_MS / 1000} s`, () => {
    const { balancer, serve } = setupBalancer({ endpoints: [endpoint('a')] });
    serve('a', { kind: 'rate-limited', retryAfterMs: 3_600_000 });
    assert.equal(shedAfter(balancer.pick({})), 60_000);
    const inf = setupBalancer({ endpoints: [endpoint('a')] });
    inf.serve('a', { kind: 'rate-limited', retryAfterMs: Infinity });
    assert.equal(shedAfter(inf.balancer.pick({})), 60_000);
  });

  test('ignores a missing, zero, negative, NaN or non-numeric Retry-After', () => {
    const { balancer, serve } = setupBalancer({ endpoints: [endpoint('a')] });
    for (const retryAfterMs of [undefined, 0, -5, Number.NaN, '30' as unknown as number]) {
      serve('a', { kind: 'rate-limited', retryAfterMs });
      picked(balancer.pick({}));
    }
  });

  test('extends a cooldown but never shortens it', () => {
    const { balancer, serve, pickOn, clock } = setupBalancer({ endpoints: [endpoint('a')] });
    const inFlight = pickOn('a');
    serve('a', { kind: 'rate-limited', retryAfterMs: 10_000 });
    balancer.finish(inFlight, { kind: 'rate-limited', retryAfterMs: 1_000 });
    assert.equal(shedAfter(balancer.pick({})), 10_000);
    clock.advance(500);
    assert.equal(shedAfter(balancer.pick({})), 9_500);
  });

  test('waits for the later of cooldown and open breaker when shedding', () => {
    const { balancer, repeat, serve } = setupBalancer({
      endpoints: [endpoint('a')],
      rng: middleRng(),
    });
    repeat(19, 'a', ERROR);
    serve('a', { kind: 'rate-limited', retryAfterMs: 45_000 }); // 20th: opens for 30 s
    assert.equal(shedAfter(balancer.pick({})), 45_000);
  });
});

describe('pinned requests (stored responses)', () => {
  test('go to the pinned endpoint whatever affinity and load say', () => {
    const { balancer, pickOn } = setupBalancer();
    pickOn('b');
    pickOn('b'); // b is the busiest
    for (let i = 0; i < 5; i++) {
      const result = picked(balancer.pick({ pinnedEndpointId: 'b', affinityKey: 'k' }));
      assert.equal(result.attempt.endpoint.id, 'b');
      assert.equal(result.affinity, 'hit');
    }
  });

  test('shed rather than go elsewhere: an unknown, drifted, excluded or cooling endpoint', () => {
    const { balancer, serve, update } = setupBalancer();
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
    const { balancer, repeat, clock } = setupBalancer({
      endpoints: [endpoint('a')],
      rng: middleRng(),
    });
    repeat(20, 'a', ERROR); // opens for 30 s
    assert.equal(shedAfter(balancer.pick({ pinnedEndpointId: 'a' })), 30_000);
    clock.advance(30_000);
    const result = picked(balancer.pick({ pinnedEndpointId: 'a' }));
    assert.equal(result.attempt.halfOpenProbe, true);
  });
});

describe('retries', () => {
  test("answers 'max-attempts' once attemptsSoFar reaches maxAttempts", () => {
    const { balancer } = setupBalancer();
    assert.equal(balancer.tryRetry(1).kind, 'retry');
    assert.equal(balancer.tryRetry(2).kind, 'retry');
    assert.equal(balancer.tryRetry(3).kind, 'max-attempts');
    assert.equal(balancer.tryRetry(Number.NaN).kind, 'max-attempts');
  });

  test("answers 'budget-exhausted' once the budget is spent, and refills with first attempts", () => {
    const { balancer } = setupBalancer({
      policy: { retry: { minPerSecond: 0, budgetPercent: 20 } },
    });
    assert.equal(balancer.tryRetry(1).kind, 'budget-exhausted');
    for (let i = 0; i < 10; i++) balancer.recordRequest();
    assert.equal(balancer.tryRetry(1).kind, 'retry');
    assert.equal(balancer.tryRetry(1).kind, 'retry');
    assert.equal(balancer.tryRetry(1).kind, 'budget-exhausted');
    assert.deepEqual(balancer.retryBudget(), { firstAttempts: 10, retries: 2, allowance: 2 });
  });

  test('does not withdraw from the budget when maxAttempts already says no', () => {
    const { balancer } = setupBalancer({ policy: { retry: { minPerSecond: 0.1 } } });
    assert.equal(balancer.tryRetry(5).kind, 'max-attempts');
    assert.equal(balancer.retryBudget().retries, 0);
  });

  test('applies a new retry policy on update', () => {
    const { balancer, update } = setupBalancer();
    update({ retry: { maxAttempts: 1 } }, [endpoint('a')]);
    assert.equal(balancer.tryRetry(1).kind, 'max-attempts');
  });
});

describe('update', () => {
  test('keeps EWMA, in-flight and breaker state by endpoint id', () => {
    const { balancer, serve, repeat, pickOn, statusOf, update } = setupBalancer();
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
    const { balancer, pickOn, statusOf, update, events } = setupBalancer({ rng: middleRng() });
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
    const { serve, statusOf, update } = setupBalancer();
    serve('c', OK, 100);
    serve('c', ERROR);
    update({}, [endpoint('a'), endpoint('b')]);
    update({}, [endpoint('a'), endpoint('b'), endpoint('c')]);
    assert.equal(statusOf('c').errors, 0);
    assert.equal(statusOf('c').ewmaSeeded, true);
  });

  test('counts the in-flight attempts of an endpoint that left and came back', () => {
    const { balancer, pickOn, statusOf, update } = setupBalancer({ rng: middleRng() });
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
    const { serve, statusOf, update } = setupBalancer({
      policy: { defaultTtftMs: 500, coldStart: { idleAfterMs: 0 } },
    });
    serve('a', OK, 100); // 420
    serve('b', OK, 2_500); // 836
    assert.equal(statusOf('c').ewmaTtftMs, 628);
    update({ defaultTtftMs: 500, coldStart: { idleAfterMs: 0 } }, [endpoint('a'), endpoint('c')]);
    assert.equal(statusOf('c').ewmaTtftMs, 420);
  });

  test('keeps the first of duplicated ids', () => {
    const { balancer } = setupBalancer({
      endpoints: [endpoint('a', { url: 'http://one/v1' }), endpoint('a', { url: 'http://two/v1' })],
    });
    assert.deepEqual(
      balancer.status().map((s) => s.url),
      ['http://one/v1'],
    );
  });

  test('restarts the health window when its length changes, and keeps it otherwise', () => {
    const { repeat, statusOf, update } = setupBalancer();
    repeat(5, 'a', ERROR);
    update({ health: { openForMs: 1_000 } }, [endpoint('a')]);
    assert.equal(statusOf('a').window.errors, 5);
    update({ health: { windowMs: 20_000 } }, [endpoint('a')]);
    assert.equal(statusOf('a').window.errors, 0);
    assert.equal(statusOf('a').errors, 5);
  });

  test('switches between Balance and Failover', () => {
    const endpoints = [endpoint('a'), endpoint('b', { tier: 1 })];
    const { balancer, update } = setupBalancer({ endpoints, rng: seededRng(3) });
    const seen = new Set<string>();
    for (let i = 0; i < 50; i++) seen.add(picked(balancer.pick({})).attempt.endpoint.id);
    assert.deepEqual([...seen].sort(), ['a', 'b']);
    update({ mode: 'Failover' }, endpoints);
    for (let i = 0; i < 50; i++) assert.equal(picked(balancer.pick({})).attempt.endpoint.id, 'a');
  });

  test('applies new breaker settings at the next opening', () => {
    const { repeat, update, breakerEvents } = setupBalancer({ rng: middleRng() });
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
    const { balancer } = setupBalancer({ endpoints, policy: { defaultTtftMs: 700 } });
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
        consecutiveErrors: 0,
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
        consecutiveErrors: 0,
        window: { requests: 0, errors: 0, rateLimited: 0 },
        costPerMTok: 0.6,
        driftMismatches: 0,
      },
    ]);
  });

  test('shows the probe fingerprint and counts passive drift mismatches', () => {
    const probe = { fingerprint: 'm/fp/abc', model: 'm', systemFingerprint: 'fp', drifted: true };
    const { balancer, statusOf } = setupBalancer({
      endpoints: [endpoint('a', { probe }), endpoint('b')],
    });
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
    const { repeat, clock, statusOf, breakerEvents } = setupBalancer({ rng: middleRng() });
    repeat(20, 'a', ERROR);
    clock.advance(30_000);
    assert.equal(statusOf('a').breaker, 'half-open');
    assert.equal(breakerEvents().at(-1)!.reason, 'open-expired');
  });

  test('counts lifetime totals and window totals separately', () => {
    const { repeat, statusOf, clock } = setupBalancer();
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
    const { balancer, pickOn, serve, statusOf, clock } = setupBalancer();
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
    const { balancer, pickOn, statusOf } = setupBalancer();
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
    const { balancer } = setupBalancer({
      endpoints,
      policy: { costWeightPerMs: Number.NaN },
      rng: scriptedRng([0, 0]),
    });
    assert.equal(picked(balancer.pick({})).attempt.endpoint.id, 'a');
  });

  test('defaults the pick request when the shell passes none', () => {
    const { balancer } = setupBalancer({ endpoints: [endpoint('a')] });
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
    const { balancer, statusOf, clock } = setupBalancer({
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
