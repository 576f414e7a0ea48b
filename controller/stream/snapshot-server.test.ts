import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { pino } from 'pino';
import type { PoolSnapshot } from '../../crds/snapshot.ts';
import { ControllerMetrics } from '../metrics.ts';
import { SnapshotServer } from './snapshot-server.ts';

const SNAPSHOT: PoolSnapshot = {
  version: 7,
  hash: 'abc',
  pool: { namespace: 'apps', name: 'chat' },
  policy: {} as PoolSnapshot['policy'],
  timeouts: { connectMs: 1000, firstByteMs: 1000, idleMs: 1000, clientStallMs: 1000 },
  endpoints: [
    {
      id: 'gpus/10.0.0.7:8000',
      backend: 'gpus',
      tier: 0,
      url: 'http://10.0.0.7:8000/v1',
      costPerMTok: 0,
    },
  ],
};

describe('SnapshotServer: load events', () => {
  let server: SnapshotServer;
  let base: string;

  before(async () => {
    server = new SnapshotServer({
      authenticator: {
        authenticate: () =>
          Promise.resolve({
            ok: true,
            identity: {
              namespace: 'apps',
              serviceAccount: 'app',
              podName: undefined,
              podUid: undefined,
            },
          }),
      },
      logger: pino({ level: 'silent' }),
      metrics: new ControllerMetrics(),
      heartbeatMs: 60_000,
      tls: undefined,
      poolExists: () => true,
      onSidecarChange: () => undefined,
    });
    await new Promise<void>((resolve) => server.server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.server.address() as AddressInfo).port}`;
  });
  after(() => server.close());

  /** Subscribes and collects the stream's text until `done` says it has enough. */
  const subscribe = (done: (text: string) => boolean): Promise<string> =>
    new Promise((resolve, reject) => {
      const req = http.get(
        `${base}/v1/namespaces/apps/pools/chat/snapshots?sidecar=s1`,
        { headers: { authorization: 'Bearer t' } },
        (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (chunk: string) => {
            text += chunk;
            if (done(text)) {
              req.destroy();
              resolve(text);
            }
          });
        },
      );
      req.on('error', reject);
    });

  it('lists a pool for scraping only while it has subscribers and a snapshot', async () => {
    assert.deepEqual(server.subscribedEndpoints(), new Map());
    server.publish('apps/chat', SNAPSHOT, performance.now());
    assert.deepEqual(server.subscribedEndpoints(), new Map(), 'no subscriber yet');
    const stream = subscribe((text) => text.includes('event: load'));
    while (server.connectedCount() === 0) await new Promise((r) => setTimeout(r, 5));
    assert.deepEqual(server.subscribedEndpoints(), new Map([['apps/chat', SNAPSHOT.endpoints]]));
    server.publishLoad('apps/chat', {
      endpoints: [{ id: 'gpus/10.0.0.7:8000', running: 3, ageMs: 12 }],
    });
    const text = await stream;
    // The snapshot with its version as the event id; the load event with no id at all.
    assert.ok(text.includes(`event: snapshot\nid: 7\ndata: ${JSON.stringify(SNAPSHOT)}\n\n`));
    assert.ok(
      text.endsWith(
        'event: load\ndata: {"endpoints":[{"id":"gpus/10.0.0.7:8000","running":3,"ageMs":12}]}\n\n',
      ),
    );
    while (server.connectedCount() > 0) await new Promise((r) => setTimeout(r, 5));
    assert.deepEqual(server.subscribedEndpoints(), new Map());
  });

  it('sends nothing for a pool nobody subscribes to', () => {
    server.publishLoad('apps/other', { endpoints: [] });
    assert.equal(server.connectedCount(), 0);
  });
});
