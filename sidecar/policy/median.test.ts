import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { median } from './median.ts';

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
