import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  cdf,
  percentile,
  quantiles,
  shareOverTime,
  summarise,
  type BackendCounters,
  type ClientResult,
} from './metrics.ts';

const ok = (ttftMs: number, e2eMs: number, sentAtMs = 0, endedAtMs = 100): ClientResult => ({
  ok: true,
  status: 200,
  ttftMs,
  e2eMs,
  sentAtMs,
  endedAtMs,
});
const backend = (name: string, over: Partial<BackendCounters> = {}): BackendCounters => ({
  name,
  requests: 0,
  cacheHitBlocks: 0,
  cacheMissBlocks: 0,
  promptTokens: 0,
  completionTokens: 0,
  costPerMTok: 1,
  ...over,
});

describe('benchmark metrics', () => {
  it('nearest-rank percentiles', () => {
    const xs = Array.from({ length: 100 }, (_, i) => i + 1);
    assert.equal(percentile(xs, 50), 50);
    assert.equal(percentile(xs, 99), 99);
    assert.equal(percentile(xs, 100), 100);
    assert.equal(percentile([7], 99), 7);
    assert.ok(Number.isNaN(percentile([], 50)));
    assert.deepEqual(quantiles([3, 1, 2]), { p50: 2, p90: 3, p99: 3 });
  });

  it('summarises errors, latency of successes only, throughput, hit rate, cost and share', () => {
    const results: ClientResult[] = [
      ok(10, 100, 0, 500),
      ok(20, 200, 100, 900),
      { ok: false, status: 500, ttftMs: 1, e2eMs: 1, sentAtMs: 200, endedAtMs: 1000 },
      ok(30, 300, 300, 600),
    ];
    const backends = [
      backend('a', {
        requests: 3,
        cacheHitBlocks: 6,
        cacheMissBlocks: 2,
        promptTokens: 3_000_000,
        completionTokens: 0,
        costPerMTok: 0.2,
      }),
      backend('b', {
        requests: 1,
        cacheHitBlocks: 0,
        cacheMissBlocks: 2,
        promptTokens: 500_000,
        completionTokens: 500_000,
        costPerMTok: 1,
      }),
    ];
    const s = summarise(results, backends, 10);
    assert.equal(s.requests, 4);
    assert.equal(s.errors, 1);
    assert.equal(s.errorRate, 0.25);
    assert.deepEqual(s.errorKinds, { '500': 1 });
    assert.deepEqual(s.ttftMs, { p50: 20, p90: 30, p99: 30 });
    assert.deepEqual(s.e2eMs, { p50: 200, p90: 300, p99: 300 });
    // 3 completed over 1 s of wall time at speed 10 = 10 simulated seconds.
    assert.equal(s.throughputRps, 0.3);
    assert.equal(s.cacheHitRate, 0.6);
    // ($0.60 + $1.00) for 4 requests = $400 per 1,000.
    assert.ok(Math.abs(s.costPer1k - 400) < 1e-9);
    assert.deepEqual(s.share, { a: 0.75, b: 0.25 });
  });

  it('an empty run is all zeros, not NaN or a division error', () => {
    const s = summarise([], [backend('a')], 1);
    assert.equal(s.errorRate, 0);
    assert.deepEqual(s.errorKinds, {});
    assert.equal(s.throughputRps, 0);
    assert.equal(s.cacheHitRate, 0);
    assert.equal(s.costPer1k, 0);
    assert.deepEqual(s.share, { a: 0 });
  });

  it('the CDF ends at 1 and is thinned', () => {
    const points = cdf(
      Array.from({ length: 1000 }, (_, i) => 1000 - i),
      100,
    );
    assert.ok(points.length <= 101);
    assert.deepEqual(points[points.length - 1], { x: 1000, p: 1 });
    assert.equal(points[0]!.x, 1);
    assert.deepEqual(cdf([]), []);
  });

  it('shares over time: each backend’s part of the requests sent in each window', () => {
    const at = (sentAtMs: number, backend: string | undefined): ClientResult => ({
      ...ok(1, 2, sentAtMs),
      backend,
    });
    const points = shareOverTime(
      [
        at(0, 'b0'),
        at(100, 'b1'),
        at(500, 'b0'),
        at(900, 'b0'),
        at(1000, 'b1'),
        at(950, undefined),
      ],
      2,
    );
    assert.deepEqual(points, [
      { tS: 0.25, backend: 'b0', share: 1 / 2 },
      { tS: 0.25, backend: 'b1', share: 1 / 2 },
      { tS: 0.75, backend: 'b0', share: 2 / 3 },
      { tS: 0.75, backend: 'b1', share: 1 / 3 },
    ]);
    assert.deepEqual(shareOverTime([at(0, undefined)]), []);
  });
});
