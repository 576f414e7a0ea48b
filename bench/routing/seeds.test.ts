import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { PolicyResult } from './metrics.ts';
import { aggregateSeeds, median, range, type SeedRun } from './seeds.ts';

const result = (
  over: Partial<PolicyResult> & { machineCpuPercent?: number | null },
): SeedRun['result'] => ({
  requests: 100,
  errors: 0,
  errorRate: 0,
  errorKinds: {},
  ttftMs: { p50: 100, p90: 200, p99: 300 },
  e2eMs: { p50: 1000, p90: 2000, p99: 3000 },
  cacheHitRate: 0.2,
  throughputRps: 10,
  costPer1k: 1,
  share: { b0: 0.5, b1: 0.5 },
  machineCpuPercent: 40,
  ...over,
});

describe('median and range', () => {
  it('takes the middle value, or the mean of the middle two', () => {
    assert.equal(median([3, 1, 2]), 2);
    assert.equal(median([4, 1, 3, 2]), 2.5);
    assert.equal(median([7]), 7);
  });

  it('ignores values that are not finite (a run without a successful request)', () => {
    assert.equal(median([NaN, 5, 1]), 3);
    assert.ok(Number.isNaN(median([])));
    assert.ok(Number.isNaN(median([NaN])));
    assert.deepEqual(range([5, NaN, 1, 9]), { min: 1, max: 9 });
    assert.equal(range([NaN]), undefined);
  });
});

describe('aggregateSeeds', () => {
  const runs: SeedRun[] = [
    {
      seed: 1,
      wallS: 8.04,
      result: result({
        ttftMs: { p50: 100, p90: 200, p99: 900 },
        cacheHitRate: 0.3,
        errors: 2,
        errorRate: 0.02,
        errorKinds: { '500': 2 },
        share: { b0: 0.6, b1: 0.4 },
        machineCpuPercent: 50,
      }),
    },
    {
      seed: 2,
      wallS: 9,
      result: result({
        ttftMs: { p50: 300, p90: 400, p99: 500 },
        cacheHitRate: 0.1,
        machineCpuPercent: null,
      }),
    },
    {
      seed: 3,
      wallS: 10,
      result: result({
        ttftMs: { p50: 200, p90: 300, p99: 700 },
        cacheHitRate: 0.2,
        errors: 1,
        errorRate: 0.01,
        errorKinds: { '500': 1, incomplete: 1 },
        share: { b0: 0.5, b1: 0.4, b2: 0.1 },
        machineCpuPercent: 30,
      }),
    },
  ];
  const agg = aggregateSeeds(runs);

  it('holds the median of every figure where one run’s figure was', () => {
    assert.deepEqual(agg.ttftMs, { p50: 200, p90: 300, p99: 700 });
    assert.equal(agg.cacheHitRate, 0.2);
    assert.equal(agg.errorRate, 0.01);
    assert.equal(agg.errors, 1);
    assert.equal(agg.requests, 100);
    assert.equal(agg.machineCpuPercent, 40);
  });

  it('keeps every run’s figures beside the medians', () => {
    assert.deepEqual(
      agg.seeds.map((s) => [s.seed, s.ttftMs.p99, s.cacheHitRate, s.errorRate, s.wallS]),
      [
        [1, 900, 0.3, 0.02, 8],
        [2, 500, 0.1, 0, 9],
        [3, 700, 0.2, 0.01, 10],
      ],
    );
  });

  it('sums the error kinds and averages the shares, which still add up to 1', () => {
    assert.deepEqual(agg.errorKinds, { '500': 3, incomplete: 1 });
    assert.ok(Math.abs(Object.values(agg.share).reduce((a, b) => a + b, 0) - 1) < 1e-12);
    assert.ok(Math.abs(agg.share['b2']! - 0.1 / 3) < 1e-12);
  });

  it('takes the median of the conversation figures when the runs have them', () => {
    const affinity = (home: number) => ({
      conversations: 10,
      laterTurns: 50,
      laterTurnsHome: home,
      maxHomeShare: home / 2,
      unknownBackend: 0,
    });
    const withChats = aggregateSeeds(
      [0.9, 0.5, 0.7].map((home, i) => ({
        seed: i,
        wallS: 1,
        result: result({ conversations: affinity(home) }),
      })),
    );
    assert.equal(withChats.conversations?.laterTurnsHome, 0.7);
    assert.equal(withChats.conversations?.maxHomeShare, 0.35);
    assert.equal(withChats.seeds[1]?.conversations?.laterTurnsHome, 0.5);
    assert.equal(agg.conversations, undefined);
  });

  it('refuses no runs at all', () => {
    assert.throws(() => aggregateSeeds([]), /at least one run/);
  });
});
