import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { AFFINITY_SLOWDOWN_MIN_SAMPLES } from '../../crds/policy-defaults.ts';
import { balancePool } from '../../harness/pool-file.ts';
import {
  debugBackends,
  eventually,
  hello,
  rawChat,
  simConfig,
  simStats,
  startPool,
} from '../helpers.ts';

const SYSTEM_PROMPT = 'You are a careful assistant for the billing team. '.repeat(40);

/**
 * Turn `i` of one conversation: the shared system prompt, its first question, then `i` earlier
 * exchanges. Every turn shares the conversation's home (the prompt through its first user
 * message), so affinity keeps them on one endpoint.
 */
function conversationTurn(i: number): unknown {
  const messages: { role: string; content: string }[] = [
    { role: 'system', content: SYSTEM_PROMPT },
    { role: 'user', content: 'question number 0' },
  ];
  for (let k = 1; k <= i; k++)
    messages.push(
      { role: 'assistant', content: `answer number ${k - 1}` },
      { role: 'user', content: `question number ${k}` },
    );
  return { model: 'm', stream: true, max_tokens: 3, messages };
}

describe('routing through a real sidecar', () => {
  test('Failover sends everything to the first backend and moves to the next only when it breaks', async () => {
    const pool = await startPool([{ name: 'primary' }, { name: 'secondary' }], (urls) =>
      [
        'apiVersion: switchyard.dev/v1alpha1',
        'kind: InferencePool',
        'metadata: {name: fo}',
        'spec:',
        '  mode: Failover',
        '  backends:',
        `  - {name: primary, url: ${urls[0]}/v1}`,
        `  - {name: secondary, url: ${urls[1]}/v1}`,
        '  health: {window: 5s, minRequests: 4, maxErrorRate: 0.5, openFor: 1s}',
        '',
      ].join('\n'),
    );
    try {
      for (let i = 0; i < 10; i++) {
        const res = await rawChat(pool.sidecar.url, hello());
        assert.match(res.headers.get('x-switchyard-backend') ?? '', /^primary\//);
      }
      await simConfig(pool.sims[0]!, { errorRate: 1 });
      const statuses: number[] = [];
      for (let i = 0; i < 15; i++) statuses.push((await rawChat(pool.sidecar.url, hello())).status);
      assert.deepEqual(
        new Set(statuses),
        new Set([200]),
        'retries move failed requests to the secondary',
      );
      const res = await rawChat(pool.sidecar.url, hello());
      assert.match(res.headers.get('x-switchyard-backend') ?? '', /^secondary\//);
      assert.equal(
        res.headers.get('x-switchyard-attempts'),
        '1',
        'the open primary is no longer tried',
      );

      await simConfig(pool.sims[0]!, { errorRate: 0 });
      await eventually(
        async () =>
          (await rawChat(pool.sidecar.url, hello())).headers
            .get('x-switchyard-backend')
            ?.startsWith('primary/') === true,
        15_000,
        'traffic to return to the primary',
      );
    } finally {
      await pool.stop();
    }
  });

  test('affinity keeps the turns of a conversation on one endpoint, and lets go when it is slow', async () => {
    const pool = await startPool([{ name: 'a' }, { name: 'b' }, { name: 'c' }], (urls) =>
      balancePool(
        urls,
        '  affinity: {key: Prefix, prefixChars: 4096, maxSlowdown: 2.5}\n  health: {minRequests: 1000, consecutiveErrors: 0}',
      ),
    );
    try {
      const served = new Set<string>();
      const placed = new Set<string>();
      for (let i = 0; i < 12; i++) {
        const { headers } = await rawChat(pool.sidecar.url, conversationTurn(i));
        served.add(headers.get('x-switchyard-backend')!);
        placed.add(headers.get('x-switchyard-affinity')!);
      }
      assert.equal(served.size, 1, `one conversation went to ${[...served].join(', ')}`);
      assert.deepEqual([...placed], ['hit'], 'every turn says it went home');
      const sticky = [...served][0]!;
      // Measure every endpoint with unrelated short prompts (no affinity key), three at a time,
      // until each has the AFFINITY_SLOWDOWN_MIN_SAMPLES samples that affinity's slowdown check
      // counts (`ttftSamples` leaves out the cold first one, which is dropped). The least-loaded
      // step spreads a batch over all three while its requests overlap; a short answer may end
      // before the batch's last request is placed, so the batches go on until the samples are
      // there rather than a fixed number.
      await eventually(
        async () => {
          const batch = await Promise.all(
            [0, 1, 2].map(() => rawChat(pool.sidecar.url, { ...hello(), stream: true })),
          );
          for (const { headers } of batch)
            assert.equal(headers.get('x-switchyard-affinity'), 'none');
          const { endpoints } = await debugBackends(pool.sidecar);
          return endpoints.every((e) => e.ttftSamples >= AFFINITY_SLOWDOWN_MIN_SAMPLES);
        },
        20_000,
        'every endpoint to have the samples of the slowdown check',
      );
      const index = ['a', 'b', 'c'].indexOf(sticky.split('/')[0]!);
      // Slow prefill, and no prefix cache to skip it: every request is slow, not only the first
      // (affinity lets go of a server that stays slow, after its third slow sample).
      await simConfig(pool.sims[index]!, { prefillMsPerToken: 1, cacheBlocks: 0 });
      let movedTo: Headers | undefined;
      await eventually(
        async () => {
          const { headers } = await rawChat(pool.sidecar.url, conversationTurn(99));
          movedTo = headers;
          return headers.get('x-switchyard-backend') !== sticky;
        },
        30_000,
        'affinity to let go of the slow endpoint',
      ).catch(async (err: Error) => {
        // What the slowdown check saw, so a failure says which side of its limit each one was.
        const { endpoints } = await debugBackends(pool.sidecar);
        const seen = endpoints.map((e) => `${e.id}: ${e.measuredTtftMs} ms × ${e.ttftSamples}`);
        throw new Error(`${err.message} (sticky ${sticky}; ${seen.join(', ')})`, { cause: err });
      });
      // The next endpoint of the key's order took it, and the answer says so.
      assert.equal(movedTo?.get('x-switchyard-affinity'), 'spill');
      const debug = await debugBackends(pool.sidecar);
      const slow = debug.endpoints.find((e) => e.id === sticky)!;
      const others = debug.endpoints.filter((e) => e.id !== sticky);
      for (const e of debug.endpoints) {
        assert.ok(
          e.ttftSamples >= AFFINITY_SLOWDOWN_MIN_SAMPLES,
          `${e.id}: ${e.ttftSamples} samples`,
        );
      }
      const fastest = Math.min(...others.map((e) => e.measuredTtftMs!));
      assert.ok(
        slow.measuredTtftMs! > 2.5 * fastest && slow.measuredTtftMs! > fastest + 100,
        `it let go because the sticky endpoint was much slower (${slow.measuredTtftMs} ms, others from ${fastest})`,
      );
    } finally {
      await pool.stop();
    }
  });

  test('retries stop when the retry budget is spent', async () => {
    const pool = await startPool(
      [
        { name: 'x', flags: ['--error-rate', '1'] },
        { name: 'y', flags: ['--error-rate', '1'] },
      ],
      (urls) =>
        balancePool(
          urls,
          '  health: {minRequests: 1000, consecutiveErrors: 0}\n  retry: {budgetPercent: 0, minPerSecond: 0.2, maxAttempts: 3}',
          ['x', 'y'],
        ),
    );
    try {
      let retried = 0;
      for (let i = 0; i < 20; i++) {
        const res = await rawChat(pool.sidecar.url, hello());
        assert.equal(res.status, 500);
        if (res.headers.get('x-switchyard-attempts') !== '1') retried++;
      }
      const attempts =
        (await simStats(pool.sims[0]!)).requests + (await simStats(pool.sims[1]!)).requests;
      // 0.2 retries/s over the 10 s budget window: a reserve of 2 retries.
      assert.ok(attempts <= 20 + 2, `${attempts} attempts for 20 requests`);
      assert.ok(retried <= 2);
      const metrics = await (await fetch(`${pool.sidecar.adminUrl}/metrics`)).text();
      const exhausted = Number(
        /switchyard_retry_budget_exhausted_total\{[^}]*\} (\d+)/.exec(metrics)?.[1],
      );
      assert.ok(exhausted >= 18, `budget exhaustion counted ${exhausted} times`);
    } finally {
      await pool.stop();
    }
  });
});
