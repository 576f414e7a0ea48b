import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { PoolPolicy } from '../../crds/policy-types.ts';
import {
  countsTokens,
  HOLD_MAX_BYTES,
  readsUsage,
  tokensOf,
  UsageChunkFilter,
  UsageScanner,
  USAGE_OBJECT_MAX_BYTES,
  withUsageAsked,
} from './usage.ts';

const chunk = (id: number, text: string, extra = ''): string =>
  `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":${JSON.stringify(text)}},"logprobs":null,"finish_reason":null}]${extra}}\n\n`;

const USAGE_CHUNK =
  'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":12,"total_tokens":19,"completion_tokens":7}}\n\n';

/** A vLLM stream with `include_usage`: content, the usage chunk, `[DONE]`. */
const VLLM_STREAM = [
  chunk(0, 'Hello'),
  chunk(1, ' "usage": {"x":1} wor'),
  chunk(2, 'ld\n\n!'),
  USAGE_CHUNK,
  'data: [DONE]\n\n',
];

/** OpenAI's shape: `"usage": null` in every chunk, then the usage chunk. */
const OPENAI_STREAM = [
  chunk(0, 'Hi', ',"usage":null'),
  chunk(1, ' there', ',"usage":null'),
  'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,"prompt_tokens_details":{"cached_tokens":0}}}\n\n',
  'data: [DONE]\n\n',
];

const crlf = (events: string[]): string[] => events.map((e) => e.replace(/\n/g, '\r\n'));

function scanTokens(chunks: readonly Buffer[]): number | undefined {
  const scanner = new UsageScanner();
  for (const c of chunks) scanner.feed(c);
  return scanner.tokens;
}

/** Runs the filter over `chunks`; checks that no complete event waits; returns what it passed. */
function filtered(chunks: readonly Buffer[], expected: string): string {
  const filter = new UsageChunkFilter();
  const out: Buffer[] = [];
  let input = '';
  for (const c of chunks) {
    input += c.toString('latin1');
    out.push(filter.feed(c));
    const sent = Buffer.concat(out).toString('latin1');
    assert.ok(expected.startsWith(sent), `passed more than the answer: ${JSON.stringify(sent)}`);
    // Every complete event in so far (but the usage chunk) has gone on.
    const complete = input.slice(0, lastBoundary(input));
    const due = complete.split(/(?<=\n\r?\n)/).filter((e) => !e.includes('"choices":[],"usage":{'));
    assert.ok(
      sent.length >= due.join('').length,
      `held a complete event: sent ${JSON.stringify(sent)} of ${JSON.stringify(input)}`,
    );
  }
  out.push(filter.flush());
  return Buffer.concat(out).toString('latin1');
}

function lastBoundary(text: string): number {
  let end = 0;
  for (const m of text.matchAll(/\n\r?\n/g)) end = m.index + m[0].length;
  return end;
}

function splitAt(text: string, ...at: number[]): Buffer[] {
  const bytes = Buffer.from(text);
  const cuts = [0, ...at, bytes.length];
  return cuts.slice(1).map((end, i) => bytes.subarray(cuts[i], end));
}

describe('tokensOf', () => {
  test('total, else prompt + completion, else input + output', () => {
    assert.equal(tokensOf({ prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 }), 7);
    assert.equal(tokensOf({ prompt_tokens: 3, completion_tokens: 4 }), 7);
    assert.equal(tokensOf({ input_tokens: 5, output_tokens: 6 }), 11);
    assert.equal(tokensOf({ prompt_tokens: 9 }), 9);
    assert.equal(tokensOf({ prompt_tokens: 9, completion_tokens: null }), undefined);
    assert.equal(tokensOf({ total_tokens: -1 }), undefined);
    assert.equal(tokensOf(null), undefined);
    assert.equal(tokensOf(3), undefined);
  });
});

describe('countsTokens, readsUsage, withUsageAsked', () => {
  const policy = (flowControl: unknown): PoolPolicy => ({ flowControl }) as unknown as PoolPolicy;
  test('a pool counts tokens only with a tokensPerMinute budget', () => {
    assert.equal(countsTokens(policy(undefined)), false);
    assert.equal(countsTokens(policy({ budgets: [] })), false);
    assert.equal(countsTokens(policy({ budgets: [{ id: 'pool', requestsPerMinute: 5 }] })), false);
    assert.equal(
      countsTokens(
        policy({
          budgets: [
            { id: 'pool', requestsPerMinute: 5 },
            { id: 'w', tokensPerMinute: 9 },
          ],
        }),
      ),
      true,
    );
  });

  test('reads chat, completions, responses and embeddings, not messages', () => {
    for (const path of [
      '/v1/chat/completions',
      '/v1/completions',
      '/v1/responses',
      '/v1/embeddings',
    ])
      assert.equal(readsUsage(path), true, path);
    assert.equal(readsUsage('/v1/messages'), false);
  });

  test('asks for usage on streamed chat and completions that did not', () => {
    assert.deepEqual(withUsageAsked('/v1/chat/completions', { stream: true, model: 'm' }), {
      stream: true,
      model: 'm',
      stream_options: { include_usage: true },
    });
    assert.deepEqual(
      withUsageAsked('/v1/completions', {
        stream: true,
        stream_options: { include_usage: false, continuous_usage_stats: false },
      }),
      { stream: true, stream_options: { include_usage: true, continuous_usage_stats: false } },
    );
    assert.deepEqual(withUsageAsked('/v1/completions', { stream: true, stream_options: null }), {
      stream: true,
      stream_options: { include_usage: true },
    });
  });

  test('leaves the body alone otherwise', () => {
    const asked = { stream: true, stream_options: { include_usage: true } };
    assert.equal(withUsageAsked('/v1/chat/completions', asked), undefined);
    assert.equal(withUsageAsked('/v1/chat/completions', { stream: false }), undefined);
    assert.equal(withUsageAsked('/v1/chat/completions', {}), undefined);
    assert.equal(withUsageAsked('/v1/responses', { stream: true }), undefined);
    assert.equal(withUsageAsked('/v1/chat/completions', { stream: 'yes' }), undefined);
    for (const odd of ['x', [], 3])
      assert.equal(
        withUsageAsked('/v1/completions', { stream: true, stream_options: odd }),
        undefined,
      );
  });
});

describe('UsageScanner', () => {
  test('a vLLM stream: the usage chunk, split at every byte position', () => {
    const text = VLLM_STREAM.join('');
    for (let at = 0; at <= Buffer.byteLength(text); at++)
      assert.equal(scanTokens(splitAt(text, at)), 19, `split at ${at}`);
  });

  test("one byte at a time, CRLF, and OpenAI's nulls", () => {
    for (const events of [VLLM_STREAM, crlf(VLLM_STREAM), OPENAI_STREAM]) {
      const text = events.join('');
      const bytes = Buffer.from(text);
      const ones = [...bytes].map((b) => Buffer.from([b]));
      const expected = events === OPENAI_STREAM ? 5 : 19;
      assert.equal(scanTokens(ones), expected);
      assert.equal(scanTokens([bytes]), expected);
    }
  });

  test('usage in every chunk: the last', () => {
    const events = [1, 2, 3].map((n) =>
      chunk(
        n,
        'x',
        `,"usage":{"prompt_tokens":4,"completion_tokens":${n},"total_tokens":${4 + n}}`,
      ),
    );
    assert.equal(scanTokens([Buffer.from(events.join(''))]), 7);
  });

  test('no usage: undefined', () => {
    assert.equal(scanTokens([Buffer.from(chunk(0, 'a') + 'data: [DONE]\n\n')]), undefined);
    assert.equal(
      scanTokens([Buffer.from('{"usage":null,"x":"\\"usage\\": {\\"total_tokens\\":3}"}')]),
      undefined,
    );
  });

  test('a Responses stream: response.completed', () => {
    const text =
      'event: response.created\ndata: {"type":"response.created","response":{"id":"resp_1","usage":null}}\n\n' +
      'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":"usage"}\n\n' +
      'event: response.completed\ndata: {"type":"response.completed","response":{"id":"resp_1","usage":{"input_tokens":8,"input_tokens_details":{"cached_tokens":0},"output_tokens":5,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":13}}}\n\n';
    for (let at = 0; at <= text.length; at += 7) assert.equal(scanTokens(splitAt(text, at)), 13);
  });

  test('a huge JSON answer, its usage before megabytes of prompt_logprobs or at its end', () => {
    const logprobs = JSON.stringify(
      Array.from({ length: 60_000 }, (_, i) => ({ [i]: { logprob: -1.5 } })),
    );
    const before = Buffer.from(
      `{"id":"c","choices":[{"message":{"content":"ok"}}],"usage":{"prompt_tokens":60000,"completion_tokens":1,"total_tokens":60001},"prompt_logprobs":${logprobs}}`,
    );
    const after = Buffer.from(
      `{"id":"c","choices":[{"message":{"content":${JSON.stringify('y'.repeat(3_000_000))}}}],"usage":{"prompt_tokens":2,"completion_tokens":3}}`,
    );
    for (const body of [before, after]) {
      const pieces: Buffer[] = [];
      for (let i = 0; i < body.length; i += 65_536) pieces.push(body.subarray(i, i + 65_536));
      assert.ok(body.length > 1_000_000);
      assert.equal(scanTokens(pieces), body === before ? 60001 : 5);
    }
  });

  test('skips an object too long to be a usage, and finds the next', () => {
    const long = `{"usage":{"note":"${'z'.repeat(USAGE_OBJECT_MAX_BYTES)}"},"x":{"usage":{"total_tokens":4}}}`;
    assert.equal(scanTokens([Buffer.from(long)]), 4);
  });

  test('a key not followed by an object, or broken JSON, counts nothing', () => {
    assert.equal(scanTokens([Buffer.from('{"usage" x {"total_tokens":1}}')]), undefined);
    assert.equal(scanTokens([Buffer.from('{"usage" : \n {"total_tokens":1,}}')]), undefined);
    assert.equal(scanTokens([Buffer.from('"usag'), Buffer.from('x"usage":{"total_tokens":2}')]), 2);
  });
});

describe('UsageChunkFilter', () => {
  const without = (events: string[]): string =>
    events.filter((e) => !e.includes('"choices":[],"usage"')).join('');

  test('drops the usage chunk, split at every byte position (LF and CRLF)', () => {
    for (const events of [VLLM_STREAM, crlf(VLLM_STREAM), OPENAI_STREAM]) {
      const text = events.join('');
      const expected = without(events);
      assert.notEqual(expected, text);
      const n = Buffer.byteLength(text);
      for (let at = 0; at <= n; at++)
        assert.equal(filtered(splitAt(text, at), expected), expected, `split at ${at}`);
      for (let at = 0; at + 5 <= n; at += 3)
        assert.equal(filtered(splitAt(text, at, at + 5), expected), expected, `split at ${at}+5`);
    }
  });

  test('one byte at a time', () => {
    const text = crlf(OPENAI_STREAM).join('');
    const ones = [...Buffer.from(text)].map((b) => Buffer.from([b]));
    assert.equal(filtered(ones, without(crlf(OPENAI_STREAM))), without(crlf(OPENAI_STREAM)));
  });

  test('a chunk of whole events other than the usage one passes as the same buffer', () => {
    const filter = new UsageChunkFilter();
    const c = Buffer.from(chunk(0, 'a') + chunk(1, 'b'));
    assert.equal(filter.feed(c), c);
  });

  test('usage in every chunk: chunks with a choice stay', () => {
    const events = [1, 2].map((n) =>
      chunk(
        n,
        'x',
        `,"usage":{"prompt_tokens":4,"completion_tokens":${n},"total_tokens":${4 + n}}`,
      ),
    );
    const text = [...events, USAGE_CHUNK, 'data: [DONE]\n\n'].join('');
    const expected = [...events, 'data: [DONE]\n\n'].join('');
    assert.equal(filtered([Buffer.from(text)], expected), expected);
  });

  test('no usage chunk: everything, unchanged', () => {
    const text =
      chunk(0, 'a') +
      ': comment\n\n' +
      'data: {"choices":[],"usage":null}\n\n' +
      'data: [DONE]\n\n';
    assert.equal(filtered(splitAt(text, 10, 50, 90), text), text);
  });

  test('a long event is passed on without being held whole', () => {
    const big = chunk(0, 'q'.repeat(HOLD_MAX_BYTES * 3));
    const filter = new UsageChunkFilter();
    const bytes = Buffer.from(big + USAGE_CHUNK);
    let sent = 0;
    for (let i = 0; i < bytes.length; i += 1000) {
      sent += filter.feed(bytes.subarray(i, Math.min(i + 1000, bytes.length))).length;
      // An event with a choice is never the usage chunk: at most its last bytes wait.
      if (i + 1000 < big.length) assert.ok(sent >= i + 1000 - 2, `held ${i + 1000 - sent} bytes`);
    }
    sent += filter.flush().length;
    assert.equal(sent, Buffer.byteLength(big));
  });

  test('an incomplete event with no choice yet is held until it ends, past the limit passed', () => {
    const filter = new UsageChunkFilter();
    assert.equal(filter.feed(Buffer.from('data: {"id":"x"')).length, 0);
    assert.equal(
      filter.feed(Buffer.from(',"pad":"' + 'p'.repeat(HOLD_MAX_BYTES))).length > HOLD_MAX_BYTES,
      true,
    );
    assert.equal(filter.feed(Buffer.from('"}\n\n')).toString(), '"}\n\n');
    assert.equal(filter.flush().length, 0);
  });

  test('a stream that ends inside an event: the held bytes come out at the end', () => {
    const filter = new UsageChunkFilter();
    assert.equal(filter.feed(Buffer.from('data: {"choices":[]')).length, 0);
    assert.equal(filter.flush().toString(), 'data: {"choices":[]');
  });

  test('a usage-only event that is not JSON, or has no data, stays', () => {
    const text =
      'data: {"choices":[],"usage":{"total_tokens":1}\n\nevent: x\n: "choices":[] "usage"\n\n';
    assert.equal(filtered([Buffer.from(text)], text), text);
  });
});
