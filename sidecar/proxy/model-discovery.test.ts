import assert from 'node:assert/strict';
import http from 'node:http';
import https from 'node:https';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, test } from 'node:test';
import { makeServingTls } from '../../harness/tls.ts';
import type { EndpointSpec, ServedModel } from '../policy/index.ts';
import type { ActivePool } from '../config/active-pool.ts';
import {
  fetchModelList,
  isDiscovered,
  MAX_MODEL_LIST_BYTES,
  MAX_MODELS_PER_ENDPOINT,
  modelsUrl,
  servedModels,
  startModelDiscovery,
  type ActivePoolLike,
  type FetchModels,
  type ModelListOutcome,
} from './model-discovery.ts';

/** vLLM's answer with one LoRA adapter loaded (the shape of test/engine/fixtures/models.http). */
const VLLM_LIST = JSON.stringify({
  object: 'list',
  data: [
    { id: 'tiny', object: 'model', owned_by: 'vllm', root: '/models/tiny', parent: null },
    { id: 'tiny-sql', object: 'model', owned_by: 'vllm', root: '/adapters/sql', parent: 'tiny' },
  ],
});
const VLLM_MODELS: ServedModel[] = [{ id: 'tiny' }, { id: 'tiny-sql', parent: 'tiny' }];

function endpoint(id: string, url: string, extra: Partial<EndpointSpec> = {}): EndpointSpec {
  return { id, backend: id.split('/')[0] ?? id, tier: 0, url, costPerMTok: 0, ...extra };
}

/** A pool whose balancer records what it is told. */
function pool(name: string, endpoints: EndpointSpec[]) {
  const reports: [string, readonly ServedModel[]][] = [];
  const p: ActivePoolLike & { endpoints: EndpointSpec[] } = {
    name,
    endpoints,
    balancer: { reportModels: (id, models) => void reports.push([id, models]) },
  };
  return { pool: p, reports };
}

function recordingLogger() {
  const lines: { level: 'warn' | 'info'; fields: Record<string, unknown>; msg: string }[] = [];
  return {
    lines,
    logger: {
      warn: (fields: Record<string, unknown>, msg: string) =>
        void lines.push({ level: 'warn', fields, msg }),
      info: (fields: Record<string, unknown>, msg: string) =>
        void lines.push({ level: 'info', fields, msg }),
    } as never,
  };
}

async function waitFor(what: string, cond: () => boolean, ms = 3000): Promise<void> {
  const until = performance.now() + ms;
  while (!cond()) {
    if (performance.now() > until) assert.fail(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

describe('servedModels', () => {
  test("reads vLLM's list: the base model, and adapters with their parent", () => {
    assert.deepEqual(servedModels(VLLM_LIST), VLLM_MODELS);
  });

  test('reads any OpenAI list; a parent that is the model itself is none', () => {
    assert.deepEqual(
      servedModels('{"data":[{"id":"gpt-4o"},{"id":"a","parent":"a"},{"id":"b","parent":""}]}'),
      [{ id: 'gpt-4o' }, { id: 'a' }, { id: 'b' }],
    );
    assert.deepEqual(servedModels('{"object":"list","data":[]}'), []);
  });

  test('skips entries without a string id, and counts a duplicate once', () => {
    assert.deepEqual(
      servedModels(
        '{"data":[null,1,{"id":5},{"id":""},{"name":"x"},{"id":"m"},{"id":"m","parent":"z"}]}',
      ),
      [{ id: 'm' }],
    );
  });

  test('refuses what is not a model list', () => {
    for (const body of ['', 'not json', '[]', '{"data":{}}', '{"models":[]}', 'null', '"x"'])
      assert.equal(servedModels(body), undefined, body);
    const many = JSON.stringify({
      data: Array.from({ length: MAX_MODELS_PER_ENDPOINT + 1 }, (_, i) => ({ id: `m${i}` })),
    });
    assert.equal(servedModels(many), undefined);
  });
});

describe('which endpoints are asked, and where', () => {
  test('a pool in force is what discovery follows, as it is', () => {
    // Compiles: the sidecar passes its ActivePool objects without adapting them.
    const follow = (pools: readonly ActivePool[]): readonly ActivePoolLike[] => pools;
    assert.deepEqual(follow([]), []);
  });

  test('only those that declare no models and whose backend does not rewrite the model', () => {
    assert.equal(isDiscovered(endpoint('a/1', 'http://h/v1')), true);
    assert.equal(isDiscovered(endpoint('a/1', 'http://h/v1', { models: ['m'] })), false);
    assert.equal(isDiscovered(endpoint('a/1', 'http://h/v1', { models: [] })), false);
    assert.equal(isDiscovered(endpoint('a/1', 'http://h/v1', { model: 'gpt-4o' })), false);
  });

  test('the URL a proxied GET /v1/models goes to', () => {
    assert.equal(modelsUrl('http://10.0.0.7:8000/v1'), 'http://10.0.0.7:8000/v1/models');
    assert.equal(modelsUrl('https://host/openai/v1'), 'https://host/openai/v1/models');
  });
});

describe('fetchModelList (against a local server)', () => {
  let server: http.Server;
  let base = '';
  const seen: { path: string; headers: http.IncomingHttpHeaders }[] = [];

  before(async () => {
    server = http.createServer((req, res) => {
      seen.push({ path: req.url ?? '', headers: req.headers });
      const json = (body: string, status = 200): void => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(body);
      };
      switch (req.url) {
        case '/vllm/v1/models':
          return json(VLLM_LIST);
        case '/gone/v1/models':
          return json('{"detail":"Not Found"}', 404);
        case '/html/v1/models':
          res.end('<html>hello</html>');
          return;
        case '/huge/v1/models':
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(' '.repeat(MAX_MODEL_LIST_BYTES + 1));
          return;
        case '/moved/v1/models':
          res.writeHead(302, { location: '/vllm/v1/models' });
          res.end();
          return;
        case '/stall/v1/models':
          return; // never answers
      }
      json('{}', 404);
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => {
    server.closeAllConnections();
    server.close();
  });

  const fetchFrom = (
    path: string,
    extra: Partial<EndpointSpec> = {},
    timeoutMs = 2000,
    signal = new AbortController().signal,
  ): Promise<ModelListOutcome> =>
    fetchModelList(endpoint('b/1', `${base}${path}/v1`, extra), { timeoutMs, signal });

  test('reads the list, sending no key when the backend has none', async () => {
    assert.deepEqual(await fetchFrom('/vllm'), { ok: true, models: VLLM_MODELS });
    const request = seen.at(-1);
    assert.equal(request?.path, '/vllm/v1/models');
    assert.equal(request?.headers.authorization, undefined);
    assert.equal(request?.headers.accept, 'application/json');
  });

  test("sends the backend's key in the header it takes", async () => {
    await fetchFrom('/vllm', { apiKey: 'sk-1' });
    assert.equal(seen.at(-1)?.headers.authorization, 'Bearer sk-1');
    await fetchFrom('/vllm', { apiKey: 'sk-2', apiKeyHeader: 'x-api-key' });
    assert.equal(seen.at(-1)?.headers['x-api-key'], 'sk-2');
    assert.equal(seen.at(-1)?.headers.authorization, undefined);
  });

  test('fails on an error status, a redirect, a body that is no list or too large', async () => {
    assert.deepEqual(await fetchFrom('/gone'), { ok: false, reason: 'HTTP 404' });
    assert.deepEqual(await fetchFrom('/moved'), { ok: false, reason: 'HTTP 302' });
    assert.deepEqual(await fetchFrom('/html'), {
      ok: false,
      reason: 'the answer is not an OpenAI model list',
    });
    const huge = await fetchFrom('/huge');
    assert.equal(huge.ok, false);
    assert.match(!huge.ok ? huge.reason : '', /larger than/);
  });

  test('fails on a timeout, a refused connection, and when stopped', async () => {
    const started = performance.now();
    assert.deepEqual(await fetchFrom('/stall', {}, 100), {
      ok: false,
      reason: 'no answer within 100 ms',
    });
    assert.ok(performance.now() - started < 1000);
    // A port nothing listens on: bind one, then close it.
    const closed = http.createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((r) => closed.close(() => r()));
    const refused = await fetchModelList(endpoint('b/1', `http://127.0.0.1:${port}/v1`), {
      timeoutMs: 2000,
      signal: new AbortController().signal,
    });
    assert.equal(refused.ok, false);
    assert.match(!refused.ok ? refused.reason : '', /ECONNREFUSED/);
    const stop = new AbortController();
    const pending = fetchFrom('/stall', {}, 5000, stop.signal);
    stop.abort();
    assert.deepEqual(await pending, { ok: false, reason: 'stopped' });
    assert.deepEqual(await fetchFrom('/vllm', {}, 5000, stop.signal), {
      ok: false,
      reason: 'stopped',
    });
  });
});

describe('fetchModelList over https, with the backend certificate settings', () => {
  let dir = '';
  let ca = '';
  let server: https.Server;
  let base = '';

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'switchyard-discovery-tls-'));
    const files = makeServingTls(dir, 'discovery-test');
    ca = await readFile(files.caFile, 'utf8');
    const [cert, key] = await Promise.all([readFile(files.certFile), readFile(files.keyFile)]);
    server = https.createServer({ cert, key }, (req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(VLLM_LIST);
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(async () => {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
    await rm(dir, { recursive: true, force: true });
  });

  const fetchWith = (tls: EndpointSpec['tls']): Promise<ModelListOutcome> =>
    fetchModelList(endpoint('s/1', `${base}/v1`, tls === undefined ? {} : { tls }), {
      timeoutMs: 2000,
      signal: new AbortController().signal,
    });

  test('trusts the CA bundle and checks the name given', async () => {
    assert.deepEqual(await fetchWith({ caBundle: ca, serverName: 'localhost' }), {
      ok: true,
      models: VLLM_MODELS,
    });
    const wrongName = await fetchWith({ caBundle: ca, serverName: 'other.test' });
    assert.equal(wrongName.ok, false);
    assert.match(!wrongName.ok ? wrongName.reason : '', /ERR_TLS_CERT_ALTNAME_INVALID/);
  });

  test('refuses an unknown CA unless told to skip the check', async () => {
    const untrusted = await fetchWith(undefined);
    assert.equal(untrusted.ok, false);
    assert.match(!untrusted.ok ? untrusted.reason : '', /UNABLE_TO_VERIFY_LEAF_SIGNATURE|CERT/);
    assert.deepEqual(await fetchWith({ insecureSkipVerify: true }), {
      ok: true,
      models: VLLM_MODELS,
    });
  });
});

describe('startModelDiscovery', () => {
  let server: http.Server;
  let base = '';
  /** What each path answers now; a path not here stalls until the client gives up. */
  const answers = new Map<string, { status: number; body: string }>();
  const asked: string[] = [];

  before(async () => {
    server = http.createServer((req, res) => {
      const path = req.url ?? '';
      asked.push(path);
      const answer = answers.get(path);
      if (answer === undefined) return;
      res.writeHead(answer.status, { 'content-type': 'application/json' });
      res.end(answer.body);
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => {
    server.closeAllConnections();
    server.close();
  });

  const count = (path: string): number => asked.filter((p) => p === path).length;

  test('asks every undeclared endpoint at once and every period, and reports its list', async () => {
    answers.set('/p1/v1/models', { status: 200, body: VLLM_LIST });
    answers.set('/p2/v1/models', { status: 200, body: '{"data":[{"id":"embed"}]}' });
    const chat = pool('chat', [
      endpoint('gpu/1', `${base}/p1/v1`),
      endpoint('declared/1', `${base}/declared/v1`, { models: ['tiny'] }),
      endpoint('rewrite/1', `${base}/rewrite/v1`, { model: 'gpt-4o' }),
    ]);
    const embed = pool('embed', [endpoint('gpu/1', `${base}/p2/v1`)]);
    const { logger, lines } = recordingLogger();
    const discovery = startModelDiscovery({
      pools: () => [chat.pool, embed.pool],
      everyMs: 60,
      logger,
    });
    try {
      await waitFor('first reports', () => chat.reports.length >= 1 && embed.reports.length >= 1);
      assert.deepEqual(chat.reports[0], ['gpu/1', VLLM_MODELS]);
      assert.deepEqual(embed.reports[0], ['gpu/1', [{ id: 'embed' }]]);
      await waitFor('a second period', () => chat.reports.length >= 3);
      assert.equal(count('/declared/v1/models'), 0);
      assert.equal(count('/rewrite/v1/models'), 0);
      assert.deepEqual(lines, []);
    } finally {
      await discovery.close();
    }
  });

  test('a failure keeps the last list and is logged once per streak; recovery once', async () => {
    answers.set('/flaky/v1/models', { status: 200, body: VLLM_LIST });
    const p = pool('chat', [endpoint('gpu/1', `${base}/flaky/v1`)]);
    const { logger, lines } = recordingLogger();
    const discovery = startModelDiscovery({ pools: () => [p.pool], everyMs: 20, logger });
    try {
      await waitFor('a first list', () => p.reports.length >= 1);
      answers.set('/flaky/v1/models', { status: 503, body: '{}' });
      const reportsBefore = p.reports.length;
      const askedBefore = count('/flaky/v1/models');
      await waitFor('several failures', () => count('/flaky/v1/models') >= askedBefore + 4);
      // At most the fetch that was in flight when the answer changed reported.
      assert.ok(p.reports.length <= reportsBefore + 1);
      const warned = lines.filter((l) => l.level === 'warn');
      assert.equal(warned.length, 1);
      assert.deepEqual(warned[0]?.fields, {
        pool: 'chat',
        endpoint: 'gpu/1',
        url: `${base}/flaky/v1/models`,
        reason: 'HTTP 503',
      });
      answers.set('/flaky/v1/models', { status: 200, body: '{"data":[{"id":"tiny"}]}' });
      await waitFor('the new list', () => p.reports.at(-1)?.[1].length === 1);
      assert.deepEqual(
        lines.map((l) => l.level),
        ['warn', 'info'],
      );
      // A new streak is logged again.
      answers.set('/flaky/v1/models', { status: 200, body: 'garbage' });
      await waitFor('a second warning', () => lines.length === 3);
      assert.equal(lines[2]?.fields['reason'], 'the answer is not an OpenAI model list');
    } finally {
      await discovery.close();
    }
  });

  test('a timed-out fetch fails the endpoint, and does not hold up the close', async () => {
    const p = pool('chat', [endpoint('slow/1', `${base}/stall-forever/v1`)]);
    const { logger, lines } = recordingLogger();
    const discovery = startModelDiscovery({
      pools: () => [p.pool],
      everyMs: 1000,
      timeoutMs: 50,
      logger,
    });
    await waitFor('the timeout', () => lines.length === 1);
    assert.equal(lines[0]?.fields['reason'], 'no answer within 50 ms');
    await discovery.close();
    assert.deepEqual(p.reports, []);
  });
});

describe('startModelDiscovery: scheduling (scripted fetch)', () => {
  /** A fetch whose answers the test releases one by one. */
  function scriptedFetch() {
    const calls: {
      endpoint: EndpointSpec;
      signal: AbortSignal;
      answer: (o: ModelListOutcome) => void;
    }[] = [];
    let inFlight = 0;
    let maxInFlight = 0;
    const fetchImpl: FetchModels = (e, { signal }) =>
      new Promise((resolve) => {
        inFlight++;
        maxInFlight = Math.max(maxInFlight, inFlight);
        const answer = (o: ModelListOutcome): void => {
          inFlight--;
          resolve(o);
        };
        calls.push({ endpoint: e, signal, answer });
      });
    return { calls, fetchImpl, maxInFlight: () => maxInFlight };
  }
  const OK: ModelListOutcome = { ok: true, models: [{ id: 'm' }] };

  test('rounds never overlap: an endpoint is not asked again while its fetch runs', async () => {
    const script = scriptedFetch();
    const p = pool('chat', [endpoint('a/1', 'http://127.0.0.1:9/v1')]);
    const { logger } = recordingLogger();
    const discovery = startModelDiscovery({
      pools: () => [p.pool],
      everyMs: 5,
      logger,
      fetchImpl: script.fetchImpl,
    });
    try {
      await waitFor('the first fetch', () => script.calls.length === 1);
      await sleep(60);
      assert.equal(script.calls.length, 1);
      script.calls[0]?.answer(OK);
      await waitFor('the next round', () => script.calls.length === 2);
      assert.equal(script.maxInFlight(), 1);
      script.calls[1]?.answer(OK);
    } finally {
      await discovery.close();
    }
  });

  test('each wait is drawn from ±10 % of the period', async (t) => {
    t.mock.timers.enable({ apis: ['setTimeout', 'setInterval'] });
    const asked = (random: number) => {
      let clock = 0;
      const times: number[] = [];
      const p = pool('chat', [endpoint('a/1', 'http://127.0.0.1:9/v1')]);
      const discovery = startModelDiscovery({
        pools: () => [p.pool],
        everyMs: 1000,
        logger: recordingLogger().logger,
        now: () => clock,
        random: () => random,
        fetchImpl: () => {
          times.push(clock);
          return Promise.resolve(OK);
        },
      });
      const advance = async (ms: number): Promise<void> => {
        for (let step = 0; step < ms; step += 100) {
          clock += 100;
          t.mock.timers.tick(100);
          await new Promise((resolve) => setImmediate(resolve));
        }
      };
      return { times, advance, close: () => discovery.close() };
    };
    // Checked every 500 ms: a wait of 900 ms is served at 1000, one of 1100 at 1500.
    const early = asked(0);
    await early.advance(1000);
    assert.deepEqual(early.times, [0, 1000]);
    await early.close();
    const late = asked(0.999);
    await late.advance(1000);
    assert.deepEqual(late.times, [0]);
    await late.advance(500);
    assert.deepEqual(late.times, [0, 1500]);
    await late.close();
  });

  test('asks at most `concurrency` endpoints at once', async () => {
    const script = scriptedFetch();
    const endpoints = Array.from({ length: 5 }, (_, i) =>
      endpoint(`a/${i}`, `http://127.0.0.1:9/${i}/v1`),
    );
    const p = pool('chat', endpoints);
    const { logger } = recordingLogger();
    const discovery = startModelDiscovery({
      pools: () => [p.pool],
      everyMs: 10_000,
      concurrency: 2,
      logger,
      fetchImpl: script.fetchImpl,
    });
    try {
      await waitFor('two fetches', () => script.calls.length === 2);
      await sleep(20);
      assert.equal(script.calls.length, 2);
      for (let i = 0; i < 5; i++) {
        await waitFor(`fetch ${i}`, () => script.calls.length > i);
        script.calls[i]?.answer(OK);
      }
      await waitFor('all reported', () => p.reports.length === 5);
      assert.equal(script.maxInFlight(), 2);
    } finally {
      await discovery.close();
    }
  });

  test('a new endpoint, a changed URL and refresh() are asked at once, not a period later', async () => {
    const script = scriptedFetch();
    const p = pool('chat', [endpoint('a/1', 'http://127.0.0.1:9/one/v1')]);
    const { logger } = recordingLogger();
    const discovery = startModelDiscovery({
      pools: () => [p.pool],
      everyMs: 60_000,
      logger,
      fetchImpl: script.fetchImpl,
    });
    try {
      await waitFor('the first fetch', () => script.calls.length === 1);
      script.calls[0]?.answer(OK);
      p.pool.endpoints.push(endpoint('a/2', 'http://127.0.0.1:9/two/v1'));
      await waitFor('the new endpoint', () => script.calls.length === 2);
      assert.equal(script.calls[1]?.endpoint.id, 'a/2');
      script.calls[1]?.answer(OK);
      p.pool.endpoints[0] = endpoint('a/1', 'http://127.0.0.1:9/moved/v1');
      await waitFor('the moved endpoint', () => script.calls.length === 3);
      assert.equal(script.calls[2]?.endpoint.url, 'http://127.0.0.1:9/moved/v1');
      script.calls[2]?.answer(OK);
      await sleep(20);
      discovery.refresh('chat', 'a/2');
      discovery.refresh('chat', 'a/2');
      discovery.refresh('other', 'a/2');
      await waitFor('the refresh', () => script.calls.length === 4);
      assert.equal(script.calls[3]?.endpoint.id, 'a/2');
      // Asked during a round: after it.
      discovery.refresh('chat', 'a/1');
      await sleep(20);
      assert.equal(script.calls.length, 4);
      script.calls[3]?.answer(OK);
      await waitFor('the refresh after the round', () => script.calls.length === 5);
      assert.equal(script.calls[4]?.endpoint.id, 'a/1');
      script.calls[4]?.answer(OK);
      await waitFor('reports', () => p.reports.length === 5);
    } finally {
      await discovery.close();
    }
  });

  test('an endpoint that leaves is forgotten: when it returns it is asked at once', async () => {
    const script = scriptedFetch();
    const gone = endpoint('a/1', 'http://127.0.0.1:9/v1');
    const p = pool('chat', [gone]);
    const { logger } = recordingLogger();
    const discovery = startModelDiscovery({
      pools: () => [p.pool],
      everyMs: 60_000,
      logger,
      fetchImpl: script.fetchImpl,
    });
    try {
      await waitFor('the first fetch', () => script.calls.length === 1);
      script.calls[0]?.answer(OK);
      await waitFor('reported', () => p.reports.length === 1);
      p.pool.endpoints.length = 0;
      discovery.refresh('chat', 'a/1');
      await sleep(30);
      assert.equal(script.calls.length, 1);
      p.pool.endpoints.push(gone);
      await waitFor('asked again', () => script.calls.length === 2);
      script.calls[1]?.answer(OK);
      await waitFor('reported again', () => p.reports.length === 2);
    } finally {
      await discovery.close();
    }
  });

  test('close() aborts the fetches in flight, waits for them, and reports nothing after', async () => {
    const script = scriptedFetch();
    const p = pool('chat', [endpoint('a/1', 'http://127.0.0.1:9/v1')]);
    const { logger, lines } = recordingLogger();
    const discovery = startModelDiscovery({
      pools: () => [p.pool],
      everyMs: 5,
      logger,
      fetchImpl: script.fetchImpl,
    });
    await waitFor('the first fetch', () => script.calls.length === 1);
    const call = script.calls[0]!;
    let closed = false;
    const closing = discovery.close().then(() => (closed = true));
    assert.equal(call.signal.aborted, true);
    await sleep(20);
    assert.equal(closed, false);
    call.answer(OK);
    await closing;
    assert.deepEqual(p.reports, []);
    assert.deepEqual(lines, []);
    discovery.refresh('chat', 'a/1');
    await sleep(20);
    assert.equal(script.calls.length, 1);
  });

  test('a fetch that throws is a failure; settings that cannot work are refused', async () => {
    const p = pool('chat', [endpoint('a/1', 'http://127.0.0.1:9/v1')]);
    const { logger, lines } = recordingLogger();
    const discovery = startModelDiscovery({
      pools: () => [p.pool],
      everyMs: 1000,
      logger,
      fetchImpl: () => Promise.reject(new Error('boom')),
    });
    await waitFor('the warning', () => lines.length === 1);
    assert.equal(lines[0]?.fields['reason'], 'Error: boom');
    await discovery.close();
    assert.throws(
      () => startModelDiscovery({ pools: () => [], everyMs: 0, logger }),
      /everyMs must be a finite number above 0/,
    );
    assert.throws(
      () => startModelDiscovery({ pools: () => [], timeoutMs: Number.NaN, logger }),
      /timeoutMs/,
    );
  });
});
