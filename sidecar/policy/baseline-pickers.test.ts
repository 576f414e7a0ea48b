import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Balancer } from './balancer.ts';
import { pickLeastConnections, pickRandom, RoundRobin } from './baseline-pickers.ts';
import { endpoint, fakeClock, scriptedRng, testPolicy } from './testing.ts';

const c = (id: string, inFlight = 0) => ({ id, inFlight });

describe('baseline pickers', () => {
  it('round-robin walks the pool in order from a random start, and skips what is not a candidate', () => {
    const pool = [c('a'), c('b'), c('c')];
    const rr = new RoundRobin();
    const rng = scriptedRng([0.5]); // drawn once, on the first pick: start at b
    assert.deepEqual(
      [1, 2, 3, 4].map(() => rr.pick(pool, pool, rng).id),
      ['b', 'c', 'a', 'b'],
    );
    const withoutB = [pool[0]!, pool[2]!];
    assert.deepEqual(
      [1, 2, 3].map(() => rr.pick(withoutB, pool, rng).id),
      ['c', 'a', 'c'],
    );
    assert.equal(
      rr.pick([c('x')], pool, rng).id,
      'x',
      'a candidate outside the pool is still served',
    );
    assert.throws(() => rr.pick([], pool, rng), RangeError);
    assert.equal(new RoundRobin().pick(pool, pool, scriptedRng([NaN])).id, 'a');
  });

  it('random takes the draw’s position, and survives a broken draw', () => {
    const cs = [c('a'), c('b'), c('c'), c('d')];
    assert.equal(pickRandom(cs, scriptedRng([0])).id, 'a');
    assert.equal(pickRandom(cs, scriptedRng([0.5])).id, 'c');
    assert.equal(pickRandom(cs, scriptedRng([0.9999])).id, 'd');
    assert.equal(pickRandom(cs, scriptedRng([1])).id, 'd');
    assert.equal(pickRandom(cs, scriptedRng([NaN])).id, 'a');
    assert.throws(() => pickRandom([], scriptedRng([0])), RangeError);
  });

  it('least-connections takes the least loaded, ties at random', () => {
    const cs = [c('a', 3), c('b', 1), c('c', 1), c('d', 2)];
    assert.equal(pickLeastConnections(cs, scriptedRng([0])).id, 'b');
    assert.equal(pickLeastConnections(cs, scriptedRng([0.7])).id, 'c');
    assert.throws(() => pickLeastConnections([], scriptedRng([0])), RangeError);
  });
});

describe('Balancer with a baseline picker', () => {
  const endpoints = ['a', 'b', 'c'].map((id) => endpoint(id));

  it('round-robin ignores affinity and load', () => {
    const balancer = new Balancer(testPolicy(), endpoints, {
      clock: fakeClock(),
      rng: scriptedRng([0]),
      picker: 'round-robin',
    });
    const ids = [1, 2, 3, 4].map(() => {
      const r = balancer.pick({ affinityKey: 'same key every time' });
      assert.equal(r.kind, 'picked');
      return r.kind === 'picked' ? [r.attempt.endpoint.id, r.affinity] : [];
    });
    assert.deepEqual(ids, [
      ['a', 'none'],
      ['b', 'none'],
      ['c', 'none'],
      ['a', 'none'],
    ]);
  });

  it('least-connections follows in-flight counts; random draws once per pick', () => {
    const lc = new Balancer(testPolicy(), endpoints, {
      clock: fakeClock(),
      rng: scriptedRng([0, 0, 0]),
      picker: 'least-connections',
    });
    const first = lc.pick({});
    const second = lc.pick({});
    const third = lc.pick({});
    const ids = [first, second, third].map((r) =>
      r.kind === 'picked' ? r.attempt.endpoint.id : '',
    );
    assert.deepEqual(ids, ['a', 'b', 'c']);
    const random = new Balancer(testPolicy(), endpoints, {
      clock: fakeClock(),
      rng: scriptedRng([0.5]),
      picker: 'random',
    });
    const r = random.pick({});
    assert.equal(r.kind === 'picked' ? r.attempt.endpoint.id : '', 'b');
  });

  it('still sheds when nothing is a candidate', () => {
    const balancer = new Balancer(testPolicy(), endpoints, {
      clock: fakeClock(),
      rng: scriptedRng([]),
      picker: 'round-robin',
    });
    const r = balancer.pick({ exclude: new Set(['a', 'b', 'c']) });
    assert.equal(r.kind, 'shed');
  });
});
