import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { prettyJsonInSlices } from './sliced-json.ts';

const head = { pool: 'p', mode: 'Balance', version: 3, hash: null, nested: { a: [1, { b: 'x' }] } };

describe('pretty JSON in slices', () => {
  test('is JSON.stringify(value, null, 2) for any array length and slice size', () => {
    for (const length of [0, 1, 2, 5, 13]) {
      const items = Array.from({ length }, (_, i) => i);
      const describe = (i: number) =>
        i % 4 === 3
          ? undefined
          : { id: `e${i}`, text: 'line\nbreak "q"', list: [i, [], {}], window: { n: i } };
      const expected = JSON.stringify({ ...head, endpoints: items.map(describe) }, null, 2);
      for (const perSlice of [1, 2, 4, 100]) {
        const pieces = [...prettyJsonInSlices(head, 'endpoints', () => items, describe, perSlice)];
        assert.equal(pieces.join(''), expected, `${length} items, ${perSlice} per slice`);
        if (length > 0) assert.equal(pieces.length, 2 + Math.ceil(length / perSlice));
      }
    }
  });

  test('reads the items and describes them only as the pieces are asked for', () => {
    const described: number[] = [];
    let read = 0;
    const pieces = prettyJsonInSlices(
      {},
      'xs',
      () => {
        read += 1;
        return [1, 2, 3];
      },
      (x) => {
        described.push(x);
        return x;
      },
      2,
    )[Symbol.iterator]();
    assert.equal(read, 0);
    pieces.next();
    assert.equal(read, 1);
    assert.deepEqual(described, []);
    pieces.next();
    assert.deepEqual(described, [1, 2]);
  });
});
