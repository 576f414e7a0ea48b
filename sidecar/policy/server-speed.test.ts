import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { lowerBound, median, medianWithout } from './median.ts';
import {
  MEASURED_SLOWER_RATIO,
  medianBySelection,
  prefillPositions,
  REPORT_TRUST_FACTOR,
  reportedSlowdowns,
  SLOW_SERVER_RATIO,
  slowdownAgainstPeers,
  speedWeightedCount,
  trustedSlowdown,
  trustedSlowdownAgainstPeers,
} from './server-speed.ts';

describe('reportedSlowdowns', () => {
  test("each server's inter-token latency over the median of its peers that report one", () => {
    // Peers of a 10: 10, 12, 40 (median 12); of the 40: 10, 10, 12 (median 10).
    assert.deepEqual(reportedSlowdowns([10, 10, 40, undefined, 12]), [
      10 / 12,
      10 / 12,
      40 / 10,
      1,
      12 / 10,
    ]);
  });

  test('one slow server of two reads as slow as it is (a two-endpoint pool or tier)', () => {
    assert.deepEqual(reportedSlowdowns([40, 10]), [4, 0.25]);
  });

  test('is 1 for a server whose peers report nothing usable', () => {
    assert.deepEqual(reportedSlowdowns([]), []);
    assert.deepEqual(reportedSlowdowns([40, undefined]), [1, 1]);
    assert.deepEqual(reportedSlowdowns([40, 0, Number.NaN, -1, Infinity]), [1, 1, 1, 1, 1]);
  });

  test('gives exactly what sorting and taking the median without each value gives', () => {
    // The definition, O(n log n): what the O(n) selection must reproduce to the last bit.
    const bySorting = (latencies: readonly (number | undefined)[]): number[] => {
      const usable = (v: number | undefined): v is number =>
        v !== undefined && Number.isFinite(v) && v > 0;
      const sorted = latencies.filter(usable).sort((a, b) => a - b);
      return latencies.map((v) => {
        if (!usable(v)) return 1;
        const peers = medianWithout(sorted, lowerBound(sorted, v));
        return peers === undefined ? 1 : v / peers;
      });
    };
    const latency = fc.oneof(
      fc.integer({ min: 1, max: 6 }), // few distinct values: many ties around the middle
      fc.double({ min: 0.001, max: 1e4, noNaN: true }),
      fc.constantFrom(undefined, 0, -1, Number.NaN, Infinity),
    );
    fc.assert(
      fc.property(fc.array(latency, { maxLength: 40 }), (latencies) => {
        assert.deepEqual(reportedSlowdowns(latencies), bySorting(latencies));
      }),
      { numRuns: 2000 },
    );
    const large = Array.from({ length: 4096 }, (_, i) => 10 + ((i * 7919) % 13));
    assert.deepEqual(reportedSlowdowns(large), bySorting(large));
    const ascending = Array.from({ length: 1000 }, (_, i) => i + 1);
    assert.deepEqual(reportedSlowdowns(ascending), bySorting(ascending));
    assert.deepEqual(reportedSlowdowns(ascending.toReversed()), bySorting(ascending.toReversed()));
  });

  test("answers for a value asked without a list, and leaves the caller's list as it was", () => {
    const latencies = [30, 10, undefined, 20];
    const slowdownOf = slowdownAgainstPeers(latencies);
    assert.deepEqual(latencies, [30, 10, undefined, 20]);
    assert.equal(slowdownOf(30), 30 / 15);
    assert.equal(slowdownOf(undefined), 1);
    assert.equal(slowdownAgainstPeers([undefined, 7])(7), 1);
  });
});

describe('medianBySelection', () => {
  test("is median.ts's median, bit for bit, ties and even counts included", () => {
    const value = fc.oneof(
      fc.integer({ min: 1, max: 6 }), // few distinct values: many ties around the middle
      fc.double({ min: -1e4, max: 1e4, noNaN: true }),
    );
    fc.assert(
      fc.property(fc.array(value, { maxLength: 60, size: 'max' }), (values) => {
        assert.equal(medianBySelection([...values]), median(values));
      }),
      { numRuns: 2000 },
    );
    const ascending = Array.from({ length: 1001 }, (_, i) => i * 0.1);
    for (const list of [ascending, ascending.toReversed(), ascending.slice(1)])
      assert.equal(medianBySelection([...list]), median(list));
    assert.equal(medianBySelection([]), undefined);
  });
});

describe('speedWeightedCount', () => {
  test(`leaves a server less than ${SLOW_SERVER_RATIO}× slower at its own count`, () => {
    assert.equal(speedWeightedCount(3, 1, 0.5), 3);
    assert.equal(speedWeightedCount(3, 1.49, 5), 3);
    assert.equal(speedWeightedCount(3, 0.5, 5), 3, 'a faster server is not favoured either');
  });

  test("counts a slower server by the time its queue and the request's prefill take there", () => {
    // 4× slower, idle: a short request (a tenth of a position) counts as 0.3 requests ahead…
    assert.ok(Math.abs(speedWeightedCount(0, 4, 0.1) - 0.3) < 1e-12);
    // …a long one (two positions) as 6, and with one of its own in flight, as 10.
    assert.equal(speedWeightedCount(0, 4, 2), 6);
    assert.equal(speedWeightedCount(1, 4, 2), 10);
    // Prefill not known: one position.
    assert.equal(speedWeightedCount(1, 4, Number.NaN), 7);
  });

  test('with a free slot, counts only the slower prefill: nobody is ahead of the request there', () => {
    // 4× slower with room: a tenth of a position of prefill costs 0.3 more.
    assert.ok(Math.abs(speedWeightedCount(2, 4, 0.1, 1) - 2.3) < 1e-12);
    assert.equal(speedWeightedCount(2, 4, 2, 3), 8);
    // No room, or room not known: the queue counts too.
    assert.equal(speedWeightedCount(2, 4, 2, 0), 14);
    assert.equal(speedWeightedCount(2, 4, 2, -2), 14);
    assert.equal(speedWeightedCount(2, 4, 2, undefined), 14);
  });

  test('property: never below the plain count, growing with the slowdown and the prompt', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 50 }),
        fc.double({ min: 0, max: 20, noNaN: true }),
        fc.double({ min: 0, max: 10, noNaN: true }),
        fc.option(fc.integer({ min: -5, max: 10 }), { nil: undefined }),
        (inFlight, slowdown, positions, free) => {
          const count = speedWeightedCount(inFlight, slowdown, positions, free);
          assert.ok(count >= inFlight - 1e-9);
          assert.ok(speedWeightedCount(inFlight, slowdown + 1, positions, free) >= count - 1e-9);
          assert.ok(speedWeightedCount(inFlight, slowdown, positions + 1, free) >= count - 1e-9);
          // A free slot never makes a slow server look busier.
          assert.ok(speedWeightedCount(inFlight, slowdown, positions, 1) <= count + 1e-9);
        },
      ),
    );
  });
});

describe('prefillPositions', () => {
  test("counts a request's prefill in the server's queue positions: a hold is a batch of them", () => {
    // A sixth of a hold at a server of six slots is one position: one slot frees that often.
    assert.ok(Math.abs(prefillPositions(1 / 6, 6) - 1) < 1e-12);
    // A long prompt (1.25 holds: 3 s of prefill next to a 2.4 s hold) is 7.5 positions there.
    assert.equal(prefillPositions(1.25, 6), 7.5);
  });

  test('a server that has not shown its batch counts as one slot; an unmeasured prefill as one position', () => {
    assert.equal(prefillPositions(1.25, undefined), 1.25);
    assert.equal(prefillPositions(1.25, 0), 1.25);
    assert.equal(prefillPositions(undefined, 6), 1);
    assert.equal(prefillPositions(Number.NaN, 6), 1);
    assert.equal(prefillPositions(-1, 6), 1);
  });
});

describe('trustedSlowdown', () => {
  test('weighs a report only as far as this sidecar measured the server slower', () => {
    assert.equal(trustedSlowdown(4, undefined), 1, 'not measured: the report alone is not enough');
    assert.equal(trustedSlowdown(4, 1), 1, 'measured as fast as its peers');
    assert.equal(trustedSlowdown(2000, 0.03), 1, "a liar's peer, measured 37× faster than it");
    assert.equal(trustedSlowdown(4, 1.7), 4, "the routing benchmark's slow server, whole");
    assert.equal(
      trustedSlowdown(2000, MEASURED_SLOWER_RATIO),
      REPORT_TRUST_FACTOR * MEASURED_SLOWER_RATIO,
    );
    assert.equal(trustedSlowdown(4, 1.4), 1, 'within the jitter of equally fast servers');
    assert.equal(trustedSlowdown(0.5, 3), 1, 'reported faster: never weighed');
    assert.equal(trustedSlowdown(Number.NaN, 3), 1);
    assert.equal(trustedSlowdown(Infinity, Infinity), 1);
    assert.equal(trustedSlowdown(Infinity, 1e308), 1);
    assert.equal(trustedSlowdown(Infinity, 2), 8);
  });

  test('is never more than the report, nor the factor times the measurement, and 1 below the ratio', () => {
    const anyNumber = fc.oneof(fc.double(), fc.constantFrom(Number.NaN, Infinity, -Infinity, 0));
    fc.assert(
      fc.property(anyNumber, fc.option(anyNumber, { nil: undefined }), (reported, measured) => {
        const t = trustedSlowdown(reported, measured);
        assert.ok(t >= 1 && Number.isFinite(t), `${t}`);
        if (t > 1) {
          assert.ok(t <= reported);
          assert.ok(measured !== undefined && t <= REPORT_TRUST_FACTOR * measured);
          assert.ok(measured >= MEASURED_SLOWER_RATIO);
        }
      }),
    );
  });

  test('compares reports and measurements each with the peers', () => {
    // a reports 4× b's speed and was measured 2× b's TTFT; c reports nothing and is unmeasured.
    const of = trustedSlowdownAgainstPeers([40, 10, undefined], [20, 10, undefined]);
    assert.equal(of(40, 20), 4);
    assert.equal(of(10, 10), 1);
    assert.equal(of(undefined, undefined), 1);
    assert.equal(of(40, undefined), 1, 'a report with no measurement of its own');
    assert.equal(of(40, Number.NaN), 1);
  });
});
