import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { pino } from 'pino';
import { contentHash } from '../../crds/content-hash.ts';
import type { EndpointSpec } from '../../crds/policy-types.ts';
import { applyEndpointsDelta } from '../../crds/snapshot-delta.ts';
import { parseEndpointsDelta, type PoolSnapshot } from '../../crds/snapshot.ts';
import { withoutApiKeys } from '../core/stream-access.ts';
import { ControllerMetrics } from '../metrics.ts';
import { SnapshotServer } from './snapshot-server.ts';

const POLICY = {} as PoolSnapshot['policy'];
const TIMEOUTS = { connectMs: 1000, firstByteMs: 1000, idleMs: 1000, clientStallMs: 1000 };

function endpoint(n: number): EndpointSpec {
  return {
    id: `gpus/10.0.0.${n}:8000`,
    backend: 'gpus',
    tier: 0,
    url: `http://10.0.0.${n}:8000/v1`,
    costPerMTok: 0,
    // Some carry a key: the keyless stream's delta must not, and must still check out.
    ...(n % 3 === 0 ? { apiKey: `key-${n}` } : {}),
  };
}

function snapshot(version: number, ns: number[], policy = POLICY): PoolSnapshot {
  const endpoints = ns.map(endpoint).sort((a, b) => (a.id < b.id ? -1 : 1));
  return {
    version,
    hash: contentHash({ policy, timeouts: TIMEOUTS, endpoints }),
    pool: { namespace: 'apps', name: 'chat' },
    policy,
    timeouts: TIMEOUTS,
    endpoints,
  };
}

interface Event {
  type: string;
  id: string | undefined;
  data: unknown;
}

/** One subscription: its response headers and the events it received so far. */
interface Stream {
  headers: http.IncomingHttpHeaders;
  events: Event[];
  req: http.ClientRequest;
}

describe('SnapshotServer endpoints deltas (issue 46)', () => {
  let server: SnapshotServer;
  let base: string;

  before(async () => {
    server = new SnapshotServer({
      authenticator: {
        // 'Bearer t': a token bound to no pod; 'Bearer pod': bound to a pod following apps/chat.
        authenticate: (authorization) => {
          const bound = authorization === 'Bearer pod';
          return Promise.resolve({
            ok: true,
            identity: {
              namespace: 'apps',
              serviceAccount: 'app',
              podName: bound ? 'app-1' : undefined,
              podUid: undefined,
              pod: bound ? { name: 'app-1', follows: new Set(['chat']) } : undefined,
            },
          });
        },
      },
      logger: pino({ level: 'silent' }),
      metrics: new ControllerMetrics(),
      heartbeatMs: 60_000,
      tls: undefined,
      poolExists: () => true,
      onSidecarChange: () => undefined,
    });
    await new Promise<void>((resolve) => server.listener.server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.listener.server.address() as AddressInfo).port}`;
  });
  after(() => server.close());

  const open = (token: string, query: string): Promise<Stream> =>
    new Promise((resolve, reject) => {
      const req = http.get(
        `${base}/v1/namespaces/apps/pools/chat/snapshots?${query}`,
        { headers: { authorization: `Bearer ${token}` } },
        (res) => {
          const stream: Stream = { headers: res.headers, events: [], req };
          let buffer = '';
          res.setEncoding('utf8');
          res.on('data', (chunk: string) => {
            buffer += chunk;
            let end: number;
            while ((end = buffer.indexOf('\n\n')) >= 0) {
              const block = buffer.slice(0, end);
              buffer = buffer.slice(end + 2);
              const field = (name: string): string | undefined =>
                block
                  .split('\n')
                  .find((l) => l.startsWith(`${name}: `))
                  ?.slice(name.length + 2);
              const type = field('event');
              if (type !== undefined)
                stream.events.push({
                  type,
                  id: field('id'),
                  data: JSON.parse(field('data') ?? 'null') as unknown,
                });
            }
          });
          resolve(stream);
        },
      );
      req.on('error', reject);
    });

  const until = async (check: () => boolean): Promise<void> => {
    const deadline = Date.now() + 5000;
    while (!check()) {
      assert.ok(Date.now() < deadline, 'timed out');
      await new Promise((r) => setTimeout(r, 5));
    }
  };

  /** What a sidecar holds after these events: the full ones taken, the deltas applied. */
  const held = (events: Event[]): PoolSnapshot => {
    let current: PoolSnapshot | undefined;
    for (const e of events) {
      if (e.type === 'snapshot') {
        // Not parseSnapshot: the policy here is a stub; the stream's shape is what is tested.
        current = e.data as PoolSnapshot;
      } else if (e.type === 'endpoints') {
        const parsed = parseEndpointsDelta(e.data);
        assert.ok(parsed.ok && current !== undefined);
        const applied = applyEndpointsDelta(current, parsed.value);
        assert.ok(applied.ok, applied.ok ? '' : applied.reason);
        current = applied.snapshot;
      }
    }
    assert.ok(current !== undefined);
    return current;
  };

  it('sends deltas only to subscribers that asked, with and without keys; full snapshots to the rest', async () => {
    const ns = Array.from({ length: 30 }, (_, i) => i + 1);
    server.publish('apps/chat', snapshot(1, ns), performance.now());
    const legacy = await open('pod', 'sidecar=old');
    const keyed = await open('pod', 'sidecar=new&deltas=1');
    const keyless = await open('t', 'sidecar=tool&deltas=1');
    const streams = [legacy, keyed, keyless];
    await until(() => streams.every((s) => s.events.length === 1));
    assert.equal(legacy.headers['x-switchyard-deltas'], undefined);
    assert.equal(keyed.headers['x-switchyard-deltas'], '1');
    assert.equal(keyless.headers['x-switchyard-deltas'], '1');

    // A rolling restart's step: pod 3 (with a key) goes, pod 31 comes, pod 6 changes its key.
    const step1 = snapshot(2, [...ns.filter((n) => n !== 3), 31]);
    step1.endpoints = step1.endpoints.map((e) =>
      e.id.endsWith('.6:8000') ? { ...e, apiKey: 'rotated' } : e,
    );
    step1.hash = contentHash({ policy: POLICY, timeouts: TIMEOUTS, endpoints: step1.endpoints });
    server.publish('apps/chat', step1, performance.now());
    // A policy change always goes whole.
    const step2 = snapshot(3, [...ns.filter((n) => n !== 3), 31], {
      costWeightPerMs: 1,
    } as PoolSnapshot['policy']);
    server.publish('apps/chat', step2, performance.now());
    await until(() => streams.every((s) => s.events.length === 3));

    assert.deepEqual(
      legacy.events.map((e) => `${e.type}:${e.id}`),
      ['snapshot:1', 'snapshot:2', 'snapshot:3'],
    );
    for (const s of [keyed, keyless])
      assert.deepEqual(
        s.events.map((e) => `${e.type}:${e.id}`),
        ['snapshot:1', 'endpoints:2', 'snapshot:3'],
      );
    const delta = keyed.events[1]!.data as { removed: string[]; added: { at: number }[] };
    assert.deepEqual(delta.removed, ['gpus/10.0.0.3:8000']);
    assert.equal(delta.added.length, 1);
    assert.ok(!JSON.stringify(keyless.events).includes('key-'), 'no key on the keyless stream');
    assert.ok(!JSON.stringify(keyless.events).includes('rotated'));

    // Each holds exactly what the full snapshots said, keys as its token allows.
    assert.deepEqual(held(keyed.events.slice(0, 2)), step1);
    assert.deepEqual(held(keyless.events.slice(0, 2)), withoutApiKeys(step1));
    assert.deepEqual(held(keyed.events), step2);
    for (const s of streams) s.req.destroy();
    await until(() => server.connectedCount() === 0);
  });

  it('sends the full snapshot when most endpoints changed (the delta would not be under half)', async () => {
    server.publish('apps/chat', snapshot(10, [1, 2, 3, 4]), performance.now());
    const s = await open('pod', 'deltas=1');
    await until(() => s.events.length === 1);
    server.publish('apps/chat', snapshot(11, [5, 6, 7, 8]), performance.now());
    server.publish(
      'apps/chat',
      snapshot(12, [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]),
      performance.now(),
    );
    server.publish(
      'apps/chat',
      snapshot(13, [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 17]),
      performance.now(),
    );
    await until(() => s.events.length === 4);
    assert.deepEqual(
      s.events.map((e) => `${e.type}:${e.id}`),
      ['snapshot:10', 'snapshot:11', 'snapshot:12', 'endpoints:13'],
    );
    assert.deepEqual(held(s.events), snapshot(13, [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 17]));
    s.req.destroy();
    await until(() => server.connectedCount() === 0);
  });
});
