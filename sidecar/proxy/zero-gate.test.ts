import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import pino from 'pino';
import type { HeldWaiter } from '../config/active-pool.ts';
import { ZeroHold } from '../policy/index.ts';
import { HoldGate, type HoldRefusal, type HoldTimers } from './zero-gate.ts';

const POLICY = { maxWaitMs: 1_000, maxRequests: 2, maxBytes: 100 };

/** Timers run by hand: `advance` fires what is due; microtasks run on `flush`. */
class ManualTimers implements HoldTimers {
  now = 0;
  readonly #timers = new Map<number, { at: number; fn: () => void }>();
  #next = 1;
  #micro: (() => void)[] = [];

  setTimeout(fn: () => void, ms: number): { unref(): void } {
    const id = this.#next++;
    this.#timers.set(id, { at: this.now + ms, fn });
    return Object.assign({ unref: () => undefined }, { id });
  }

  clearTimeout(handle: unknown): void {
    this.#timers.delete((handle as { id: number }).id);
  }

  queueMicrotask(fn: () => void): void {
    this.#micro.push(fn);
  }

  get pending(): number {
    return this.#timers.size;
  }

  flush(): void {
    const micro = this.#micro;
    this.#micro = [];
    for (const fn of micro) fn();
  }

  advance(ms: number): void {
    this.now += ms;
    for (const [id, t] of [...this.#timers]) {
      if (t.at <= this.now) {
        this.#timers.delete(id);
        t.fn();
      }
    }
  }
}

interface Client {
  sent?: number;
  refused?: HoldRefusal;
  dropped?: number;
  leave(): void;
  watching: boolean;
}

/** Read through a call: an assertion that it was undefined must not narrow it for good. */
function codeOf(client: Client): string | undefined {
  return client.refused?.code;
}

function setUp() {
  const timers = new ManualTimers();
  const hold = new ZeroHold<HeldWaiter>();
  hold.configure(POLICY, 0);
  const left: string[] = [];
  let shed = 0;
  const logs: string[] = [];
  const logger = pino(
    { level: 'info' },
    { write: (line: string) => logs.push((JSON.parse(line) as { msg: string }).msg) },
  );
  const gate = new HoldGate({
    poolName: 'chat',
    hold,
    metrics: { left: (outcome) => left.push(outcome), shed: () => shed++ },
    logger,
    nowMs: () => timers.now,
    timers,
  });
  const order: string[] = [];
  const admit = (name: string, bodyBytes = 10): Client => {
    let gone: (() => void) | undefined;
    const client: Client = {
      watching: false,
      leave: () => gone?.(),
    };
    gate.admit({
      bodyBytes,
      send: (heldMs) => {
        client.sent = heldMs;
        order.push(name);
      },
      refuse: (r) => (client.refused = r),
      dropped: (heldMs) => (client.dropped = heldMs),
      watchClient: (g) => {
        gone = g;
        client.watching = true;
        return () => (client.watching = false);
      },
    });
    return client;
  };
  return { timers, hold, gate, admit, left, order, logs, shed: () => shed };
}

describe('HoldGate', () => {
  test('held until an endpoint comes, then sent in arrival order after the apply', () => {
    const { timers, hold, admit, left, order, logs } = setUp();
    const a = admit('a');
    timers.advance(300);
    const b = admit('b');
    assert.equal(hold.size, 2);
    assert.equal(timers.pending, 1, 'one timer for the hold');
    hold.configure(POLICY, 1);
    assert.equal(a.sent, undefined, 'not inside the apply');
    timers.flush();
    assert.deepEqual(order, ['a', 'b']);
    assert.equal(a.sent, 300);
    assert.equal(b.sent, 0);
    assert.equal(a.watching, false);
    assert.deepEqual(left, ['released', 'released']);
    assert.equal(timers.pending, 0);
    assert.match(logs[0]!, /holding its requests until the first one is ready/);
    assert.match(logs[1]!, /an endpoint is ready; held requests released/);
    assert.equal(logs.length, 2, 'one line when the streak starts, one when it ends');
  });

  test('an endpoint that goes again before the release leaves them held', () => {
    const { timers, hold, admit } = setUp();
    const a = admit('a');
    hold.configure(POLICY, 1);
    hold.configure(POLICY, 0);
    timers.flush();
    assert.equal(a.sent, undefined);
    assert.equal(hold.size, 1);
  });

  test('past maxWait: a 503 saying so, each at its own deadline', () => {
    const { timers, admit, left, logs, shed } = setUp();
    const a = admit('a');
    timers.advance(600);
    const b = admit('b');
    timers.advance(400);
    assert.equal(a.refused?.code, 'scale_from_zero_timeout');
    assert.equal(a.refused?.retryAfterS, 1);
    assert.equal(a.refused?.heldMs, 1_000);
    assert.match(a.refused?.message ?? '', /held 1s \(scaleFromZero.maxWait, 1s\)/);
    assert.equal(b.refused, undefined);
    timers.advance(599);
    assert.equal(b.refused, undefined);
    timers.advance(1);
    assert.equal(codeOf(b), 'scale_from_zero_timeout');
    assert.deepEqual(left, ['timeout', 'timeout']);
    assert.equal(shed(), 2);
    assert.match(logs.at(-1)!, /no endpoint came within scaleFromZero.maxWait/);
  });

  test('full in count or bytes: a 503 at once, never held', () => {
    const { admit, hold, shed } = setUp();
    admit('a', 95);
    const big = admit('big', 6);
    assert.equal(big.refused?.code, 'scale_from_zero_full');
    assert.match(big.refused?.message ?? '', /scaleFromZero.maxBytes, 100/);
    assert.equal(big.refused?.heldMs, undefined);
    assert.equal(big.watching, false);
    admit('b', 5);
    const third = admit('c', 0);
    assert.match(third.refused?.message ?? '', /scaleFromZero.maxRequests, 2/);
    assert.equal(hold.size, 2);
    assert.equal(shed(), 2);
  });

  test('a client that leaves is dropped at once; the timer follows the oldest left', () => {
    const { timers, hold, admit, left } = setUp();
    const a = admit('a');
    timers.advance(500);
    const b = admit('b');
    a.leave();
    assert.equal(a.dropped, 500);
    assert.equal(hold.size, 1);
    assert.deepEqual(left, ['gone']);
    timers.advance(500);
    assert.equal(b.refused, undefined, "a's deadline is no longer armed");
    timers.advance(500);
    assert.equal(codeOf(b), 'scale_from_zero_timeout');
    a.leave();
    assert.deepEqual(left, ['gone', 'timeout'], 'counted once');
  });

  test('shutdown: every held request gets its 503 now, and the connection closes', () => {
    const { timers, gate, admit, hold, left } = setUp();
    const a = admit('a');
    const b = admit('b');
    timers.advance(10);
    gate.refuseAll();
    for (const c of [a, b]) {
      assert.equal(c.refused?.code, 'shutting_down');
      assert.equal(c.refused?.close, true);
    }
    assert.equal(hold.size, 0);
    assert.deepEqual(left, ['shutdown', 'shutdown']);
    assert.equal(timers.pending, 0);
  });
});
