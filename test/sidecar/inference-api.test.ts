/**
 * The whole inference API through a standalone sidecar, with the official clients (`openai` for
 * Responses and audio, `@anthropic-ai/sdk` for Messages) against real simulator processes:
 * streaming and not, stored responses that must stay on the endpoint that made them, multipart
 * uploads passed through byte for byte under the body limit, and the other vLLM paths.
 */
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI, { toFile } from 'openai';
import { balancePool, sidecarOn } from '../../harness/pool-file.ts';
import { startSim } from '../../harness/processes.ts';
import { debugBackends, eventually, startPool, type PoolFixture } from '../helpers.ts';

/** A request body's worth of pseudo-random bytes standing in for audio. */
const audio = (bytes: number, seed: number): Buffer => {
  const out = Buffer.alloc(bytes);
  let x = seed;
  for (let i = 0; i < bytes; i++) {
    x = (x * 1103515245 + 12345) >>> 0;
    out[i] = x >>> 24;
  }
  return out;
};

const BODY_LIMIT_BYTES = 256 * 1024;

interface ErrorBody {
  error: { code: string; message: string; type: string };
}

describe('the inference API through the sidecar, with the official clients', () => {
  let pool: PoolFixture;
  let anthropic: Anthropic;
  const backendOf = (response: Response) => response.headers.get('x-switchyard-backend') ?? '';

  before(async () => {
    pool = await startPool([{ name: 'a' }, { name: 'b' }], (urls) => balancePool(urls), [
      '--max-body-bytes',
      String(BODY_LIMIT_BYTES),
    ]);
    anthropic = new Anthropic({ baseURL: pool.sidecar.url, apiKey: 'client-key', maxRetries: 0 });
  });
  after(() => pool.stop());

  describe('Responses', () => {
    test('answers a response whole, from one of the endpoints', async () => {
      const { data, response } = await pool.client.responses
        .create({ model: 'm', input: 'Say something about rail yards.', max_output_tokens: 6 })
        .withResponse();
      assert.equal(data.object, 'response');
      assert.equal(data.usage?.output_tokens, 6);
      assert.ok(data.output_text.length > 0);
      assert.match(backendOf(response), /^(a|b)\//);
    });

    test('streams the named events unchanged, in order', async () => {
      const stream = await pool.client.responses.create({
        model: 'm',
        input: 'Count the switches.',
        max_output_tokens: 5,
        stream: true,
      });
      const types: string[] = [];
      let text = '';
      for await (const event of stream) {
        types.push(event.type);
        if (event.type === 'response.output_text.delta') text += event.delta;
      }
      assert.equal(types[0], 'response.created');
      assert.equal(types.at(-1), 'response.completed');
      assert.equal(types.filter((t) => t === 'response.output_text.delta').length, 5);
      assert.ok(text.length > 0);
    });

    test('previous_response_id and /v1/responses/{id} always reach the endpoint that made the response', async () => {
      // Each simulator keeps only its own responses, as vLLM does: anywhere else is a 404.
      const first = await pool.client.responses
        .create({ model: 'm', input: 'Start a story.', max_output_tokens: 3 })
        .withResponse();
      const home = backendOf(first.response);
      let previous = first.data.id;
      for (let turn = 0; turn < 6; turn++) {
        const streamed = turn % 2 === 1;
        if (streamed) {
          const { data: stream, response } = await pool.client.responses
            .create({
              model: 'm',
              input: `Turn ${turn}.`,
              previous_response_id: previous,
              max_output_tokens: 3,
              stream: true,
            })
            .withResponse();
          assert.equal(backendOf(response), home);
          for await (const event of stream) {
            if (event.type === 'response.created') previous = event.response.id;
          }
        } else {
          const { data, response } = await pool.client.responses
            .create({
              model: 'm',
              input: `Turn ${turn}.`,
              previous_response_id: previous,
              max_output_tokens: 3,
            })
            .withResponse();
          assert.equal(backendOf(response), home);
          assert.equal(data.previous_response_id, previous);
          previous = data.id;
        }
        const { data: stored, response } = await pool.client.responses
          .retrieve(previous)
          .withResponse();
        assert.equal(stored.id, previous);
        assert.equal(backendOf(response), home);
      }
      // Cancel reaches the home too: the simulator says the response is not a background one,
      // where any other endpoint would not know it at all.
      await assert.rejects(pool.client.responses.cancel(previous), (err: unknown) => {
        assert.ok(err instanceof OpenAI.BadRequestError, String(err));
        return true;
      });
    });

    test('an id this sidecar never saw is routed normally and gets the server answer', async () => {
      await assert.rejects(pool.client.responses.retrieve('resp_never_seen'), (err: unknown) => {
        assert.ok(err instanceof OpenAI.NotFoundError, String(err));
        assert.match(err.message, /resp_never_seen/);
        return true;
      });
    });
  });

  describe('Messages (Anthropic)', () => {
    test('answers a message whole', async () => {
      const { data, response } = await anthropic.messages
        .create({
          model: 'm',
          max_tokens: 5,
          system: 'You are terse.',
          messages: [{ role: 'user', content: 'hello there' }],
        })
        .withResponse();
      assert.equal(data.type, 'message');
      assert.equal(data.stop_reason, 'max_tokens');
      assert.equal(data.usage.output_tokens, 5);
      assert.equal(data.content[0]?.type, 'text');
      assert.match(response.headers.get('x-switchyard-backend') ?? '', /^(a|b)\//);
    });

    test('streams the named events unchanged', async () => {
      const stream = anthropic.messages.stream({
        model: 'm',
        max_tokens: 4,
        messages: [{ role: 'user', content: 'hello there' }],
      });
      const types: string[] = [];
      for await (const event of stream) types.push(event.type);
      const message = await stream.finalMessage();
      assert.equal(types[0], 'message_start');
      assert.equal(types.at(-1), 'message_stop');
      assert.equal(types.filter((t) => t === 'content_block_delta').length, 4);
      assert.equal(message.usage.output_tokens, 4);
      const text = message.content[0]?.type === 'text' ? message.content[0].text : '';
      assert.ok(text.length > 0);
    });

    test('counts tokens', async () => {
      const counted = await anthropic.messages.countTokens({
        model: 'm',
        messages: [{ role: 'user', content: 'hello there' }],
      });
      assert.ok(counted.input_tokens > 0);
    });

    test("one conversation's turns stay on one endpoint (affinity on system + messages)", async () => {
      const system = 'You are the dispatcher of a busy rail yard. '.repeat(4);
      for (const topic of ['signals', 'switches', 'sidings', 'turntables']) {
        const messages: Anthropic.MessageParam[] = [
          { role: 'user', content: `Tell me about ${topic} in a few words.` },
        ];
        const homes = new Set<string>();
        for (let turn = 0; turn < 3; turn++) {
          const { data, response } = await anthropic.messages
            .create({ model: 'm', max_tokens: 4, system, messages })
            .withResponse();
          homes.add(response.headers.get('x-switchyard-backend') ?? '');
          const text = data.content[0]?.type === 'text' ? data.content[0].text : '';
          messages.push({ role: 'assistant', content: text }, { role: 'user', content: 'More.' });
        }
        assert.equal(homes.size, 1, `${topic}: ${[...homes].join(', ')}`);
      }
    });
  });

  describe('audio uploads', () => {
    test('a transcription upload passes through byte for byte', async () => {
      const bytes = audio(100_000, 7);
      const through = await pool.client.audio.transcriptions.create({
        file: await toFile(bytes, 'clip.wav'),
        model: 'm',
      });
      // The simulator's transcript is a hash of the file's bytes: a direct upload of the same
      // bytes gets the same text only if the sidecar changed none of them.
      const direct = new OpenAI({ baseURL: `${pool.sims[0]!.url}/v1`, apiKey: 'x', maxRetries: 0 });
      const expected = await direct.audio.transcriptions.create({
        file: await toFile(bytes, 'clip.wav'),
        model: 'm',
      });
      assert.equal(through.text, expected.text);
      const other = await pool.client.audio.translations.create({
        file: await toFile(audio(100_000, 8), 'clip.wav'),
        model: 'm',
      });
      assert.notEqual(other.text, through.text);
    });

    test('an upload over the body limit is refused with a 413, declared or chunked', async () => {
      await assert.rejects(
        pool.client.audio.transcriptions.create({
          file: await toFile(audio(BODY_LIMIT_BYTES + 1, 1), 'long.wav'),
          model: 'm',
        }),
        (err: unknown) => {
          assert.ok(err instanceof OpenAI.APIError && err.status === 413, String(err));
          return true;
        },
      );
      // Chunked: no Content-Length, so the limit is found on the way.
      const answer = await new Promise<{
        status: number;
        body: string;
        connection: string | undefined;
      }>((resolve, reject) => {
        const req = http.request(`${pool.sidecar.url}/v1/audio/transcriptions`, {
          method: 'POST',
          headers: { 'content-type': 'multipart/form-data; boundary=x' },
        });
        req.on('error', reject);
        req.on('response', (res) => {
          let body = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => (body += c));
          res.on('end', () =>
            resolve({ status: res.statusCode ?? 0, body, connection: res.headers.connection }),
          );
        });
        const chunk = audio(64 * 1024, 2);
        let sent = 0;
        const write = (): void => {
          while (sent < BODY_LIMIT_BYTES * 2) {
            sent += chunk.length;
            if (!req.write(chunk)) {
              req.once('drain', write);
              return;
            }
          }
          req.end();
        };
        write();
      });
      assert.equal(answer.status, 413);
      assert.equal((JSON.parse(answer.body) as ErrorBody).error.code, 'body_too_large');
      // The rest of the body was read and dropped before the answer, so the connection need not
      // close (closing with the client's bytes unread can reset it before the 413 is read).
      assert.notEqual(answer.connection, 'close');
    });
  });

  test('rerank, score, tokenize and detokenize are balanced too', async () => {
    const post = (path: string, body: unknown) =>
      fetch(`${pool.sidecar.url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    for (const path of ['/v1/rerank', '/rerank', '/v2/rerank']) {
      const res = await post(path, { model: 'm', query: 'q', documents: ['a', 'b', 'c'] });
      assert.equal(res.status, 200, path);
      const body = (await res.json()) as { results: unknown[] };
      assert.equal(body.results.length, 3);
      assert.match(backendOf(res), /^(a|b)\//);
    }
    for (const path of ['/v1/score', '/score']) {
      const res = await post(path, { model: 'm', text_1: 'q', text_2: ['a', 'b'] });
      assert.equal(res.status, 200, path);
      assert.equal(((await res.json()) as { data: unknown[] }).data.length, 2);
    }
    const tokenized = await post('/tokenize', { prompt: 'hello there' });
    assert.equal(tokenized.status, 200);
    const { tokens } = (await tokenized.json()) as { tokens: number[] };
    assert.ok(tokens.length > 0);
    const detokenized = await post('/detokenize', { tokens });
    assert.equal(detokenized.status, 200);
  });

  test('an unknown path is still a 404 naming the known ones; a wrong method a 405', async () => {
    const unknown = await fetch(`${pool.sidecar.url}/v1/assistants`, { method: 'POST' });
    assert.equal(unknown.status, 404);
    const body = (await unknown.json()) as ErrorBody;
    assert.equal(body.error.code, 'unknown_url');
    assert.match(body.error.message, /\/v1\/responses/);
    assert.match(body.error.message, /\/v1\/messages/);
    const wrong = await fetch(`${pool.sidecar.url}/v1/messages`);
    assert.equal(wrong.status, 405);
    assert.equal(wrong.headers.get('allow'), 'POST');
  });

  // Last: it takes an endpoint out of the pool.
  test('a stored response whose endpoint has left the pool is a clear 409, not a 404 elsewhere', async () => {
    const { data, response } = await pool.client.responses
      .create({ model: 'm', input: 'Remember me.', max_output_tokens: 2 })
      .withResponse();
    const home = backendOf(response);
    const [a, b] = pool.sims;
    const keep = home.startsWith('a/') ? b! : a!;
    await writeFile(
      pool.poolFile,
      balancePool([keep.url], '', [home.startsWith('a/') ? 'b' : 'a']),
    );
    await eventually(
      async () => (await debugBackends(pool.sidecar)).endpoints.length === 1,
      10_000,
      'the pool file reload',
    );
    for (const attempt of [
      () => pool.client.responses.retrieve(data.id),
      () =>
        pool.client.responses.create({
          model: 'm',
          input: 'And then?',
          previous_response_id: data.id,
        }),
    ]) {
      await assert.rejects(attempt(), (err: unknown) => {
        assert.ok(err instanceof OpenAI.ConflictError, String(err));
        assert.equal(err.code, 'response_endpoint_gone');
        assert.ok(err.message.includes(data.id) && err.message.includes(home), err.message);
        return true;
      });
    }
  });
});

describe('a backend that reads its key from x-api-key', () => {
  test('gets the key there, and neither of the client credentials', async () => {
    const seen: http.IncomingHttpHeaders[] = [];
    const backend = http.createServer((req, res) => {
      if (req.method === 'GET' && req.url === '/metrics') {
        // The sidecar's load scrape: no metrics here, like a provider; not a request to check.
        res.writeHead(404).end();
        return;
      }
      seen.push(req.headers);
      req.resume();
      req.on('end', () => {
        const body = JSON.stringify({
          id: 'msg_1',
          type: 'message',
          role: 'assistant',
          content: [{ type: 'text', text: 'ok' }],
          model: 'm',
          stop_reason: 'end_turn',
          usage: { input_tokens: 1, output_tokens: 1 },
        });
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(body);
      });
    });
    await new Promise<void>((resolve) => backend.listen(0, '127.0.0.1', resolve));
    const { port } = backend.address() as AddressInfo;
    const KEY = 'sk-ant-test-1234';
    const running = await sidecarOn(
      balancePool([`http://127.0.0.1:${port}`]).replace(
        `url: http://127.0.0.1:${port}/v1}`,
        `url: http://127.0.0.1:${port}/v1, apiKeyEnv: PROVIDER_KEY, apiKeyHeader: x-api-key}`,
      ),
      [],
      { PROVIDER_KEY: KEY },
    );
    try {
      const client = new Anthropic({
        baseURL: running.sidecar.url,
        apiKey: 'client-key',
        defaultHeaders: { authorization: 'Bearer client-token' },
        maxRetries: 0,
      });
      const message = await client.messages.create({
        model: 'm',
        max_tokens: 1,
        messages: [{ role: 'user', content: 'hi' }],
      });
      assert.equal(message.type, 'message');
      assert.equal(seen[0]?.['x-api-key'], KEY);
      assert.equal(seen[0]?.authorization, undefined);
    } finally {
      await running.stop();
      await new Promise((resolve) => backend.close(resolve));
    }
  });
});

describe('an upload whose first endpoint refuses the connection', () => {
  test('is not retried elsewhere (its body is gone), where a JSON request is', async () => {
    // A port nothing listens on: bind one, note it, close it.
    const closed = http.createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const deadPort = (closed.address() as AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    const sim = await startSim('live');
    const running = await sidecarOn(
      [
        'apiVersion: switchyard.dev/v1alpha1',
        'kind: InferencePool',
        'metadata: {name: upload}',
        'spec:',
        '  mode: Failover',
        '  backends:',
        `  - {name: dead, url: 'http://127.0.0.1:${deadPort}/v1'}`,
        `  - {name: live, url: '${sim.url}/v1'}`,
        '',
      ].join('\n'),
    );
    try {
      const form = new FormData();
      form.set('model', 'm');
      form.set('file', new Blob([new Uint8Array(audio(10_000, 3))]), 'clip.wav');
      const upload = await fetch(`${running.sidecar.url}/v1/audio/transcriptions`, {
        method: 'POST',
        body: form,
      });
      assert.equal(upload.status, 502);
      assert.equal(upload.headers.get('x-switchyard-attempts'), '1');
      assert.equal(((await upload.json()) as ErrorBody).error.code, 'upstream_unreachable');
      const json = await fetch(`${running.sidecar.url}/v1/messages`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'm',
          max_tokens: 2,
          messages: [{ role: 'user', content: 'hi' }],
        }),
      });
      assert.equal(json.status, 200);
      assert.match(json.headers.get('x-switchyard-backend') ?? '', /^live\//);
    } finally {
      await running.stop();
      await sim.stop();
    }
  });
});
