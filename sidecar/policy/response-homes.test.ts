import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { ResponseHomes } from './response-homes.ts';
import { fakeClock } from './testing.ts';

const homes = (maxEntries = 3, maxAgeMs = 1000) => {
  const clock = fakeClock();
  return { clock, homes: new ResponseHomes({ maxEntries, maxAgeMs }, clock) };
};

describe('ResponseHomes', () => {
  test('returns the endpoint that made a response', () => {
    const { homes: h } = homes();
    h.remember('resp_1', 'a/1');
    h.remember('resp_2', 'b/2');
    assert.equal(h.homeOf('resp_1'), 'a/1');
    assert.equal(h.homeOf('resp_2'), 'b/2');
    assert.equal(h.homeOf('resp_unknown'), undefined);
  });

  test('evicts the least recently used id past maxEntries', () => {
    const { homes: h } = homes(2);
    h.remember('resp_1', 'a');
    h.remember('resp_2', 'a');
    assert.equal(h.homeOf('resp_1'), 'a'); // resp_2 is now the least recently used
    h.remember('resp_3', 'b');
    assert.equal(h.size, 2);
    assert.equal(h.homeOf('resp_2'), undefined);
    assert.equal(h.homeOf('resp_1'), 'a');
    assert.equal(h.homeOf('resp_3'), 'b');
  });

  test('forgets an id unused for maxAgeMs, and a use renews it', () => {
    const { homes: h, clock } = homes(10, 1000);
    h.remember('resp_1', 'a');
    h.remember('resp_2', 'a');
    clock.advance(900);
    assert.equal(h.homeOf('resp_1'), 'a');
    clock.advance(900);
    assert.equal(h.homeOf('resp_1'), 'a');
    assert.equal(h.homeOf('resp_2'), undefined);
    assert.equal(h.size, 1);
  });

  test('a response remembered again moves to its new endpoint', () => {
    const { homes: h } = homes();
    h.remember('resp_1', 'a');
    h.remember('resp_1', 'b');
    assert.equal(h.homeOf('resp_1'), 'b');
    assert.equal(h.size, 1);
  });

  test('forget drops an id; empty ids and a zero capacity keep nothing', () => {
    const { homes: h } = homes();
    h.remember('resp_1', 'a');
    h.forget('resp_1');
    h.remember('', 'a');
    assert.equal(h.size, 0);
    const { homes: none } = homes(0);
    none.remember('resp_1', 'a');
    assert.equal(none.homeOf('resp_1'), undefined);
  });
});
