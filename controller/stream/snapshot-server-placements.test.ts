import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { pino } from 'pino';
import {
  parsePlacements,
  placementsPath,
  PLACEMENTS_HEADER,
  type PoolPlacements,
} from '../../crds/snapshot.ts';
import { encodeHashes } from '../../lib/placement-hashes.ts';
import type { PoolKey } from '../core/pool-index.ts';
import { ControllerMetrics } from '../metrics.ts';
import { PEER_PLACEMENTS_PATH, SnapshotServer } from './snapshot-server.ts';

const PATH = placementsPath('apps', 'chat');

/** A server on loopback; `placements` as the option; peers' token is 'Bearer peer'. */
async function start(
  placements: { bytesPerSecond: number } | undefined,
  forwarded: Map<PoolKey, PoolPlacements>[] = [],
): Promise<{ server: SnapshotServer; base: string; metrics: ControllerMetrics }> {
  const metrics = new ControllerMetrics();
  const server = new SnapshotServer({
    authenticator: {
      authenticate: (authorization) =>
        Promise.resolve(
          authorization === 'Bearer t'
            ? {
                ok: true,
                identity: {
                  namespace: 'apps',
                  serviceAccount: 'app',
                  podName: undefined,
                  podUid: undefined,
                  pod: undefined,
                },
              }
            : { ok: false, reason: 'bad token' },
        ),
    },
    logger: pino({ level: 'silent' }),
    metrics,
    heartbeatMs: 60_000,
    tls: undefined,
    poolExists: (key) => key === 'apps/chat',
    onSidecarChange: () => undefined,
    ...(placements === undefined ? {} : { placements }),
    placementPeers: {
      authenticate: (authorization) => Promise.resolve(authorization === 'Bearer peer'),
      forward: (batches) => forwarded.push(batches),
    },
  });
  await new Promise<void>((resolve) => server.listener.server.listen(0, '127.0.0.1', resolve));
  return {
    server,
    base: `http://127.0.0.1:${(server.listener.server.address() as AddressInfo).port}`,
    metrics,
  };
}

async function post(
  url: string,
  body: unknown,
  token = 't',
): Promise<{ status: number; body: string }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: res.status, body: await res.text() };
}

/** A stream of the pool: its response headers and the `placements` events it gets. */
function subscribe(base: string): Promise<{
  headers: http.IncomingHttpHeaders;
  events: PoolPlacements[];
  close(): void;
}> {
  return new Promise((resolve, reject) => {
    const req = http.get(
      `${base}/v1/namespaces/apps/pools/chat/snapshots?sidecar=s1`,
      { headers: { authorization: 'Bearer t' } },
      (res) => {
        const events: PoolPlacements[] = [];
        let buffer = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          buffer += chunk;
          for (let end = buffer.indexOf('\n\n'); end !== -1; end = buffer.indexOf('\n\n')) {
            const block = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            if (!block.startsWith('event: placements\n')) continue;
            assert.equal(/^id:/m.test(block), false, 'a placements event carries no id');
            const parsed = parsePlacements(JSON.parse(/^data: (.*)$/m.exec(block)![1]!));
            assert.ok(parsed.ok);
            events.push(parsed.value);
          }
        });
        resolve({ headers: res.headers, events, close: () => req.destroy() });
      },
    );
    req.on('error', reject);
  });
}

async function until(what: string, ok: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !ok(); i++) await new Promise((r) => setTimeout(r, 10));
  assert.ok(ok(), what);
}

const upload = (endpoint: string, ...deepest: number[]): PoolPlacements => ({
  endpoints: [endpoint],
  placements: deepest.map((d) => ({ endpoint: 0, ageMs: 3, hashes: encodeHashes([1, d]) })),
});

describe('SnapshotServer placements', () => {
  describe('with placements on', () => {
    let s: Awaited<ReturnType<typeof start>>;
    const forwarded: Map<PoolKey, PoolPlacements>[] = [];
    before(async () => (s = await start({ bytesPerSecond: 2000 }, forwarded)));
    after(() => s.server.close());

    it('says so on the stream, and relays an upload to every subscriber within a tick', async () => {
      const [a, b] = [await subscribe(s.base), await subscribe(s.base)];
      assert.equal(a.headers[PLACEMENTS_HEADER], '2000');
      assert.equal((await post(`${s.base}${PATH}`, upload('gpus/a', 11, 12))).status, 204);
      await until(
        'both subscribers get the event',
        () => a.events.length > 0 && b.events.length > 0,
      );
      assert.deepEqual(a.events, b.events);
      assert.deepEqual(a.events[0]?.endpoints, ['gpus/a']);
      assert.equal(a.events[0]?.placements.length, 2);
      assert.ok(a.events[0].placements.every((p) => p.ageMs >= 3));
      await until('forwarded to the peers', () => forwarded.length > 0);
      assert.deepEqual(forwarded[0]?.get('apps/chat')?.endpoints, ['gpus/a']);

      // The same (deepest hash, endpoint) again: nothing new to say.
      assert.equal((await post(`${s.base}${PATH}`, upload('gpus/a', 12))).status, 204);
      await new Promise((r) => setTimeout(r, 250));
      assert.equal(a.events.length, 1);
      const text = await s.metrics.registry.metrics();
      assert.match(text, /switchyard_controller_placements_received_total 3/);
      assert.match(text, /switchyard_controller_placements_dropped_total\{reason="duplicate"\} 1/);
      a.close();
      b.close();
    });

    it('keeps each event within a tenth of the bytes per second, newest first', async () => {
      const a = await subscribe(s.base);
      const many: PoolPlacements = {
        endpoints: ['gpus/b'],
        placements: Array.from({ length: 40 }, (_, i) => ({
          endpoint: 0,
          ageMs: i,
          hashes: encodeHashes([1000 + i]),
        })),
      };
      assert.equal((await post(`${s.base}${PATH}`, many)).status, 204);
      await until('an event', () => a.events.length > 0);
      assert.ok(JSON.stringify(a.events[0]).length <= 200);
      assert.equal(a.events[0]?.placements[0]?.hashes, encodeHashes([1000]));
      a.close();
    });

    it('answers a bad upload 400 naming the field, and a stranger 401', async () => {
      const bad = await post(`${s.base}${PATH}`, {
        endpoints: ['a'],
        placements: [{ endpoint: 4, ageMs: 0, hashes: encodeHashes([1]) }],
      });
      assert.equal(bad.status, 400);
      const error = (JSON.parse(bad.body) as { error: { code: string; message: string } }).error;
      assert.equal(error.code, 'invalid_placements');
      assert.match(error.message, /\/placements\/0\/endpoint/);
      assert.equal((await post(`${s.base}${PATH}`, 'not json')).status, 400);
      assert.equal((await post(`${s.base}${PATH}`, upload('a', 1), 'x')).status, 401);
      assert.equal(
        (await post(`${s.base}${PATH}`, { endpoints: [], placements: [], pad: 'x'.repeat(70_000) }))
          .status,
        413,
      );
    });

    it("relays a peer's placements here without forwarding them again; refuses others", async () => {
      const a = await subscribe(s.base);
      const before = forwarded.length;
      const body = { pools: { 'apps/chat': upload('gpus/c', 77) } };
      assert.equal((await post(`${s.base}${PEER_PLACEMENTS_PATH}`, body, 't')).status, 403);
      assert.equal((await post(`${s.base}${PEER_PLACEMENTS_PATH}`, body, 'peer')).status, 204);
      await until('the peer placement', () => a.events.some((e) => e.endpoints[0] === 'gpus/c'));
      await new Promise((r) => setTimeout(r, 150));
      assert.equal(forwarded.length, before, 'not forwarded again');
      a.close();
    });
  });

  it('without the option: no header, and uploads answer 404 placements_off', async () => {
    const s = await start(undefined);
    try {
      const a = await subscribe(s.base);
      assert.equal(a.headers[PLACEMENTS_HEADER], undefined);
      a.close();
      const res = await post(`${s.base}${PATH}`, upload('a', 1));
      assert.equal(res.status, 404);
      assert.equal(
        (JSON.parse(res.body) as { error: { code: string } }).error.code,
        'placements_off',
      );
    } finally {
      s.server.close();
    }
  });
});
