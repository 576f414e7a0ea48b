import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  INITIAL_STATE,
  awaitsFirstByte,
  isPreemptable,
  isRetryableStatus,
  outcomeOf,
  transition,
  type AttemptEvent,
  type AttemptState,
  type Effect,
} from './attempt-state.ts';

const head = (status: number, retryAfterMs?: number): AttemptEvent => ({
  kind: 'head',
  status,
  retryAfterMs,
});
const DATA: AttemptEvent = { kind: 'data' };
const END: AttemptEvent = { kind: 'end' };
const DEADLINE: AttemptEvent = { kind: 'deadline' };
const CLIENT_GONE: AttemptEvent = { kind: 'client-gone' };
const SUPERSEDED: AttemptEvent = { kind: 'superseded' };
const PREEMPTED: AttemptEvent = { kind: 'preempted' };
const upstreamError = (code: string): AttemptEvent => ({ kind: 'upstream-error', code });

const ALL_EVENTS: AttemptEvent[] = [
  head(200),
  head(503),
  DATA,
  END,
  upstreamError('ECONNRESET'),
  DEADLINE,
  CLIENT_GONE,
  SUPERSEDED,
  PREEMPTED,
];

/** Runs events from the initial state; returns the last state and every effect's kind, in order. */
function run(...events: AttemptEvent[]): { state: AttemptState; effects: Effect[] } {
  let state = INITIAL_STATE;
  const effects: Effect[] = [];
  for (const event of events) {
    const next = transition(state, event);
    if (next === undefined) continue;
    state = next.state;
    effects.push(...next.effects);
  }
  return { state, effects };
}

const kinds = (effects: readonly Effect[]): string[] =>
  effects.map((e) => (e.kind === 'report' ? `report:${e.code}` : e.kind));

describe('attempt state machine', () => {
  describe('preemption (flow control)', () => {
    test('before anything reached the client: neutral, upstream dropped, queued again', () => {
      for (const before of [[], [head(200)], [head(404)]] as AttemptEvent[][]) {
        const { state, effects } = run(...before, PREEMPTED);
        assert.equal(state.kind, 'done');
        assert.deepEqual(kinds(effects), ['report:preempted', 'destroy-upstream', 'requeue']);
        assert.deepEqual(outcomeOf('preempted', false, undefined), { kind: 'neutral' });
      }
    });

    test('never once the answer streams, nor after a retried or relayed error', () => {
      for (const before of [[head(200), DATA], [head(503)], [head(200), END]] as AttemptEvent[][]) {
        const { state } = run(...before);
        assert.equal(isPreemptable(state), false, JSON.stringify(state));
        assert.equal(transition(state, PREEMPTED), undefined);
      }
      assert.equal(isPreemptable(INITIAL_STATE), true);
      assert.equal(isPreemptable(run(head(200)).state), true);
    });
  });

  describe('before the response head', () => {
    test('a 2xx or 4xx head is held: no effect until its first body byte', () => {
      for (const status of [200, 204, 404]) {
        const next = transition(INITIAL_STATE, head(status));
        assert.deepEqual(next, { state: { kind: 'awaiting-first-byte', status }, effects: [] });
      }
    });

    test('a 5xx head is reported, then retried elsewhere or relayed', () => {
      const { state, effects } = run(head(502));
      assert.deepEqual(state, { kind: 'awaiting-error-body', status: 502 });
      assert.deepEqual(kinds(effects), ['report:5xx', 'retry-or-relay']);
    });

    test('a 429 head carries its Retry-After into the report', () => {
      const next = transition(INITIAL_STATE, head(429, 2_000));
      assert.deepEqual(next?.effects[0], { kind: 'report', code: '429', retryAfterMs: 2_000 });
    });

    test('a refused connection is an error, retried when allowed', () => {
      const { state, effects } = run(upstreamError('ECONNREFUSED'));
      assert.equal(state.kind, 'done');
      assert.deepEqual(effects, [
        { kind: 'report', code: 'error' },
        {
          kind: 'retry-or-fail',
          failure: { kind: 'transport', code: 'ECONNREFUSED', timeout: false },
        },
      ]);
    });

    test('a connect timeout counts as a timeout and answers 504 when not retried', () => {
      for (const code of ['ECONNECT_TIMEOUT', 'ETIMEDOUT']) {
        const { effects } = run(upstreamError(code));
        assert.deepEqual(effects, [
          { kind: 'report', code: 'timeout' },
          { kind: 'retry-or-fail', failure: { kind: 'transport', code, timeout: true } },
        ]);
      }
    });

    test('the first-byte deadline gives up on the attempt and retries', () => {
      const { state, effects } = run(DEADLINE);
      assert.equal(state.kind, 'done');
      assert.deepEqual(kinds(effects), ['report:timeout', 'destroy-upstream', 'retry-or-fail']);
      assert.deepEqual(effects[2], {
        kind: 'retry-or-fail',
        failure: { kind: 'no-first-byte', timeout: true },
      });
    });

    test('a client that leaves ends the attempt as neutral and destroys the request', () => {
      const { state, effects } = run(CLIENT_GONE);
      assert.equal(state.kind, 'done');
      assert.deepEqual(kinds(effects), ['report:aborted', 'destroy-upstream']);
    });

    test('body events and supersession cannot come before a head', () => {
      for (const event of [DATA, END, SUPERSEDED])
        assert.equal(transition(INITIAL_STATE, event), undefined);
    });
  });

  describe('a held 2xx or 4xx head', () => {
    test('the first body byte is the TTFT sample, then the head goes out', () => {
      const { state, effects } = run(head(200), DATA);
      assert.deepEqual(state, { kind: 'streaming', status: 200 });
      assert.deepEqual(kinds(effects), ['first-byte', 'watch-idle', 'write-head']);
    });

    test('an empty body writes the head and ends: success for 2xx, neutral for 4xx', () => {
      assert.deepEqual(kinds(run(head(204), END).effects), [
        'write-head',
        'end-client',
        'report:2xx',
      ]);
      assert.deepEqual(kinds(run(head(404), END).effects), [
        'write-head',
        'end-client',
        'report:4xx',
      ]);
    });

    test('a reset before the first byte is still retryable (nothing reached the client)', () => {
      const { state, effects } = run(head(200), upstreamError('ECONNRESET'));
      assert.equal(state.kind, 'done');
      assert.deepEqual(effects, [
        { kind: 'report', code: 'error' },
        { kind: 'destroy-upstream' },
        { kind: 'retry-or-fail', failure: { kind: 'reset-before-first-byte', timeout: false } },
      ]);
    });

    test('a 200 that stalls before its body is retried at the deadline', () => {
      assert.deepEqual(kinds(run(head(200), DEADLINE).effects), [
        'report:timeout',
        'destroy-upstream',
        'retry-or-fail',
      ]);
    });

    test('a client that leaves is neutral', () => {
      assert.deepEqual(kinds(run(head(200), CLIENT_GONE).effects), [
        'report:aborted',
        'destroy-upstream',
      ]);
    });
  });

  describe('streaming', () => {
    test('later chunks change nothing (the exchange writes them)', () => {
      const { state } = run(head(200), DATA);
      assert.equal(transition(state, DATA), undefined);
    });

    test('the end reports success', () => {
      const { state, effects } = run(head(200), DATA, DATA, END);
      assert.equal(state.kind, 'done');
      assert.deepEqual(kinds(effects).slice(3), ['end-client', 'report:2xx']);
    });

    test('a 4xx body that ends is neutral', () => {
      assert.deepEqual(kinds(run(head(400), DATA, END).effects).slice(3), [
        'end-client',
        'report:4xx',
      ]);
    });

    test('a break after the first byte is never retried: the client stream is ended', () => {
      const { effects } = run(head(200), DATA, upstreamError('ETIMEDOUT'));
      assert.deepEqual(kinds(effects).slice(3), [
        'report:error',
        'destroy-upstream',
        'break-client',
      ]);
    });

    test('a break while the client held the stream paused is the client’s: aborted, not an error', () => {
      const held: AttemptEvent = { kind: 'upstream-error', code: 'ECONNRESET', clientHeld: true };
      assert.deepEqual(kinds(run(head(200), DATA, held).effects).slice(3), [
        'report:aborted',
        'destroy-upstream',
        'break-client',
      ]);
    });

    test('a client that leaves mid-stream is neutral', () => {
      assert.deepEqual(kinds(run(head(200), DATA, CLIENT_GONE).effects).slice(3), [
        'report:aborted',
        'destroy-upstream',
      ]);
    });

    test('the deadline no longer applies', () => {
      const { state } = run(head(200), DATA);
      assert.equal(awaitsFirstByte(state), false);
      assert.equal(transition(state, DEADLINE), undefined);
    });
  });

  describe('a 5xx or 429 that is not retried', () => {
    test('is relayed from its first body byte, without a second report', () => {
      const { state, effects } = run(head(503), DATA, DATA, END);
      assert.equal(state.kind, 'done');
      assert.deepEqual(kinds(effects), [
        'report:5xx',
        'retry-or-relay',
        'watch-idle',
        'write-head',
        'end-client',
      ]);
    });

    test('an empty error body is relayed too', () => {
      assert.deepEqual(kinds(run(head(500), END).effects).slice(2), ['write-head', 'end-client']);
    });

    test('no body by the deadline: the client gets a 504 instead of a stall', () => {
      const { effects } = run(head(503), DEADLINE);
      assert.deepEqual(effects.slice(2), [
        { kind: 'destroy-upstream' },
        { kind: 'fail', failure: { kind: 'no-error-body', status: 503, timeout: true } },
      ]);
    });

    test('a reset before its body fails without another retry', () => {
      const { effects } = run(head(503), upstreamError('ECONNRESET'));
      assert.deepEqual(effects.slice(2), [
        { kind: 'destroy-upstream' },
        { kind: 'fail', failure: { kind: 'reset-before-first-byte', timeout: false } },
      ]);
    });

    test('a break mid-body ends the client stream without a second report', () => {
      assert.deepEqual(kinds(run(head(503), DATA, upstreamError('ECONNRESET')).effects).slice(4), [
        'destroy-upstream',
        'break-client',
      ]);
    });

    test('a client that leaves only destroys the request (the outcome is reported)', () => {
      assert.deepEqual(kinds(run(head(503), CLIENT_GONE).effects).slice(2), ['destroy-upstream']);
      assert.deepEqual(kinds(run(head(503), DATA, CLIENT_GONE).effects).slice(4), [
        'destroy-upstream',
      ]);
    });
  });

  describe('a 5xx or 429 retried elsewhere', () => {
    test('is drained, and nothing but the client leaving matters after that', () => {
      const { state, effects } = run(head(502), SUPERSEDED);
      assert.equal(state.kind, 'draining');
      assert.equal(awaitsFirstByte(state), false);
      assert.deepEqual(kinds(effects).slice(2), ['drain-upstream']);
      for (const event of [DATA, DEADLINE, head(200), SUPERSEDED])
        assert.equal(transition(state, event), undefined);
      assert.deepEqual(transition(state, END), { state: { kind: 'done' }, effects: [] });
      assert.deepEqual(transition(state, upstreamError('ECONNRESET')), {
        state: { kind: 'done' },
        effects: [],
      });
      assert.deepEqual(kinds(transition(state, CLIENT_GONE)!.effects), ['destroy-upstream']);
    });
  });

  describe('invariants over every path', () => {
    /** Every sequence of up to `depth` events from the initial state. */
    function* paths(depth: number, prefix: AttemptEvent[] = []): Generator<AttemptEvent[]> {
      yield prefix;
      if (prefix.length === depth) return;
      for (const event of ALL_EVENTS) yield* paths(depth, [...prefix, event]);
    }

    test('the balancer is told exactly once per attempt that ends, never twice', () => {
      for (const events of paths(5)) {
        const { state, effects } = run(...events);
        const reports = effects.filter((e) => e.kind === 'report').length;
        assert.ok(reports <= 1, `${reports} reports after ${JSON.stringify(events)}`);
        if (['done', 'draining', 'awaiting-error-body', 'streaming-error'].includes(state.kind))
          assert.equal(reports, 1, `no report after ${JSON.stringify(events)}`);
      }
    });

    test('the head is written at most once, and never after a retry was asked for', () => {
      for (const events of paths(5)) {
        const names = kinds(run(...events).effects);
        assert.ok(names.filter((k) => k === 'write-head').length <= 1);
        const retried = names.findIndex((k) => k.startsWith('retry-or'));
        const written = names.indexOf('write-head');
        if (written !== -1 && retried !== -1)
          assert.equal(
            names[retried],
            'retry-or-relay',
            `retry after the head: ${JSON.stringify(events)}`,
          );
      }
    });

    test('the client is answered at most once: an end, a break, a failure or a retry', () => {
      for (const events of paths(5)) {
        const answers = kinds(run(...events).effects).filter((k) =>
          ['end-client', 'break-client', 'fail', 'retry-or-fail'].includes(k),
        );
        assert.ok(answers.length <= 1, `${answers.join(', ')} after ${JSON.stringify(events)}`);
      }
    });

    test('nothing happens after done', () => {
      for (const event of ALL_EVENTS) assert.equal(transition({ kind: 'done' }, event), undefined);
    });
  });
});

describe('outcomeOf', () => {
  test('maps each counted code to what the balancer learns', () => {
    assert.deepEqual(outcomeOf('2xx', true, undefined), { kind: 'success', streamed: true });
    assert.deepEqual(outcomeOf('2xx', false, undefined), { kind: 'success', streamed: false });
    assert.deepEqual(outcomeOf('429', false, 500), { kind: 'rate-limited', retryAfterMs: 500 });
    for (const code of ['5xx', 'error', 'timeout'] as const)
      assert.deepEqual(outcomeOf(code, true, undefined), { kind: 'error' });
    for (const code of ['4xx', 'aborted'] as const)
      assert.deepEqual(outcomeOf(code, true, undefined), { kind: 'neutral' });
  });
});

describe('isRetryableStatus', () => {
  test('429 and every 5xx', () => {
    assert.deepEqual([200, 400, 404, 428, 429, 499, 500, 503, 599].map(isRetryableStatus), [
      false,
      false,
      false,
      false,
      true,
      false,
      true,
      true,
      true,
    ]);
  });
});
