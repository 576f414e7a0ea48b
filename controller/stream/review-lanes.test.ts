import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ReviewLanes } from './review-lanes.ts';

/** A job that records when it started and ends when told. */
function job(started: string[], name: string) {
  let end!: () => void;
  const done = new Promise<void>((resolve) => (end = resolve));
  return {
    work: () => {
      started.push(name);
      return done;
    },
    end: () => end(),
  };
}

describe('ReviewLanes', () => {
  test('newcomers before renewals, at most `limit` at once', async () => {
    const lanes = new ReviewLanes(1);
    const started: string[] = [];
    const a = job(started, 'renewal-a');
    const b = job(started, 'renewal-b');
    const c = job(started, 'first-c');
    const ran = [
      lanes.run('a', 'renewal', a.work),
      lanes.run('b', 'renewal', b.work),
      lanes.run('c', 'first', c.work),
    ];
    assert.deepEqual(started, ['renewal-a'], 'one at a time');
    assert.deepEqual(lanes.waiting, { first: 1, renewal: 1 });
    a.end();
    await ran[0];
    await new Promise(setImmediate);
    assert.deepEqual(started, ['renewal-a', 'first-c'], 'the newcomer jumps the renewal');
    c.end();
    await ran[2];
    await new Promise(setImmediate);
    assert.deepEqual(started, ['renewal-a', 'first-c', 'renewal-b']);
    b.end();
    await Promise.all(ran);
  });

  test('a renewal someone now waits for moves to the newcomers’ lane', async () => {
    const lanes = new ReviewLanes(1);
    const started: string[] = [];
    const busy = job(started, 'busy');
    const r = job(started, 'renewal-r');
    const f = job(started, 'first-f');
    const ran = [
      lanes.run('busy', 'first', busy.work),
      lanes.run('r', 'renewal', r.work),
      lanes.run('f', 'first', f.work),
    ];
    lanes.promote('r');
    assert.deepEqual(lanes.waiting, { first: 2, renewal: 0 });
    busy.end();
    await new Promise(setImmediate);
    assert.deepEqual(started, ['busy', 'first-f'], 'behind the newcomers already waiting');
    f.end();
    await new Promise(setImmediate);
    assert.deepEqual(started, ['busy', 'first-f', 'renewal-r']);
    r.end();
    await Promise.all(ran);
  });

  test('a failed review frees its slot', async () => {
    const lanes = new ReviewLanes(1);
    await assert.rejects(
      lanes.run('x', 'first', () => Promise.reject(new Error('API server unreachable'))),
    );
    assert.equal(await lanes.run('y', 'first', () => Promise.resolve(7)), 7);
  });
});
