import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  DEFAULT_LOAD_FACTOR,
  idHash,
  keyNumber,
  loadCapacity,
  rendezvousOrder,
  rendezvousWalk,
  rendezvousWeight,
  WALK_SELECTION_STEPS,
} from './bounded-load.ts';

const endpoints = (n: number, prefix = 'pool/10.0.0.') =>
  Array.from({ length: n }, (_, i) => {
    const id = `${prefix}${i + 1}:8000`;
    return { id, idHash: idHash(id) };
  });
const first = (key: number, pool: ReturnType<typeof endpoints>) =>
  rendezvousOrder(key, pool)[0]!.id;

describe('loadCapacity', () => {
  test('is ⌈factor · (total + 1) / n⌉', () => {
    assert.equal(DEFAULT_LOAD_FACTOR, 1.25);
    assert.equal(loadCapacity([0, 0, 0, 0], 1.25), 1);
    assert.equal(loadCapacity([2, 2, 2, 2], 1.25), 3);
    assert.equal(loadCapacity([10, 0, 0, 0], 2), 6);
  });

  test('is 0 for no endpoints, ignores negative loads, and falls back below factor 1', () => {
    assert.equal(loadCapacity([], 1.25), 0);
    assert.equal(loadCapacity([-5, 3], 1), 2);
    assert.equal(loadCapacity([3, 3], 0.5), loadCapacity([3, 3], DEFAULT_LOAD_FACTOR));
  });

  test('property: someone always fits, however the load is spread', () => {
    fc.assert(
      fc.property(
        fc.array(fc.nat(1000), { minLength: 1 }),
        fc.double({ min: 1, max: 4 }),
        (loads, f) => {
          const capacity = loadCapacity(loads, f);
          assert.ok(loads.some((l) => l < capacity));
        },
      ),
    );
  });
});

describe('rendezvousOrder', () => {
  test('ranks every endpoint once, independent of the input order', () => {
    fc.assert(
      fc.property(fc.nat(), fc.shuffledSubarray(endpoints(8), { minLength: 1 }), (key, subset) => {
        const order = rendezvousOrder(key, subset).map((e) => e.id);
        assert.deepEqual(
          rendezvousOrder(key, [...subset].reverse()).map((e) => e.id),
          order,
        );
        assert.equal(new Set(order).size, subset.length);
      }),
    );
  });

  test('breaks an exact weight tie (a duplicated id) by id, stably', () => {
    const a = { id: 'same', idHash: 1 };
    const b = { id: 'same', idHash: 1 };
    const c = { id: 'other', idHash: 1 };
    const order = rendezvousOrder(7, [a, b, c]);
    assert.equal(order[0]!.id, 'other');
  });

  test('moves only the keys of a removed endpoint', () => {
    const all = endpoints(6);
    const without = all.filter((e) => e.id !== all[2]!.id);
    for (let k = 0; k < 2_000; k++) {
      const before = first(k * 7919, all);
      if (before !== all[2]!.id) assert.equal(first(k * 7919, without), before);
    }
  });

  test('moves keys only to a newly added endpoint, about 1/n of them', () => {
    const old = endpoints(5);
    const grown = [...old, ...endpoints(1, 'pool/10.0.9.')];
    let moved = 0;
    const keys = 20_000;
    for (let k = 0; k < keys; k++) {
      const key = keyNumber(`key-${k}`);
      const after = first(key, grown);
      if (after !== first(key, old)) {
        assert.equal(after, grown[5]!.id);
        moved += 1;
      }
    }
    assert.ok(Math.abs(moved / keys - 1 / 6) < 0.015, `moved share ${moved / keys}`);
  });

  test('spreads keys and their second choices evenly over endpoints with near-identical ids', () => {
    const pool = endpoints(5);
    const firsts = new Map<string, number>();
    const seconds = new Map<string, number>();
    const keys = 50_000;
    for (let k = 0; k < keys; k++) {
      const order = rendezvousOrder(keyNumber(k.toString(16)), pool);
      firsts.set(order[0]!.id, (firsts.get(order[0]!.id) ?? 0) + 1);
      seconds.set(order[1]!.id, (seconds.get(order[1]!.id) ?? 0) + 1);
    }
    for (const counts of [firsts, seconds]) {
      for (const [id, count] of counts)
        assert.ok(Math.abs(count / keys - 0.2) < 0.01, `${id}: ${count / keys}`);
    }
  });

  test('walked one at a time, is the same order, past the selection steps too', () => {
    fc.assert(
      fc.property(
        fc.nat(),
        // Few distinct hashes, so that equal weights (broken by id) come up.
        fc.uniqueArray(fc.record({ id: fc.string({ maxLength: 4 }), idHash: fc.nat(6) }), {
          minLength: 0,
          maxLength: 3 * WALK_SELECTION_STEPS,
          size: 'max',
          selector: (e) => e.id,
        }),
        (key, pool) => {
          assert.deepEqual(
            [...rendezvousWalk(key, pool)].map((e) => e.id),
            rendezvousOrder(key, pool).map((e) => e.id),
          );
        },
      ),
      // fast-check's default size caps arrays at 10: the sorted remainder needs longer pools.
      { numRuns: 300 },
    );
  });

  test('weights use both halves of a 52-bit key', () => {
    const h = idHash('x');
    assert.notEqual(rendezvousWeight(5, h), rendezvousWeight(5 + 2 ** 40, h));
  });
});
