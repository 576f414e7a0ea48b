/**
 * Slow detection (docs/policy.md, "The median rule for slow detection") is asked on every
 * finished attempt. It used to sort the EWMAs of the whole pool each time, most of the policy's
 * time at 4,096 endpoints (issue 16's admin-scrape bench); it now reads a median kept sorted. The
 * rule itself is checked against its definition in balancer.property.test.ts.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Balancer } from './balancer.ts';
import { seededRng } from './rng.ts';
import { endpoint, fakeClock, testPolicy, type FakeClock } from './testing.ts';
import type { Attempt, EndpointSpec, PolicyEvent } from './types.ts';

function setup(endpoints: EndpointSpec[], maxTtftSlowdown = 2) {
  const clock = fakeClock(1_000);
  const events: PolicyEvent[] = [];
  const balancer = new Balancer(
    testPolicy({
      defaultTtftMs: 10,
      health: { minRequests: 3, maxTtftSlowdown, openForMs: 30_000 },
      coldStart: { idleAfterMs: 0 },
    }),
    endpoints,
    { clock, rng: seededRng(7), onEvent: (e) => events.push(e) },
  );
  return { clock, balancer, events };
}

/** Starts an attempt on `id` (every other endpoint excluded). */
function start(balancer: Balancer, ids: readonly string[], id: string): Attempt {
  const picked = balancer.pick({ exclude: new Set(ids.filter((x) => x !== id)) });
  assert.equal(picked.kind, 'picked', `${id} takes a request`);
  return picked.attempt;
}

/** One streamed request to `id` that answers its first byte after `ttftMs`. */
function serve(
  { clock, balancer }: { clock: FakeClock; balancer: Balancer },
  ids: readonly string[],
  id: string,
  ttftMs: number,
): Attempt {
  const attempt = start(balancer, ids, id);
  clock.advance(ttftMs);
  balancer.firstByte(attempt);
  balancer.finish(attempt, { kind: 'success', streamed: true });
  return attempt;
}

/** Counts Array.prototype.sort calls made while `fn` runs (node:test cannot mock an array's). */
function sortsDuring(fn: () => void): number {
  const sort = Array.prototype.sort;
  let sorts = 0;
  Array.prototype.sort = function (this: unknown[], compare?: (a: unknown, b: unknown) => number) {
    sorts += 1;
    return sort.call(this, compare) as unknown[];
  } as typeof sort;
  try {
    fn();
  } finally {
    Array.prototype.sort = sort;
  }
  return sorts;
}

describe('slow detection', () => {
  test('a finished attempt sorts nothing: the median is read, not recomputed', () => {
    const ids = Array.from({ length: 512 }, (_, i) => `e${i}`);
    const pool = setup(ids.map((id) => endpoint(id)));
    for (const id of ids) serve(pool, ids, id, 10 + (id.length % 3));
    pool.balancer.status(); // the reference is built here (once), or by the next finish
    const attempts = ids.slice(0, 200).map((id) => start(pool.balancer, ids, id));
    pool.clock.advance(12);
    for (const a of attempts) pool.balancer.firstByte(a);
    const sorts = sortsDuring(() => {
      for (const a of attempts) pool.balancer.finish(a, { kind: 'success', streamed: true });
    });
    // Before: one sort of 511 EWMAs per finish (200).
    assert.equal(sorts, 0);
    assert.deepEqual(pool.events, []);
    assert.ok(pool.balancer.status().every((s) => !s.slow && s.breaker === 'closed'));
  });

  test('the reference follows each sample: opens exactly when the EWMA passes 2× the median', () => {
    const ids = ['a', 'b', 'c', 'd'];
    const pool = setup(ids.map((id) => endpoint(id)));
    for (let i = 0; i < 10; i++) for (const id of ids) serve(pool, ids, id, 10);
    // b's and c's samples after the reference was built move the median d is compared with.
    pool.balancer.status();
    for (let i = 0; i < 20; i++) for (const id of ['a', 'b', 'c']) serve(pool, ids, id, 15);
    let served = 0;
    while (pool.balancer.status().find((s) => s.id === 'd')!.breaker === 'closed') {
      const before = pool.balancer.status();
      const peers = before.filter((s) => s.id !== 'd').map((s) => s.ewmaTtftMs);
      const median = [...peers].sort((x, y) => x - y)[1]!;
      serve(pool, ids, 'd', 60);
      served += 1;
      const d = pool.balancer.status().find((s) => s.id === 'd')!;
      assert.equal(d.breaker === 'open', d.ewmaTtftMs > 2 * median, `request ${served}`);
    }
    assert.ok(served > 1);
    const opened = pool.events.filter((e) => e.kind === 'breaker');
    assert.deepEqual(
      opened.map((e) => e.kind === 'breaker' && [e.endpointId, e.to, e.reason]),
      [['d', 'open', 'slow']],
    );
  });

  test('a drifted or open endpoint finishing late moves no reference', () => {
    const ids = ['a', 'b', 'c', 'x'];
    const specs = ids.map((id) => endpoint(id));
    const pool = setup(specs);
    for (let i = 0; i < 10; i++) for (const id of ids) serve(pool, ids, id, 10);
    pool.clock.advance(11_000); // fresh health windows
    // x takes a request, then is judged drifted; a's breaker opens for errors while its runs.
    const onX = start(pool.balancer, ids, 'x');
    const onA = start(pool.balancer, ids, 'a');
    pool.balancer.update(
      testPolicy({
        defaultTtftMs: 10,
        health: { minRequests: 3, maxTtftSlowdown: 2, openForMs: 30_000 },
        coldStart: { idleAfterMs: 0 },
      }),
      specs.map((s) => (s.id === 'x' ? { ...s, drifted: true } : s)),
    );
    for (let i = 0; i < 3; i++)
      pool.balancer.finish(start(pool.balancer, ids, 'a'), { kind: 'error' });
    assert.equal(pool.balancer.status()[0]!.breaker, 'open');
    // Their late answers (1 s) move their own EWMAs, not the reference of b and c.
    pool.clock.advance(1_000);
    for (const a of [onX, onA]) {
      pool.balancer.firstByte(a);
      pool.balancer.finish(a, { kind: 'success', streamed: true });
    }
    for (const i of [0, 3]) assert.ok(pool.balancer.status()[i]!.ewmaTtftMs > 200);
    // c slows to 40 ms: past twice b's 10 ms at its third request (EWMA 16, 20.8), when its
    // window reaches minRequests. Counting a and x (~208 ms), its reference would be 208.
    for (let i = 0; i < 3; i++) serve(pool, ids, 'c', 40);
    assert.deepEqual(
      pool.events
        .filter((e) => e.kind === 'breaker' && e.to === 'open')
        .map((e) => e.kind === 'breaker' && [e.endpointId, e.reason]),
      [
        ['a', 'errors'],
        ['c', 'slow'],
      ],
    );
  });
});
