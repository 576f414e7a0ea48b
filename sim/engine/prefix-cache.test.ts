import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { PrefixCache, blockKeys } from './prefix-cache.ts';
import { mulberry32 } from '../../lib/rng.ts';

function commonPrefix(a: string, b: string): number {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}

void test('blockKeys: one key per full block; equal prefixes give equal keys', () => {
  assert.equal(blockKeys('', 4).length, 0);
  assert.equal(blockKeys('abc', 4).length, 0);
  assert.equal(blockKeys('abcdefghi', 4).length, 2);
  const a = blockKeys('aaaabbbbcccc', 4);
  const b = blockKeys('aaaabbbbdddd', 4);
  assert.deepEqual(a.slice(0, 2), b.slice(0, 2));
  assert.notEqual(a[2], b[2]);
  // Cumulative: the same block text after a different prefix is a different block.
  assert.notEqual(blockKeys('xxxxcccc', 4)[1], blockKeys('yyyycccc', 4)[1]);
  for (const k of a) assert.ok(Number.isSafeInteger(k) && k >= 0);
});

void test('a prompt hits exactly the full blocks it shares with a cached one', () => {
  fc.assert(
    fc.property(
      fc.string({ unit: fc.constantFrom('a', 'b'), maxLength: 120 }),
      fc.string({ unit: fc.constantFrom('a', 'b'), maxLength: 60 }),
      fc.string({ unit: fc.constantFrom('a', 'b'), maxLength: 60 }),
      fc.integer({ min: 1, max: 9 }),
      (shared, tailA, tailB, size) => {
        const a = shared + tailA;
        const b = shared + tailB;
        const cache = new PrefixCache(10_000);
        cache.insert(blockKeys(a, size));
        const keysB = blockKeys(b, size);
        const expected = Math.min(Math.floor(commonPrefix(a, b) / size), keysB.length);
        assert.equal(cache.match(keysB), expected);
      },
    ),
  );
});

void test('LRU: capacity holds, the least recently used chain goes first, tails before heads', () => {
  const cache = new PrefixCache(6);
  const rng = mulberry32(7);
  const text = (n: number) =>
    Array.from({ length: n }, () => 'abcd'[Math.floor(rng() * 4)]).join('');
  const one = blockKeys(text(16), 4); // 4 blocks
  const two = blockKeys(text(16), 4); // 4 blocks
  cache.insert(one);
  cache.insert(two);
  assert.equal(cache.size, 6);
  // `one` is older: its two tail blocks were evicted, its head survives.
  assert.equal(cache.match(one), 2);
  assert.equal(cache.match(two), 4);
  cache.setCapacity(2);
  assert.equal(cache.size, 2);
  assert.equal(cache.match(two), 2);
  cache.clear();
  assert.equal(cache.match(two), 0);
  const off = new PrefixCache(0);
  off.insert(one);
  assert.equal(off.match(one), 0);
});
