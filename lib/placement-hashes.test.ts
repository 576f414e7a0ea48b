import { describe, test as it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { parsePlacements } from '../crds/snapshot.ts';
import {
  decodeHashes,
  encodeHashes,
  placementDepths,
  placementDigest,
} from './placement-hashes.ts';

describe('placementDepths', () => {
  it('names the powers of two, the home and the deepest block', () => {
    assert.deepEqual(placementDepths(0, 1), []);
    assert.deepEqual(placementDepths(1, 1), [1]);
    assert.deepEqual(placementDepths(5, 3), [1, 2, 3, 4, 5]);
    assert.deepEqual(placementDepths(20, 6), [1, 2, 4, 6, 8, 16, 20]);
    assert.deepEqual(placementDepths(256, 3), [1, 2, 3, 4, 8, 16, 32, 64, 128, 256]);
  });

  it('ignores a home past the chain', () => {
    assert.deepEqual(placementDepths(3, 9), [1, 2, 3]);
  });

  it('takes the hashes at those depths', () => {
    assert.deepEqual(placementDigest([10, 11, 12, 13, 14], 3), [10, 11, 12, 13, 14]);
    assert.deepEqual(placementDigest([10, 11, 12, 13, 14, 15], 1), [10, 11, 13, 15]);
  });
});

describe('encodeHashes / decodeHashes', () => {
  it('round-trips 52-bit hashes and passes the wire schema', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }).map((n) => n % 2 ** 52),
          {
            minLength: 1,
            maxLength: 64,
          },
        ),
        (hashes) => {
          const text = encodeHashes(hashes);
          assert.deepEqual(decodeHashes(text), hashes);
          const parsed = parsePlacements({
            endpoints: ['a/10.0.0.1:8000'],
            placements: [{ endpoint: 0, ageMs: 5, hashes: text }],
          });
          assert.equal(parsed.ok, true);
        },
      ),
    );
  });

  it('refuses what is not whole hashes', () => {
    const text = encodeHashes([1, 2]);
    assert.equal(decodeHashes(text.slice(0, -1)), undefined);
    assert.equal(decodeHashes(text + '='), undefined);
    assert.equal(decodeHashes('abc'), undefined);
    const parsed = parsePlacements({
      endpoints: ['a'],
      placements: [{ endpoint: 0, ageMs: 0, hashes: text.slice(0, 12) }],
    });
    assert.equal(parsed.ok, false);
  });

  it('refuses an endpoint index past the list', () => {
    const parsed = parsePlacements({
      endpoints: ['a'],
      placements: [{ endpoint: 1, ageMs: 0, hashes: encodeHashes([7]) }],
    });
    assert.equal(parsed.ok, false);
    assert.equal(!parsed.ok && parsed.errors[0]?.path, '/placements/0/endpoint');
  });
});
