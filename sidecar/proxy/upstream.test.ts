import assert from 'node:assert/strict';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import type { AddressInfo, Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, test } from 'node:test';
import type { EndpointTls } from '../../crds/policy-types.ts';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeServingTls } from '../../harness/tls.ts';
import {
  Upstream,
  isTlsFailure,
  upstreamErrorCode,
  upstreamTarget,
  type UpstreamHandler,
} from './upstream.ts';

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

describe('upstream tls', () => {
  let dir = '';
  let ca = '';
  let server: https.Server;
  let base = '';

  before(async () => {
    // The sidecar never imports the controller (layers.test.ts), so not its certificate maker.
    dir = await mkdtemp(join(tmpdir(), 'switchyard-upstream-tls-'));
    const files = makeServingTls(dir, 'upstream-test');
    ca = await readFile(files.caFile, 'utf8');
    const [cert, key] = await Promise.all([readFile(files.certFile), readFile(files.keyFile)]);
    server = https.createServer({ cert, key }, (req, res) => {
      req.resume();
      req.on('end', () => res.end('ok'));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(async () => {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
    await rm(dir, { recursive: true, force: true });
  });

  async function call(upstream: Upstream, tls: EndpointTls | undefined): Promise<string[]> {
    const recorder = new Recorder();
    upstream.request(
      {
        target: upstreamTarget(`${base}/v1/models`),
        method: 'GET',
        headers: {},
        body: Buffer.alloc(0),
        connectTimeoutMs: 2_000,
        tls,
      },
      recorder,
    );
    for (
      let i = 0;
      i < 400 && !recorder.heard.some((h) => h === 'end' || h.startsWith('error'));
      i++
    )
      await sleep(5);
    return recorder.heard;
  }

  test('trusts the CA of the endpoint, checks the name it is given, logs a refusal once', async () => {
    const warned: unknown[] = [];
    const upstream = new Upstream({ logger: { warn: (o: unknown) => warned.push(o) } });
    const trusted = { caBundle: ca, serverName: 'localhost' };
    assert.deepEqual(await call(upstream, trusted), ['head 200', 'data ok', 'end']);
    // A new snapshot's equal setting (another object) reuses the agent and its connection.
    assert.deepEqual(await call(upstream, { ...trusted }), ['head 200', 'data ok', 'end']);
    const [wrongName] = await call(upstream, { caBundle: ca, serverName: 'other.test' });
    assert.match(
      wrongName ?? '',
      /^error ERR_TLS_CERT_ALTNAME_INVALID: Hostname\/IP does not match .*other\.test/,
    );
    const [untrusted] = await call(upstream, undefined);
    assert.match(untrusted ?? '', /^error (UNABLE_TO_VERIFY_LEAF_SIGNATURE|SELF_SIGNED)/);
    assert.doesNotMatch(untrusted ?? '', /--use-system-ca/);
    await call(upstream, undefined);
    assert.equal(warned.length, 2, 'one line per endpoint and reason within 30 s');
    assert.deepEqual(await call(upstream, { insecureSkipVerify: true }), [
      'head 200',
      'data ok',
      'end',
    ]);
    upstream.close();
  });

  test('a TLS handshake that never completes is a connect timeout, like a TCP connect', async () => {
    // Accepts the connection and never answers the ClientHello.
    const accepted: net.Socket[] = [];
    const silent = net.createServer((socket) => accepted.push(socket));
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    const port = (silent.address() as AddressInfo).port;
    const upstream = new Upstream();
    const recorder = new Recorder();
    upstream.request(
      {
        target: upstreamTarget(`https://127.0.0.1:${port}/v1/models`),
        method: 'GET',
        headers: {},
        body: Buffer.alloc(0),
        connectTimeoutMs: 100,
        tls: { caBundle: ca },
      },
      recorder,
    );
    for (let i = 0; i < 400 && recorder.heard.length === 0; i++) await sleep(5);
    assert.deepEqual(recorder.heard, ['error ECONNECT_TIMEOUT']);
    upstream.close();
    for (const socket of accepted) socket.destroy();
    silent.close();
  });

  test('names certificate failures, and only those', () => {
    assert.ok(isTlsFailure('CERT_HAS_EXPIRED'));
    assert.ok(isTlsFailure('ERR_SSL_WRONG_VERSION_NUMBER'));
    assert.ok(!isTlsFailure('ECONNREFUSED'));
    assert.ok(!isTlsFailure(undefined));
    const expired = Object.assign(new Error('certificate has expired'), {
      code: 'CERT_HAS_EXPIRED',
    });
    assert.equal(upstreamErrorCode(expired), 'CERT_HAS_EXPIRED: certificate has expired');
    const refused = Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });
    assert.equal(upstreamErrorCode(refused), 'ECONNREFUSED');
  });
});
