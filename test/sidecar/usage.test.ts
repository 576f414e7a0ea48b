/**
 * Token usage through a standalone sidecar whose pool charges tokens (flow control with a
 * `tokensPerMinute` budget), in front of a real simulator, with the official `openai` client:
 * the sidecar asks streamed chat and completions for their usage, hides the usage chunk from a
 * client that did not ask for it, leaves it to one that did, and learns the tokens of every
 * answer: its debug log line `exchange over: tokens used` says them, and the pool's budget in
 * `/debug/flow` is charged them (the flow gate settles the request's ticket with them).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { eventually, getJson, startPool, type PoolFixture } from '../helpers.ts';

/** One simulator serving `m` (also asked for as `fast`, an alias), and a token budget. */
const POOL = (url: string): string =>
  [
    'apiVersion: switchyard.dev/v1alpha1',
    'kind: InferencePool',
    'metadata: {name: test}',
    'spec:',
    '  mode: Balance',
    '  aliases: [{name: fast, model: m}]',
    `  backends: [{name: a, url: ${url}/v1, models: [m]}]`,
    '  flowControl:',
    '    budgets:',
    '    - {tokensPerMinute: 1000000}',
    '',
  ].join('\n');

interface TokensLine {
  msg: string;
  path: string;
  tokens: number | null;
}

interface DebugFlow {
  pools: { budgets: { id: string; used: { requests: number; tokens: number } }[] }[];
}

describe('token usage through a pool with a token budget', () => {
  let pool: PoolFixture;
  let seen = 0;
  /** The tokens the pool's budget had been charged at the last look. */
  let charged = 0;

  /** Tokens the pool's budget was charged over the last minute, from `/debug/flow`. */
  async function budgetUsed(): Promise<number> {
    const flow = await getJson<DebugFlow>(`${pool.sidecar.adminUrl}/debug/flow`);
    const budget = flow.pools[0]?.budgets.find((b) => b.id === 'pool');
    assert.ok(budget !== undefined, `no pool budget in /debug/flow: ${JSON.stringify(flow)}`);
    return budget.used.tokens;
  }

  /** The `tokens used` log lines written since the last call: one per exchange that ended. */
  async function tokensLogged(count: number): Promise<TokensLine[]> {
    let lines: TokensLine[] = [];
    await eventually(
      () => {
        lines = pool.sidecar
          .output()
          .split('\n')
          .filter((l) => l.includes('"exchange over: tokens used"'))
          .map((l) => JSON.parse(l) as TokensLine);
        return lines.length >= seen + count;
      },
      10_000,
      `${count} "tokens used" log line(s)`,
    );
    const fresh = lines.slice(seen);
    seen = lines.length;
    // The budget was charged what the answers used (settled as the line was logged); an answer
    // without usage is charged its estimate instead.
    const used = await budgetUsed();
    if (fresh.every((l) => l.tokens !== null)) {
      const sum = fresh.reduce((n, l) => n + (l.tokens ?? 0), 0);
      assert.equal(used - charged, sum, 'the budget was charged the tokens used');
    } else assert.ok(used > charged, 'an answer without usage is charged its estimate');
    charged = used;
    return fresh;
  }

  before(async () => {
    pool = await startPool([{ name: 'a' }], (urls) => POOL(urls[0]!), ['--log-level', 'debug']);
  });
  after(() => pool.stop());

  const messages = [{ role: 'user' as const, content: 'Tell me about rail yards.' }];

  test('a chat stream that did not ask: no usage chunk, all content; the sidecar counts it', async () => {
    const asked = await pool.client.chat.completions.create({
      model: 'm',
      messages,
      max_tokens: 6,
      stream: true,
      stream_options: { include_usage: true },
    });
    let askedText = '';
    let usage: { total_tokens: number } | undefined;
    let usageChunks = 0;
    for await (const chunk of asked) {
      askedText += chunk.choices[0]?.delta.content ?? '';
      if (chunk.usage) {
        usage = chunk.usage;
        usageChunks++;
        assert.deepEqual(chunk.choices, []);
      }
    }
    assert.equal(usageChunks, 1, 'a client that asked sees the usage chunk');
    assert.ok(usage !== undefined && usage.total_tokens > 6);
    assert.deepEqual(
      (await tokensLogged(1)).map((l) => [l.path, l.tokens]),
      [['/v1/chat/completions', usage.total_tokens]],
    );

    const plain = await pool.client.chat.completions.create({
      model: 'm',
      messages,
      max_tokens: 6,
      stream: true,
    });
    let text = '';
    let finished = false;
    for await (const chunk of plain) {
      assert.ok(chunk.choices.length > 0, `a chunk without a choice: ${JSON.stringify(chunk)}`);
      assert.ok(!chunk.usage, `usage shown to a client that did not ask: ${JSON.stringify(chunk)}`);
      text += chunk.choices[0]?.delta.content ?? '';
      if (chunk.choices[0]?.finish_reason) finished = true;
    }
    assert.ok(finished);
    assert.equal(text, askedText, 'the same answer, every token of it');
    assert.deepEqual(
      (await tokensLogged(1)).map((l) => l.tokens),
      [usage.total_tokens],
    );
  });

  test('the raw stream: events intact, [DONE] last, no usage anywhere', async () => {
    const res = await fetch(`${pool.sidecar.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', prompt: 'Rail yards', max_tokens: 4, stream: true }),
    });
    assert.equal(res.status, 200);
    const text = await res.text();
    const events = text.split('\n\n');
    assert.equal(events.pop(), '', 'the stream ends with a blank line');
    assert.equal(events.at(-1), 'data: [DONE]');
    for (const event of events.slice(0, -1)) {
      assert.match(event, /^data: \{/);
      const parsed = JSON.parse(event.slice(6)) as { choices: unknown[]; usage?: unknown };
      assert.equal(parsed.choices.length, 1);
      assert.ok(parsed.usage === undefined || parsed.usage === null);
    }
    const [line] = await tokensLogged(1);
    assert.equal(line?.path, '/v1/completions');
    assert.ok(typeof line.tokens === 'number' && line.tokens > 4);
  });

  test('through an alias: one rewrite, with the served model and the usage asked for', async () => {
    const { data: stream, response } = await pool.client.chat.completions
      .create({ model: 'fast', messages, max_tokens: 3, stream: true })
      .withResponse();
    assert.match(response.headers.get('x-switchyard-backend') ?? '', /^a\/.*m/);
    let chunks = 0;
    for await (const chunk of stream) {
      assert.equal(chunk.model, 'm');
      assert.ok(!chunk.usage);
      chunks++;
    }
    assert.ok(chunks >= 3);
    const [line] = await tokensLogged(1);
    assert.ok(typeof line?.tokens === 'number' && line.tokens > 3);
  });

  test('a non-streamed answer: unchanged, its usage counted', async () => {
    const answer = await pool.client.chat.completions.create({
      model: 'm',
      messages,
      max_tokens: 5,
    });
    assert.ok(answer.usage !== undefined);
    assert.equal(answer.usage.completion_tokens, 5);
    assert.deepEqual(
      (await tokensLogged(1)).map((l) => l.tokens),
      [answer.usage.total_tokens],
    );
  });

  test('a Responses stream: its events unchanged, response.completed counted', async () => {
    const stream = await pool.client.responses.create({
      model: 'm',
      input: 'Say something about rail yards.',
      max_output_tokens: 5,
      stream: true,
    });
    let total: number | undefined;
    for await (const event of stream) {
      if (event.type === 'response.completed') total = event.response.usage?.total_tokens;
    }
    assert.ok(total !== undefined);
    assert.deepEqual(
      (await tokensLogged(1)).map((l) => [l.path, l.tokens]),
      [['/v1/responses', total]],
    );
  });

  test('a client that leaves mid-stream: the exchange still ends, without tokens', async () => {
    const controller = new AbortController();
    const res = await fetch(`${pool.sidecar.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', messages, max_tokens: 400, stream: true }),
      signal: controller.signal,
    });
    const reader = res.body!.getReader();
    await reader.read();
    controller.abort();
    await reader.read().catch(() => undefined);
    assert.deepEqual(
      (await tokensLogged(1)).map((l) => l.tokens),
      [null],
    );
  });
});
