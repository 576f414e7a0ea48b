import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { indexFromDraw, sampleTwoDistinct, seededRng } from './rng.ts';
import { scriptedRng } from './testing.ts';

describe('seededRng', () => {
  test('replays the same sequence for the same seed', () => {
    const a = seededRng(42);
    const b = seededRng(42);
    for (let i = 0; i < 100; i++) assert.equal(a.next(), b.next());
  });

  test('gives different sequences for different seeds', () => {
    const a = seededRng(1);
    const b = seededRng(2);
    const same = Array.from({ length: 20 }, () => a.next() === b.next()).filter(Boolean);
    assert.ok(same.length < 2);
  });

  test('draws uniformly from [0, 1)', () => {
    const rng = seededRng(7);
    const bins = new Array<number>(10).fill(0);
    const n = 50_000;
    for (let i = 0; i < n; i++) {
      const x = rng.next();
      assert.ok(x >= 0 && x < 1);
      bins[Math.floor(x * 10)]! += 1;
    }
    for (const count of bins) assert.ok(Math.abs(count / n - 0.1) < 0.01, `bin share ${count / n}`);
  });
});

describe('indexFromDraw', () => {
  test('maps draws in [0, 1) to indices in [0, n)', () => {
    assert.equal(indexFromDraw(0, 5), 0);
    assert.equal(indexFromDraw(0.2, 5), 1);
    assert.equal(indexFromDraw(0.9999, 5), 4);
  });

  test('clamps draws from a broken Rng instead of indexing past the array', () => {
    assert.equal(indexFromDraw(1, 5), 4);
    assert.equal(indexFromDraw(7, 5), 4);
    assert.equal(indexFromDraw(-0.5, 5), 0);
    assert.equal(indexFromDraw(Number.NaN, 5), 0);
    assert.equal(indexFromDraw(Infinity, 5), 4);
  });
});

describe('sampleTwoDistinct', () => {
  test('returns two distinct indices even when both draws are equal', () => {
    assert.deepEqual(sampleTwoDistinct(scriptedRng([0, 0]), 2), [0, 1]);
    assert.deepEqual(sampleTwoDistinct(scriptedRng([0.99, 0.99]), 2), [1, 0]);
    assert.deepEqual(sampleTwoDistinct(scriptedRng([0.5, 0.5]), 4), [2, 1]);
    assert.deepEqual(sampleTwoDistinct(scriptedRng([0.5, 0.7]), 4), [2, 3]);
    assert.deepEqual(sampleTwoDistinct(scriptedRng([0.5, 0.1]), 4), [2, 0]);
  });

  test('uses exactly two draws', () => {
    const rng = scriptedRng([0.3, 0.6]);
    sampleTwoDistinct(rng, 10);
    assert.equal(rng.drawn, 2);
  });

  test('throws for fewer than two slots or a non-integer count', () => {
    assert.throws(() => sampleTwoDistinct(seededRng(1), 1), RangeError);
    assert.throws(() => sampleTwoDistinct(seededRng(1), 0), RangeError);
    assert.throws(() => sampleTwoDistinct(seededRng(1), Number.NaN), RangeError);
    assert.throws(() => sampleTwoDistinct(seededRng(1), 2.5), RangeError);
  });

  test('property: indices are distinct and in range for any draws, even broken ones', () => {
    const draw = fc.oneof(
      fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
      fc.constantFrom(1, -1, Number.NaN, Infinity, -Infinity, 0.9999999999999999),
    );
    fc.assert(
      fc.property(fc.integer({ min: 2, max: 1000 }), draw, draw, (n, a, b) => {
        const [i, j] = sampleTwoDistinct(scriptedRng([a, b]), n);
        assert.notEqual(i, j);
        for (const k of [i, j]) assert.ok(Number.isInteger(k) && k >= 0 && k < n);
      }),
    );
  });

  test('every ordered pair is equally likely', () => {
    const rng = seededRng(99);
    const n = 4;
    const counts = new Map<string, number>();
    const draws = 60_000;
    for (let k = 0; k < draws; k++) {
      const pair = sampleTwoDistinct(rng, n).join(',');
      counts.set(pair, (counts.get(pair) ?? 0) + 1);
    }
    assert.equal(counts.size, n * (n - 1));
    for (const count of counts.values()) {
      assert.ok(Math.abs(count / draws - 1 / 12) < 0.01, `pair share ${count / draws}`);
    }
  });
});
