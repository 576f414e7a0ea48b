import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { canonicalJson, compareStrings, contentHash, fnv1a64Hex } from './hash.ts';

describe('canonicalJson', () => {
  test('sorts object keys at every depth and keeps array order', () => {
    assert.equal(
      canonicalJson({ b: 1, a: { d: [3, 1], c: 'x' } }),
      '{"a":{"c":"x","d":[3,1]},"b":1}',
    );
  });

  test('leaves out undefined fields and writes undefined array items as null, like JSON', () => {
    assert.equal(canonicalJson({ a: undefined, b: null, c: [undefined] }), '{"b":null,"c":[null]}');
    assert.equal(canonicalJson(undefined), 'null');
  });

  test('is JSON that parses back to the same data', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        assert.deepEqual(JSON.parse(canonicalJson(value)), JSON.parse(JSON.stringify(value)));
      }),
    );
  });

  test('does not depend on the order fields were built in', () => {
    fc.assert(
      fc.property(fc.dictionary(fc.string(), fc.integer()), (record) => {
        const reversed = Object.fromEntries(Object.entries(record).reverse());
        assert.equal(canonicalJson(record), canonicalJson(reversed));
      }),
    );
  });
});

describe('fnv1a64Hex', () => {
  test('matches the published FNV-1a 64 test vectors', () => {
    assert.equal(fnv1a64Hex(''), 'cbf29ce484222325');
    assert.equal(fnv1a64Hex('a'), 'af63dc4c8601ec8c');
    assert.equal(fnv1a64Hex('foobar'), '85944171f73967e8');
  });

  test('hashes the UTF-8 encoding', () => {
    assert.notEqual(fnv1a64Hex('é'), fnv1a64Hex('\u00e9\u0000'));
    assert.match(fnv1a64Hex('ключ 🔑'), /^[0-9a-f]{16}$/);
  });
});

describe('contentHash', () => {
  test('is equal for equal content and different for different content', () => {
    assert.equal(contentHash({ a: 1, b: [1, 2] }), contentHash({ b: [1, 2], a: 1 }));
    assert.notEqual(contentHash({ a: 1, b: [1, 2] }), contentHash({ a: 1, b: [2, 1] }));
  });
});

describe('compareStrings', () => {
  test('orders by code unit', () => {
    assert.deepEqual(['b', 'B', 'a', 'é'].sort(compareStrings), ['B', 'a', 'b', 'é']);
    assert.equal(compareStrings('x', 'x'), 0);
  });
});
