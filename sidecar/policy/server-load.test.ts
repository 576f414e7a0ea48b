import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_REPORT_MAX_AGE_MS, ReportedLoad } from './server-load.ts';

describe('ReportedLoad', () => {
  test('without a report, the estimate is the local count', () => {
    assert.equal(DEFAULT_REPORT_MAX_AGE_MS, 2000);
    assert.equal(new ReportedLoad().estimate(3, 0, 1000), 3);
  });

  test("adds what this sidecar started since the report to the server's queue", () => {
    const load = new ReportedLoad();
    load.update({ running: 5, waiting: 2 }, 1, 0);
    assert.equal(load.estimate(1, 10, 1000), 7);
    assert.equal(load.estimate(3, 10, 1000), 9, 'two more started here');
    assert.equal(load.estimate(0, 10, 1000), 6, 'one finished here');
  });

  test('is never below the local count', () => {
    const load = new ReportedLoad();
    load.update({ running: 0, waiting: 0 }, 4, 0);
    assert.equal(load.estimate(2, 1, 1000), 2);
  });

  test('ignores a report older than maxAgeMs', () => {
    const load = new ReportedLoad();
    load.update({ waiting: 10 }, 0, 0);
    assert.equal(load.estimate(1, 1000, 1000), 11);
    assert.equal(load.estimate(1, 1001, 1000), 1);
    assert.equal(load.last(1001, 1000), undefined);
  });

  test('keeps fields a later report leaves out (an ORCA header has no running count)', () => {
    const load = new ReportedLoad();
    load.update({ running: 4, waiting: 1, kvCacheUsage: 0.5 }, 0, 0);
    load.update({ waiting: 3 }, 0, 100);
    assert.deepEqual(load.last(150, 1000), {
      running: 4,
      waiting: 3,
      kvCacheUsage: 0.5,
      ageMs: 50,
    });
    assert.equal(load.estimate(0, 150, 1000), 7);
  });

  test('ignores garbage values, and a report with nothing usable', () => {
    const load = new ReportedLoad();
    load.update({ running: -1, waiting: Number.NaN, kvCacheUsage: 7 }, 0, 0);
    assert.equal(load.last(0, 1000), undefined);
    load.update({ kvCacheUsage: 0.9 }, 0, 0);
    assert.equal(load.estimate(2, 0, 1000), 2, 'KV usage alone is no queue depth');
    assert.deepEqual(load.last(0, 1000), {
      running: undefined,
      waiting: undefined,
      kvCacheUsage: 0.9,
      ageMs: 0,
    });
  });
});
