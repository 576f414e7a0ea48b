/**
 * Slow-endpoint ejection must not empty a pool. Found by `npm run bench:soak`: when other work
 * starved the machine's CPU, the simulators' TTFT rose one after the other, each endpoint was
 * opened as `slow` relative to the others' EWMAs, and for ~20 s the sidecar answered every
 * request 503 no_healthy_backend although every endpoint would have served (docs/reliability.md).
 *
 * The reduced case below needs no starvation: two endpoints go out for errors while their EWMA is
 * low; the survivor takes all the traffic, gets slower (Little's law), and is then ejected for
 * being slower than two endpoints that serve nothing. The pool sheds everything.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Balancer } from './balancer.ts';
import { seededRng } from './rng.ts';
import { endpoint, fakeClock, testPolicy } from './testing.ts';

describe('slow ejection', () => {
  test('never opens the last closed endpoint for being slower than endpoints already out', () => {
    const clock = fakeClock(1_000);
    const balancer = new Balancer(
      testPolicy({ health: { minRequests: 5, maxTtftSlowdown: 4, openForMs: 30_000 } }),
      [endpoint('a'), endpoint('b'), endpoint('c')],
      { clock, rng: seededRng(1) },
    );
    /** One request to `id`; false when the balancer would not send it there (shed). */
    const serve = (id: string, ttftMs: number, outcome: 'success' | 'error'): boolean => {
      const picked = balancer.pick({ exclude: new Set(['a', 'b', 'c'].filter((x) => x !== id)) });
      if (picked.kind !== 'picked') return false;
      clock.advance(ttftMs);
      balancer.firstByte(picked.attempt);
      balancer.finish(
        picked.attempt,
        outcome === 'success' ? { kind: 'success', streamed: true } : { kind: 'error' },
      );
      return true;
    };
    // All three at 20 ms, long enough for their EWMAs to settle there.
    for (let i = 0; i < 60; i++) for (const id of ['a', 'b', 'c']) serve(id, 20, 'success');
    // A fresh health window, then a and b fail (their EWMAs stay at 20 ms): open for errors.
    clock.advance(11_000);
    for (let i = 0; i < 10; i++) for (const id of ['a', 'b']) serve(id, 20, 'error');
    const open = balancer.status().filter((s) => s.breaker === 'open');
    assert.deepEqual(
      open.map((s) => s.id),
      ['a', 'b'],
    );
    // c now carries the whole pool and answers in 100 ms instead of 20: slower, but serving.
    let served = 0;
    while (served < 20 && serve('c', 100, 'success')) served++;
    const c = balancer.status().find((s) => s.id === 'c')!;
    assert.equal(
      c.breaker,
      'closed',
      `c, the only endpoint that serves, is ${c.breaker} after ${served} requests`,
    );
    assert.equal(balancer.pick({}).kind, 'picked', 'the pool still serves');
  });
});
