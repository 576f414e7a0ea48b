import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { Balancer } from './balancer.ts';
import { pickLeastLoaded, pickTwoChoices } from './p2c.ts';
import { seededRng } from './rng.ts';
import { endpoint, fakeClock, scriptedRng, testPolicy } from './testing.ts';

/** Analytic P2C share of the endpoint of rank i (0 = best) among n with distinct scores. */
const expectedShare = (i: number, n: number) => (2 * (n - 1 - i)) / (n * (n - 1));

describe('pickTwoChoices', () => {
  const byValue = (x: number) => x;

  test('throws for no candidates', () => {
    assert.throws(() => pickTwoChoices([], seededRng(1), byValue), RangeError);
  });

  test('returns the only candidate without drawing', () => {
    const rng = scriptedRng([]);
    assert.equal(pickTwoChoices([7], rng, byValue), 7);
    assert.equal(rng.drawn, 0);
  });

  test('picks the lower score of the two drawn candidates, in either draw order', () => {
    assert.equal(pickTwoChoices([300, 100, 200], scriptedRng([0, 0.9]), byValue), 200);
    assert.equal(pickTwoChoices([300, 100, 200], scriptedRng([0.9, 0]), byValue), 200);
    assert.equal(pickTwoChoices([300, 100, 200], scriptedRng([0.4, 0]), byValue), 100);
  });

  test('keeps the first drawn candidate on a tie', () => {
    const items = [{ s: 5 }, { s: 5 }];
    assert.equal(
      pickTwoChoices(items, scriptedRng([0.9, 0]), (x) => x.s),
      items[1],
    );
    assert.equal(
      pickTwoChoices(items, scriptedRng([0, 0]), (x) => x.s),
      items[0],
    );
  });

  test('lets a NaN score lose against any number', () => {
    assert.equal(pickTwoChoices([Number.NaN, 1e12], scriptedRng([0, 0]), byValue), 1e12);
    assert.equal(pickTwoChoices([1e12, Number.NaN], scriptedRng([0, 0]), byValue), 1e12);
  });

  test('property: scores exactly two distinct candidates and returns the better one', () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 0, max: 1_000 }), { minLength: 2, maxLength: 50 }),
        fc.integer(),
        (scores, seed) => {
          const items = scores.map((s, i) => ({ i, s }));
          const scored: number[] = [];
          const chosen = pickTwoChoices(items, seededRng(seed), (x) => {
            scored.push(x.i);
            return x.s;
          });
          assert.equal(scored.length, 2);
          assert.notEqual(scored[0], scored[1]);
          assert.ok(scored.includes(chosen.i));
          const other = items[scored.find((i) => i !== chosen.i)!]!;
          assert.ok(chosen.s <= other.s);
        },
      ),
    );
  });

  test('statistics: 100,000 picks match the analytic P2C shares within ±1 point', () => {
    const scores = [10, 20, 30, 40, 50];
    const counts = new Array<number>(scores.length).fill(0);
    const rng = seededRng(20240601);
    const picks = 100_000;
    for (let k = 0; k < picks; k++)
      counts[pickTwoChoices([2, 0, 4, 1, 3], rng, (i) => scores[i]!)]! += 1;
    counts.forEach((count, rank) => {
      const share = count / picks;
      const expected = expectedShare(rank, scores.length);
      assert.ok(Math.abs(share - expected) < 0.01, `rank ${rank}: ${share} vs ${expected}`);
    });
  });
});

describe('pickLeastLoaded', () => {
  interface Candidate {
    name: string;
    inFlight: number;
    score: number;
    price: number;
  }
  const c = (name: string, inFlight: number, score: number, price = 0): Candidate => ({
    name,
    inFlight,
    score,
    price,
  });
  const pick = (candidates: Candidate[], rng = scriptedRng([0, 0.9]), byPrice = false) =>
    pickLeastLoaded(
      candidates,
      rng,
      (x) => x.inFlight,
      (x) => x.score,
      byPrice ? (x) => x.price : undefined,
    ).name;

  test('throws for no candidates', () => {
    assert.throws(() => pick([]), RangeError);
  });

  test('only the fewest in flight compete: the only one is taken without a draw', () => {
    const rng = scriptedRng([]);
    assert.equal(pick([c('a', 2, 1), c('b', 0, 900), c('c', 1, 1)], rng), 'b');
    assert.equal(rng.drawn, 0);
  });

  test('among the equally loaded, the better score of two random ones', () => {
    assert.equal(pick([c('a', 1, 500), c('b', 1, 100), c('c', 3, 1)]), 'b');
  });

  test('a NaN in-flight count does not empty the choice: then all compete by score', () => {
    assert.equal(pick([c('a', Number.NaN, 500), c('b', Number.NaN, 100)]), 'b');
  });

  test('with price classes, the least loaded of each class compete by score', () => {
    // cheap is one request busier than dear; its score (latency + cost term) is still lower.
    const candidates = [c('dear', 0, 2_000, 1_000), c('cheap', 1, 1_400, 200)];
    assert.equal(pick(candidates, scriptedRng([]), false), 'dear'); // load alone: dear
    assert.equal(pick(candidates, scriptedRng([0, 0.9]), true), 'cheap');
  });

  test('within a class, only its least loaded is a candidate', () => {
    const candidates = [
      c('cheap-busy', 4, 1, 200), // the best score, but the busiest of its class
      c('cheap-idle', 1, 1_400, 200),
      c('dear', 0, 2_000, 1_000),
    ];
    for (const draws of [
      [0, 0.9],
      [0.9, 0],
    ])
      assert.equal(pick(candidates, scriptedRng(draws), true), 'cheap-idle');
  });
});

describe('Balancer P2C statistics', () => {
  test('100,000 picks over endpoints with fixed scores match the analytic shares within ±1 point', () => {
    // Equal EWMA (the default seed), no load between picks: the score differs by price only.
    const n = 8;
    const prices = [0.7, 0.1, 0.5, 0.3, 0.8, 0.2, 0.6, 0.4]; // rank = price order
    const endpoints = prices.map((costPerMTok, i) => endpoint(`e${i}`, { costPerMTok }));
    const balancer = new Balancer(testPolicy({ costWeightPerMs: 0.001 }), endpoints, {
      clock: fakeClock(),
      rng: seededRng(7),
    });
    const counts = new Map<string, number>();
    const picks = 100_000;
    for (let k = 0; k < picks; k++) {
      const result = balancer.pick({});
      assert.equal(result.kind, 'picked');
      if (result.kind !== 'picked') return;
      counts.set(result.attempt.endpoint.id, (counts.get(result.attempt.endpoint.id) ?? 0) + 1);
      balancer.finish(result.attempt, { kind: 'neutral' });
    }
    const byPrice = [...prices.keys()].sort((a, b) => prices[a]! - prices[b]!);
    byPrice.forEach((index, rank) => {
      const share = (counts.get(`e${index}`) ?? 0) / picks;
      const expected = expectedShare(rank, n);
      assert.ok(Math.abs(share - expected) < 0.01, `rank ${rank}: ${share} vs ${expected}`);
    });
  });
});
