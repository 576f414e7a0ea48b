import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { fmix32, fnv1a64, toHex64 } from './hash.ts';

/** Reference FNV-1a 64 with BigInt over TextEncoder's UTF-8. */
function referenceFnv1a64(text: string): string {
  let h = 0xcbf29ce484222325n;
  for (const byte of new TextEncoder().encode(text)) {
    h ^= BigInt(byte);
    h = (h * 0x100000001b3n) & 0xffffffffffffffffn;
  }
  return h.toString(16).padStart(16, '0');
}

describe('fnv1a64', () => {
  test('matches the published FNV-1a 64 test vectors', () => {
    assert.equal(toHex64(fnv1a64('')), 'cbf29ce484222325');
    assert.equal(toHex64(fnv1a64('a')), 'af63dc4c8601ec8c');
    assert.equal(toHex64(fnv1a64('foobar')), '85944171f73967e8');
  });

  test('hashes the UTF-8 encoding of 2-, 3- and 4-byte characters and lone surrogates', () => {
    for (const text of ['é', '€uro', '日本語', '😀 emoji', 'a\ud800b', 'end\udc00', '\ud83d']) {
      assert.equal(toHex64(fnv1a64(text)), referenceFnv1a64(text), JSON.stringify(text));
    }
  });

  test('property: equals a BigInt reference over TextEncoder for any string', () => {
    const anyUnit = fc.integer({ min: 0, max: 0xffff }).map((c) => String.fromCharCode(c));
    fc.assert(
      fc.property(fc.oneof(fc.string({ unit: 'binary' }), fc.string({ unit: anyUnit })), (text) => {
        assert.equal(toHex64(fnv1a64(text)), referenceFnv1a64(text));
      }),
    );
  });

  test('continues from an earlier state as if the texts were concatenated', () => {
    fc.assert(
      fc.property(fc.string(), fc.string(), (a, b) => {
        assert.deepEqual(fnv1a64(b, fnv1a64(a)), fnv1a64(a + b));
      }),
    );
  });
});

describe('toHex64', () => {
  test('pads both halves to eight digits', () => {
    assert.equal(toHex64({ hi: 1, lo: 0xabc }), '0000000100000abc');
  });
});

describe('fmix32', () => {
  test('maps 0 to 0 and spreads neighbouring inputs far apart', () => {
    assert.equal(fmix32(0), 0);
    const a = fmix32(1000);
    const b = fmix32(1001);
    let differing = 0;
    for (let x = a ^ b; x !== 0; x >>>= 1) differing += x & 1;
    assert.ok(differing >= 8, `only ${differing} bits differ`);
  });

  test('returns an unsigned 32-bit integer for any input', () => {
    fc.assert(
      fc.property(fc.integer(), (x) => {
        const h = fmix32(x);
        assert.ok(Number.isInteger(h) && h >= 0 && h <= 0xffffffff);
      }),
    );
  });
});
