import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { clipUtf8, joinLimited, plural } from './problems.ts';

describe('messages', () => {
  test('plural counts a noun', () => {
    assert.equal(plural(0, 'endpoint'), '0 endpoints');
    assert.equal(plural(1, 'endpoint'), '1 endpoint');
    assert.equal(plural(2, 'endpoint'), '2 endpoints');
  });

  test('joinLimited lists the first items and counts the rest', () => {
    assert.equal(joinLimited(['a', 'b'], 2), 'a; b');
    assert.equal(joinLimited(['a', 'b', 'c'], 2), 'a; b; and 1 more');
    assert.equal(joinLimited([], 2), '');
  });

  test('clipUtf8 keeps short text and cuts long text at a character boundary', () => {
    assert.equal(clipUtf8('short', 10), 'short');
    assert.equal(clipUtf8('abcdefghijkl', 10), 'abcdefg...');
    const clipped = clipUtf8('ééééé', 8); // 10 bytes; 5 are left for text: two é and half of one
    assert.equal(clipped, 'éé...');
    assert.ok(new TextEncoder().encode(clipped).length <= 8);
    assert.equal(clipUtf8('abcdef', 2), '...');
  });
});
