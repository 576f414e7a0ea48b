import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  Breaker,
  OPEN_JITTER_FRACTION,
  openDurationMs,
  tripReason,
  type HealthReading,
} from './breaker.ts';
import { scriptedRng, testPolicy } from './testing.ts';
import type { HealthPolicy } from './types.ts';

const health = (overrides: Partial<HealthPolicy> = {}): HealthPolicy =>
  testPolicy({ health: overrides }).health; // minRequests 20, errors 0.5, 429s 0.3, 30 s..300 s

const reading = (overrides: Partial<HealthReading> = {}): HealthReading => ({
  requests: 20,
  errors: 0,
  rateLimited: 0,
  slow: false,
  ...overrides,
});

/** An Rng whose draws put the jitter factor at exactly 1. */
const noJitter = () => ({ next: () => 0.5 });

describe('tripReason', () => {
  test('does not trip below minRequests, however bad the window', () => {
    const p = health();
    assert.equal(
      tripReason(reading({ requests: 19, errors: 19, rateLimited: 19, slow: true }), p),
      undefined,
    );
  });

  test('trips on the error rate at the threshold, not below', () => {
    const p = health();
    assert.equal(tripReason(reading({ errors: 10 }), p), 'errors');
    assert.equal(tripReason(reading({ errors: 9 }), p), undefined);
  });

  test('trips on the 429 rate at the threshold, not below', () => {
    const p = health();
    assert.equal(tripReason(reading({ rateLimited: 6 }), p), 'rate-limited');
    assert.equal(tripReason(reading({ rateLimited: 5 }), p), undefined);
  });

  test('trips on slowness once the gate is passed', () => {
    assert.equal(tripReason(reading({ slow: true }), health()), 'slow');
    assert.equal(tripReason(reading({ requests: 5, slow: true }), health()), undefined);
  });

  test('names errors first, then 429s, then slowness when several apply', () => {
    const all = reading({ errors: 10, rateLimited: 10, slow: true });
    assert.equal(tripReason(all, health()), 'errors');
    assert.equal(tripReason({ ...all, errors: 0 }, health()), 'rate-limited');
  });

  test('does not trip a spotless window with zero thresholds', () => {
    const p = health({ maxErrorRate: 0, max429Rate: 0 });
    assert.equal(tripReason(reading(), p), undefined);
    assert.equal(tripReason(reading({ errors: 1 }), p), 'errors');
  });

  test('never trips on NaN thresholds', () => {
    const p = health({ maxErrorRate: Number.NaN, max429Rate: Number.NaN, minRequests: Number.NaN });
    assert.equal(tripReason(reading({ errors: 20, rateLimited: 20 }), p), undefined);
  });

  test('trips on a run of consecutiveErrors errors, whatever the window holds', () => {
    // Unset is an older controller's snapshot: the default of 5 applies.
    for (const consecutiveErrors of [5, undefined]) {
      const p = health({ consecutiveErrors });
      const run = (n: number) => reading({ requests: n, errors: n, consecutiveErrors: n });
      assert.equal(tripReason(run(5), p), 'errors', String(consecutiveErrors));
      assert.equal(tripReason(run(4), p), undefined, String(consecutiveErrors));
    }
    const three = health({ consecutiveErrors: 3 });
    assert.equal(
      tripReason(reading({ requests: 3, errors: 3, consecutiveErrors: 3 }), three),
      'errors',
    );
  });

  test('consecutiveErrors 0 or NaN turns the run rule off', () => {
    for (const consecutiveErrors of [0, Number.NaN]) {
      const p = health({ consecutiveErrors });
      assert.equal(
        tripReason(reading({ requests: 9, errors: 9, consecutiveErrors: 9 }), p),
        undefined,
      );
    }
  });

  test('needs at least one request even when minRequests is 0', () => {
    const p = health({ minRequests: 0 });
    assert.equal(tripReason(reading({ requests: 0, slow: true }), p), undefined);
    assert.equal(tripReason(reading({ requests: 1, errors: 1 }), p), 'errors');
  });
});

describe('openDurationMs', () => {
  test('is openForMs with a middle draw, ±20 % at the extremes', () => {
    assert.equal(OPEN_JITTER_FRACTION, 0.2);
    const p = health();
    assert.equal(openDurationMs(p, 0, scriptedRng([0.5])), 30_000);
    assert.equal(openDurationMs(p, 0, scriptedRng([0])), 24_000);
    assert.ok(Math.abs(openDurationMs(p, 0, scriptedRng([0.999999])) - 36_000) < 1);
  });

  test('doubles with each consecutive opening up to maxOpenForMs', () => {
    const p = health();
    const durations = [0, 1, 2, 3, 4, 5].map((k) => openDurationMs(p, k, noJitter()));
    assert.deepEqual(durations, [30_000, 60_000, 120_000, 240_000, 300_000, 300_000]);
  });

  test('never exceeds maxOpenForMs, even with upward jitter at the cap', () => {
    const p = health();
    assert.equal(openDurationMs(p, 10, scriptedRng([0.999])), 300_000);
    assert.equal(openDurationMs(p, 10, scriptedRng([0])), 240_000);
  });

  test('uses no jitter when the Rng returns garbage', () => {
    for (const draw of [Number.NaN, -1, 2]) {
      assert.equal(openDurationMs(health(), 0, scriptedRng([draw])), 30_000);
    }
  });

  test('treats negative or NaN periods as zero and survives huge opening counts', () => {
    assert.equal(openDurationMs(health({ openForMs: -5 }), 0, noJitter()), 0);
    assert.equal(openDurationMs(health({ openForMs: Number.NaN }), 3, noJitter()), 0);
    assert.equal(openDurationMs(health({ openForMs: 0 }), 5_000, noJitter()), 0);
    assert.equal(openDurationMs(health({ maxOpenForMs: Number.NaN }), 0, noJitter()), 0);
    assert.equal(openDurationMs(health(), -3, noJitter()), 30_000);
  });

  test('property: stays within ±20 % of the capped nominal period and under the cap', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 100 }),
        fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
        (k, draw) => {
          const p = health();
          const nominal = Math.min(30_000 * 2 ** k, 300_000);
          const d = openDurationMs(p, k, scriptedRng([draw]));
          assert.ok(d >= nominal * 0.8 - 1e-6 && d <= nominal * 1.2 + 1e-6);
          assert.ok(d <= 300_000);
        },
      ),
    );
  });
});

describe('Breaker', () => {
  const tripped = (nowMs = 0, draw = 0.5) => {
    const b = new Breaker(health());
    const t = b.evaluate(nowMs, reading({ errors: 20 }), scriptedRng([draw]));
    return { b, t };
  };

  test('starts closed and admits requests', () => {
    const b = new Breaker(health());
    assert.equal(b.state, 'closed');
    assert.equal(b.admits(), true);
    assert.equal(b.availableAtMs(5), 5);
    assert.equal(b.evaluate(0, reading(), scriptedRng([])), undefined);
  });

  test('opens on a tripping reading and reports why and for how long', () => {
    const { b, t } = tripped(1_000);
    assert.deepEqual(t, { from: 'closed', to: 'open', reason: 'errors', openForMs: 30_000 });
    assert.equal(b.state, 'open');
    assert.equal(b.admits(), false);
    assert.equal(b.availableAtMs(1_000), 31_000);
    assert.equal(b.consecutiveOpenings, 1);
  });

  test('stays open until its period is over, then turns half-open', () => {
    const { b } = tripped(1_000);
    assert.equal(b.advance(30_999), undefined);
    assert.equal(b.state, 'open');
    assert.deepEqual(b.advance(31_000), { from: 'open', to: 'half-open', reason: 'open-expired' });
    assert.equal(b.state, 'half-open');
    assert.equal(b.admits(), true);
    assert.equal(b.advance(40_000), undefined);
  });

  test('does not turn half-open on a NaN time', () => {
    const { b } = tripped();
    assert.equal(b.advance(Number.NaN), undefined);
    assert.equal(b.state, 'open');
  });

  test('ignores readings while open or half-open', () => {
    const { b } = tripped();
    assert.equal(b.evaluate(1, reading({ errors: 20 }), scriptedRng([])), undefined);
    b.advance(30_000);
    assert.equal(b.evaluate(30_001, reading({ errors: 20 }), scriptedRng([])), undefined);
    assert.equal(b.state, 'half-open');
  });

  test('lets exactly one probe through while half-open', () => {
    const { b } = tripped();
    assert.equal(b.takeProbe(), undefined); // open: no probe yet
    b.advance(30_000);
    const token = b.takeProbe();
    assert.notEqual(token, undefined);
    assert.equal(b.probeInFlight, true);
    assert.equal(b.admits(), false);
    assert.equal(b.takeProbe(), undefined);
    assert.equal(b.availableAtMs(30_000), Infinity);
  });

  test('closes on a successful probe and resets the doubling', () => {
    const { b } = tripped();
    b.advance(30_000);
    const token = b.takeProbe()!;
    const t = b.settleProbe(token, 'succeeded', 30_500, scriptedRng([]));
    assert.deepEqual(t, { from: 'half-open', to: 'closed', reason: 'probe-succeeded' });
    assert.equal(b.state, 'closed');
    assert.equal(b.consecutiveOpenings, 0);
    const again = b.evaluate(31_000, reading({ errors: 20 }), noJitter());
    assert.equal(again?.openForMs, 30_000);
  });

  test('opens again for twice as long when the probe fails', () => {
    const { b } = tripped();
    b.advance(30_000);
    const t = b.settleProbe(b.takeProbe()!, 'failed', 30_500, noJitter());
    assert.deepEqual(t, {
      from: 'half-open',
      to: 'open',
      reason: 'probe-failed',
      openForMs: 60_000,
    });
    assert.equal(b.availableAtMs(30_500), 90_500);
    assert.equal(b.probeInFlight, false);
  });

  test('frees the probe slot without a verdict when the probe is released', () => {
    const { b } = tripped();
    b.advance(30_000);
    assert.equal(b.settleProbe(b.takeProbe()!, 'released', 30_100, scriptedRng([])), undefined);
    assert.equal(b.state, 'half-open');
    assert.equal(b.admits(), true);
    assert.notEqual(b.takeProbe(), undefined);
  });

  test('ignores a stale or foreign probe token', () => {
    const { b } = tripped();
    b.advance(30_000);
    const token = b.takeProbe()!;
    assert.equal(b.settleProbe(token + 1, 'failed', 30_100, scriptedRng([])), undefined);
    assert.equal(b.state, 'half-open');
    b.settleProbe(token, 'succeeded', 30_200, scriptedRng([]));
    assert.equal(b.settleProbe(token, 'failed', 30_300, scriptedRng([])), undefined);
    assert.equal(b.state, 'closed');
  });

  test('applies a new policy at the next opening', () => {
    const b = new Breaker(health());
    b.setPolicy(health({ openForMs: 1_000, minRequests: 1 }));
    const t = b.evaluate(0, reading({ requests: 1, errors: 1 }), noJitter());
    assert.equal(t?.openForMs, 1_000);
  });

  test('caps the growing period at maxOpenForMs over many failed probes', () => {
    const b = new Breaker(health());
    let now = 0;
    const periods: number[] = [];
    let t = b.evaluate(now, reading({ errors: 20 }), noJitter());
    for (let i = 0; i < 6; i++) {
      periods.push(t!.openForMs!);
      now += t!.openForMs!;
      b.advance(now);
      t = b.settleProbe(b.takeProbe()!, 'failed', now, noJitter());
    }
    assert.deepEqual(periods, [30_000, 60_000, 120_000, 240_000, 300_000, 300_000]);
  });
});
