/**
 * What clients do at the HTTP level (Expect, Connection-named headers, half-close, pipelining,
 * encodings, a BOM) through a real sidecar process to a backend that records what reached it.
 * None of it may fail the request or be counted against the endpoint.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { gzipSync } from 'node:zlib';
import { scratchDir } from '../../harness/pool-file.ts';
import { startSidecar, stopAll, type RunningProcess } from '../../harness/processes.ts';
import { rawConnect, rawExchange } from '../reliability/raw-client.ts';
import { debugBackends, eventually } from '../helpers.ts';

interface Seen {
  headers: http.IncomingHttpHeaders;
  body: string;
}

/**
 * A backend that records each request and answers a small completion; with `x-test-trailer` it
 * answers chunked with a trailer. `maxConcurrent` is the most requests it held at once.
 */
async function recordingBackend(): Promise<{
  url: string;
  seen: Seen[];
  maxConcurrent(): number;
  close(): Promise<void>;
}> {
  const seen: Seen[] = [];
  let concurrent = 0;
  let maxConcurrent = 0;
  const server = http.createServer((req, res) => {
    if (req.method === 'GET' && req.url === '/metrics') {
      // The sidecar's load scrape, not a client's request: no metrics here, not recorded.
      res.writeHead(404).end();
      return;
    }
    concurrent++;
    maxConcurrent = Math.max(maxConcurrent, concurrent);
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      seen.push({ headers: req.headers, body });
      const n = seen.length;
      // Held a little, so requests that overlap would be seen overlapping.
      setTimeout(() => {
        concurrent--;
        const answer = JSON.stringify({ id: `r${n}`, object: 'chat.completion', choices: [] });
        if (req.headers['x-test-trailer'] !== undefined) {
          res.writeHead(200, { 'content-type': 'application/json', trailer: 'x-checksum' });
          res.write(answer);
          res.addTrailers({ 'x-checksum': 'abc123' });
          res.end();
          return;
        }
        res.writeHead(200, {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(answer),
        });
        res.end(answer);
      }, 5);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    seen,
    maxConcurrent: () => maxConcurrent,
    close: () =>
      new Promise((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

const BODY = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] });
const head = (extra = '', length = Buffer.byteLength(BODY)): string =>
  `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${length}\r\n${extra}\r\n`;

describe('client protocol behaviours', () => {
  let backend: Awaited<ReturnType<typeof recordingBackend>>;
  let sidecar: RunningProcess;
  let port: number;
  let cleanup: () => Promise<void>;

  before(async () => {
    backend = await recordingBackend();
    const scratch = await scratchDir();
    cleanup = scratch.cleanup;
    const poolFile = join(scratch.dir, 'pool.yaml');
    await writeFile(
      poolFile,
      [
        'apiVersion: switchyard.dev/v1alpha1',
        'kind: InferencePool',
        'metadata: {name: protocol}',
        'spec:',
        '  backends:',
        `  - {name: a, url: '${backend.url}/v1'}`,
        '  timeouts: {firstByte: 5s}',
        '  health: {minRequests: 1, maxErrorRate: 0.5, openFor: 60s}',
        '',
      ].join('\n'),
    );
    // A body limit of 2 MiB: the curl test sends more than 1 MB, the gzip test decodes past it.
    sidecar = await startSidecar(poolFile, ['--max-body-bytes', String(2 << 20)]);
    port = Number(new URL(sidecar.url).port);
  });
  after(async () => {
    await stopAll([sidecar]);
    await backend?.close();
    await cleanup?.();
  });

  const lastSeen = (): Seen => backend.seen.at(-1)!;

  test('curl with a body over 1 MB (Expect: 100-continue) gets its answer; Expect is not forwarded', async () => {
    const big = JSON.stringify({
      model: 'm',
      messages: [{ role: 'user', content: 'x'.repeat(1_200_000) }],
    });
    const { dir, cleanup: rm } = await scratchDir();
    try {
      const file = join(dir, 'body.json');
      await writeFile(file, big);
      // curl adds `Expect: 100-continue` by itself to bodies over 1 MB (libcurl's rule).
      const { stdout } = await promisify(execFile)('curl', [
        '-sS',
        '-v',
        '--max-time',
        '20',
        '-H',
        'content-type: application/json',
        '--data-binary',
        `@${file}`,
        '-w',
        '\n%{http_code}',
        `${sidecar.url}/v1/chat/completions`,
      ]).catch((err: { stdout: string; stderr: string }) => {
        throw new Error(`curl failed: ${err.stderr}`);
      });
      assert.match(stdout, /\n200$/);
      assert.equal(lastSeen().body.length, big.length);
      assert.equal(lastSeen().headers.expect, undefined);
    } finally {
      await rm();
    }
  });

  test('headers named in Connection are not forwarded (RFC 9110 §7.6.1)', async () => {
    const received = await rawExchange(
      port,
      head('connection: close, x-secret\r\nx-secret: hunter2\r\nx-kept: yes\r\n') + BODY,
    );
    assert.match(received, /^HTTP\/1\.1 200/);
    assert.equal(lastSeen().headers['x-secret'], undefined);
    assert.equal(lastSeen().headers['x-kept'], 'yes');
  });

  test('a client that half-closes after its request still gets the answer', async () => {
    const c = await rawConnect(port);
    c.socket.end(head() + BODY);
    const { received } = await c.closed;
    assert.match(received, /^HTTP\/1\.1 200/);
    assert.match(received, /"chat\.completion"/);
  });

  test('pipelined requests are answered in order, one upstream request at a time', async () => {
    const before = backend.seen.length;
    const N = 30;
    const c = await rawConnect(port);
    c.socket.write((head() + BODY).repeat(N - 1) + head('connection: close\r\n') + BODY);
    const { received } = await c.closed;
    assert.equal(received.match(/HTTP\/1\.1 200/g)?.length, N);
    assert.equal(backend.seen.length - before, N);
    const ids = [...received.matchAll(/"id":"r(\d+)"/g)].map((m) => Number(m[1]));
    assert.deepEqual(
      ids,
      [...ids].sort((a, b) => a - b),
      'answers in the order they were asked',
    );
    assert.equal(backend.maxConcurrent(), 1, 'never two upstream requests of one connection');
  });

  test('upstream trailers reach the client', async () => {
    const received = await rawExchange(
      port,
      head('x-test-trailer: 1\r\nte: trailers\r\nconnection: close\r\n') + BODY,
    );
    assert.match(received, /^HTTP\/1\.1 200/);
    assert.match(received, /\r\nx-checksum: abc123\r\n/i);
  });

  test('a gzip-encoded body is decoded; an unknown encoding gets a 415', async () => {
    const gz = gzipSync(BODY);
    const ok = await fetch(`${sidecar.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' },
      body: gz,
    });
    assert.equal(ok.status, 200, await ok.clone().text());
    assert.equal(lastSeen().body, BODY);
    assert.equal(lastSeen().headers['content-encoding'], undefined);

    const br = await fetch(`${sidecar.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'content-encoding': 'br' },
      body: 'whatever',
    });
    assert.equal(br.status, 415);
    const error = ((await br.json()) as { error: { code: string; message: string } }).error;
    assert.equal(error.code, 'unsupported_encoding');
    assert.match(error.message, /gzip/);
  });

  test('a gzip body that decodes past the body limit gets a 413', async () => {
    const huge = JSON.stringify({ model: 'm', pad: ' '.repeat(3 << 20) });
    const res = await fetch(`${sidecar.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' },
      body: gzipSync(huge),
    });
    assert.equal(res.status, 413);
    assert.match(await res.text(), /body_too_large/);
  });

  test('a JSON body with a UTF-8 byte-order mark is accepted', async () => {
    const withBom = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(BODY)]);
    const res = await fetch(`${sidecar.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: withBom,
    });
    assert.equal(res.status, 200, await res.clone().text());
    assert.equal(lastSeen().body, BODY, 'forwarded without the BOM');
  });

  test('none of it was counted against the endpoint', async () => {
    await eventually(
      async () => (await debugBackends(sidecar)).endpoints[0]?.inFlight === 0,
      5_000,
      'nothing in flight',
    );
    const [endpoint] = (await debugBackends(sidecar)).endpoints;
    assert.equal(endpoint?.errors, 0);
    assert.equal(endpoint?.breaker, 'closed');
  });
});
