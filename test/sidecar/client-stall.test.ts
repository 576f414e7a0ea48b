/**
 * `timeouts.clientStall` through real processes: a client that stops reading is disconnected and
 * its upstream request aborted, so the model server gets its slot back, and nothing counts against
 * the endpoint; a client that keeps reading, however often its socket fills, is not cut.
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import { describe, test } from 'node:test';
import { ask, completeStream } from '../../harness/ask.ts';
import { balancePool } from '../../harness/pool-file.ts';
import { debugBackends, eventually, simStats, sleep, startPool } from '../helpers.ts';

const CLIENT_STALL_MS = 1_000;

/** The pool: one endpoint whose breaker a single counted error would open. */
const poolOf = (urls: string[]): string =>
  balancePool(
    urls,
    [
      `  timeouts: {clientStall: ${CLIENT_STALL_MS}ms}`,
      '  health: {minRequests: 1, maxErrorRate: 0.5, openFor: 30s}',
    ].join('\n'),
  );

/** A streamed chat request of `maxTokens` tokens (about 190 bytes of SSE each from the sim). */
function streamRequest(maxTokens: number): string {
  const body = JSON.stringify({
    model: 'm',
    stream: true,
    max_tokens: maxTokens,
    messages: [{ role: 'user', content: 'tell me a long story' }],
  });
  return (
    'POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n' +
    `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`
  );
}

interface Reader {
  socket: net.Socket;
  /** Bytes received so far. */
  bytes(): number;
  /** The last bytes received (where `data: [DONE]` is, on a complete stream). */
  tail(): string;
  /** Resolves when the connection has closed, by either side. */
  closed: Promise<void>;
}

/** A raw client that sends `request` and counts what it reads; reading is the caller's to pause. */
function connect(port: number, request: string): Promise<Reader> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    let bytes = 0;
    let tail = '';
    socket.on('data', (data: Buffer) => {
      bytes += data.length;
      tail = (tail + data.toString('latin1')).slice(-256);
    });
    socket.on('error', () => undefined);
    const closed = new Promise<void>((done) => socket.once('close', () => done()));
    socket.once('error', reject);
    socket.once('connect', () => {
      socket.write(request);
      resolve({ socket, bytes: () => bytes, tail: () => tail, closed });
    });
  });
}

/** `switchyard_client_stalled_total` of the sidecar (0 before its first increment). */
async function stalledTotal(adminUrl: string): Promise<number> {
  const text = await (await fetch(`${adminUrl}/metrics`)).text();
  return Number(/^switchyard_client_stalled_total\{pool="test"\} (\d+)$/m.exec(text)?.[1] ?? 0);
}

describe('a client that stops reading (timeouts.clientStall)', () => {
  test('is disconnected and its upstream request aborted; the endpoint is not blamed, others are served', async () => {
    // 0.1 ms a token: a 20-second answer, so the simulator is still generating when the cut comes.
    const pool = await startPool(
      [{ name: 'a', flags: ['--slots', '64', '--decode-ms-per-token', '0.1'] }],
      poolOf,
    );
    try {
      const { sidecar } = pool;
      const sim = pool.sims[0]!;
      const stalled = await connect(Number(new URL(sidecar.url).port), streamRequest(200_000));
      await eventually(() => stalled.bytes() > 0, 10_000, 'the first chunk');
      // Reads nothing more: every buffer between the sidecar and this client fills.
      stalled.socket.pause();

      const other = await ask(sidecar.url);
      assert.ok(completeStream(other), 'another client is served meanwhile');

      await eventually(
        async () => (await stalledTotal(sidecar.adminUrl!)) === 1,
        30_000,
        'switchyard_client_stalled_total 1',
      );
      await eventually(
        async () => {
          const stats = await simStats(sim);
          return stats.aborted === 1 && stats.inFlight === 0;
        },
        10_000,
        'the simulator to see its request aborted',
      );
      const endpoint = (await debugBackends(sidecar)).endpoints[0]!;
      assert.equal(endpoint.errors, 0, 'no error counted against the endpoint');
      assert.equal(endpoint.breaker, 'closed');
      assert.equal(endpoint.inFlight, 0);

      // A client that does not read cannot see its connection go: it does once it reads again.
      stalled.socket.resume();
      await stalled.closed;
      assert.ok(!stalled.tail().includes('data: [DONE]'), 'the stream was cut');

      const warning = sidecar
        .output()
        .split('\n')
        .filter((line) => line.startsWith('{'))
        .map((line) => JSON.parse(line) as Record<string, unknown>)
        .find((entry) => entry['msg'] === 'client stopped reading; connection closed');
      assert.ok(warning, 'the warning is logged');
      assert.equal(warning['pool'], 'test');
      assert.equal(warning['endpoint'], endpoint.id);
      assert.ok(Number(warning['stalledMs']) >= CLIENT_STALL_MS, String(warning['stalledMs']));

      assert.ok(completeStream(await ask(sidecar.url)), 'the endpoint still serves');
    } finally {
      await pool.stop();
    }
  });

  test('is not cut while it keeps reading, however often its socket fills', async () => {
    // No decode time: the whole answer (some 38 MB) is there at once, so the client is always
    // the slower side and its socket fills whenever it pauses.
    const pool = await startPool(
      [{ name: 'a', flags: ['--slots', '64', '--decode-ms-per-token', '0'] }],
      poolOf,
    );
    try {
      const { sidecar } = pool;
      const reader = await connect(Number(new URL(sidecar.url).port), streamRequest(200_000));
      // Takes at most 2 MB every 200 ms, until the stream has ended: a bounded amount, so the
      // stream spans many times clientStall whatever the socket buffers hold, and enough that
      // the kernel reports room (once a third of the send buffer is read) every window or two.
      const WINDOW_BYTES = 2_000_000;
      let budget = 0;
      reader.socket.pause();
      reader.socket.on('data', (data: Buffer) => {
        budget -= data.length;
        if (budget <= 0) reader.socket.pause();
      });
      let windows = 0;
      let open = true;
      void reader.closed.then(() => (open = false));
      while (open) {
        budget = WINDOW_BYTES;
        reader.socket.resume();
        windows++;
        await sleep(200);
      }
      assert.ok(reader.tail().includes('data: [DONE]'), 'the stream ran to its end');
      assert.ok(
        windows * 200 > 2 * CLIENT_STALL_MS,
        `the stream outlasted clientStall (${windows} windows), so drains reset its clock`,
      );
      assert.equal(await stalledTotal(sidecar.adminUrl!), 0);
      const endpoint = (await debugBackends(sidecar)).endpoints[0]!;
      assert.deepEqual([endpoint.errors, endpoint.breaker], [0, 'closed']);
      assert.equal((await simStats(pool.sims[0]!)).aborted, 0);
    } finally {
      await pool.stop();
    }
  });
});
