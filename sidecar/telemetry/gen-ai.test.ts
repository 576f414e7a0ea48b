import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { BodyTail, genAiOperation, tokenUsage } from './gen-ai.ts';

describe('genAiOperation', () => {
  test('names the GenAI operation of each inference path, and none of the others', () => {
    assert.equal(genAiOperation('/v1/chat/completions'), 'chat');
    assert.equal(genAiOperation('/v1/completions'), 'text_completion');
    assert.equal(genAiOperation('/v1/embeddings'), 'embeddings');
    assert.equal(genAiOperation('/v1/models'), undefined);
  });
});

describe('BodyTail', () => {
  test('keeps the last bytes of a body across chunks', () => {
    const tail = new BodyTail(8);
    for (const part of ['abc', 'defg', 'hijkl', 'mn']) tail.push(Buffer.from(part));
    assert.equal(tail.text(), 'ghijklmn');
  });

  test('cuts a single chunk longer than the limit', () => {
    const tail = new BodyTail(4);
    tail.push(Buffer.from('0123456789'));
    assert.equal(tail.text(), '6789');
  });

  test('gives the last bytes of a long body', () => {
    const tail = new BodyTail(16);
    let body = '';
    for (let i = 0; i < 10_000; i++) {
      const part = `chunk ${i};`;
      body += part;
      tail.push(Buffer.from(part));
    }
    assert.equal(tail.text(), body.slice(-16));
  });

  test('is empty before any chunk', () => {
    assert.equal(new BodyTail().text(), '');
  });
});

describe('tokenUsage', () => {
  test('reads a non-streamed chat answer’s usage', () => {
    const body = JSON.stringify({
      choices: [{ message: { content: 'hi' } }],
      usage: {
        prompt_tokens: 12,
        completion_tokens: 7,
        total_tokens: 19,
        prompt_tokens_details: null,
      },
    });
    assert.deepEqual(tokenUsage(body), { inputTokens: 12, outputTokens: 7 });
  });

  test('reads the final usage chunk of a stream', () => {
    const sse =
      'data: {"choices":[{"delta":{"content":"x"}}],"usage":null}\n\n' +
      'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":18,"total_tokens":21}}\n\n' +
      'data: [DONE]\n\n';
    assert.deepEqual(tokenUsage(sse), { inputTokens: 3, outputTokens: 18 });
  });

  test('reads Responses and Messages style input_tokens and output_tokens', () => {
    const body = '{"usage":{"input_tokens":40,"output_tokens":2,"total_tokens":42}}';
    assert.deepEqual(tokenUsage(body), { inputTokens: 40, outputTokens: 2 });
  });

  test('reads embeddings usage, which has no output tokens', () => {
    assert.deepEqual(tokenUsage('{"usage":{"prompt_tokens":5,"total_tokens":5}}'), {
      inputTokens: 5,
    });
  });

  test('takes no number from generated text that mentions the keys', () => {
    const body = JSON.stringify({ choices: [{ message: { content: '{"prompt_tokens": 99}' } }] });
    assert.deepEqual(tokenUsage(body), {});
  });

  test('finds nothing in a body without usage', () => {
    assert.deepEqual(tokenUsage('data: [DONE]\n\n'), {});
  });
});
