import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import {
  DEFAULT_BLOCKS_PER_ENDPOINT,
  DEFAULT_PREFIX_MAX_AGE_MS,
  MAX_INDEX_ENTRIES,
  PrefixIndex,
} from './prefix-index.ts';

const any = (): boolean => true;
const index = (blocksPerEndpoint = 100, maxAgeMs = 10_000, endpoints = 1) =>
  new PrefixIndex({ blocksPerEndpoint, maxAgeMs }, endpoints);

describe('PrefixIndex', () => {
  test('keeps its defaults named', () => {
    assert.equal(DEFAULT_BLOCKS_PER_ENDPOINT, 4096);
    assert.equal(DEFAULT_PREFIX_MAX_AGE_MS, 600_000);
    assert.equal(MAX_INDEX_ENTRIES, 131_072);
  });

  test('finds the endpoint holding the longest known prefix', () => {
    const idx = index();
    idx.record([1, 2], 'a', 0);
    idx.record([1, 2, 3, 4], 'b', 0);
    assert.deepEqual(idx.longestMatch([1, 2, 3, 9], any, 1), { depth: 3, holders: ['b'] });
    assert.deepEqual(idx.longestMatch([1, 2, 7], any, 1), { depth: 2, holders: ['b', 'a'] });
    assert.equal(idx.longestMatch([5, 6], any, 1), undefined);
  });

  test('lists holders most recently used first, and refreshes on record', () => {
    const idx = index();
    idx.record([1], 'a', 0);
    idx.record([1], 'b', 1);
    assert.deepEqual(idx.longestMatch([1], any, 2)!.holders, ['b', 'a']);
    idx.record([1], 'a', 3);
    assert.deepEqual(idx.longestMatch([1], any, 4)!.holders, ['a', 'b']);
    idx.record([1], 'a', 5); // already first: stays first
    assert.deepEqual(idx.longestMatch([1], any, 6)!.holders, ['a', 'b']);
    assert.equal(idx.size(), 2);
  });

  test('skips endpoints that are not admissible, falling back to a shorter prefix', () => {
    const idx = index();
    idx.record([1, 2, 3], 'a', 0);
    idx.record([1], 'b', 0);
    assert.deepEqual(
      idx.longestMatch([1, 2, 3], (id) => id !== 'a', 1),
      {
        depth: 1,
        holders: ['b'],
      },
    );
  });

  test('ignores entries older than maxAgeMs', () => {
    const idx = index(100, 1000);
    idx.record([1, 2], 'a', 0);
    idx.record([1], 'b', 900);
    assert.deepEqual(idx.longestMatch([1, 2], any, 1000), { depth: 2, holders: ['a'] });
    assert.deepEqual(idx.longestMatch([1, 2], any, 1500), { depth: 1, holders: ['b'] });
    assert.equal(idx.longestMatch([1, 2], any, 2000), undefined);
  });

  test('bounds each endpoint by its own share, evicting the deepest blocks first', () => {
    const idx = index(3);
    idx.record([1, 2, 3, 4, 5], 'a', 0);
    assert.equal(idx.size(), 3);
    // Recorded deepest first, so the shared start of the prompt is what stays.
    assert.deepEqual(idx.longestMatch([1, 2, 3, 4, 5], any, 1), { depth: 3, holders: ['a'] });
    idx.record([9, 8, 7], 'b', 0);
    assert.equal(idx.size(), 6, "one endpoint's traffic does not evict another's");
    idx.record([20], 'a', 2);
    assert.deepEqual(idx.longestMatch([1, 2, 3], any, 3), { depth: 2, holders: ['a'] });
  });

  test('kept full by new prompts, stays within its share and keeps at least the newest half', () => {
    const idx = index(100);
    const prompt = (n: number) => Array.from({ length: 10 }, (_, i) => n * 100 + i + 1);
    for (let n = 0; n < 1000; n++) {
      idx.record(prompt(n), 'a', n);
      assert.ok(idx.size() <= 100, `size ${idx.size()} after prompt ${n}`);
    }
    // The last 50 blocks (five prompts) are held whatever the generation turnover did.
    for (let n = 995; n < 1000; n++) {
      assert.equal(idx.longestMatch(prompt(n), any, 1000)?.depth, 10, `prompt ${n}`);
    }
    assert.equal(idx.longestMatch(prompt(0), any, 1000), undefined, 'the oldest are gone');
  });

  test('a refreshed entry survives the turnover that drops its unrefreshed neighbours', () => {
    const idx = index(4);
    idx.record([1, 2], 'a', 0); // young {2, 1}
    idx.record([3], 'a', 1); // turnover: old {2, 1}, young {3}
    idx.record([1], 'a', 2); // refreshed: moves to young {3, 1}
    idx.record([4], 'a', 3); // turnover: 2 is dropped, old {3, 1}, young {4}
    assert.equal(idx.longestMatch([1], any, 4)?.depth, 1);
    assert.equal(idx.longestMatch([2], any, 4), undefined);
    assert.equal(idx.size(), 3);
  });

  test('shares the entry cap among endpoints when the pool is large', () => {
    const idx = index(MAX_INDEX_ENTRIES, 10_000, 1);
    const hashes = Array.from({ length: 200 }, (_, i) => i + 1);
    idx.record(hashes, 'a', 0);
    assert.equal(idx.size(), 200);
    idx.setEndpointCount(MAX_INDEX_ENTRIES / 100);
    assert.equal(idx.size(), 100, 'trimmed to the new share at once');
    idx.setEndpointCount(0);
    idx.record(hashes, 'a', 1);
    assert.equal(idx.size(), 200);
  });

  test('forgets everything an endpoint held', () => {
    const idx = index();
    idx.record([1, 2], 'a', 0);
    idx.record([1], 'b', 0);
    idx.forget('a');
    idx.forget('never-seen');
    assert.deepEqual(idx.longestMatch([1, 2], any, 1), { depth: 1, holders: ['b'] });
    assert.equal(idx.size(), 1);
    idx.forget('b');
    assert.equal(idx.longestMatch([1, 2], any, 1), undefined);
  });
});

describe('PrefixIndex.recordAt (placements of other sidecars)', () => {
  test('records blocks held since a past time; they count until that time ages out', () => {
    const idx = index(100, 10_000);
    idx.recordAt([1, 4], 'b', 5_000);
    assert.deepEqual(idx.longestMatch([1, 2, 3, 4], any, 14_000), { depth: 4, holders: ['b'] });
    assert.equal(idx.longestMatch([1, 2, 3, 4], any, 15_001), undefined);
  });

  test('never makes an entry older than what the index has', () => {
    const idx = index(100, 10_000);
    idx.record([1, 2], 'a', 9_000);
    // An old report of the same placement (in the young generation) keeps the fresh time.
    idx.recordAt([1, 2], 'a', 1_000);
    assert.deepEqual(idx.longestMatch([1, 2], any, 18_000), { depth: 2, holders: ['a'] });
    // Nor in the old generation: fill the young one past half the share to turn it over.
    const small = index(4, 10_000);
    small.record([7], 'a', 9_000);
    small.record([20, 21], 'a', 9_000); // young holds 3 of 4: the next new block turns it over
    small.recordAt([22, 7], 'a', 1_000);
    assert.deepEqual(small.longestMatch([7], any, 18_000), { depth: 1, holders: ['a'] });
  });

  test('several holders stay in time order, whatever order their placements arrive in', () => {
    const idx = index(100, 10_000);
    idx.record([1], 'a', 1_000);
    idx.record([1], 'c', 3_000);
    idx.recordAt([1], 'b', 2_000); // between the two
    assert.deepEqual(idx.longestMatch([1], any, 4_000)?.holders, ['c', 'b', 'a']);
    idx.recordAt([1], 'a', 2_500); // a refreshed: moves ahead of b, not of c
    assert.deepEqual(idx.longestMatch([1], any, 4_000)?.holders, ['c', 'a', 'b']);
    idx.recordAt([1], 'c', 3_500); // already first: stays
    idx.recordAt([1], 'd', 500); // the oldest: last
    assert.deepEqual(idx.longestMatch([1], any, 4_000)?.holders, ['c', 'a', 'b', 'd']);
  });

  test('an older placement does not take the front of the holders from a fresher one', () => {
    const idx = index(100, 10_000);
    idx.record([1], 'a', 0);
    idx.record([1], 'b', 5_000);
    idx.recordAt([1], 'a', 1_000);
    assert.deepEqual(idx.longestMatch([1], any, 6_000), { depth: 1, holders: ['b', 'a'] });
  });
});
