import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { BATCH_KNOWN_FOR_MS, DEFAULT_REPORT_MAX_AGE_MS, ReportedLoad } from './server-load.ts';

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

  describe('freeSlots', () => {
    test('is unknown until the server has reported a running count and a waiting queue', () => {
      const load = new ReportedLoad();
      assert.equal(load.freeSlots(0, 0, 1000), undefined);
      load.update({ waiting: 2 }, 0, 0);
      assert.equal(load.freeSlots(0, 0, 1000), undefined, 'an ORCA header says nothing of slots');
      load.update({ running: 6, waiting: 0 }, 0, 10);
      assert.equal(load.freeSlots(0, 10, 1000), 0, 'it queued at 0: six is its batch');
      const idle = new ReportedLoad();
      idle.update({ running: 6, waiting: 0 }, 0, 0);
      assert.equal(idle.freeSlots(0, 0, 1000), undefined, 'six is what it was given');
    });

    test('batch: the largest running count, once the server has queued', () => {
      const load = new ReportedLoad();
      load.update({ running: 4, waiting: 0 }, 0, 0);
      assert.equal(load.batch(0), undefined);
      load.update({ running: 6, waiting: 2 }, 0, 10);
      load.update({ running: 3, waiting: 0 }, 0, 20);
      assert.equal(load.batch(20), 6);
      assert.equal(load.batch(10 + BATCH_KNOWN_FOR_MS + 1), undefined);
    });

    test('is the largest batch seen minus the load estimate', () => {
      const load = new ReportedLoad();
      load.update({ running: 6, waiting: 1 }, 0, 0);
      load.update({ running: 2, waiting: 0 }, 1, 10);
      assert.equal(load.freeSlots(1, 20, 1000), 4);
      assert.equal(load.freeSlots(3, 20, 1000), 2, 'two more started here since');
    });

    test('is below zero by the waiting queue when a full KV cache queues below the batch', () => {
      const load = new ReportedLoad();
      load.update({ running: 8, waiting: 0 }, 0, 0);
      load.update({ running: 5, waiting: 2 }, 1, 10);
      assert.equal(load.freeSlots(1, 20, 1000), -2);
      assert.equal(load.freeSlots(2, 20, 1000), -3, 'one started here since queues behind them');
      assert.equal(load.freeSlots(0, 20, 1000), -1, 'one finished here: a waiting one takes it');
    });

    test("counts this sidecar's own requests against the batch once the report is stale", () => {
      const load = new ReportedLoad();
      load.update({ running: 6, waiting: 3 }, 0, 0);
      assert.equal(load.freeSlots(4, 2000, 1000), 2);
    });

    test(`forgets the batch ${BATCH_KNOWN_FOR_MS} ms after the server last queued`, () => {
      const load = new ReportedLoad();
      load.update({ running: 6, waiting: 3 }, 0, 0);
      load.update({ running: 6, waiting: 0 }, 0, BATCH_KNOWN_FOR_MS);
      assert.equal(load.freeSlots(0, BATCH_KNOWN_FOR_MS, 1000), 0);
      assert.equal(load.freeSlots(0, BATCH_KNOWN_FOR_MS + 1, 1000), undefined);
    });
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

  test('holds the reported inter-token latency while the report is fresh, through reports without it', () => {
    const load = new ReportedLoad();
    assert.equal(load.interTokenLatencyMs(0, 1000), undefined);
    load.update({ running: 2, interTokenLatencyMs: 40 }, 0, 0);
    // An ORCA header carries none: the scrape's value stands, aging from when it came.
    load.update({ waiting: 1 }, 0, 500);
    assert.equal(load.interTokenLatencyMs(1000, 1000), 40);
    assert.equal(load.last(1000, 1000)?.interTokenLatencyMs, 40);
    // The report without a speed is fresh at 1,400; the speed is not.
    assert.equal(load.interTokenLatencyMs(1400, 1000), undefined, 'stale');
    assert.equal(load.last(1400, 1000)?.interTokenLatencyMs, undefined);
    assert.equal(load.last(1400, 1000)?.waiting, 1);
    load.update({ interTokenLatencyMs: 40 }, 0, 1500);
    for (const garbage of [0, -3, Number.NaN, Infinity]) {
      load.update({ interTokenLatencyMs: garbage }, 0, 2000);
      assert.equal(load.interTokenLatencyMs(2000, 1000), 40);
    }
    const alone = new ReportedLoad();
    alone.update({ interTokenLatencyMs: 12 }, 0, 0);
    assert.equal(alone.interTokenLatencyMs(0, 1000), 12);
    assert.equal(alone.estimate(1, 0, 1000), 1, 'a speed is no queue depth');
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
