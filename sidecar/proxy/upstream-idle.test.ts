/**
 * `timeouts.idle` after a timeout that came with a chunk: Node hands only a socket's first
 * timeout to its request, so once `UpstreamRequest` had set one aside (a chunk was waiting, after
 * a stall of the sidecar's own loop), an upstream that then went silent was never timed out and
 * its stream hung.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import { Upstream, upstreamTarget, type UpstreamHandler } from './upstream.ts';

const IDLE_MS = 100;

let server: http.Server;
let base = '';

before(async () => {
  server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('a');
      // Sent while the client's loop is blocked (below), then nothing more, ever.
      setTimeout(() => res.write('b'), IDLE_MS * 1.5);
    });
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

/** Blocks this thread, as a long task or a GC pause of the sidecar's loop would. */
function blockFor(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

test('an upstream that goes silent after a timeout set aside for a waiting chunk is still timed out', async () => {
  const upstream = new Upstream();
  const heard: string[] = [];
  const ended = new Promise<void>((resolve, reject) => {
    const guard = setTimeout(() => reject(new Error(`still waiting: ${heard.join(', ')}`)), 5_000);
    const handler: UpstreamHandler = {
      onResponseHead: (status) => {
        heard.push(`head ${status}`);
        call.watchIdle(IDLE_MS);
      },
      onData: (chunk) => {
        heard.push(`data ${chunk.toString()}`);
        // The idle timer runs out while blocked, and 'b' arrives meanwhile: the timeout is set
        // aside for it.
        if (chunk.toString() === 'a') blockFor(IDLE_MS * 3);
      },
      onEnd: () => {
        heard.push('end');
        clearTimeout(guard);
        resolve();
      },
      onError: (code) => {
        heard.push(`error ${code}`);
        clearTimeout(guard);
        resolve();
      },
    };
    const call = upstream.request(
      {
        target: upstreamTarget(`${base}/v1/chat/completions`),
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: Buffer.from('{}'),
        connectTimeoutMs: 1_000,
      },
      handler,
    );
  });
  try {
    await ended;
  } finally {
    upstream.close();
  }
  assert.deepEqual(heard, ['head 200', 'data a', 'data b', 'error ETIMEDOUT']);
});
