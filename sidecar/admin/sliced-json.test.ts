import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { prettyJsonInSlices } from './sliced-json.ts';

const head = { pool: 'p', mode: 'Balance', version: 3, hash: null, nested: { a: [1, { b: 'x' }] } };

function slicesOf<T>(items: readonly T[], perSlice: number): T[][] {
  const slices: T[][] = [];
  for (let i = 0; i < items.length; i += perSlice) slices.push(items.slice(i, i + perSlice));
  return slices;
}

describe('pretty JSON in slices', () => {
  test('is JSON.stringify(value, null, 2) for any array length and slicing', () => {
    for (const length of [0, 1, 2, 5, 13]) {
      const items = Array.from({ length }, (_, i) => i);
      const describe = (i: number) =>
        i % 4 === 3
          ? undefined
          : { id: `e${i}`, text: 'line\nbreak "q"', list: [i, [], {}], window: { n: i } };
      const expected = JSON.stringify({ ...head, endpoints: items.map(describe) }, null, 2);
      for (const perSlice of [1, 2, 4, 100]) {
        const slices = slicesOf(items, perSlice);
        const pieces = [...prettyJsonInSlices(head, 'endpoints', () => slices, describe)];
        assert.equal(pieces.join(''), expected, `${length} items, ${perSlice} per slice`);
        assert.equal(pieces.length, Math.max(1, slices.length + 1));
      }
      // Empty slices change nothing.
      const gappy = [[], ...slicesOf(items, 3), []];
      assert.equal(
        [...prettyJsonInSlices(head, 'endpoints', () => gappy, describe)].join(''),
        expected,
      );
    }
  });

  test('takes and describes the slices only as the pieces are asked for', () => {
    const described: number[] = [];
    let read = 0;
    function* slices(): Generator<number[]> {
      read += 1;
      yield [1, 2];
      read += 1;
      yield [3];
    }
    const pieces = prettyJsonInSlices({}, 'xs', slices, (x) => {
      described.push(x);
      return x;
    })[Symbol.iterator]();
    assert.equal(read, 0);
    pieces.next();
    assert.deepEqual([read, described], [1, [1, 2]]);
    pieces.next();
    assert.deepEqual([read, described], [2, [1, 2, 3]]);
  });
});
