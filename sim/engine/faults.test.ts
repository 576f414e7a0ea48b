import { test } from 'node:test';
import assert from 'node:assert/strict';
import { pickFault } from './faults.ts';

/** Replays `values` and counts the draws. */
function scripted(values: number[]): { rng: () => number; drawn: () => number } {
  let i = 0;
  return {
    rng: () => {
      const v = values[i++];
      if (v === undefined) throw new Error('script used up');
      return v;
    },
    drawn: () => i,
  };
}

const rates = { errorRate: 0.1, rateLimitRate: 0.2, stallRate: 0.3 };

void test('three draws per request whatever the outcome; error before rate limit before stall', () => {
  const cases: [number[], string][] = [
    [[0.05, 0.1, 0.1], 'error'],
    [[0.5, 0.1, 0.1], 'rate-limit'],
    [[0.5, 0.5, 0.1], 'stall'],
    [[0.5, 0.5, 0.5], 'none'],
    [[0.1, 0.2, 0.3], 'none'], // each bound is exclusive
  ];
  for (const [draws, kind] of cases) {
    const s = scripted(draws);
    assert.equal(pickFault(s.rng, rates).kind, kind, JSON.stringify(draws));
    assert.equal(s.drawn(), 3);
  }
});

void test('rates of 0 never fault, rates of 1 always do', () => {
  const s = scripted([0, 0, 0, 0.999, 0.999, 0.999]);
  assert.equal(pickFault(s.rng, { errorRate: 0, rateLimitRate: 0, stallRate: 0 }).kind, 'none');
  assert.equal(pickFault(s.rng, { errorRate: 1, rateLimitRate: 0, stallRate: 0 }).kind, 'error');
});
