import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { balancePool } from '../../harness/pool-file.ts';
import {
  debugBackends,
  eventually,
  hello,
  rawChat,
  simConfig,
  simStats,
  sleep,
  startPool,
} from '../helpers.ts';

const streamHello = { ...hello(), stream: true };

describe('passive health through a real sidecar', () => {
  test('avoids a failing endpoint once the window fills, and takes it back after openFor', async () => {
    const pool = await startPool(
      [{ name: 'good' }, { name: 'bad', flags: ['--error-rate', '1'] }],
      (urls) =>
        balancePool(
          urls,
          '  health: {window: 5s, minRequests: 4, maxErrorRate: 0.5, openFor: 1s}\n  retry: {budgetPercent: 100, minPerSecond: 10, maxAttempts: 3}',
          ['good', 'bad'],
        ),
    );
    try {
      const statuses: number[] = [];
      for (let i = 0; i < 30; i++) statuses.push((await rawChat(pool.sidecar.url, hello())).status);
      assert.deepEqual(
        new Set(statuses),
        new Set([200]),
        'retries hide the failures from the client',
      );
      const bad = (await debugBackends(pool.sidecar)).endpoints.find((e) => e.backend === 'bad')!;
      assert.equal(bad.breaker, 'open');
      assert.ok(
        bad.requests <= 8,
        `the failing endpoint got ${bad.requests} requests; its breaker should have stopped them`,
      );

      await simConfig(pool.sims[1]!, { errorRate: 0 });
      await eventually(
        async () => {
          await rawChat(pool.sidecar.url, hello());
          const e = (await debugBackends(pool.sidecar)).endpoints.find((x) => x.backend === 'bad')!;
          return e.breaker === 'closed';
        },
        15_000,
        'the recovered endpoint to close its breaker',
      );
      const before = (await simStats(pool.sims[1]!)).completed;
      for (let i = 0; i < 20; i++) await rawChat(pool.sidecar.url, hello());
      assert.ok(
        (await simStats(pool.sims[1]!)).completed > before,
        'the recovered endpoint serves again',
      );
    } finally {
      await pool.stop();
    }
  });

  test('retries 429s elsewhere and opens the breaker of a rate-limited endpoint', async () => {
    const pool = await startPool(
      [{ name: 'ok' }, { name: 'limited', flags: ['--rate-limit-rate', '1'] }],
      (urls) =>
        balancePool(
          urls,
          '  health: {window: 20s, minRequests: 3, max429Rate: 0.3, openFor: 30s}',
          ['ok', 'limited'],
        ),
    );
    try {
      // Each 429 carries Retry-After: 1, which keeps the endpoint out of picks for a second, so
      // the window fills slowly; the client never sees a 429 meanwhile.
      await eventually(
        async () => {
          const res = await rawChat(pool.sidecar.url, hello());
          assert.equal(res.status, 200);
          const limited = (await debugBackends(pool.sidecar)).endpoints.find(
            (e) => e.backend === 'limited',
          )!;
          return limited.breaker === 'open';
        },
        15_000,
        'the rate-limited endpoint to open its breaker',
      );
      const limited = (await debugBackends(pool.sidecar)).endpoints.find(
        (e) => e.backend === 'limited',
      )!;
      assert.ok(limited.rateLimited >= 3);
    } finally {
      await pool.stop();
    }
  });

  test('times out a stalled endpoint before the first byte and retries on another', async () => {
    const pool = await startPool(
      [{ name: 'ok' }, { name: 'stall', flags: ['--stall-rate', '1'] }],
      (urls) =>
        balancePool(
          urls,
          '  timeouts: {firstByte: 300ms}\n  health: {minRequests: 100, consecutiveErrors: 0}',
          ['ok', 'stall'],
        ),
    );
    try {
      let retried = 0;
      for (let i = 0; i < 8; i++) {
        const res = await rawChat(pool.sidecar.url, streamHello);
        assert.equal(res.status, 200);
        assert.match(res.headers.get('x-switchyard-backend') ?? '', /^ok\//);
        if (res.headers.get('x-switchyard-attempts') === '2') retried++;
      }
      assert.ok(retried >= 1, 'some requests were first sent to the stalling endpoint');
      const stall = (await debugBackends(pool.sidecar)).endpoints.find(
        (e) => e.backend === 'stall',
      )!;
      assert.equal(stall.errors, retried);
      await eventually(
        async () => (await simStats(pool.sims[1]!)).inFlight === 0,
        5_000,
        'stalled upstream requests to be cancelled',
      );
    } finally {
      await pool.stop();
    }
  });

  test('sheds with 503 and Retry-After at once when every endpoint is broken', async () => {
    const pool = await startPool(
      [
        { name: 'x', flags: ['--error-rate', '1'] },
        { name: 'y', flags: ['--error-rate', '1'] },
      ],
      (urls) =>
        balancePool(
          urls,
          '  health: {window: 10s, minRequests: 3, maxErrorRate: 0.5, openFor: 30s}',
          ['x', 'y'],
        ),
    );
    try {
      await eventually(
        async () => {
          await rawChat(pool.sidecar.url, hello());
          return (await debugBackends(pool.sidecar)).endpoints.every((e) => e.breaker === 'open');
        },
        10_000,
        'every breaker to open',
      );
      const before =
        (await simStats(pool.sims[0]!)).requests + (await simStats(pool.sims[1]!)).requests;
      const res = await rawChat(pool.sidecar.url, hello());
      assert.equal(res.status, 503);
      assert.equal(
        (JSON.parse(res.text) as { error: { code: string } }).error.code,
        'no_healthy_backend',
      );
      assert.ok(Number(res.headers.get('retry-after')) >= 1);
      assert.equal(res.headers.get('x-switchyard-attempts'), '0');
      const afterCount =
        (await simStats(pool.sims[0]!)).requests + (await simStats(pool.sims[1]!)).requests;
      assert.equal(afterCount, before, 'a shed request reaches no backend');
    } finally {
      await pool.stop();
    }
  });

  test('passes the upstream failure through when retries cannot help', async () => {
    const pool = await startPool([{ name: 'only', flags: ['--error-rate', '1'] }], (urls) =>
      balancePool(urls, '  health: {minRequests: 100, consecutiveErrors: 0}', ['only']),
    );
    try {
      const res = await rawChat(pool.sidecar.url, hello());
      assert.equal(res.status, 500);
      assert.equal(res.headers.get('x-switchyard-attempts'), '1');
    } finally {
      await pool.stop();
    }
  });

  test('answers 502 with OpenAI-style JSON when no endpoint accepts connections', async () => {
    const pool = await startPool([{ name: 'gone' }], (urls) =>
      balancePool(urls, '  health: {minRequests: 100, consecutiveErrors: 0}', ['gone']),
    );
    try {
      await pool.sims[0]!.stop();
      const res = await rawChat(pool.sidecar.url, hello());
      assert.equal(res.status, 502);
      assert.equal(
        (JSON.parse(res.text) as { error: { code: string } }).error.code,
        'upstream_unreachable',
      );
    } finally {
      await pool.stop();
    }
  });

  test('drops the cold-start TTFT sample instead of learning it', async () => {
    const pool = await startPool([{ name: 'cold', flags: ['--cold-start-ms', '1500'] }], (urls) =>
      balancePool(urls, '  defaultTtft: 100ms\n  coldStart: {idleAfter: 1s}', ['cold']),
    );
    try {
      await sleep(1_200); // idle longer than idleAfter: the next request is a cold start
      const first = await rawChat(pool.sidecar.url, streamHello);
      assert.equal(first.status, 200);
      let e = (await debugBackends(pool.sidecar)).endpoints[0]!;
      // Learning the 1.5 s sample would move the EWMA to 0.8 × 100 + 0.2 × 1500 = 380 ms.
      assert.ok(e.ewmaTtftMs < 150, `EWMA ${e.ewmaTtftMs} ms learned the cold start`);
      await rawChat(pool.sidecar.url, streamHello);
      e = (await debugBackends(pool.sidecar)).endpoints[0]!;
      assert.ok(e.ewmaTtftMs < 100, `a warm sample moves the EWMA down (${e.ewmaTtftMs} ms)`);
    } finally {
      await pool.stop();
    }
  });

  test('ends a stream that breaks mid-way with an SSE error event, and never retries it', async () => {
    const pool = await startPool(
      [
        { name: 'dies', flags: ['--decode-ms-per-token', '20'] },
        { name: 'spare', flags: ['--decode-ms-per-token', '20'] },
      ],
      (urls) =>
        balancePool(urls, '  mode: Failover', ['dies', 'spare']).replace('  mode: Balance\n', ''),
    );
    try {
      const res = await fetch(`${pool.sidecar.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ ...hello(), stream: true, max_tokens: 500 }),
      });
      assert.equal(res.status, 200);
      assert.match(res.headers.get('x-switchyard-backend') ?? '', /^dies\//);
      const reader = (res.body as ReadableStream<Uint8Array>).getReader();
      const first = await reader.read();
      assert.ok(first.value !== undefined && first.value.length > 0);
      await pool.sims[0]!.kill(); // the backend dies mid-stream
      let rest = '';
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        rest += new TextDecoder().decode(value);
      }
      assert.match(rest, /upstream_stream_broken/);
      assert.doesNotMatch(rest, /\[DONE\]/);
      const spare = (await simStats(pool.sims[1]!)).requests;
      assert.equal(spare, 0, 'a stream that already sent bytes is not retried');
    } finally {
      await pool.stop();
    }
  });
});
