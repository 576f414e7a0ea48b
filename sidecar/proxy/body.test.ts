import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, test } from 'node:test';
import { drainRest, type DrainResult } from './body.ts';

/**
 * A real server that reads `firstBytes` of each request body, then calls `drainRest` and answers
 * with what it returned; the client sends `chunks` of 1 KiB.
 */
async function drainAfter(
  chunks: number,
  maxBytes: number,
  { endBody = true } = {},
): Promise<DrainResult> {
  let result: (r: DrainResult) => void = () => {};
  const done = new Promise<DrainResult>((resolve) => (result = resolve));
  const server = http.createServer((req, res) => {
    req.once('data', () => {
      req.pause();
      void drainRest(req, maxBytes).then((r) => {
        result(r);
        if (r !== 'aborted') res.end(r);
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const req = http.request({ port, host: '127.0.0.1', method: 'POST', path: '/' });
  req.on('error', () => {});
  req.on('response', (res) => res.resume());
  const chunk = Buffer.alloc(1024, 1);
  for (let i = 0; i < chunks; i += 1) req.write(chunk);
  if (endBody) req.end();
  else setTimeout(() => req.destroy(), 50);
  try {
    return await done;
  } finally {
    server.closeAllConnections();
    server.close();
  }
}

describe('drainRest', () => {
  test('reads the rest of the body to its end', async () => {
    assert.equal(await drainAfter(64, 1024 * 1024), 'drained');
  });

  test('stops reading past its bound, so a client cannot make it read forever', async () => {
    assert.equal(await drainAfter(512, 16 * 1024), 'cut');
  });

  test('says so when the client leaves before its body ends', async () => {
    assert.equal(await drainAfter(4, 1024 * 1024, { endBody: false }), 'aborted');
  });
});
