import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { lowerBound, median, medianWithout } from './median.ts';

describe('median', () => {
  test('returns undefined for no values', () => {
    assert.equal(median([]), undefined);
  });

  test('returns the middle value of an odd count, in any order', () => {
    assert.equal(median([5]), 5);
    assert.equal(median([300, 100, 200]), 200);
  });

  test('returns the mean of the two middle values of an even count', () => {
    assert.equal(median([400, 100, 300, 200]), 250);
  });

  test('ignores NaN and keeps Infinity in order', () => {
    assert.equal(median([Number.NaN, 1, 3]), 2);
    assert.equal(median([Number.NaN]), undefined);
    assert.equal(median([1, Infinity, 2]), 2);
  });

  test('accepts any iterable and does not modify an array it is given', () => {
    const values = [3, 1, 2];
    assert.equal(median(values), 2);
    assert.deepEqual(values, [3, 1, 2]);
    assert.equal(median(new Map([['a', 7]]).values()), 7);
  });
});

describe('sorted-array helpers', () => {
  test('lowerBound: the first index not below the value', () => {
    const sorted = [1, 2, 2, 5];
    assert.deepEqual(
      [0, 1, 2, 3, 5, 6].map((v) => lowerBound(sorted, v)),
      [0, 0, 1, 3, 3, 4],
    );
    assert.equal(lowerBound([], 1), 0);
  });

  test('medianWithout: the median of the rest, as median() computes it', () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 0, max: 50 }), { maxLength: 12 }),
        fc.nat(),
        (xs, k) => {
          const sorted = [...xs].sort((a, b) => a - b);
          assert.equal(medianWithout(sorted), median(xs));
          if (sorted.length === 0) return;
          const skip = k % sorted.length;
          assert.equal(medianWithout(sorted, skip), median(sorted.filter((_, i) => i !== skip)));
        },
      ),
    );
  });
});
