import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { parsePlacements, type PoolPlacements } from '../../crds/snapshot.ts';
import { decodeHashes, encodeHashes } from '../../lib/placement-hashes.ts';
import { DUPLICATE_WINDOW_MS, MAX_PENDING, PlacementRelay } from './placement-relay.ts';

/** A batch naming `endpoints`, one placement per [endpoint index, deepest hash, ageMs]. */
function batch(endpoints: string[], placements: [number, number, number][]): PoolPlacements {
  return {
    endpoints,
    placements: placements.map(([endpoint, deepest, ageMs]) => ({
      endpoint,
      ageMs,
      hashes: encodeHashes([1, 2, deepest]),
    })),
  };
}

/** The event's placements as `endpoint id:deepest hash`. */
function named(event: PoolPlacements | undefined): string[] {
  return (event?.placements ?? []).map(
    (p) => `${event!.endpoints[p.endpoint]}:${decodeHashes(p.hashes)!.at(-1)}`,
  );
}

describe('PlacementRelay', () => {
  it('merges uploads into one event, re-indexing their endpoints, newest first', () => {
    const relay = new PlacementRelay();
    relay.accept(batch(['a', 'b'], [[1, 10, 50]]), 1000);
    relay.accept(
      batch(
        ['c', 'b'],
        [
          [0, 11, 5],
          [1, 12, 20],
        ],
      ),
      1040,
    );
    const tick = relay.tick(1100, 8192);
    assert.deepEqual(named(tick.event), ['c:11', 'b:12', 'b:10']);
    assert.deepEqual(tick.event?.endpoints, ['c', 'b']);
    // Ages grow by the time held: 5 + 60, 20 + 60, 50 + 100.
    assert.deepEqual(
      tick.event?.placements.map((p) => p.ageMs),
      [65, 80, 150],
    );
    assert.equal(tick.json, JSON.stringify(tick.event));
    assert.ok(parsePlacements(JSON.parse(tick.json)).ok);
    assert.equal(relay.tick(1200, 8192).event, undefined, 'nothing new: no event');
  });

  it('drops a (deepest hash, endpoint) seen in the last 10 s, from any uploader', () => {
    const relay = new PlacementRelay();
    assert.equal(relay.accept(batch(['a'], [[0, 7, 0]]), 0).accepted, 1);
    relay.tick(100, 8192);
    const again = relay.accept(
      batch(
        ['x', 'a'],
        [
          [1, 7, 0],
          [0, 7, 0],
        ],
      ),
      5000,
    );
    assert.deepEqual(again, { accepted: 1, duplicate: 1, invalid: 0, overBudget: 0 });
    assert.equal(relay.accept(batch(['a'], [[0, 7, 0]]), DUPLICATE_WINDOW_MS).accepted, 1);
    assert.equal(relay.remembered, 2, 'a/7 again, x/7');
    relay.tick(3 * DUPLICATE_WINDOW_MS, 8192);
    assert.equal(relay.remembered, 0, 'the window forgets');
  });

  it('keeps the newest within the budget and counts the rest as dropped', () => {
    const relay = new PlacementRelay();
    const placements: [number, number, number][] = [];
    for (let i = 0; i < 50; i++) placements.push([i % 3, 100 + i, i * 10]);
    relay.accept(batch(['e0', 'e1', 'e2'], placements), 0);
    const tick = relay.tick(100, 819);
    assert.ok(tick.json!.length <= 819, `${tick.json!.length} bytes`);
    assert.equal(tick.sent + tick.overBudget, 50);
    assert.ok(tick.sent > 0 && tick.sent < 50);
    const ages = tick.event!.placements.map((p) => p.ageMs);
    assert.deepEqual(
      ages,
      [...ages].sort((a, b) => a - b),
    );
    assert.equal(ages[0], 100, 'the newest (age 0 + 100 held) went first');
  });

  it('forwards only what was uploaded here, not what peers relayed', () => {
    const relay = new PlacementRelay();
    relay.accept(batch(['a'], [[0, 1, 0]]), 0, true);
    relay.accept(batch(['b'], [[0, 2, 0]]), 0, false);
    const tick = relay.tick(100, 8192);
    assert.equal(tick.sent, 2);
    assert.deepEqual(named(tick.forward), ['a:1']);
  });

  it('counts undecodable placements as invalid, and caps what waits', () => {
    const relay = new PlacementRelay();
    const bad: PoolPlacements = {
      endpoints: ['a'],
      placements: [
        { endpoint: 0, ageMs: 0, hashes: 'AAAAAAAAAB' }, // not canonical base64url
        { endpoint: 3, ageMs: 0, hashes: encodeHashes([1]) },
      ],
    };
    assert.equal(relay.accept(bad, 0).invalid, 2);
    const many: [number, number, number][] = [];
    for (let i = 0; i < MAX_PENDING + 10; i++) many.push([0, i + 1, 0]);
    assert.equal(relay.accept(batch(['a'], many), 0).overBudget, 10);
    assert.equal(relay.waiting, MAX_PENDING);
  });

  it('never goes over budget, sends no duplicate within the window, and loses nothing uncounted', () => {
    const upload = fc.record({
      atMs: fc.integer({ min: 0, max: 400 }),
      endpoints: fc.array(fc.constantFrom('a', 'b', 'c', 'endpoint-é'), {
        minLength: 1,
        maxLength: 4,
      }),
      placements: fc.array(
        fc.tuple(
          fc.nat(3),
          fc.integer({ min: 1, max: 40 }),
          fc.integer({ min: 0, max: 5000 }),
          fc.integer({ min: 1, max: 8 }),
        ),
        { maxLength: 30 },
      ),
      local: fc.boolean(),
    });
    fc.assert(
      fc.property(
        fc.array(upload, { maxLength: 40 }),
        fc.integer({ min: 0, max: 3000 }),
        (uploads, maxBytes) => {
          const relay = new PlacementRelay();
          let now = 0;
          let accepted = 0;
          let sent = 0;
          let dropped = 0;
          let given = 0;
          let refused = 0;
          const lastSent = new Map<string, number>();
          for (const u of uploads) {
            now += u.atMs;
            const b: PoolPlacements = {
              endpoints: u.endpoints,
              placements: u.placements.map(([e, deepest, ageMs, depth]) => ({
                endpoint: e % u.endpoints.length,
                ageMs,
                hashes: encodeHashes([...Array<number>(depth - 1).fill(9), deepest]),
              })),
            };
            const a = relay.accept(b, now, u.local);
            given += b.placements.length;
            accepted += a.accepted;
            refused += a.duplicate + a.invalid + a.overBudget;
            now += 100;
            const tick = relay.tick(now, maxBytes);
            sent += tick.sent;
            dropped += tick.overBudget;
            if (tick.json !== undefined) {
              assert.ok(Buffer.byteLength(tick.json) <= maxBytes);
              assert.ok(parsePlacements(JSON.parse(tick.json)).ok);
            }
            for (const name of named(tick.event)) {
              const before = lastSent.get(name);
              assert.ok(
                before === undefined || now - before >= DUPLICATE_WINDOW_MS,
                `${name} again after ${now - (before ?? 0)} ms`,
              );
              lastSent.set(name, now);
            }
          }
          assert.equal(given, accepted + refused, 'each upload placement is counted once');
          assert.equal(accepted, sent + dropped, 'each accepted one is sent or dropped');
        },
      ),
    );
  });
});
