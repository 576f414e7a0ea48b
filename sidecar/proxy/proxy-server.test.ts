import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { pino } from 'pino';
import { listen } from '../../lib/listen.ts';
import { ActivePoolState, type ActivePool } from '../config/active-pool.ts';
import { loadPoolText } from '../config/pool-file.ts';
import { seededRng } from '../policy/index.ts';
import { SidecarMetrics } from './metrics.ts';
import { SidecarProxy } from './proxy-server.ts';

const logger = pino({ level: 'silent' });

function proxyOf(pool: () => ActivePool | undefined): SidecarProxy {
  return new SidecarProxy({
    pool,
    metrics: new SidecarMetrics('test'),
    logger,
    maxBodyBytes: 1 << 20,
    nowMs: () => performance.now(),
    isDraining: () => false,
  });
}

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/** A POST whose body waits for `100 Continue` when `expectContinue`, as curl sends large bodies. */
function post(
  url: string,
  body: string,
  headers: Record<string, string> = {},
  expectContinue = false,
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${url}/v1/chat/completions`, {
      method: 'POST',
      agent: false,
      headers: {
        'content-type': 'application/json',
        'content-length': String(Buffer.byteLength(body)),
        ...(expectContinue ? { expect: '100-continue' } : {}),
        ...headers,
      },
    });
    if (expectContinue) req.on('continue', () => req.end(body));
    else req.end(body);
    req.on('error', reject);
    req.on('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () =>
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }),
      );
    });
  });
}

const chat = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] });

describe('sidecar proxy server', () => {
  test('before any configuration: 503 no_configuration, saying where it comes from', async (t) => {
    const proxy = proxyOf(() => undefined);
    const url = await listen(proxy.server, { host: '127.0.0.1', port: 0 });
    t.after(() => {
      proxy.server.close();
      proxy.close();
    });
    const answer = await post(url, chat);
    assert.equal(answer.status, 503);
    assert.equal(answer.headers['retry-after'], '1');
    const error = (JSON.parse(answer.body) as { error: { code: string; message: string } }).error;
    assert.equal(error.code, 'no_configuration');
    assert.match(error.message, /no pool configuration has been applied yet/i);
    assert.match(error.message, /controller/);
  });

  describe('what reaches the backend', () => {
    const seen: http.IncomingHttpHeaders[] = [];
    let backend: http.Server;
    let proxy: SidecarProxy;
    let url = '';
    let backendHost = '';

    before(async () => {
      backend = http.createServer((req, res) => {
        seen.push(req.headers);
        req.resume();
        req.on('end', () => {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end('{"object":"chat.completion"}');
        });
      });
      await new Promise<void>((r) => backend.listen(0, '127.0.0.1', r));
      const { port } = backend.address() as AddressInfo;
      backendHost = `127.0.0.1:${port}`;
      const loaded = loadPoolText(
        `apiVersion: switchyard.dev/v1alpha1
kind: InferencePool
metadata: {name: headers}
spec:
  backends:
  - {name: a, url: 'http://127.0.0.1:${port}/v1'}
  timeouts: {firstByte: 2s}
`,
        {},
      );
      if (!loaded.ok) throw new Error(JSON.stringify(loaded.problems));
      const active = new ActivePoolState({
        clock: { nowMs: () => performance.now() },
        rng: seededRng(1),
        logger,
      });
      active.apply(loaded.pool);
      proxy = proxyOf(() => active.current());
      url = await listen(proxy.server, { host: '127.0.0.1', port: 0 });
    });
    after(async () => {
      proxy.server.close();
      proxy.server.closeAllConnections();
      proxy.close();
      await new Promise((r) => backend.close(r));
    });

    test('a client expecting 100-continue is answered by the sidecar; Expect is not forwarded', async () => {
      const answer = await post(url, chat, {}, true);
      assert.equal(answer.status, 200);
      assert.equal(seen.at(-1)?.expect, undefined);
    });

    test('hop-by-hop and x-switchyard-* headers stay here; Host is the backend’s', async () => {
      const answer = await post(url, chat, {
        'keep-alive': 'timeout=5',
        'proxy-authorization': 'Basic c2VjcmV0',
        te: 'trailers',
        'x-switchyard-backend': 'spoof',
        'x-request-id': 'r-1',
      });
      assert.equal(answer.status, 200);
      const headers = seen.at(-1)!;
      for (const name of ['keep-alive', 'proxy-authorization', 'te', 'x-switchyard-backend'])
        assert.equal(headers[name], undefined, `${name} was forwarded`);
      assert.equal(headers['x-request-id'], 'r-1');
      assert.equal(headers.host, backendHost);
      assert.equal(headers['content-length'], String(Buffer.byteLength(chat)));
      assert.equal(headers['x-forwarded-for'], undefined);
      assert.match(String(answer.headers['x-switchyard-backend']), /^a\//);
    });
  });

  test('counts each request of its pool, and each it answers itself with a 429 or 503, for the reports', async (t) => {
    const backend = http.createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{"object":"chat.completion"}');
      });
    });
    await new Promise<void>((r) => backend.listen(0, '127.0.0.1', r));
    const { port } = backend.address() as AddressInfo;
    // One request a minute: a sheddable request past it is refused at once (429 over_budget).
    const loaded = loadPoolText(
      `apiVersion: switchyard.dev/v1alpha1
kind: InferencePool
metadata: {name: demand}
spec:
  backends:
  - {name: a, url: 'http://127.0.0.1:${port}/v1'}
  flowControl: {budgets: [{requestsPerMinute: 1}]}
`,
      {},
    );
    if (!loaded.ok) throw new Error(JSON.stringify(loaded.problems));
    let nowMs = 0;
    const active = new ActivePoolState({
      clock: { nowMs: () => nowMs },
      rng: seededRng(1),
      logger,
    });
    active.apply(loaded.pool);
    const proxy = proxyOf(() => active.current());
    const url = await listen(proxy.server, { host: '127.0.0.1', port: 0 });
    t.after(async () => {
      proxy.server.close();
      proxy.server.closeAllConnections();
      proxy.close();
      await new Promise((r) => backend.close(r));
    });
    const statuses: number[] = [];
    for (const priority of ['0', '-1', '-1'])
      statuses.push((await post(url, chat, { 'x-switchyard-priority': priority })).status);
    // Its one endpoint excluded (drifted), and no budget: the balancer sheds (503).
    const policy = { ...loaded.pool.policy, flowControl: undefined };
    const endpoints = loaded.pool.endpoints.map((e) => ({ ...e, drifted: true }));
    active.apply({ ...loaded.pool, hash: 'excluded', policy, endpoints });
    statuses.push((await post(url, chat)).status);
    // A request answered before it reaches the pool (bad JSON) is not the pool's demand.
    statuses.push((await post(url, '{')).status);
    assert.deepEqual(statuses, [200, 429, 429, 503, 400]);
    nowMs += 2_000;
    assert.deepEqual(active.current()!.demand!.take(), {
      requestsPerSecond: 2,
      shedPerSecond: 1.5,
    });
  });
});
