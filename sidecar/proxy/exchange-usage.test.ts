/**
 * An exchange's token accounting: `onEnd` once, whatever ends it, with the usage of the answer the
 * client got; the usage chunk the sidecar asked for kept from the client. The upstream is
 * scripted (a fake `UpstreamClient`); the client is a real HTTP request on loopback, and each
 * request is made an `Exchange` directly, as the proxy server (or the flow gate) does.
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
import { Exchange, type ExchangeEnd } from './exchange.ts';
import { SidecarMetrics } from './metrics.ts';
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
  constructor(init: UpstreamRequestInit, handler: UpstreamHandler) {
    this.init = init;
    this.handler = handler;
  }
  pause(): void {}
  resume(): void {}
  watchIdle(): void {}
  abort(): void {
    this.aborted = true;
  }
  drain(): void {}
}

class FakeUpstream implements UpstreamClient {
  readonly calls: FakeCall[] = [];
  request(init: UpstreamRequestInit, handler: UpstreamHandler): FakeCall {
    const call = new FakeCall(init, handler);
    this.calls.push(call);
    return call;
  }
  close(): void {}
  async call(n: number): Promise<FakeCall> {
    for (let i = 0; i < 400 && this.calls.length < n; i++) await sleep(5);
    const call = this.calls[n - 1];
    if (call === undefined) throw new Error(`no request number ${n} reached the upstream`);
    return call;
  }
}

const POOL = (flowControl: string): string => `apiVersion: switchyard.dev/v1alpha1
kind: InferencePool
metadata: {name: usage}
spec:
  backends:
  - {name: a, url: 'http://a.test:8000/v1'}
  - {name: b, url: 'http://b.test:8000/v1'}
  retry: {budgetPercent: 100, minPerSecond: 100, maxAttempts: 2}
${flowControl}
`;
const TOKEN_BUDGET = '  flowControl: {budgets: [{tokensPerMinute: 100000}]}';
const REQUEST_BUDGET = '  flowControl: {budgets: [{requestsPerMinute: 100}]}';

const SSE = { 'content-type': 'text/event-stream', 'content-length': '999' };
const content = (text: string): string =>
  `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"${text}"}}]}\n\n`;
const USAGE =
  'data: {"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}\n\n';
const DONE = 'data: [DONE]\n\n';

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

describe('exchange token accounting', () => {
  let upstream: FakeUpstream;
  let active: ActivePoolState;
  let server: http.Server;
  let url: string;
  let ends: ExchangeEnd[];
  let usageAdded: boolean;

  async function start(flowControl: string): Promise<void> {
    const loaded = loadPoolText(POOL(flowControl), {});
    if (!loaded.ok) throw new Error(JSON.stringify(loaded.problems));
    active.apply(loaded.pool);
    url = await listen(server, { host: '127.0.0.1', port: 0 });
  }

  /** A streamed chat request; resolves with what the client got (or had, when it left). */
  function chat(onData?: (req: http.ClientRequest, text: string) => void): Promise<Answer> {
    return new Promise((resolve) => {
      const req = http.request(`${url}/v1/chat/completions`, { method: 'POST', agent: false });
      req.on('error', () => resolve({ status: 0, headers: {}, body: '' }));
      req.on('response', (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => {
          text += c;
          onData?.(req, text);
        });
        const done = (): void =>
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text });
        res.on('end', done);
        res.on('error', done);
        res.on('close', done);
      });
      req.end('{"model":"m","stream":true}');
    });
  }

  const ended = async (count = 1): Promise<ExchangeEnd[]> => {
    for (let i = 0; i < 200 && ends.length < count; i++) await sleep(5);
    await sleep(20); // and no second call after it
    return ends;
  };

  beforeEach(() => {
    ends = [];
    usageAdded = true;
    upstream = new FakeUpstream();
    active = new ActivePoolState({
      clock: { nowMs: () => performance.now() },
      rng: seededRng(3),
      logger,
    });
    const deps = {
      upstream,
      metrics: new SidecarMetrics('usage'),
      logger,
      nowMs: () => performance.now(),
    };
    server = http.createServer((req, res) => {
      const parts: Buffer[] = [];
      req.on('data', (c: Buffer) => parts.push(c));
      req.on('end', () => {
        const raw = Buffer.concat(parts);
        new Exchange(deps, {
          req,
          res,
          pool: active.current()!,
          path: '/v1/chat/completions',
          query: '',
          raw,
          fields: JSON.parse(raw.toString()) as Record<string, unknown>,
          streamed: true,
          affinity: {},
          usageAdded,
          onEnd: (end) => ends.push(end),
        }).start();
      });
    });
  });
  afterEach(() => {
    server.close();
    server.closeAllConnections();
  });

  test('an answer in full: every event but the usage chunk, split anywhere; tokens once', async () => {
    await start(TOKEN_BUDGET);
    const answer = chat();
    const call = await upstream.call(1);
    call.handler.onResponseHead(200, SSE);
    const stream = Buffer.from(content('Hi') + content(' there') + USAGE + DONE);
    const cuts = [0, 3, 90, 140, 200, 300, stream.length];
    for (let i = 1; i < cuts.length; i++)
      call.handler.onData(stream.subarray(cuts[i - 1], cuts[i]));
    call.handler.onEnd();
    const { status, headers, body } = await answer;
    assert.equal(status, 200);
    assert.equal(body, content('Hi') + content(' there') + DONE);
    assert.equal(headers['content-length'], undefined, "the upstream's length no longer holds");
    assert.deepEqual(await ended(), [{ tokens: 11 }]);
  });

  test('a client that asked for usage gets the stream untouched', async () => {
    usageAdded = false;
    await start(TOKEN_BUDGET);
    const answer = chat();
    const call = await upstream.call(1);
    call.handler.onResponseHead(200, { 'content-type': 'text/event-stream' });
    call.handler.onData(Buffer.from(content('Hi') + USAGE + DONE));
    call.handler.onEnd();
    assert.equal((await answer).body, content('Hi') + USAGE + DONE);
    assert.deepEqual(await ended(), [{ tokens: 11 }]);
  });

  test('a stream that ends inside an event: the held bytes still reach the client', async () => {
    await start(TOKEN_BUDGET);
    const answer = chat();
    const call = await upstream.call(1);
    call.handler.onResponseHead(200, { 'content-type': 'text/event-stream' });
    call.handler.onData(Buffer.from(content('Hi') + 'data: {"choices":[]'));
    call.handler.onEnd();
    assert.equal((await answer).body, content('Hi') + 'data: {"choices":[]');
    assert.deepEqual(await ended(), [{ tokens: undefined }]);
  });

  test('retried: the tokens are those of the answer the client got', async () => {
    await start(TOKEN_BUDGET);
    const answer = chat();
    const first = await upstream.call(1);
    first.handler.onResponseHead(503, { 'content-type': 'application/json' });
    first.handler.onData(Buffer.from('{"usage":{"total_tokens":500}}'));
    const second = await upstream.call(2);
    second.handler.onResponseHead(200, { 'content-type': 'text/event-stream' });
    second.handler.onData(Buffer.from(content('ok') + USAGE + DONE));
    second.handler.onEnd();
    assert.equal((await answer).body, content('ok') + DONE);
    assert.deepEqual(await ended(), [{ tokens: 11 }]);
  });

  test('failed on every attempt: once, without tokens', async () => {
    await start(TOKEN_BUDGET);
    const answer = chat();
    (await upstream.call(1)).handler.onError('ECONNREFUSED');
    (await upstream.call(2)).handler.onError('ECONNREFUSED');
    assert.equal((await answer).status, 502);
    assert.deepEqual(await ended(), [{ tokens: undefined }]);
  });

  test('the client gone mid-stream: once, without tokens', async () => {
    await start(TOKEN_BUDGET);
    const answer = chat((req) => req.destroy());
    const call = await upstream.call(1);
    call.handler.onResponseHead(200, { 'content-type': 'text/event-stream' });
    call.handler.onData(Buffer.from(content('Hi')));
    await answer;
    for (let i = 0; i < 200 && !call.aborted; i++) await sleep(5);
    assert.equal(call.aborted, true);
    call.handler.onData(Buffer.from(USAGE));
    assert.deepEqual(await ended(), [{ tokens: undefined }]);
  });

  test('a pool that charges no tokens: nothing read, nothing taken out', async () => {
    usageAdded = false;
    await start(REQUEST_BUDGET);
    const answer = chat();
    const call = await upstream.call(1);
    call.handler.onResponseHead(200, { 'content-type': 'text/event-stream' });
    call.handler.onData(Buffer.from(content('Hi') + USAGE + DONE));
    call.handler.onEnd();
    assert.equal((await answer).body, content('Hi') + USAGE + DONE);
    assert.deepEqual(await ended(), [{ tokens: undefined }]);
  });
});
