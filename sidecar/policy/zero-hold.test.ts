import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ZeroHold } from './zero-hold.ts';

const POLICY = { maxWaitMs: 1_000, maxRequests: 3, maxBytes: 100 };

function held(hold: ZeroHold<string>, value: string, nowMs: number, bytes = 10) {
  const offered = hold.offer(bytes, nowMs, value);
  assert.equal(offered.kind, 'held');
  return offered;
}

describe('ZeroHold', () => {
  test('holds only while scale from zero is on and the endpoint list is empty', () => {
    const hold = new ZeroHold<string>();
    assert.equal(hold.holds(), false, 'no configuration yet');
    hold.configure(undefined, 0);
    assert.equal(hold.holds(), false, 'off: a pool with no endpoint sheds at once');
    hold.configure(POLICY, 2);
    assert.equal(hold.holds(), false, 'endpoints: sent (open breakers shed, as before)');
    hold.configure(POLICY, 0);
    assert.equal(hold.holds(), true);
  });

  test('bounded in count and in bytes; first come first served', () => {
    const hold = new ZeroHold<string>();
    hold.configure(POLICY, 0);
    assert.equal(held(hold, 'a', 0).first, true);
    assert.equal(held(hold, 'b', 1, 80).first, false);
    assert.deepEqual(hold.offer(11, 2, 'too big'), { kind: 'full', limit: 'bytes' });
    held(hold, 'c', 3, 10);
    assert.deepEqual(hold.offer(0, 4, 'one more'), { kind: 'full', limit: 'requests' });
    assert.equal(hold.size, 3);
    assert.equal(hold.bytes, 100);
    assert.deepEqual(
      hold.takeAll('released').map((e) => e.value),
      ['a', 'b', 'c'],
    );
    assert.equal(hold.size, 0);
    assert.equal(hold.bytes, 0);
  });

  test('times out the oldest first, each after maxWait', () => {
    const hold = new ZeroHold<string>();
    hold.configure(POLICY, 0);
    held(hold, 'a', 0);
    held(hold, 'b', 400);
    assert.equal(hold.nextDeadlineMs(), 1_000);
    assert.deepEqual(hold.expire(999), []);
    assert.deepEqual(
      hold.expire(1_000).map((e) => e.value),
      ['a'],
    );
    assert.equal(hold.nextDeadlineMs(), 1_400);
    assert.deepEqual(
      hold.expire(5_000).map((e) => e.value),
      ['b'],
    );
    assert.equal(hold.nextDeadlineMs(), undefined);
  });

  test('asks to release when an endpoint comes or scale from zero is turned off', () => {
    const hold = new ZeroHold<string>();
    let changes = 0;
    hold.onChange = () => changes++;
    hold.configure(POLICY, 0);
    hold.configure(POLICY, 0);
    assert.equal(changes, 0, 'nothing held: nothing to release');
    held(hold, 'a', 0);
    hold.configure({ ...POLICY, maxWaitMs: 2_000 }, 0);
    assert.equal(changes, 0, 'still no endpoint');
    assert.equal(hold.nextDeadlineMs(), 2_000, 'a new maxWait applies to those held');
    hold.configure(POLICY, 1);
    assert.equal(changes, 1);
    hold.configure(undefined, 0);
    assert.equal(changes, 2);
  });

  test('a streak: reported once when the hold empties, with how each request left', () => {
    const hold = new ZeroHold<string>();
    let firsts = 0;
    hold.onFirstHeld = () => firsts++;
    hold.configure({ ...POLICY, maxRequests: 2 }, 0);
    const a = held(hold, 'a', 10);
    held(hold, 'b', 20);
    assert.equal(hold.offer(0, 30, 'c').kind, 'full');
    assert.equal(firsts, 1);
    assert.equal(hold.remove(a.entry), true);
    assert.equal(hold.remove(a.entry), false, 'removed once');
    assert.equal(hold.endStreak(), undefined, 'b is still held');
    hold.expire(5_000);
    assert.deepEqual(hold.endStreak(), {
      sinceMs: 10,
      held: 2,
      released: 0,
      timedOut: 1,
      gone: 1,
      shutdown: 0,
      full: 1,
    });
    assert.equal(hold.endStreak(), undefined, 'once');
    held(hold, 'd', 6_000);
    assert.equal(firsts, 2, 'a new streak');
    hold.takeAll('shutdown');
    assert.equal(hold.endStreak()?.shutdown, 1);
  });

  test('a full hold before any streak counts nothing', () => {
    const hold = new ZeroHold<string>();
    hold.configure({ ...POLICY, maxBytes: 0 }, 0);
    assert.deepEqual(hold.offer(1, 0, 'x'), { kind: 'full', limit: 'bytes' });
    assert.equal(hold.endStreak(), undefined);
    assert.equal(held(hold, 'empty body', 0, 0).first, true, 'maxBytes 0 holds bodiless requests');
  });
});
