/**
 * The affinity step of a pick (affinity-decision.ts), driven through the Balancer, its only
 * user: the affinity header's and the prompt's homes, the load bound and the spill along the
 * key's order, the slowdown check, a single message's bet, and the queue a known prefix buys.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import {
  AFFINITY_MAX_EXTRA_IN_FLIGHT,
  AFFINITY_MAX_SLOWDOWN,
  AFFINITY_SLOWDOWN_MIN_MS,
  AFFINITY_SLOWDOWN_MIN_SAMPLES,
  AFFINITY_SLOW_RECHECK_AFTER_MS,
} from './affinity.ts';
import { idHash, keyNumber, rendezvousOrder } from './bounded-load.ts';
import { BATCH_KNOWN_FOR_MS } from './server-load.ts';
import { ADDED_TEXT_AT_HOME_SHARE } from './affinity-decision.ts';
import {
  endpoint,
  ERROR,
  measureTtft,
  NEUTRAL,
  OK,
  picked,
  setupBalancer,
  type PolicyOverrides,
} from './testing.ts';
import type { EndpointSpec, PromptBlocks } from './types.ts';

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
    const on = setupBalancer({ policy: withKey() });
    assert.equal(picked(on.balancer.pick({})).affinity, 'none');
    assert.equal(picked(on.balancer.pick({ affinityKey: '' })).affinity, 'none');
    const off = setupBalancer({ policy: { affinity: { key: 'None' } } });
    assert.equal(picked(off.balancer.pick({ affinityKey: 'k', prompt: PROMPT })).affinity, 'none');
    const prefixOnly = setupBalancer();
    assert.equal(picked(prefixOnly.balancer.pick({ affinityKey: 'k' })).affinity, 'none');
  });

  test('keeps a key at home under the load bound, then spills to its second endpoint', () => {
    const specs = five();
    const { balancer, statusOf } = setupBalancer({ endpoints: specs, policy: withKey() });
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
    const { balancer, pickOn } = setupBalancer({
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
    const { balancer } = setupBalancer({ endpoints: specs, policy: withKey() });
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
    const { balancer } = setupBalancer({ endpoints: specs, policy: withKey() });
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
    const { balancer, clock } = setupBalancer({ endpoints: specs, policy: withKey() });
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
    const { balancer, statusOf } = setupBalancer({
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
    const { balancer } = setupBalancer({ endpoints: five(), policy: withKey() });
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
    const { balancer, repeat } = setupBalancer({
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
    const { balancer, clock, repeat } = setupBalancer({
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

  test(`passes over a home whose server reports generating over ${AFFINITY_MAX_SLOWDOWN}× slower, once one sample shows it slower too`, () => {
    const specs = five();
    const key = 'session-reported-slow';
    const [home, second] = orderOf(key, specs);
    const { balancer, clock } = setupBalancer({
      endpoints: specs,
      policy: withKey(),
    });
    for (const s of specs)
      balancer.reportLoad(s.id, { running: 0, interTokenLatencyMs: s.id === home ? 26 : 10 });
    // The report alone is one server's word: not measured yet, the home is kept.
    assert.equal(picked(balancer.pick({ affinityKey: key })).attempt.endpoint.id, home);
    // One sample each, the home's 3× its peers' (the TTFT check of its own needs five).
    for (const s of specs) measureTtft(balancer, clock, s.id, s.id === home ? 30 : 10);
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
    const { balancer, repeat } = setupBalancer({
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
    const { balancer, repeat } = setupBalancer({
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
    const { balancer, repeat, statusOf } = setupBalancer({
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
    const { balancer, repeat } = setupBalancer({ endpoints: specs, policy: withKey() });
    for (const s of specs) repeat(10, s.id, OK, s.id === home ? 200 : 100);
    const result = picked(balancer.pick({ affinityKey: key }));
    assert.equal(result.affinity, 'hit');
    assert.equal(result.attempt.endpoint.id, home);
  });

  test('uses the default maxSlowdown when the policy has a non-positive one', () => {
    const specs = five();
    const key = 'session-2x';
    const home = homeOf(key, specs);
    const { balancer, repeat, statusOf } = setupBalancer({
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
    const { balancer, repeat, clock } = setupBalancer({ endpoints: specs, policy: withKey() });
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
    const { balancer, serve } = setupBalancer({ endpoints: specs, policy: withKey() });
    const retry = picked(balancer.pick({ affinityKey: key, exclude: new Set([home!]) }));
    assert.equal(retry.affinity, 'spill');
    assert.equal(retry.attempt.endpoint.id, second);
    balancer.finish(retry.attempt, NEUTRAL);
    serve(home!, { kind: 'rate-limited', retryAfterMs: 5_000 });
    assert.equal(picked(balancer.pick({ affinityKey: key })).affinity, 'spill');
  });

  test("balances as 'overloaded' when no admissible endpoint fits under the bound", () => {
    const specs = [endpoint('a'), endpoint('b')];
    const { balancer, repeat, pickOn } = setupBalancer({
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
    const { balancer, update } = setupBalancer({ endpoints: specs, policy: withKey() });
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
    const { balancer, update } = setupBalancer({ endpoints: specs, policy: withKey() });
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
    const { balancer } = setupBalancer({
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
    const { balancer } = setupBalancer({ endpoints: specs, policy: PREFIX });
    const result = picked(balancer.pick({ prompt: PROMPT }));
    assert.equal(result.affinity, 'hit');
    assert.equal(result.attempt.endpoint.id, order(12, specs)[0]);
  });

  test('a later turn goes where the earlier turn went, even when that was a spill', () => {
    const specs = eight();
    const { balancer, pickOn } = setupBalancer({ endpoints: specs, policy: PREFIX });
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
    const { balancer } = setupBalancer({ endpoints: specs, policy: PREFIX });
    const a = picked(balancer.pick({ prompt: PROMPT }));
    balancer.finish(a.attempt, OK);
    const other: PromptBlocks = { hashes: [11, 99], ends: [256, 400], homeDepth: 2 };
    const b = picked(balancer.pick({ prompt: other }));
    assert.equal(b.attempt.endpoint.id, order(99, specs)[0]);
  });

  test('a busy holder spills along the order of the matched prefix', () => {
    const specs = eight();
    const { balancer, pickOn } = setupBalancer({ endpoints: specs, policy: PREFIX });
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
      const t = setupBalancer({ endpoints: specs, policy: PREFIX });
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
      const { balancer, clock, specs, home } = freeHome();
      // This sidecar measured the home slower too: a report counts only as far as that.
      for (const s of specs) measureTtft(balancer, clock, s.id, s.id === home ? homeItl : 10);
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
    const { balancer, update } = setupBalancer({ endpoints: specs, policy: PREFIX });
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
    function teachExchange(t: ReturnType<typeof setupBalancer>, id: string): void {
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
      const t = setupBalancer({ endpoints: specs, policy: PREFIX });
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
      const t = setupBalancer({ endpoints: specs, policy: PREFIX });
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
      const t = setupBalancer({ endpoints: specs, policy: PREFIX });
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
    const { balancer } = setupBalancer({
      endpoints: specs,
      policy: { affinity: { key: 'Header' } },
    });
    const result = picked(balancer.pick({ prompt: PROMPT }));
    assert.equal(result.affinity, 'none');
  });
});
