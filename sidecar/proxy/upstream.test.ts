import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, test } from 'node:test';
import { Upstream, upstreamTarget, type UpstreamHandler } from './upstream.ts';

/** Records what a handler heard, in order. */
class Recorder implements UpstreamHandler {
  readonly heard: string[] = [];
  onResponseHead(status: number): void {
    this.heard.push(`head ${status}`);
  }
  onData(chunk: Buffer): void {
    this.heard.push(`data ${chunk.toString()}`);
  }
  onEnd(): void {
    this.heard.push('end');
  }
  onError(code: string): void {
    this.heard.push(`error ${code}`);
  }
}

describe('upstream requests', () => {
  let server: http.Server;
  let base = '';
  const seen: http.IncomingHttpHeaders[] = [];
  const open = new Set<Socket>();

  before(async () => {
    server = http.createServer((req, res) => {
      seen.push(req.headers);
      req.resume();
      req.on('end', () => {
        if (req.url === '/v1/reset') {
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          res.write('one');
          setTimeout(() => req.socket.destroy(), 20);
          return;
        }
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(`{"path":${JSON.stringify(req.url)}}`);
      });
    });
    server.on('connection', (socket: Socket) => {
      open.add(socket);
      socket.on('close', () => open.delete(socket));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(
    () =>
      new Promise<void>((r) => {
        server.close(() => r());
        server.closeAllConnections();
      }),
  );

  function send(upstream: Upstream, path: string, recorder: Recorder) {
    return upstream.request(
      {
        target: upstreamTarget(base + path),
        method: 'POST',
        headers: { 'content-length': 2, 'x-request-id': 'r' },
        body: Buffer.from('{}'),
        connectTimeoutMs: 1_000,
      },
      recorder,
    );
  }

  async function until(check: () => boolean): Promise<void> {
    for (let i = 0; i < 200 && !check(); i++) await sleep(5);
  }

  test('head, data and end reach the handler; Host and path come from the target', async () => {
    const upstream = new Upstream();
    const recorder = new Recorder();
    send(upstream, '/v1/chat/completions?x=1', recorder);
    await until(() => recorder.heard.includes('end'));
    assert.deepEqual(recorder.heard, [
      'head 200',
      'data {"path":"/v1/chat/completions?x=1"}',
      'end',
    ]);
    const headers = seen.at(-1)!;
    assert.equal(headers.host, new URL(base).host);
    assert.equal(headers['x-request-id'], 'r');
    assert.equal(headers['x-forwarded-for'], undefined);
    upstream.close();
  });

  test('a response that breaks off is one error, after the data that came', async () => {
    const upstream = new Upstream();
    const recorder = new Recorder();
    send(upstream, '/v1/reset', recorder);
    await until(() => recorder.heard.some((h) => h.startsWith('error')));
    await sleep(50);
    assert.deepEqual(recorder.heard, ['head 200', 'data one', 'error ECONNRESET']);
    upstream.close();
  });

  test('aborted before it has a socket, a request leaves no connection open', async () => {
    const upstream = new Upstream();
    const recorder = new Recorder();
    await until(() => open.size === 0);
    send(upstream, '/v1/chat/completions', recorder).abort();
    await sleep(100);
    await until(() => open.size === 0);
    assert.equal(open.size, 0, 'an idle connection was left in the pool');
    assert.deepEqual(recorder.heard, []);
    upstream.close();
  });
});
