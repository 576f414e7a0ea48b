/**
 * The simulator's Responses, Messages, audio and scoring endpoints, in vLLM 0.32's shapes
 * (test/engine/fixtures/*.http), through the official `openai` client where it has them.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import OpenAI, { toFile } from 'openai';
import { startSim, type SimHandle } from '../server.ts';

async function withSims(
  count: number,
  fn: (sims: SimHandle[], clients: OpenAI[]) => Promise<void>,
): Promise<void> {
  const sims: SimHandle[] = [];
  try {
    for (let i = 0; i < count; i++) sims.push(await startSim({ speed: 20, model: 'tiny' }));
    await fn(
      sims,
      sims.map((s) => new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'x', maxRetries: 0 })),
    );
  } finally {
    for (const sim of sims) await sim.close();
  }
}

/** The JSON body of a captured vLLM answer. */
function fixtureBody(name: string): Record<string, unknown> {
  const text = readFileSync(
    new URL(`../../test/engine/fixtures/${name}.http`, import.meta.url),
    'utf8',
  );
  const answer = text.slice(text.indexOf('--- response'));
  return JSON.parse(answer.slice(answer.indexOf('\n{'))) as Record<string, unknown>;
}

const post = (url: string, body: unknown) =>
  fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });

test('a response has the fields of vLLM’s, and is kept for GET and previous_response_id on its own server only', async () => {
  await withSims(2, async ([a, b], [clientA, clientB]) => {
    const created = await clientA!.responses.create({
      model: 'tiny',
      input: 'hello there',
      max_output_tokens: 5,
    });
    const vllm = fixtureBody('responses');
    for (const key of Object.keys(created)) {
      if (key !== 'output_text') assert.ok(key in vllm, `vLLM has no ${key}`);
    }
    assert.equal(created.status, 'incomplete');
    assert.deepEqual(created.incomplete_details, { reason: 'max_output_tokens' });
    assert.equal((await clientA!.responses.retrieve(created.id)).id, created.id);
    const next = await clientA!.responses.create({
      model: 'tiny',
      input: 'and then?',
      previous_response_id: created.id,
      max_output_tokens: 2,
    });
    // The follow-up's prompt is the conversation so far.
    assert.ok((next.usage?.input_tokens ?? 0) > (created.usage?.input_tokens ?? 0));
    const notFound = await fetch(`${b!.url}/v1/responses/${created.id}`);
    assert.equal(notFound.status, 404);
    assert.deepEqual(await notFound.json(), {
      error: {
        message: `Response with id '${created.id}' not found.`,
        type: 'invalid_request_error',
        param: 'response_id',
        code: 404,
      },
    });
    await assert.rejects(
      clientB!.responses.create({ model: 'tiny', input: 'x', previous_response_id: created.id }),
      (err: unknown) => err instanceof OpenAI.NotFoundError,
    );
    const unstored = await clientA!.responses.create({ model: 'tiny', input: 'x', store: false });
    assert.equal((await fetch(`${a!.url}/v1/responses/${unstored.id}`)).status, 404);
  });
});

test('a streamed response sends vLLM’s events, numbered, and is stored when complete', async () => {
  await withSims(1, async ([sim], [client]) => {
    const stream = await client!.responses.create({
      model: 'tiny',
      input: 'hello there',
      max_output_tokens: 3,
      stream: true,
    });
    const types: string[] = [];
    const sequence: number[] = [];
    let id = '';
    for await (const event of stream) {
      types.push(event.type);
      sequence.push(event.sequence_number);
      if (event.type === 'response.completed') id = event.response.id;
    }
    assert.deepEqual(types, [
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.delta',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ]);
    assert.deepEqual(sequence, [...sequence.keys()]);
    assert.equal((await fetch(`${sim!.url}/v1/responses/${id}`)).status, 200);
    const cancel = await fetch(`${sim!.url}/v1/responses/${id}/cancel`, { method: 'POST' });
    assert.equal(cancel.status, 400);
  });
});

test('Messages answers in vLLM’s Anthropic shapes, streamed and not, and counts tokens', async () => {
  await withSims(1, async ([sim]) => {
    const message = {
      model: 'tiny',
      max_tokens: 3,
      messages: [{ role: 'user', content: 'hello there' }],
    };
    const whole = (await (await post(`${sim!.url}/v1/messages`, message)).json()) as Record<
      string,
      unknown
    >;
    assert.deepEqual(Object.keys(whole), Object.keys(fixtureBody('messages')));
    assert.equal(whole['stop_reason'], 'max_tokens');
    const streamed = await (
      await post(`${sim!.url}/v1/messages`, { ...message, stream: true })
    ).text();
    const events = [...streamed.matchAll(/^event: (\S+)$/gm)].map((m) => m[1]);
    assert.deepEqual(events, [
      'message_start',
      'content_block_start',
      'content_block_delta',
      'content_block_delta',
      'content_block_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    const counted = (await (
      await post(`${sim!.url}/v1/messages/count_tokens`, {
        model: 'tiny',
        messages: message.messages,
      })
    ).json()) as { input_tokens: number; context_management: { original_input_tokens: number } };
    assert.ok(counted.input_tokens > 0);
    assert.equal(counted.context_management.original_input_tokens, counted.input_tokens);
    const bad = await post(`${sim!.url}/v1/messages`, { model: 'tiny', messages: [] });
    assert.equal(bad.status, 400);
  });
});

test('audio uploads are transcribed as JSON or plain text, the same bytes to the same text', async () => {
  await withSims(1, async ([sim], [client]) => {
    const bytes = Buffer.alloc(64_000, 3);
    const json = await client!.audio.transcriptions.create({
      file: await toFile(bytes, 'a.wav'),
      model: 'tiny',
    });
    assert.ok(json.text.length > 0);
    const text = await client!.audio.transcriptions.create({
      file: await toFile(bytes, 'a.wav'),
      model: 'tiny',
      response_format: 'text',
    });
    assert.equal(text, json.text);
    const noFile = await fetch(`${sim!.url}/v1/audio/transcriptions`, {
      method: 'POST',
      body: (() => {
        const form = new FormData();
        form.set('model', 'tiny');
        return form;
      })(),
    });
    assert.equal(noFile.status, 400);
  });
});

test('rerank orders documents by a deterministic score; score scores each pair', async () => {
  await withSims(1, async ([sim]) => {
    const rerank = (await (
      await post(`${sim!.url}/v1/rerank`, { query: 'q', documents: ['a', 'b', 'c'], top_n: 2 })
    ).json()) as { results: { index: number; relevance_score: number }[] };
    assert.equal(rerank.results.length, 2);
    assert.ok(rerank.results[0]!.relevance_score >= rerank.results[1]!.relevance_score);
    const score = (await (
      await post(`${sim!.url}/score`, { text_1: 'q', text_2: 'a' })
    ).json()) as {
      data: { score: number }[];
    };
    assert.equal(score.data.length, 1);
    assert.equal((await post(`${sim!.url}/score`, { text_1: 1 })).status, 400);
  });
});
