import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { parsePlacements } from '../../crds/snapshot.ts';
import { decodeHashes, placementDigest } from '../../lib/placement-hashes.ts';
import {
  DEFAULT_PLACEMENT_DEDUP_MS,
  PlacementOutbox,
  type PlacementBatch,
} from './placement-outbox.ts';

const chain = (...hashes: number[]): number[] => hashes;
const bytesOf = (batch: PlacementBatch | undefined): number =>
  Buffer.byteLength(JSON.stringify(batch));

describe('PlacementOutbox', () => {
  test('a placement becomes a batch: its endpoint listed once, its digest, its age', () => {
    const outbox = new PlacementOutbox();
    const c = chain(1, 2, 3, 4, 5, 6);
    outbox.add('e1', c, 2, 1_000);
    outbox.add('e1', chain(9, 8), 1, 1_010);
    const batch = outbox.take(1_050, 65_536);
    assert.deepEqual(batch?.endpoints, ['e1']);
    assert.equal(batch?.placements.length, 2);
    assert.deepEqual(batch?.placements[0]?.endpoint, 0);
    assert.equal(batch?.placements[0]?.ageMs, 50);
    assert.equal(batch?.placements[1]?.ageMs, 40);
    assert.deepEqual(decodeHashes(batch.placements[0].hashes), placementDigest(c, 2));
    assert.equal(parsePlacements(batch).ok, true);
    assert.equal(outbox.take(1_100, 65_536), undefined, 'taken: nothing waits');
  });

  test('the same deepest block to the same endpoint is not queued again within 10 s', () => {
    const outbox = new PlacementOutbox();
    assert.equal(DEFAULT_PLACEMENT_DEDUP_MS, 10_000);
    outbox.add('e1', chain(1, 2), 1, 0);
    outbox.add('e1', chain(7, 2), 1, 5_000); // same deepest hash, same endpoint
    outbox.add('e2', chain(1, 2), 1, 5_000); // another endpoint: news
    outbox.add('e1', chain(1, 2, 3), 1, 5_000); // deeper: news
    assert.equal(outbox.size, 3);
    outbox.add('e1', chain(1, 2), 1, 9_999);
    assert.equal(outbox.size, 3);
    outbox.add('e1', chain(1, 2), 1, 10_000); // 10 s later: again
    assert.equal(outbox.size, 4);
  });

  test('at most maxQueued wait: the oldest are dropped and counted', () => {
    const outbox = new PlacementOutbox({ maxQueued: 3 });
    for (let i = 1; i <= 5; i++) outbox.add('e1', chain(i), 1, i);
    assert.equal(outbox.size, 3);
    assert.equal(outbox.dropped, 2);
    const batch = outbox.take(10, 65_536);
    assert.deepEqual(
      batch?.placements.map((p) => decodeHashes(p.hashes)),
      [[3], [4], [5]],
    );
  });

  test('clear forgets what waits', () => {
    const outbox = new PlacementOutbox();
    outbox.add('e1', chain(1), 1, 0);
    outbox.add('e1', [], 1, 0); // no blocks: nothing to say
    assert.equal(outbox.size, 1);
    outbox.clear();
    assert.equal(outbox.size, 0);
    assert.equal(outbox.take(1, 65_536), undefined);
  });

  test('a placement too large for the limit alone is dropped, not left to block the queue', () => {
    const outbox = new PlacementOutbox();
    outbox.add('x'.repeat(200), chain(1), 1, 0);
    outbox.add('e', chain(2), 1, 0);
    const batch = outbox.take(0, 150);
    assert.deepEqual(batch?.endpoints, ['e']);
    assert.equal(outbox.dropped, 1);
  });

  test('the dedup memory is bounded too', () => {
    const outbox = new PlacementOutbox({ maxRemembered: 2 });
    outbox.add('e1', chain(1), 1, 0);
    outbox.add('e1', chain(2), 1, 0);
    outbox.add('e1', chain(3), 1, 0); // forgets (1, e1)
    outbox.add('e1', chain(1), 1, 1);
    assert.equal(outbox.size, 4);
  });

  test('a batch is at most maxBytes of JSON, counted exactly; the rest waits', () => {
    const whole = new PlacementOutbox();
    const same = new PlacementOutbox();
    for (const o of [whole, same])
      for (let i = 0; i < 20; i++)
        o.add(`endpoint-${i % 3}-ü`, chain(i * 1000, i * 1000 + 1), 1, i);
    const all = whole.take(100, 65_536);
    const exact = bytesOf(all);
    const fits = same.take(100, exact);
    assert.equal(bytesOf(fits), exact, 'exactly its size fits');
    const short = new PlacementOutbox();
    for (let i = 0; i < 20; i++)
      short.add(`endpoint-${i % 3}-ü`, chain(i * 1000, i * 1000 + 1), 1, i);
    const first = short.take(100, exact - 1);
    assert.equal(first?.placements.length, 19);
    assert.equal(short.size, 1);
  });

  test('property: every batch parses, fits its limit, and together they carry every placement in order', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.record({
            endpoint: fc.constantFrom('a', 'b', 'pod-10.0.0.7:8000', 'ünïcode'),
            chain: fc.array(fc.integer({ min: 0, max: 2 ** 52 - 1 }), {
              minLength: 1,
              maxLength: 300,
            }),
            homeDepth: fc.integer({ min: 1, max: 300 }),
            dtMs: fc.integer({ min: 0, max: 3_000 }),
          }),
          { maxLength: 60 },
        ),
        fc.integer({ min: 200, max: 4_000 }),
        (adds, maxBytes) => {
          const outbox = new PlacementOutbox();
          let now = 0;
          for (const a of adds) {
            now += a.dtMs;
            outbox.add(a.endpoint, a.chain, a.homeDepth, now);
          }
          const expected = outbox.size;
          let seen = 0;
          for (
            let batch = outbox.take(now, maxBytes);
            batch !== undefined;
            batch = outbox.take(now, maxBytes)
          ) {
            assert.ok(bytesOf(batch) <= maxBytes);
            assert.equal(parsePlacements(batch).ok, true);
            seen += batch.placements.length;
          }
          assert.equal(seen + outbox.dropped, expected);
        },
      ),
      { numRuns: 200 },
    );
  });
});
