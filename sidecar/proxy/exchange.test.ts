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

/** What the proxy logged at warn level and above, since the test began. */
let logged: Record<string, unknown>[] = [];
const logger = pino(
  { level: 'warn' },
  { write: (line: string) => logged.push(JSON.parse(line) as Record<string, unknown>) },
);

class FakeCall implements UpstreamCall {
  readonly init: UpstreamRequestInit;
  readonly handler: UpstreamHandler;
  aborted = false;
  drained = false;
  idleMs: number | undefined;
  paused = false;
  /** How often the proxy paused this response because the client's socket was full. */
  pauses = 0;

  constructor(init: UpstreamRequestInit, handler: UpstreamHandler) {
    this.init = init;
    this.handler = handler;
  }
  pause(): void {
    this.paused = true;
    this.pauses++;
  }
  resume(): void {
    this.paused = false;
  }
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

const POOL = (
  maxAttempts: number,
  clientStall: string,
  firstByte = '300ms',
): string => `apiVersion: switchyard.dev/v1alpha1
kind: InferencePool
metadata: {name: exchange}
spec:
  backends:
  - {name: a, url: 'http://a.test:8000/v1'}
  - {name: b, url: 'http://b.test:8000/v1'}
  retry: {budgetPercent: 100, minPerSecond: 100, maxAttempts: ${maxAttempts}}
  timeouts: {connect: 1s, firstByte: ${firstByte}, idle: 5s, clientStall: ${clientStall}}
`;

describe('exchange', () => {
  let upstream: FakeUpstream;
  let metrics: SidecarMetrics;
  let active: ActivePoolState;
  let proxy: SidecarProxy;
  let url: string;

  async function start(
    maxAttempts: number,
    clientStall = '60s',
    firstByte?: string,
  ): Promise<void> {
    const loaded = loadPoolText(POOL(maxAttempts, clientStall, firstByte), {});
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
    logged = [];
    upstream = new FakeUpstream();
    metrics = new SidecarMetrics('exchange');
    active = new ActivePoolState({
      clock: { nowMs: () => performance.now() },
      rng: seededRng(7),
      logger,
    });
    proxy = new SidecarProxy({
      pool: () => active.current(),
      metrics,
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

  test('a timeout longer than a Node timer can wait (30 days) waits, not fires at once', async () => {
    await start(2, '720h', '720h');
    const answer = chat();
    const call = await upstream.call(1);
    call.handler.onResponseHead(200, {});
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(call.aborted, false, 'not given up at the first millisecond');
    call.handler.onData(Buffer.from('late but fine'));
    call.handler.onEnd();
    const { status, body } = await answer;
    assert.deepEqual([status, body], [200, 'late but fine']);
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

  /**
   * One streamed answer from each endpoint: a new endpoint's first sample is dropped as a cold
   * start (docs/policy.md §5), and these tests watch the samples after it.
   */
  async function warmUp(): Promise<void> {
    const answers = [chat(true), chat(true)];
    for (const n of [1, 2]) {
      const call = await upstream.call(n);
      call.handler.onResponseHead(200, { 'content-type': 'text/event-stream' });
      call.handler.onData(Buffer.from('data: {"n":1}\n\n'));
      call.handler.onEnd();
    }
    await Promise.all(answers);
    const seen = new Set(upstream.calls.map((c) => c.init.target.host));
    assert.equal(seen.size, 2, 'the two warm-up requests went to both endpoints');
  }

  test('a streamed 2xx is a TTFT sample at its first token, before the stream ends', async () => {
    await start(1);
    await warmUp();
    const answer = chat(true);
    const call = await upstream.call(3);
    const sampled = (): boolean =>
      !active
        .current()!
        .balancer.status()
        .find((s) => new URL(s.url).host === call.init.target.host)!.ewmaSeeded;
    call.handler.onResponseHead(200, { 'content-type': 'text/event-stream' });
    assert.equal(sampled(), false);
    call.handler.onData(Buffer.from('data: {"n":1}\n\n'));
    for (let i = 0; i < 200 && !sampled(); i++) await sleep(5);
    assert.equal(sampled(), true);
    assert.equal(inFlight(), 1); // still streaming
    call.handler.onEnd();
    await answer;
  });

  test('the first byte of a 4xx or of a non-streamed 2xx is no TTFT sample', async () => {
    await start(1);
    await warmUp();
    for (const [stream, status] of [
      [true, 400],
      [false, 200],
    ] as const) {
      const answer = chat(stream);
      const call = await upstream.call(upstream.calls.length + 1);
      call.handler.onResponseHead(status, { 'content-type': 'application/json' });
      call.handler.onData(Buffer.from('{"x":1}'));
      call.handler.onEnd();
      assert.equal((await answer).status, status);
    }
    assert.ok(
      active
        .current()!
        .balancer.status()
        .every((s) => s.ewmaSeeded),
    );
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

  describe('a client that stops reading', () => {
    /** A chunk large enough that a few of them fill every socket buffer to a non-reader. */
    const CHUNK = Buffer.alloc(256 * 1024, 'x');
    /** The clients' requests, destroyed after each test (one that does not read never closes). */
    let clients: http.ClientRequest[] = [];
    afterEach(() => {
      for (const req of clients) req.destroy();
      clients = [];
    });

    /**
     * Sends a streaming chat request whose answer is read only while `reading()` is true
     * (checked every `everyMs`); resolves when the response is over (read to its end, or cut
     * and the cut seen), with the bytes received.
     */
    function streamReadWhile(
      reading: () => boolean,
      everyMs: number,
    ): Promise<{ bytes: number; ended: boolean }> {
      const body = JSON.stringify({ model: 'm', stream: true, messages: [] });
      return new Promise((resolve) => {
        let bytes = 0;
        let ended = false;
        const req = http.request(`${url}/v1/chat/completions`, {
          method: 'POST',
          agent: false,
          headers: { 'content-type': 'application/json' },
        });
        clients.push(req);
        req.on('error', () => undefined);
        req.on('response', (res) => {
          res.on('data', (c: Buffer) => (bytes += c.length));
          res.on('end', () => (ended = true));
          res.on('error', () => undefined);
          res.pause();
          const timer = setInterval(() => (reading() ? res.resume() : res.pause()), everyMs);
          // Not the socket's close: a response paused when it closes has its end still unread.
          res.once('close', () => {
            clearInterval(timer);
            resolve({ bytes, ended });
          });
        });
        req.end(body);
      });
    }

    /** Feeds `call` chunks, `total` bytes in all, waiting whenever the proxy paused it. */
    async function pump(call: FakeCall, total: number): Promise<void> {
      for (let sent = 0; sent < total && !call.aborted;) {
        if (call.paused) {
          await sleep(5);
          continue;
        }
        call.handler.onData(CHUNK);
        sent += CHUNK.length;
        await new Promise((resolve) => setImmediate(resolve));
      }
    }

    /** Feeds `call` chunks until the client's socket is full and the proxy pauses the upstream. */
    async function fillClientSocket(call: FakeCall): Promise<void> {
      for (let i = 0; i < 400 && !call.paused; i++) {
        call.handler.onData(CHUNK);
        await new Promise((resolve) => setImmediate(resolve));
      }
      assert.equal(call.paused, true, 'the client socket filled');
    }

    /** `switchyard_client_stalled_total` (a counter not incremented yet has no line: 0). */
    const stalledCount = async (): Promise<number> => {
      const text = await metrics.registry.getSingleMetricAsString(
        'switchyard_client_stalled_total',
      );
      return Number(
        /^switchyard_client_stalled_total\{pool="exchange"\} (\d+)$/m.exec(text)?.[1] ?? 0,
      );
    };

    test('is disconnected after clientStall; its upstream is aborted and the endpoint not blamed', async () => {
      await start(1, '200ms');
      let reading = false;
      const closed = streamReadWhile(() => reading, 20);
      const call = await upstream.call(1);
      call.handler.onResponseHead(200, { 'content-type': 'text/event-stream' });
      await fillClientSocket(call);
      // The server keeps streaming: whenever the kernel takes a little more of the socket (a
      // drain), more comes, so the proxy stays blocked on a client that reads nothing.
      for (let i = 0; i < 1_000 && !call.aborted; i++) {
        if (!call.paused) call.handler.onData(CHUNK);
        await sleep(5);
      }
      assert.equal(call.aborted, true, 'the upstream request is aborted');
      // A client that does not read cannot see its connection close: it does once it reads.
      reading = true;
      const { ended } = await closed;
      assert.equal(ended, false, 'the stream was cut, not ended');
      assert.equal(inFlight(), 0);
      const status = active.current()!.balancer.status();
      assert.deepEqual(
        status.map((e) => [e.errors, e.breaker]),
        status.map(() => [0, 'closed']),
      );
      assert.equal(await stalledCount(), 1);
      let exposition = '';
      for await (const piece of metrics.exposition()) exposition += piece;
      assert.match(exposition, /^switchyard_requests_total\{[^}]*code="aborted"\} 1$/m);
      const warning = logged.find((l) => l['msg'] === 'client stopped reading; connection closed');
      assert.ok(warning, JSON.stringify(logged));
      assert.equal(warning['pool'], 'exchange');
      assert.ok(String(warning['endpoint']).endsWith(`/${call.init.target.host}`));
      assert.ok(Number(warning['stalledMs']) >= 200, `stalledMs ${String(warning['stalledMs'])}`);
    });

    test('is not disconnected while it keeps reading, however often its socket fills', async () => {
      await start(1, '400ms');
      let tick = 0;
      // Reads one tick in five: the socket fills while it does not, and drains when it does.
      const closed = streamReadWhile(() => tick++ % 5 === 4, 20);
      const call = await upstream.call(1);
      call.handler.onResponseHead(200, { 'content-type': 'text/event-stream' });
      // Far more than the socket buffers hold: the stream outlasts clientStall many times over.
      const total = 160 * CHUNK.length;
      await pump(call, total);
      call.handler.onEnd();
      const { bytes, ended } = await closed;
      assert.equal(ended, true, 'the stream ran to its end');
      assert.equal(bytes, total);
      assert.ok(call.pauses > 3, `the client socket filled ${call.pauses} times`);
      assert.equal(call.aborted, false);
      assert.equal(await stalledCount(), 0);
    });

    const endpointErrors = (): number[] =>
      active
        .current()!
        .balancer.status()
        .map((e) => e.errors);

    test('a break of the stream while it holds it paused is its own: counted aborted, not an error', async () => {
      await start(1);
      const closed = streamReadWhile(() => false, 20);
      const call = await upstream.call(1);
      call.handler.onResponseHead(200, { 'content-type': 'text/event-stream' });
      await fillClientSocket(call);
      // A server dropping the reader that stopped reading (its send timeout).
      call.handler.onError('ECONNRESET');
      assert.deepEqual(endpointErrors(), [0, 0]);
      let exposition = '';
      for await (const piece of metrics.exposition()) exposition += piece;
      assert.match(exposition, /^switchyard_requests_total\{[^}]*code="aborted"\} 1$/m);
      assert.doesNotMatch(exposition, /code="error"/);
      for (const req of clients) req.destroy();
      await closed;
    });

    test('a break well after it read on is the endpoint’s again', async () => {
      await start(1);
      let reading = false;
      const closed = streamReadWhile(() => reading, 20);
      const call = await upstream.call(1);
      call.handler.onResponseHead(200, { 'content-type': 'text/event-stream' });
      await fillClientSocket(call);
      reading = true;
      for (let i = 0; i < 400 && call.paused; i++) await sleep(5);
      assert.equal(call.paused, false, 'the client read on');
      await sleep(1_200); // past the 1 s in which a break is still the client's
      call.handler.onData(Buffer.from('data: {}\n\n'));
      call.handler.onError('ECONNRESET');
      assert.deepEqual(endpointErrors().sort(), [0, 1]);
      await closed;
    });

    test('is not disconnected once its attempt ended: the clock stops with it', async () => {
      await start(1, '200ms');
      let reading = false;
      const closed = streamReadWhile(() => reading, 20);
      const call = await upstream.call(1);
      call.handler.onResponseHead(200, { 'content-type': 'text/event-stream' });
      await fillClientSocket(call);
      // The upstream breaks off: the attempt ends (the client gets the SSE error event, whenever
      // it reads again), and with it the clock of clientStall.
      call.handler.onError('ECONNRESET');
      assert.equal(inFlight(), 0);
      await sleep(600);
      assert.equal(await stalledCount(), 0);
      reading = true;
      assert.equal((await closed).ended, true, 'the SSE error event ended the stream');
    });
  });
});
