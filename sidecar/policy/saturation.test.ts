import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { isSaturated } from './saturation.ts';
import { ReportedLoad, type ServerLoadReport } from './server-load.ts';
import type { SaturationRule } from './types.ts';

const MAX_AGE_MS = 1000;
const rule: SaturationRule = { kvCacheSaturation: 0.9 };
const capped: SaturationRule = { kvCacheSaturation: 0.9, maxInFlightPerEndpoint: 3 };

/** A ReportedLoad fed `reports` in order, one ms apart, ending at 0 (this sidecar had 0 there). */
function loadOf(...reports: ServerLoadReport[]): ReportedLoad {
  const load = new ReportedLoad();
  reports.forEach((report, i) => load.update(report, 0, i - reports.length + 1));
  return load;
}

describe('isSaturated', () => {
  test('a fresh report of the KV cache at or above the threshold saturates', () => {
    assert.equal(isSaturated(loadOf({ kvCacheUsage: 0.9 }), 0, rule, 0, MAX_AGE_MS), true);
    assert.equal(
      isSaturated(loadOf({ kvCacheUsage: 0.95, running: 1 }), 0, rule, 0, MAX_AGE_MS),
      true,
    );
    // Below it, other signals decide: here a report without a queue has room.
    assert.equal(
      isSaturated(loadOf({ kvCacheUsage: 0.89, running: 1 }), 0, rule, 0, MAX_AGE_MS),
      false,
    );
    // A stale one does not count.
    assert.equal(
      isSaturated(loadOf({ kvCacheUsage: 1 }), 0, rule, MAX_AGE_MS + 1, MAX_AGE_MS),
      false,
    );
  });

  test('with the batch known, no free slot saturates and a free one has room', () => {
    // Batch 4 seen while requests waited; now 2 run and none wait.
    const load = loadOf({ running: 4, waiting: 1 }, { running: 2, waiting: 0 });
    assert.equal(load.batch(0), 4);
    assert.equal(isSaturated(load, 0, rule, 0, MAX_AGE_MS), false);
    assert.equal(isSaturated(load, 1, rule, 0, MAX_AGE_MS), false);
    assert.equal(isSaturated(load, 2, rule, 0, MAX_AGE_MS), true, 'two more started here: full');
    assert.equal(isSaturated(load, 5, rule, 0, MAX_AGE_MS), true);
    // Stale, the batch still holds: this sidecar's own requests fill it.
    assert.equal(isSaturated(load, 3, rule, MAX_AGE_MS + 1, MAX_AGE_MS), false);
    assert.equal(isSaturated(load, 4, rule, MAX_AGE_MS + 1, MAX_AGE_MS), true);
  });

  test('with the batch unknown, a fresh report of waiting requests saturates', () => {
    // An ORCA header: waiting, no running count, so no batch.
    const load = loadOf({ waiting: 2 });
    assert.equal(load.batch(0), undefined);
    assert.equal(isSaturated(load, 0, rule, 0, MAX_AGE_MS), true);
  });

  test('a fresh report of the queue without waiting requests has room', () => {
    assert.equal(isSaturated(loadOf({ running: 7, waiting: 0 }), 50, capped, 0, MAX_AGE_MS), false);
    assert.equal(isSaturated(loadOf({ running: 7 }), 50, capped, 0, MAX_AGE_MS), false);
    assert.equal(isSaturated(loadOf({ waiting: 0 }), 50, capped, 0, MAX_AGE_MS), false);
  });

  test('without a fresh report of the queue, maxInFlightPerEndpoint decides', () => {
    const none = new ReportedLoad();
    assert.equal(isSaturated(none, 1000, rule, 0, MAX_AGE_MS), false, 'unset: never');
    assert.equal(isSaturated(none, 2, capped, 0, MAX_AGE_MS), false);
    assert.equal(isSaturated(none, 3, capped, 0, MAX_AGE_MS), true);
    // A report of the KV cache alone says nothing of the queue.
    const kvOnly = loadOf({ kvCacheUsage: 0.5 });
    assert.equal(isSaturated(kvOnly, 2, capped, 0, MAX_AGE_MS), false);
    assert.equal(isSaturated(kvOnly, 3, capped, 0, MAX_AGE_MS), true);
    // A stale report of a queue is no report.
    const stale = loadOf({ running: 9, waiting: 0 });
    assert.equal(isSaturated(stale, 2, capped, MAX_AGE_MS + 1, MAX_AGE_MS), false);
    assert.equal(isSaturated(stale, 3, capped, MAX_AGE_MS + 1, MAX_AGE_MS), true);
  });

  test('a headroom leaves part of the endpoint free: batch, in-flight bound and KV cache', () => {
    const shed: SaturationRule = { kvCacheSaturation: 0.9, headroom: 0.25 };
    // Batch 8 known, 4 run: 4 free; 0.25 of 8 = 2 reserved, so room until only 2 are free.
    const load = loadOf({ running: 8, waiting: 1 }, { running: 4, waiting: 0 });
    assert.equal(isSaturated(load, 0, shed, 0, MAX_AGE_MS), false);
    // One request per fresh report with a headroom: the others see the same free slots.
    assert.equal(isSaturated(load, 1, shed, 0, MAX_AGE_MS), true, 'one sent since the report');
    assert.equal(isSaturated(load, 2, rule, 0, MAX_AGE_MS), false, 'no headroom: room');
    assert.equal(
      isSaturated(
        loadOf({ running: 8, waiting: 1 }, { running: 5, waiting: 0 }),
        0,
        shed,
        0,
        MAX_AGE_MS,
      ),
      false,
      '3 free',
    );
    assert.equal(
      isSaturated(
        loadOf({ running: 8, waiting: 1 }, { running: 6, waiting: 0 }),
        0,
        shed,
        0,
        MAX_AGE_MS,
      ),
      true,
      '2 free: the reserve',
    );
    // KV cache: 0.9 × 0.75 = 0.675.
    const kv = loadOf({ kvCacheUsage: 0.7, running: 1 });
    assert.equal(isSaturated(kv, 0, shed, 0, MAX_AGE_MS), true);
    assert.equal(isSaturated(kv, 0, rule, 0, MAX_AGE_MS), false);
    // Without reports: of maxInFlightPerEndpoint 4, 1 is reserved.
    const bound: SaturationRule = { ...shed, maxInFlightPerEndpoint: 4 };
    assert.equal(isSaturated(new ReportedLoad(), 2, bound, 0, MAX_AGE_MS), false);
    assert.equal(isSaturated(new ReportedLoad(), 3, bound, 0, MAX_AGE_MS), true);
    // A reserve never takes the whole endpoint: of a bound of 1, none is reserved.
    const one: SaturationRule = { kvCacheSaturation: 0.9, headroom: 1, maxInFlightPerEndpoint: 1 };
    assert.equal(isSaturated(new ReportedLoad(), 0, one, 0, MAX_AGE_MS), false);
  });
});
