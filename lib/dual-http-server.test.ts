import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import http from 'node:http';
import http2 from 'node:http2';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { connectionOf, DualHttpServer } from './dual-http-server.ts';

let dir = '';
let tls: { cert: string; key: string };

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'switchyard-dual-'));
  await promisify(execFile)('openssl', [
    ...['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'],
    ...['-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem'), '-days', '1'],
    ...['-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1'],
  ]);
  tls = {
    cert: await readFile(join(dir, 'cert.pem'), 'utf8'),
    key: await readFile(join(dir, 'key.pem'), 'utf8'),
  };
});
after(() => rm(dir, { recursive: true, force: true }));

/** A server answering `<protocol> <path> <connection number>`, streaming on /stream. */
async function serve(secure: boolean) {
  const connections: object[] = [];
  const server = new DualHttpServer({ tls: secure ? tls : undefined }, (req, res) => {
    const c = connectionOf(req);
    if (!connections.includes(c)) connections.push(c);
    const line = `${req.httpVersionMajor} ${req.url} ${connections.indexOf(c)}`;
    if (req.url === '/stream') {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(`data: ${line}\n\n`);
      return; // held open
    }
    req.resume();
    req.on('end', () => res.writeHead(200).end(line));
  });
  await new Promise<void>((r) => server.server.listen(0, '127.0.0.1', r));
  const { port } = server.server.address() as AddressInfo;
  return { server, origin: `${secure ? 'https' : 'http'}://127.0.0.1:${port}` };
}

function h2Get(session: http2.ClientHttp2Session, path: string, body?: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const stream = session.request({ ':path': path, ':method': body ? 'POST' : 'GET' });
    let text = '';
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => {
      text += chunk;
      if (path === '/stream') resolve(text);
    });
    stream.on('end', () => resolve(text));
    stream.on('error', reject);
    stream.end(body);
  });
}

function h1Get(origin: string, path: string): Promise<string> {
  const lib = origin.startsWith('https') ? https : http;
  return new Promise((resolve, reject) => {
    const req = lib.get(`${origin}${path}`, { ca: tls.cert, agent: false }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => resolve(text));
    });
    req.on('error', reject);
  });
}

for (const secure of [false, true])
  describe(`one port, both protocols (${secure ? 'TLS, by ALPN' : 'clear text, by the first bytes'})`, () => {
    test('HTTP/2 streams and requests share one connection; HTTP/1.1 gets its own', async () => {
      const { server, origin } = await serve(secure);
      const session = http2.connect(origin, { ca: tls.cert });
      try {
        assert.equal(await h2Get(session, '/stream'), 'data: 2 /stream 0\n\n');
        assert.equal(await h2Get(session, '/report', '{"a":1}'), '2 /report 0');
        assert.equal(await h2Get(session, '/report', '{"a":2}'), '2 /report 0');
        assert.equal(await h1Get(origin, '/old-sidecar'), '1 /old-sidecar 1');
      } finally {
        session.destroy();
        server.closeAllConnections();
        await new Promise<void>((r) => server.close(() => r()));
      }
    });

    test('closeAllConnections ends an open HTTP/2 stream at once', async () => {
      const { server, origin } = await serve(secure);
      const session = http2.connect(origin, { ca: tls.cert });
      session.on('error', () => undefined);
      const closed = new Promise<void>((r) => session.once('close', () => r()));
      await h2Get(session, '/stream');
      server.closeAllConnections();
      await closed;
      await new Promise<void>((r) => server.close(() => r()));
    });
  });
