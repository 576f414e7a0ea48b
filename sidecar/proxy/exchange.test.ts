/**
 * The exchange performs what the attempt state machine decides: these tests script the upstream
 * (a fake `UpstreamClient`) and watch what the client and the balancer see, through a real proxy
 * server on loopback.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, beforeEach, describe, test } from 'node:test';
import { pino } from 'pino';
import { listen } from '../../lib/listen.ts';
import { ActivePoolState } from '../config/active-pool.ts';
import { loadPoolText } from '../config/pool-file.ts';
import { seededRng } from '../policy/index.ts';
import { SidecarMetrics } from './metrics.ts';
import { SidecarProxy } from './proxy-server.ts';
import type {
  UpstreamCall,
  UpstreamClient,
  UpstreamHandler,
  UpstreamRequestInit,
} from './upstream.ts';

const logger = pino({ level: 'silent' });

class FakeCall implements UpstreamCall {
  readonly init: UpstreamRequestInit;
  readonly handler: UpstreamHandler;
  aborted = false;
  drained = false;
  idleMs: number | undefined;

  constructor(init: UpstreamRequestInit, handler: UpstreamHandler) {
    this.init = init;
    this.handler = handler;
  }
  pause(): void {}
  resume(): void {}
  watchIdle(ms: number): void {
    this.idleMs = ms;
  }
  abort(): void {
    this.aborted = true;
  }
  drain(): void {
    this.drained = true;
  }
}

class FakeUpstream implements UpstreamClient {
  readonly calls: FakeCall[] = [];
  request(init: UpstreamRequestInit, handler: UpstreamHandler): FakeCall {
    const call = new FakeCall(init, handler);
    this.calls.push(call);
    return call;
  }
  close(): void {}

  /** The `n`th request (from 1), once the proxy has sent it. */
  async call(n: number): Promise<FakeCall> {
    for (let i = 0; i < 400 && this.calls.length < n; i++) await sleep(5);
    const call = this.calls[n - 1];
    if (call === undefined) throw new Error(`no request number ${n} reached the upstream`);
    return call;
  }
}

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

const POOL = (maxAttempts: number): string => `apiVersion: switchyard.dev/v1alpha1
kind: InferencePool
metadata: {name: exchange}
spec:
  backends:
  - {name: a, url: 'http://a.test:8000/v1'}
  - {name: b, url: 'http://b.test:8000/v1'}
  retry: {budgetPercent: 100, minPerSecond: 100, maxAttempts: ${maxAttempts}}
  timeouts: {connect: 1s, firstByte: 300ms, idle: 5s}
`;

describe('exchange', () => {
  let upstream: FakeUpstream;
  let active: ActivePoolState;
  let proxy: SidecarProxy;
  let url: string;

  async function start(maxAttempts: number): Promise<void> {
    const loaded = loadPoolText(POOL(maxAttempts), {});
    if (!loaded.ok) throw new Error(JSON.stringify(loaded.problems));
    active.apply(loaded.pool);
    url = await listen(proxy.server, { host: '127.0.0.1', port: 0 });
  }

  /** Sends a chat request; resolves with the whole answer (or what arrived before a reset). */
  function chat(stream = false, onResponse?: (req: http.ClientRequest) => void): Promise<Answer> {
    const body = JSON.stringify({
      model: 'm',
      stream,
      messages: [{ role: 'user', content: 'hi' }],
    });
    return new Promise((resolve) => {
      const req = http.request(`${url}/v1/chat/completions`, {
        method: 'POST',
        agent: false,
        headers: { 'content-type': 'application/json' },
      });
      req.on('error', () => resolve({ status: 0, headers: {}, body: '' }));
      req.on('response', (res) => {
        onResponse?.(req);
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (text += c));
        const done = (): void =>
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text });
        res.on('end', done);
        res.on('error', done);
      });
      req.end(body);
    });
  }

  const inFlight = (): number =>
    active
      .current()!
      .balancer.status()
      .reduce((n, s) => n + s.inFlight, 0);

  beforeEach(() => {
    upstream = new FakeUpstream();
    active = new ActivePoolState({
      clock: { nowMs: () => performance.now() },
      rng: seededRng(7),
      logger,
    });
    proxy = new SidecarProxy({
      pool: () => active.current(),
      metrics: new SidecarMetrics('exchange'),
      logger,
      maxBodyBytes: 1 << 20,
      nowMs: () => performance.now(),
      isDraining: () => false,
      upstream,
    });
  });
  afterEach(() => {
    proxy.server.close();
    proxy.server.closeAllConnections();
  });

  test('a 503 head is retried on the other endpoint and its own body drained', async () => {
    await start(2);
    const answer = chat();
    const first = await upstream.call(1);
    first.handler.onResponseHead(503, { 'content-type': 'application/json' });
    assert.equal(first.drained, true);
    const second = await upstream.call(2);
    assert.notEqual(second.init.target.host, first.init.target.host);
    second.handler.onResponseHead(200, { 'content-type': 'application/json' });
    second.handler.onData(Buffer.from('{"ok":true}'));
    second.handler.onEnd();
    const { status, headers, body } = await answer;
    assert.equal(status, 200);
    assert.equal(body, '{"ok":true}');
    assert.equal(headers['x-switchyard-attempts'], '2');
    assert.equal(inFlight(), 0);
  });

  test('a 503 that cannot be retried is relayed as the upstream sent it', async () => {
    await start(1);
    const answer = chat();
    const call = await upstream.call(1);
    call.handler.onResponseHead(503, { 'content-type': 'application/json', 'x-upstream': 'yes' });
    call.handler.onData(Buffer.from('{"error":"busy"}'));
    call.handler.onEnd();
    const { status, headers, body } = await answer;
    assert.deepEqual([status, body, headers['x-upstream']], [503, '{"error":"busy"}', 'yes']);
    assert.equal(call.idleMs, 5_000, 'the relayed body is bounded by timeouts.idle');
    assert.equal(upstream.calls.length, 1);
    assert.equal(inFlight(), 0);
  });

  test('a 503 head without a body by the first-byte deadline becomes a 504', async () => {
    await start(1);
    const answer = chat();
    const call = await upstream.call(1);
    call.handler.onResponseHead(503, {});
    const { status, body } = await answer;
    assert.equal(status, 504);
    assert.match(body, /upstream_timeout/);
    assert.match(body, /answered 503 and sent no body within 300 ms/);
    assert.equal(call.aborted, true);
  });

  test('a stall before the first byte is given up at the deadline and retried', async () => {
    await start(2);
    const answer = chat();
    const first = await upstream.call(1);
    first.handler.onResponseHead(200, {});
    const second = await upstream.call(2);
    assert.equal(first.aborted, true);
    second.handler.onResponseHead(200, {});
    second.handler.onData(Buffer.from('late'));
    second.handler.onEnd();
    // Late news from the attempt given up changes nothing.
    first.handler.onData(Buffer.from('stale'));
    first.handler.onEnd();
    const { status, body, headers } = await answer;
    assert.deepEqual([status, body, headers['x-switchyard-attempts']], [200, 'late', '2']);
    assert.equal(inFlight(), 0);
  });

  test('connection errors on every attempt: 502 naming the last one', async () => {
    await start(2);
    const answer = chat();
    (await upstream.call(1)).handler.onError('ECONNREFUSED');
    (await upstream.call(2)).handler.onError('ECONNREFUSED');
    const { status, body, headers } = await answer;
    assert.equal(status, 502);
    assert.match(body, /upstream_unreachable/);
    assert.match(body, /ECONNREFUSED from (a|b)\//);
    assert.equal(headers['x-switchyard-attempts'], '2');
    assert.equal(inFlight(), 0);
  });

  test('a stream broken after its first byte ends with an SSE error event, never a retry', async () => {
    await start(2);
    const answer = chat(true);
    const call = await upstream.call(1);
    call.handler.onResponseHead(200, { 'content-type': 'text/event-stream' });
    call.handler.onData(Buffer.from('data: {"n":1}\n\n'));
    call.handler.onError('ECONNRESET');
    const { status, body } = await answer;
    assert.equal(status, 200);
    assert.match(body, /^data: \{"n":1\}\n\ndata: \{"error":.*"upstream_stream_broken"/s);
    assert.equal(upstream.calls.length, 1);
    assert.equal(inFlight(), 0);
  });

  test('a client that leaves mid-stream has its upstream request destroyed', async () => {
    await start(2);
    let client: http.ClientRequest | undefined;
    const answer = chat(true, (req) => (client = req));
    const call = await upstream.call(1);
    call.handler.onResponseHead(200, { 'content-type': 'text/event-stream' });
    call.handler.onData(Buffer.from('data: {"n":1}\n\n'));
    for (let i = 0; i < 200 && client === undefined; i++) await sleep(5);
    client!.destroy();
    await answer;
    // A FIN alone may be a half-close: the departure shows when writing to the client fails.
    for (let i = 0; i < 200 && !call.aborted; i++) {
      call.handler.onData(Buffer.from('data: {"n":2}\n\n'));
      await sleep(5);
    }
    assert.equal(call.aborted, true);
    assert.equal(inFlight(), 0);
  });
});
