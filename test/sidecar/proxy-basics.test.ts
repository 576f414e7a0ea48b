import assert from 'node:assert/strict';
import http from 'node:http';
import { gunzipSync } from 'node:zlib';
import { after, before, describe, test } from 'node:test';
import { balancePool } from '../../harness/pool-file.ts';
import { debugBackends, hello, rawChat, startPool, type PoolFixture } from '../helpers.ts';

describe('sidecar proxy, through real simulators with the openai client', () => {
  let pool: PoolFixture;
  before(async () => {
    pool = await startPool([{ name: 'a' }, { name: 'b' }], (urls) =>
      balancePool(urls, '  models: [m, other]'),
    );
  });
  after(() => pool.stop());

  test('answers a non-streaming chat completion and says which endpoint served it', async () => {
    const { data, response } = await pool.client.chat.completions
      .create({ model: 'm', max_tokens: 7, messages: [{ role: 'user', content: 'hi' }] })
      .withResponse();
    assert.equal(data.object, 'chat.completion');
    assert.equal(data.usage?.completion_tokens, 7);
    assert.match(response.headers.get('x-switchyard-backend') ?? '', /^(a|b)\//);
    assert.equal(response.headers.get('x-switchyard-attempts'), '1');
  });

  test('streams a chat completion chunk by chunk', async () => {
    const stream = await pool.client.chat.completions.create({
      model: 'm',
      max_tokens: 12,
      stream: true,
      messages: [{ role: 'user', content: 'count to twelve' }],
    });
    let chunks = 0;
    let text = '';
    for await (const chunk of stream) {
      chunks++;
      text += chunk.choices[0]?.delta?.content ?? '';
    }
    assert.ok(chunks >= 12, `expected one chunk per token, got ${chunks}`);
    assert.ok(text.length > 0);
  });

  test('serves completions and embeddings', async () => {
    const completion = await pool.client.completions.create({
      model: 'm',
      prompt: 'Once upon a time',
      max_tokens: 3,
    });
    assert.equal(completion.usage?.completion_tokens, 3);
    const embedding = await pool.client.embeddings.create({ model: 'm', input: 'vector me' });
    assert.ok(embedding.data[0]!.embedding.length > 0);
  });

  test('lists the pool models on /v1/models', async () => {
    const models = await pool.client.models.list();
    assert.deepEqual(
      models.data.map((m) => m.id),
      ['m', 'other'],
    );
  });

  test('rejects bad JSON with a 400 in OpenAI error shape', async () => {
    const res = await rawChat(pool.sidecar.url, '{"model": ');
    assert.equal(res.status, 400);
    const body = JSON.parse(res.text) as { error: { code: string; message: string; type: string } };
    assert.equal(body.error.code, 'invalid_json');
    assert.equal(body.error.type, 'invalid_request_error');
  });

  test('rejects a model the pool does not serve with a 404 naming it', async () => {
    const res = await rawChat(pool.sidecar.url, hello('gpt-nope'));
    assert.equal(res.status, 404);
    const body = JSON.parse(res.text) as { error: { code: string; message: string } };
    assert.equal(body.error.code, 'model_not_found');
    assert.match(body.error.message, /gpt-nope/);
  });

  test('rejects an oversized body with a 413 before reading it all', async () => {
    const res = await rawChat(pool.sidecar.url, {
      ...hello(),
      padding: 'x'.repeat(17 * 1024 * 1024),
    });
    assert.equal(res.status, 413);
    assert.equal(
      (JSON.parse(res.text) as { error: { code: string } }).error.code,
      'body_too_large',
    );
  });

  test('answers unknown paths and wrong methods in OpenAI error shape', async () => {
    const unknown = await fetch(`${pool.sidecar.url}/v1/files`);
    assert.equal(unknown.status, 404);
    assert.equal(((await unknown.json()) as { error: { code: string } }).error.code, 'unknown_url');
    const wrong = await fetch(`${pool.sidecar.url}/v1/chat/completions`);
    assert.equal(wrong.status, 405);
  });

  test('ignores a client attempt to choose the upstream host', async () => {
    const res = await rawChat(pool.sidecar.url, hello(), {
      host: 'evil.example',
      'x-forwarded-host': 'evil.example',
      'x-switchyard-backend': 'evil',
    });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('x-switchyard-backend') ?? '', /^(a|b)\/127\.0\.0\.1:/);
  });

  test('shows every endpoint on /debug/backends', async () => {
    const debug = await debugBackends(pool.sidecar);
    assert.equal(debug.pool, 'test');
    assert.equal(debug.mode, 'Balance');
    assert.equal(debug.snapshotVersion, 1);
    assert.equal(debug.endpoints.length, 2);
    for (const e of debug.endpoints) {
      assert.equal(e.breaker, 'closed');
      assert.equal(typeof e.ewmaTtftMs, 'number');
      assert.ok(e.ewmaTtftMs > 0);
      assert.ok(e.measuredTtftMs === null || e.measuredTtftMs > 0);
      assert.equal(typeof e.ttftSamples, 'number');
      // null before its first sample, else how long ago the newest came in.
      assert.equal(e.lastTtftSampleAgeMs === null, e.measuredTtftMs === null);
      assert.ok(e.lastTtftSampleAgeMs === null || e.lastTtftSampleAgeMs >= 0);
      // Its server's time per token next to the others', null until one is reported.
      assert.ok(e.reportedSlowdown === null || e.reportedSlowdown > 0);
      assert.equal(e.inFlight, 0);
      for (const key of [
        'id',
        'backend',
        'url',
        'requests',
        'errors',
        'rateLimited',
        'consecutiveErrors',
      ])
        assert.ok(key in e, key);
    }
  });

  test('exports Prometheus metrics without prompt text', async () => {
    await pool.client.chat.completions
      .create({
        model: 'm',
        max_tokens: 2,
        stream: true,
        messages: [{ role: 'user', content: 'SECRET-PROMPT-TEXT' }],
      })
      .then(async (s) => {
        for await (const _ of s);
      });
    const text = await (await fetch(`${pool.sidecar.adminUrl}/metrics`)).text();
    for (const name of [
      'switchyard_requests_total',
      'switchyard_ttft_seconds',
      'switchyard_inflight',
      'switchyard_breaker_state',
      'switchyard_retries_total',
      'switchyard_retry_budget_exhausted_total',
      'switchyard_shed_total',
      'switchyard_client_stalled_total',
      'switchyard_affinity_total',
      'switchyard_prefill_seconds_per_kib',
      'switchyard_slot_hold_seconds',
    ]) {
      assert.match(text, new RegExp(`^# TYPE ${name} `, 'm'), name);
    }
    assert.match(
      text,
      /switchyard_requests_total\{pool="test",backend="(a|b)",endpoint="[^"]+",code="2xx"\} [1-9]/,
    );
    assert.doesNotMatch(text, /SECRET-PROMPT-TEXT/);
    assert.doesNotMatch(text, /client-key/);
  });

  test('gzips /metrics for a scraper that accepts it (as Prometheus does), and only then', async () => {
    const get = (acceptEncoding?: string) =>
      new Promise<{ headers: http.IncomingHttpHeaders; body: Buffer }>((resolve, reject) => {
        const headers = acceptEncoding === undefined ? {} : { 'accept-encoding': acceptEncoding };
        http
          .get(`${pool.sidecar.adminUrl}/metrics`, { headers }, (res) => {
            const chunks: Buffer[] = [];
            res.on('data', (c: Buffer) => chunks.push(c));
            res.on('end', () => resolve({ headers: res.headers, body: Buffer.concat(chunks) }));
          })
          .on('error', reject);
      });
    // Both within the 1 s a render is reused: the same text, once compressed.
    const [plain, gzipped] = await Promise.all([get(), get('gzip')]);
    assert.equal(plain.headers['content-encoding'], undefined);
    assert.equal(gzipped.headers['content-encoding'], 'gzip');
    assert.equal(gzipped.headers['vary'], 'accept-encoding');
    assert.equal(Number(gzipped.headers['content-length']), gzipped.body.length);
    assert.match(plain.body.toString(), /^# TYPE switchyard_requests_total /m);
    assert.equal(gunzipSync(gzipped.body).toString(), plain.body.toString());
    assert.equal((await get('gzip;q=0')).headers['content-encoding'], undefined);
  });

  test('reports health and readiness', async () => {
    assert.equal((await fetch(`${pool.sidecar.adminUrl}/healthz`)).status, 200);
    assert.equal((await fetch(`${pool.sidecar.adminUrl}/readyz`)).status, 200);
    // A pool file is a configuration from the first moment: started at once.
    const startupz = await fetch(`${pool.sidecar.adminUrl}/startupz`);
    assert.deepEqual(
      [startupz.status, await startupz.json()],
      [200, { status: 'started', reason: 'configured' }],
    );
  });
});
