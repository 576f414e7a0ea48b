import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SCENARIOS } from '../../lib/bench-names.ts';
import {
  BASE_BACKEND,
  offeredUtilisation,
  routerInstances,
  scenario,
  slotMs,
  timeScaleFor,
} from './scenarios.ts';

/** 100 requests over 99 s of trace, each 1,000 prompt tokens and 100 answer tokens. */
const requests = Array.from({ length: 100 }, (_, i) => ({
  atMs: i * 1000,
  inputTokens: 1000,
  outputTokens: 100,
}));

describe('the moderate scenario', () => {
  it('sits beside steady, on the same healthy fleet', () => {
    assert.equal(SCENARIOS.indexOf('moderate'), SCENARIOS.indexOf('steady') + 1);
    assert.deepEqual(
      scenario('moderate').backends(8, false),
      scenario('steady').backends(8, false),
    );
    assert.equal(scenario('moderate').utilisation, 0.5);
    assert.equal(scenario('moderate').laterTurnsElsewhere, true);
    assert.equal(scenario('steady').utilisation, undefined);
  });

  it('counts a request’s prefill and decode as the slot time it holds', () => {
    // 1,000 × 0.05 ms of prefill and 100 × 10 ms of decode.
    assert.equal(slotMs(requests[0]!, BASE_BACKEND), 1050);
  });

  it('derives the time scale at which the servers are half busy', () => {
    const fleet = scenario('moderate').backends(8, false);
    // 100 requests × 1,050 ms of slot time over 48 slots: at speed 1 and time scale 1, the 99 s
    // span offers 105,000 / (99,000 × 48) of the slots.
    const atOne = 105_000 / (99_000 * 48);
    assert.ok(Math.abs(offeredUtilisation(requests, fleet, 1, 1) - atOne) < 1e-12);
    for (const speed of [1, 3.2]) {
      const scale = timeScaleFor(requests, fleet, speed, 0.5);
      assert.ok(Math.abs(offeredUtilisation(requests, fleet, scale, speed) - 0.5) < 1e-12);
    }
    // Twice the time scale, half the rate, half the load.
    const half = timeScaleFor(requests, fleet, 3.2, 0.5);
    assert.ok(Math.abs(timeScaleFor(requests, fleet, 3.2, 0.25) - 2 * half) < 1e-12);
  });

  it('refuses a trace it cannot derive a rate from', () => {
    const fleet = scenario('moderate').backends(8, false);
    assert.throws(() => timeScaleFor(requests.slice(0, 1), fleet, 3.2, 0.5), /no span/);
  });
});

describe('routerInstances', () => {
  // Requests 0 and 1 start conversations; 2 continues 0, 3 continues 2, 4 continues 1.
  const turns = [
    { conversation: 0, turn: 1 },
    { conversation: 1, turn: 1 },
    { conversation: 0, turn: 2 },
    { conversation: 0, turn: 3 },
    { conversation: 1, turn: 2 },
  ];
  const parent = [undefined, undefined, 0, 2, 1];

  it('deals requests round-robin by arrival by default', () => {
    assert.deepEqual(routerInstances(5, 4, turns, false), [0, 1, 2, 3, 0]);
    assert.deepEqual(routerInstances(5, 4, undefined, true), [0, 1, 2, 3, 0]);
  });

  it('sends each later turn through another instance than the turn before it', () => {
    const instances = routerInstances(5, 4, turns, true);
    assert.deepEqual(instances, [0, 1, 1, 2, 2]);
    for (const [i, p] of parent.entries())
      if (p !== undefined) assert.notEqual(instances[i], instances[p], `request ${i}`);
  });

  it('has one instance to send through when the router is central', () => {
    assert.deepEqual(routerInstances(5, 1, turns, true), [0, 0, 0, 0, 0]);
  });
});
