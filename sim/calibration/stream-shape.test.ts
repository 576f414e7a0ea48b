import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { classifyEvent, parseSse, streamDiff, streamSequence } from './stream-shape.ts';

/** An OpenAI chat chunk's SSE event. */
function chunk(index: number, delta: Record<string, unknown>, finish: string | null = null) {
  const choice = { index, delta, logprobs: null, finish_reason: finish };
  return `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', choices: [choice] })}\n\n`;
}
const usage = `data: ${JSON.stringify({ id: 'c', choices: [], usage: { prompt_tokens: 1 } })}\n\n`;
const done = 'data: [DONE]\n\n';

/** vLLM's chat stream: a role chunk without text, the finish on the last content chunk. */
const VLLM_STREAM =
  chunk(0, { role: 'assistant', content: '' }) +
  chunk(0, { content: 'a' }) +
  chunk(0, { content: 'b' }) +
  chunk(0, { content: 'c' }, 'length') +
  usage +
  done;

describe('parseSse', () => {
  test('reads data and named events, with CRLF lines, several data lines and comments', () => {
    assert.deepEqual(
      parseSse(
        'event: x\r\ndata: {"a":1}\r\n\r\n: comment\n\ndata: one\ndata: two\n\ndata:[DONE]\n\n',
      ),
      [
        { event: 'x', data: '{"a":1}' },
        { event: undefined, data: 'one\ntwo' },
        { event: undefined, data: '[DONE]' },
      ],
    );
  });
});

describe('classifyEvent and streamSequence', () => {
  test('name each chunk by what it carries, a run of one kind once', () => {
    const events = parseSse(VLLM_STREAM).map(classifyEvent);
    assert.deepEqual(
      events.map((e) => `${e.lane}/${e.kind}`),
      ['0/role', '0/content', '0/content', '0/content+finish', '/usage', '/[DONE]'],
    );
    assert.deepEqual(streamSequence(events), [
      '0: role, content, content+finish',
      '-: usage, [DONE]',
    ]);
  });

  test('give each choice of an n > 1 stream its own lane, however they interleave', () => {
    const interleaved =
      chunk(0, { role: 'assistant', content: '' }) +
      chunk(1, { role: 'assistant', content: '' }) +
      chunk(1, { content: 'x' }, 'stop') +
      chunk(0, { content: 'y' }, 'stop') +
      done;
    assert.deepEqual(streamSequence(parseSse(interleaved).map(classifyEvent)), [
      '0: role, content+finish',
      '1: role, content+finish',
      '-: [DONE]',
    ]);
  });

  test('name completions chunks by their text, named events by their name', () => {
    const completion = `data: ${JSON.stringify({ choices: [{ index: 0, text: 't', finish_reason: null }] })}\n\n`;
    assert.equal(classifyEvent(parseSse(completion)[0]!).kind, 'content');
    const named = 'event: message_start\ndata: {"type":"message_start"}\n\n';
    assert.equal(classifyEvent(parseSse(named)[0]!).kind, 'message_start');
    assert.equal(classifyEvent({ event: undefined, data: '{' }).kind, 'unparsable data');
    assert.equal(classifyEvent({ event: undefined, data: '{"choices":[]}' }).kind, 'no choice');
    assert.equal(
      classifyEvent({ event: undefined, data: '{"choices":[1,2]}' }).kind,
      'many choices',
    );
    assert.equal(classifyEvent({ event: undefined, data: '{"x":1}' }).kind, 'data');
    assert.equal(
      classifyEvent({ event: undefined, data: '{"choices":[{"index":0,"delta":{}}]}' }).kind,
      'nothing',
    );
  });
});

describe('streamDiff', () => {
  test('finds nothing between two streams of the same shape and different lengths', () => {
    const shorter =
      chunk(0, { role: 'assistant', content: '' }) +
      chunk(0, { content: 'a' }) +
      chunk(0, { content: 'b' }, 'length') +
      usage +
      done;
    assert.deepEqual(streamDiff(VLLM_STREAM, shorter), []);
  });

  test('reports another sequence: text in the role chunk, a separate finish chunk', () => {
    const openAiStyle =
      chunk(0, { role: 'assistant', content: 'a' }) +
      chunk(0, { content: 'b' }) +
      chunk(0, {}, 'length') +
      usage +
      done;
    assert.deepEqual(streamDiff(VLLM_STREAM, openAiStyle), [
      {
        path: '<sequence>',
        kind: 'value',
        expected: '0: role, content, content+finish',
        actual: '0: role+content, content, finish',
      },
    ]);
  });

  test('reports a chunk kind whose keys differ once, however often it comes', () => {
    const extraKey = VLLM_STREAM.replaceAll(
      '"object":"chat.completion.chunk"',
      '"object":"chat.completion.chunk","usage":null',
    );
    const differences = streamDiff(VLLM_STREAM, extraKey);
    assert.deepEqual(
      differences.map((d) => `${d.path} ${d.kind}`),
      ['<role>.usage extra', '<content>.usage extra', '<content+finish>.usage extra'],
    );
  });

  test('compares the values it is told to inside chunks', () => {
    const other = VLLM_STREAM.replace('"length"', '"stop"');
    assert.deepEqual(
      streamDiff(VLLM_STREAM, other, { sameValue: new Set(['finish_reason']) }).map((d) => d.path),
      ['<content+finish>.choices[0].finish_reason'],
    );
  });

  test('reports a lane one stream lacks', () => {
    assert.deepEqual(
      streamDiff(VLLM_STREAM, done).map((d) => `${d.expected} | ${d.actual}`),
      ['0: role, content, content+finish | -: [DONE]', '-: usage, [DONE] | (no lane)'],
    );
  });
});
