/**
 * Client abuse through a real sidecar: bodies at, over and far over the limit, bodies that are
 * not JSON (or JSON too deep to re-serialise), malformed and injected headers, and every way a
 * request could try to pick the upstream host. The sidecar must answer each with the right
 * OpenAI-shaped error, never crash, and send nothing anywhere but the pool's own endpoint (a
 * canary server that every trick names must see no connection at all).
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';
import { ask } from '../../harness/ask.ts';
import { sidecarOn, type SidecarOnPool } from '../../harness/pool-file.ts';
import { rssMb } from '../../harness/proc.ts';
import { errorOf } from './client.ts';
import { recordFigure } from './figures.ts';
import { poolYaml } from './fixtures.ts';
import { rawConnect, rawExchange, statusOf } from './raw-client.ts';
import { recorder, type Recorder } from './recorder.ts';

const LIMIT = 1024 * 1024;

/** A server that must never be reached: it counts connections. */
async function canary(): Promise<{
  port: number;
  connections: () => number;
  close(): Promise<void>;
}> {
  let connections = 0;
  const server = net.createServer((s) => {
    connections++;
    s.destroy();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    port: (server.address() as AddressInfo).port,
    connections: () => connections,
    close: () => new Promise((r) => server.close(() => r())),
  };
}

const chatBody = (extra: Record<string, unknown> = {}): Record<string, unknown> => ({
  model: 'm',
  messages: [{ role: 'user', content: 'hi' }],
  ...extra,
});

/** A chat body of exactly `bytes` bytes. */
function bodyOfSize(bytes: number): string {
  const empty = JSON.stringify(chatBody({ pad: '' }));
  return JSON.stringify(chatBody({ pad: 'x'.repeat(bytes - empty.length) }));
}

describe('client abuse through a real sidecar', () => {
  let backend: Recorder;
  let rewriting: Recorder;
  let trap: Awaited<ReturnType<typeof canary>>;
  let plain: SidecarOnPool;
  let rewrite: SidecarOnPool;
  let port: number;

  before(async () => {
    backend = await recorder();
    rewriting = await recorder();
    trap = await canary();
    plain = await sidecarOn(poolYaml([`{name: r, url: '${backend.url}/v1'}`]), [
      '--max-body-bytes',
      String(LIMIT),
    ]);
    rewrite = await sidecarOn(
      poolYaml([`{name: w, url: '${rewriting.url}/v1', model: provider-model}`]),
    );
    port = Number(new URL(plain.sidecar.url).port);
  });
  after(async () => {
    await plain?.stop();
    await rewrite?.stop();
    await backend?.close();
    await rewriting?.close();
    await trap?.close();
  });

  test('bodies: at the limit forwarded whole, over it 413, a huge declared one refused unread', async (t) => {
    const at = await ask(plain.sidecar.url, bodyOfSize(LIMIT));
    assert.equal(at.status, 200);
    assert.equal(backend.seen.at(-1)?.bytes, LIMIT);

    // One byte over: 413, and the connection stays usable (the rest was drained).
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const over = await ask(plain.sidecar.url, bodyOfSize(LIMIT + 1), { agent });
    assert.equal(over.status, 413);
    assert.equal(errorOf(over)?.code, 'body_too_large');
    const again = await ask(plain.sidecar.url, chatBody(), { agent });
    assert.equal(again.status, 200);
    agent.destroy();

    const before = backend.seen.length;
    const huge = await rawExchange(
      port,
      'POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 107374182400\r\n\r\n{"model"',
    );
    assert.equal(statusOf(huge), 413);
    assert.match(huge, /connection: close/i);

    // An endless chunked body: read and dropped up to the drain limit, then the connection is cut.
    const rssBefore = rssMb(plain.sidecar.pid) ?? NaN;
    const c = await rawConnect(port);
    c.socket.write(
      'POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n',
    );
    const piece = `${(1024 * 1024).toString(16)}\r\n${'x'.repeat(1024 * 1024)}\r\n`;
    let sent = 0;
    while (!c.socket.destroyed && statusOf(c.received()) === 0 && sent < 200 * 1024 * 1024) {
      if (!c.socket.write(piece)) {
        await new Promise<void>((resolve) => {
          const done = (): void => {
            c.socket.off('drain', done).off('close', done);
            resolve();
          };
          c.socket.on('drain', done).on('close', done);
        });
      }
      sent += 1024 * 1024;
    }
    const end = await c.closed;
    const rssAfter = rssMb(plain.sidecar.pid) ?? NaN;
    // The 413 goes out while the client is still sending; closing a connection with unread
    // bytes resets it, which may discard the 413 before the client reads it.
    assert.ok([0, 413].includes(statusOf(end.received)), end.received.slice(0, 100));
    assert.ok(
      sent >= LIMIT + 64 * 1024 * 1024,
      `cut after ${sent} bytes, not before the drain limit`,
    );
    assert.equal(backend.seen.length, before, 'nothing oversized reached the backend');

    const parallel = await Promise.all(
      Array.from({ length: 16 }, () => ask(plain.sidecar.url, bodyOfSize(LIMIT))),
    );
    assert.ok(parallel.every((a) => a.status === 200));
    recordFigure(t, {
      fault: 'client: huge bodies',
      load: 'at the limit, limit + 1, 100 GiB declared, endless chunked, 16 × limit at once',
      lost: 0,
      requests: 20,
      endlessBodyCutAfterMiB: Math.round(sent / 1024 / 1024),
      rssGrowthMiB: Math.round(rssAfter - rssBefore),
    });
  });

  test('bodies that are not JSON objects: 400 with a code, and the sidecar keeps serving', async (t) => {
    const cases: [string, string | Buffer, string][] = [
      ['empty', '', 'invalid_json'],
      ['unterminated', '{"model":', 'invalid_json'],
      ['trailing garbage', '{"model":"m"}garbage', 'invalid_json'],
      ['raw NUL in a string', '{"model":"m\u0000"}', 'invalid_json'],
      ['invalid UTF-8', Buffer.from([0xff, 0xfe, 0x7b, 0x7d]), 'invalid_json'],
      ['null', 'null', 'invalid_request'],
      ['array', '[]', 'invalid_request'],
      ['string', '"hello"', 'invalid_request'],
      ['number out of range', '1e400', 'invalid_request'],
      ['deep array', `${'['.repeat(200_000)}${']'.repeat(200_000)}`, 'invalid_request'],
    ];
    for (const [name, body, code] of cases) {
      const a = await new Promise<{ status: number; text: string }>((resolve, reject) => {
        const req = http.request(`${plain.sidecar.url}/v1/chat/completions`, {
          method: 'POST',
          agent: false,
          headers: {
            'content-type': 'application/json',
            'content-length': Buffer.byteLength(body),
          },
        });
        req.on('response', (res) => {
          let text = '';
          res.on('data', (d: Buffer) => (text += d.toString()));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
        });
        req.on('error', reject);
        req.end(body);
      });
      assert.equal(a.status, 400, name);
      assert.equal((JSON.parse(a.text) as { error: { code: string } }).error.code, code, name);
    }

    // Valid but hostile: __proto__ is just a key, the last duplicate key wins.
    const proto = await ask(
      plain.sidecar.url,
      '{"__proto__":{"polluted":1},"model":"m","messages":[],"stream":true,"stream":false}',
    );
    assert.equal(proto.status, 200);
    assert.equal(({} as Record<string, unknown>)['polluted'], undefined);

    // Nested deeper than JSON.stringify can go: only a backend with a model rewrite re-serialises.
    const deep = `{"model":"m","messages":[{"role":"user","content":"hi"}],"x":${'['.repeat(100_000)}${']'.repeat(100_000)}}`;
    const passed = await ask(plain.sidecar.url, deep);
    assert.equal(passed.status, 200, 'passed through unchanged where nothing is rewritten');
    const refused = await ask(rewrite.sidecar.url, deep);
    assert.equal(refused.status, 400, 'this used to crash the sidecar');
    assert.equal(errorOf(refused)?.code, 'invalid_request');
    assert.equal(rewriting.seen.length, 0);
    const fine = await ask(rewrite.sidecar.url, chatBody());
    assert.equal(fine.status, 200, 'the rewriting sidecar still serves');
    assert.equal(
      (JSON.parse(rewriting.seen.at(-1)!.body) as { model: string }).model,
      'provider-model',
    );
    recordFigure(t, {
      fault: 'client: bad JSON',
      load: `${cases.length + 4} hostile bodies`,
      lost: 0,
      requests: cases.length + 4,
    });
  });

  test('malformed and injected headers: 400 or 431 in OpenAI shape, the connection closed', async (t) => {
    const line = 'POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n';
    const body = JSON.stringify(chatBody());
    const cases: [string, string, number][] = [
      ['bare CR in a value', `${line}x-a: one\rtwo\r\ncontent-length: 2\r\n\r\n{}`, 400],
      ['NUL in a value', `${line}x-a: one\u0000two\r\ncontent-length: 2\r\n\r\n{}`, 400],
      ['space in a name', `${line}x a: b\r\ncontent-length: 2\r\n\r\n{}`, 400],
      ['obsolete line folding', `${line}x-a: one\r\n two\r\ncontent-length: 2\r\n\r\n{}`, 400],
      [
        'content-length and transfer-encoding',
        `${line}content-length: 2\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n`,
        400,
      ],
      ['two content-lengths', `${line}content-length: 2\r\ncontent-length: 3\r\n\r\n{}`, 400],
      [
        'a 32 KiB header',
        `${line}x-big: ${'a'.repeat(32 * 1024)}\r\ncontent-length: 2\r\n\r\n{}`,
        431,
      ],
    ];
    const before = backend.seen.length;
    for (const [name, request, status] of cases) {
      const received = await rawExchange(port, request);
      assert.equal(statusOf(received), status, `${name}: ${received.slice(0, 100)}`);
      assert.match(received, /"error":\{"message":/, name);
      assert.match(received, /connection: close/i, name);
    }
    assert.equal(backend.seen.length, before, 'none of them reached the backend');

    // A second request hidden in the first one's body is just the next request on the
    // connection: the backend gets two well-framed requests, with the sidecar's own lengths.
    const smuggled = `${line}content-length: ${body.length}\r\n\r\n${body}POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:${trap.port}\r\ncontent-length: ${body.length}\r\n\r\n${body}`;
    const both = await rawExchange(port, smuggled, 1_000);
    assert.equal([...both.matchAll(/HTTP\/1\.1 200/g)].length, 2);
    const last = backend.seen.slice(-2);
    assert.deepEqual(
      last.map((s) => s.bytes),
      [body.length, body.length],
    );
    assert.ok(last.every((s) => s.headers.host === backend.host));
    recordFigure(t, {
      fault: 'client: header injection',
      load: `${cases.length + 1} raw requests`,
      lost: 0,
      requests: cases.length + 1,
    });
  });

  test('nothing a client sends selects the upstream host', async (t) => {
    const target = `127.0.0.1:${trap.port}`;
    const ok = (received: string): number => statusOf(received);
    const body = JSON.stringify(chatBody({ model: `http://${target}/v1` }));
    const post = (path: string, headers: string): string =>
      `POST ${path} HTTP/1.1\r\nhost: x\r\n${headers}content-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`;
    const attempts: [string, string, number][] = [
      ['absolute-form target', post(`http://${target}/v1/chat/completions`, ''), 404],
      [
        'Host header',
        post('/v1/chat/completions', `host: ${target}\r\n`).replace('host: x\r\n', ''),
        200,
      ],
      ['X-Forwarded-Host', post('/v1/chat/completions', `x-forwarded-host: ${target}\r\n`), 200],
      ['Forwarded', post('/v1/chat/completions', `forwarded: host=${target}\r\n`), 200],
      [
        'X-Original-URL',
        post(
          '/v1/chat/completions',
          `x-original-url: http://${target}/\r\nx-rewrite-url: http://${target}/\r\n`,
        ),
        200,
      ],
      [
        'x-switchyard-* headers',
        post(
          '/v1/chat/completions',
          `x-switchyard-backend: ${target}\r\nx-switchyard-endpoint: ${target}\r\n`,
        ),
        200,
      ],
      ['scheme-relative path', post(`//${target}/v1/chat/completions`, ''), 404],
      ['dot segments', post('/v1/chat/completions/../../../x', ''), 404],
      [
        'userinfo-looking query',
        `GET /v1/models?x=@${target}/ HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n`,
        200,
      ],
      // No tunnel: the connection is closed without an answer.
      ['CONNECT', `CONNECT ${target} HTTP/1.1\r\nhost: ${target}\r\n\r\n`, 0],
      // No upgrade: answered as a plain request, the hop-by-hop headers dropped.
      [
        'Upgrade',
        `GET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n`,
        200,
      ],
    ];
    const seenBefore = backend.seen.length;
    const results: Record<string, number> = {};
    for (const [name, request, status] of attempts) {
      const received = await rawExchange(port, request, 1_000);
      results[name] = ok(received);
      assert.equal(ok(received), status, `${name}: ${received.slice(0, 120)}`);
    }
    assert.equal(trap.connections(), 0, 'the canary was never contacted');
    for (const s of backend.seen.slice(seenBefore)) {
      assert.equal(s.headers.host, backend.host, 'the backend’s own Host');
      assert.deepEqual(
        Object.keys(s.headers).filter((h) => h.startsWith('x-switchyard-')),
        [],
      );
      assert.ok(s.url === '/v1/chat/completions' || s.url.startsWith('/v1/models'), s.url);
    }
    recordFigure(t, {
      fault: 'client: choosing the upstream host (SSRF)',
      load: `${attempts.length} attempts naming a canary server`,
      lost: 0,
      requests: attempts.length,
      canaryConnections: trap.connections(),
      statuses: results,
    });
  });
});
