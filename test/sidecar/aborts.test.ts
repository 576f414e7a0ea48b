import { readFile, readdir, readlink } from 'node:fs/promises';
import http from 'node:http';
import { describe, test } from 'node:test';
import { balancePool } from '../../harness/pool-file.ts';
import { debugBackends, eventually, simStats, startPool } from '../helpers.ts';

/**
 * Established TCP connections that process `pid` holds to `port`: its sockets (from
 * /proc/<pid>/fd) matched by inode against /proc/net/tcp. Other processes' connections, such as
 * this test's own keep-alive fetches to the simulators' admin API, do not count.
 */
async function establishedFrom(pid: number, port: number): Promise<number> {
  const inodes = new Set<string>();
  for (const fd of await readdir(`/proc/${pid}/fd`)) {
    const target = await readlink(`/proc/${pid}/fd/${fd}`).catch(() => '');
    const match = /^socket:\[(\d+)\]$/.exec(target);
    if (match) inodes.add(match[1]!);
  }
  const table = await readFile('/proc/net/tcp', 'utf8');
  const hexPort = port.toString(16).toUpperCase().padStart(4, '0');
  return table
    .split('\n')
    .slice(1)
    .filter((line) => {
      const cols = line.trim().split(/\s+/);
      return (
        cols[2]?.endsWith(`:${hexPort}`) === true && cols[3] === '01' && inodes.has(cols[9] ?? '')
      );
    }).length;
}

/** Starts a long stream, waits for `bytes` of it, then destroys the client socket. */
function abortAfter(baseUrl: string, bytes: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const body = JSON.stringify({
      model: 'm',
      stream: true,
      max_tokens: 5000,
      messages: [{ role: 'user', content: 'write a very long story' }],
    });
    const req = http.request(
      `${baseUrl}/v1/chat/completions`,
      {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
        agent: false,
      },
      (res) => {
        let seen = 0;
        res.on('data', (chunk: Buffer) => {
          seen += chunk.length;
          if (seen >= bytes) {
            req.destroy();
            resolve();
          }
        });
        res.on('error', () => resolve());
        res.on('end', () => reject(new Error('the stream ended before it was aborted')));
      },
    );
    req.on('error', () => resolve());
    req.end(body);
    if (bytes === 0) {
      setTimeout(() => {
        req.destroy();
        resolve();
      }, 50);
    }
  });
}

describe('client aborts', () => {
  test('leave no upstream socket open and no request in flight', async () => {
    const pool = await startPool(
      [
        { name: 'a', flags: ['--decode-ms-per-token', '20', '--slots', '64'] },
        { name: 'b', flags: ['--decode-ms-per-token', '20', '--slots', '64'] },
      ],
      (urls) => balancePool(urls),
      // The load scrape keeps one idle connection to each simulator: not what this counts.
      ['--load-scrape-every', '0'],
    );
    try {
      const ports = pool.sims.map((s) => Number(new URL(s.url).port));
      // Mid-stream aborts at random points, and aborts before the first byte.
      const aborts: Promise<void>[] = [];
      for (let i = 0; i < 40; i++)
        aborts.push(abortAfter(pool.sidecar.url, i % 4 === 0 ? 0 : 50 + ((i * 97) % 2000)));
      await Promise.all(aborts);
      await eventually(
        async () => (await debugBackends(pool.sidecar)).endpoints.every((e) => e.inFlight === 0),
        5_000,
        'sidecar in-flight back to 0',
      );
      for (const sim of pool.sims)
        await eventually(
          async () => (await simStats(sim)).inFlight === 0,
          5_000,
          'simulator in-flight back to 0',
        );
      const upstream = async (): Promise<number> =>
        (await establishedFrom(pool.sidecar.pid, ports[0]!)) +
        (await establishedFrom(pool.sidecar.pid, ports[1]!));
      await eventually(async () => (await upstream()) === 0, 5_000, 'upstream sockets closed');

      // The count is real: a live stream shows up as one upstream socket.
      const live = abortAfter(pool.sidecar.url, 1_000_000).catch(() => undefined);
      await eventually(
        async () => (await upstream()) === 1,
        5_000,
        'one upstream socket for a live stream',
      );
      await pool.sidecar.stop(100);
      await live;
    } finally {
      await pool.stop();
    }
  });
});
