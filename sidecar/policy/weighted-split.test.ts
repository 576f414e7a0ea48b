import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { keyNumber } from './bounded-load.ts';
import { testPolicy } from './testing.ts';
import {
  linePoint,
  MAX_ROUNDS,
  splitKey,
  WeightedSplit,
  type SplitEndpoint,
} from './weighted-split.ts';

interface E extends SplitEndpoint {
  id: string;
}

function ep(id: string, backend: string, weight?: number): E {
  return weight === undefined ? { id, spec: { backend } } : { id, spec: { backend, weight } };
}

const ids = (endpoints: readonly E[]) => endpoints.map((e) => e.id);

/** How many of `n` keyless picks went to each backend. */
function keylessShares(split: WeightedSplit, pool: E[], candidates: E[], n: number) {
  const counts = new Map<string, number>();
  for (let i = 0; i < n; i++) {
    const chosen = split.narrow(pool, candidates, undefined).candidates[0]!.spec.backend;
    counts.set(chosen, (counts.get(chosen) ?? 0) + 1);
  }
  return Object.fromEntries([...counts].sort(([a], [b]) => (a < b ? -1 : 1)));
}

describe('WeightedSplit', () => {
  const stable = [ep('s1', 'stable', 95), ep('s2', 'stable', 95)];
  const canary = [ep('c1', 'canary', 5)];
  const pool = [...stable, ...canary];

  it('leaves a tier without weights alone', () => {
    const plain = [ep('a', 'x'), ep('b', 'y')];
    const result = new WeightedSplit().narrow(plain, plain, undefined);
    assert.equal(result.pool, plain);
    assert.equal(result.candidates, plain);
  });

  it('keyless: smooth weighted round-robin, exact over a round, the small share spread', () => {
    const split = new WeightedSplit();
    assert.deepEqual(keylessShares(split, pool, pool, 100), { canary: 5, stable: 95 });
    const order: string[] = [];
    const three = [ep('a', 'a', 5), ep('b', 'b', 1), ep('c', 'c', 1)];
    for (let i = 0; i < 7; i++)
      order.push(split.narrow(three, three, undefined).candidates[0]!.spec.backend);
    assert.deepEqual(order, ['a', 'a', 'b', 'a', 'c', 'a', 'a'], "nginx's sequence");
  });

  it("narrows pool and candidates to the chosen backend's endpoints", () => {
    const split = new WeightedSplit();
    const result = split.narrow(pool, [stable[0]!, canary[0]!], undefined);
    assert.deepEqual(ids(result.pool), ['s1', 's2']);
    assert.deepEqual(ids(result.candidates), ['s1']);
  });

  it('a key lands on the same backend every time, on the line in name order', () => {
    const split = new WeightedSplit();
    for (let k = 0; k < 200; k++) {
      const key = keyNumber(`conversation-${k}`);
      const expected = linePoint(key) * 100 < 5 ? 'canary' : 'stable'; // canary < stable by name
      for (let i = 0; i < 3; i++)
        assert.equal(split.narrow(pool, pool, key).candidates[0]!.spec.backend, expected);
    }
  });

  it('keys spread by weight', () => {
    const split = new WeightedSplit();
    let onCanary = 0;
    for (let k = 0; k < 10_000; k++)
      if (split.narrow(pool, pool, keyNumber(`k${k}`)).candidates[0]!.spec.backend === 'canary')
        onCanary += 1;
    assert.ok(Math.abs(onCanary / 10_000 - 0.05) < 0.01, `${onCanary} of 10,000 on the canary`);
  });

  it('a backend without a live candidate: the others by weight, for keys too', () => {
    const split = new WeightedSplit();
    const three = [ep('a', 'a', 1), ep('b', 'b', 1), ep('c', 'c', 2)];
    const live = [three[0]!, three[2]!];
    assert.deepEqual(keylessShares(split, three, live, 30), { a: 10, c: 20 });
    for (let k = 0; k < 200; k++) {
      const key = keyNumber(`k${k}`);
      const onFull = split.narrow(three, three, key).candidates[0]!.spec.backend;
      const onLive = split.narrow(three, live, key).candidates[0]!.spec.backend;
      if (onFull !== 'b') assert.equal(onLive, onFull, 'a key on a live backend stays');
      else assert.ok(onLive === 'a' || onLive === 'c');
    }
  });

  it('weight 0 gets nothing while another is up, and takes traffic when all others are down', () => {
    const split = new WeightedSplit();
    const withZero = [ep('a', 'a', 1), ep('z', 'z', 0), ep('n', 'n')];
    assert.deepEqual(keylessShares(split, withZero, withZero, 10), { a: 10 });
    for (let k = 0; k < 100; k++)
      assert.equal(split.narrow(withZero, withZero, k * 7919).candidates[0]!.id, 'a');
    const downToZero = [withZero[1]!, withZero[2]!];
    const result = split.narrow(withZero, downToZero, undefined);
    assert.deepEqual(ids(result.candidates), ['z', 'n']);
    assert.equal(result.pool, withZero);
  });

  it('a new set of weights starts a new round', () => {
    const split = new WeightedSplit();
    const before = [ep('a', 'a', 1), ep('b', 'b', 1)];
    split.narrow(before, before, undefined); // a is ahead now
    const after = [ep('a', 'a', 1), ep('b', 'b', 3)];
    assert.deepEqual(keylessShares(split, after, after, 4), { a: 1, b: 3 });
  });

  it('interleaved lines (two models, a backend down) each keep their own exact round', () => {
    const split = new WeightedSplit();
    const modelA = [ep('a1', 'stable-a', 95), ep('a2', 'canary-a', 5)];
    const modelB = [ep('b1', 'stable-b', 3), ep('b2', 'canary-b', 1)];
    const counts = new Map<string, number>();
    for (let i = 0; i < 400; i++) {
      for (const pool of [modelA, modelB, [modelA[0]!]]) {
        const backend = split.narrow(pool, pool, undefined).candidates[0]!.spec.backend;
        counts.set(backend, (counts.get(backend) ?? 0) + 1);
      }
    }
    // modelA alone: 400 × 95/100 = 380 + 20; plus the 400 picks of its stable side alone.
    assert.equal(counts.get('canary-a'), 20);
    assert.equal(counts.get('stable-a'), 780);
    assert.equal(counts.get('canary-b'), 100);
    assert.equal(counts.get('stable-b'), 300);
  });

  it(`keeps at most ${MAX_ROUNDS} rounds, dropping the least recently used`, () => {
    const split = new WeightedSplit();
    const first = [ep('a', 'a', 1), ep('b', 'b', 2)];
    split.narrow(first, first, undefined); // b: credit 2 - 3 = -1, a: 1
    for (let w = 1; w <= MAX_ROUNDS; w++) {
      const other = [ep('x', 'x', w), ep('y', 'y', 1)];
      split.narrow(other, other, undefined);
    }
    // The first line's round was dropped: it starts afresh, b first again.
    assert.equal(split.narrow(first, first, undefined).candidates[0]!.id, 'b');
  });

  it('takes garbage weights as 0', () => {
    const split = new WeightedSplit();
    const odd = [
      ep('a', 'a', Number.NaN),
      ep('b', 'b', Infinity),
      ep('c', 'c', 2),
      ep('d', 'd', -1),
    ];
    assert.deepEqual(keylessShares(split, odd, odd, 4), { c: 4 });
  });
});

describe('splitKey', () => {
  it('reads the header or the prompt home key as affinity does, and nothing else', () => {
    const header = testPolicy({ affinity: { key: 'Header' } }).affinity;
    const prefix = testPolicy({ affinity: { key: 'Prefix' } }).affinity;
    const none = testPolicy({ affinity: { key: 'None' } }).affinity;
    const prompt = { hashes: [11, 22, 33], ends: [1, 2, 3], homeDepth: 2 };
    assert.equal(splitKey(header, { affinityKey: 'k' }), keyNumber('k'));
    assert.equal(splitKey(header, { affinityKey: '' }), undefined);
    assert.equal(splitKey(header, { prompt }), undefined);
    assert.equal(splitKey(prefix, { prompt }), 22);
    assert.equal(splitKey(prefix, { affinityKey: 'k' }), undefined);
    assert.equal(splitKey(none, { affinityKey: 'k', prompt }), undefined);
  });
  it('places keys in [0, 1)', () => {
    for (const key of [0, 1, 2 ** 52 - 1, keyNumber('x')]) {
      const p = linePoint(key);
      assert.ok(p >= 0 && p < 1);
    }
  });
});
