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

describe('SnapshotServer', () => {
  let server: SnapshotServer;
  let base: string;

  before(async () => {
    server = new SnapshotServer({
      authenticator: {
        // 'Bearer t': a token bound to no pod; 'Bearer pod-<pool>': one bound to a pod of <pool>.
        authenticate: (authorization) => {
          const follows = /^Bearer pod-(\w+)$/.exec(authorization ?? '')?.[1];
          const podName = follows === undefined ? undefined : `app-${follows}`;
          return Promise.resolve({
            ok: true,
            identity: {
              namespace: 'apps',
              serviceAccount: 'app',
              podName,
              podUid: undefined,
              pod:
                podName === undefined
                  ? undefined
                  : { name: podName, follows: new Set([follows!]), serviceAccount: 'apps/billing' },
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

  /** Subscribes and collects the stream's text until `done` says it has enough. */
  const subscribe = (done: (text: string) => boolean, token = 't'): Promise<string> =>
    new Promise((resolve, reject) => {
      const req = http.get(
        `${base}/v1/namespaces/apps/pools/chat/snapshots?sidecar=s1`,
        { headers: { authorization: `Bearer ${token}` } },
        (res) => {
          let text = `${res.statusCode} ${String(res.headers['x-switchyard-api-keys'])}\n`;
          if (res.statusCode !== 200) {
            res.setEncoding('utf8');
            res.on('data', (chunk: string) => (text += chunk));
            res.on('end', () => resolve(text));
            return;
          }
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

  describe('API keys reach only the pods that follow the pool', () => {
    it('a pod of the pool gets the keys; a token bound to no pod gets the snapshot without them', async () => {
      const keyed: PoolSnapshot = {
        ...SNAPSHOT,
        version: 8,
        endpoints: [{ ...SNAPSHOT.endpoints[0]!, apiKey: 'sk-only-for-chat-pods' }],
      };
      server.publish('apps/chat', keyed, performance.now());
      const hasSnapshot = (text: string): boolean => text.includes('event: snapshot');
      const ofPod = await subscribe(hasSnapshot, 'pod-chat');
      assert.match(ofPod, /^200 undefined\n/);
      assert.ok(ofPod.includes(`data: ${JSON.stringify(keyed)}\n\n`));
      const unbound = await subscribe(hasSnapshot, 't');
      assert.match(unbound, /^200 withheld\n/, 'the stream says the keys are withheld');
      assert.equal(unbound.includes('sk-only-for-chat-pods'), false);
      assert.ok(
        unbound.includes('"id":"gpus/10.0.0.7:8000"'),
        'the rest of the snapshot is served',
      );
      // Subscribed before the next change: each gets the next snapshot in its own form.
      const next = { ...keyed, version: 9 };
      const bothNext = (text: string): boolean => text.includes('id: 9');
      const [podNext, unboundNext] = [subscribe(bothNext, 'pod-chat'), subscribe(bothNext, 't')];
      while (server.connectedCount() < 2) await new Promise((r) => setTimeout(r, 5));
      server.publish('apps/chat', next, performance.now());
      assert.ok((await podNext).includes('sk-only-for-chat-pods'));
      assert.equal((await unboundNext).includes('sk-only-for-chat-pods'), false);
    });

    it('a pod of another pool is refused with a 403 that says why, and sees nothing of the pool', async () => {
      const text = await subscribe(() => false, 'pod-embed');
      assert.match(text, /^403 /);
      const body = JSON.parse(text.slice(text.indexOf('\n') + 1)) as { error: { message: string } };
      assert.match(
        body.error.message,
        /Pod app-embed does not follow pool chat \(it follows embed\)/,
      );
      assert.equal(text.includes('gpus/10.0.0.7'), false);
    });
  });

  it('sends each sidecar its own shares of the budgets, again when a sidecar joins', async () => {
    const budgeted: PoolSnapshot = {
      ...SNAPSHOT,
      version: 20,
      policy: {
        flowControl: {
          defaultPriority: 0,
          maxQueueWaitMs: 1000,
          maxQueuedRequests: 10,
          maxQueuedBytes: 1000,
          kvCacheSaturation: 0.9,
          workload: { kind: 'ServiceAccount' },
          budgets: [
            { id: 'pool', requestsPerMinute: 60 },
            { id: 'workload:apps/billing', workload: 'apps/billing', tokensPerMinute: 1000 },
          ],
        },
      } as PoolSnapshot['policy'],
    };
    while (server.connectedCount() > 0) await new Promise((r) => setTimeout(r, 5));
    server.publish('apps/chat', budgeted, performance.now());
    const shares = (text: string): unknown[] =>
      [...text.matchAll(/event: shares\ndata: (.*)\n\n/g)].map((m) => JSON.parse(m[1]!) as unknown);
    let seen = 0;
    const ofPod = subscribe((text) => (seen = shares(text).length) >= 2, 'pod-chat');
    // Another sidecar (a token bound to no pod: no workload) joins after the first split.
    while (seen === 0) await new Promise((r) => setTimeout(r, 5));
    assert.ok(server.budgetDemandByPool().has('apps/chat'));
    const other = subscribe((text) => shares(text).length >= 1, 't');
    const [first, second] = [shares(await ofPod), shares(await other)];
    assert.deepEqual(first[0], {
      workload: 'apps/billing',
      budgets: [
        { id: 'pool', requestsPerMinute: 60 },
        { id: 'workload:apps/billing', tokensPerMinute: 1000 },
      ],
    });
    assert.deepEqual(first[1], {
      workload: 'apps/billing',
      budgets: [
        { id: 'pool', requestsPerMinute: 30 },
        { id: 'workload:apps/billing', tokensPerMinute: 1000 },
      ],
    });
    assert.deepEqual(second[0], { budgets: [{ id: 'pool', requestsPerMinute: 30 }] });
  });

  it("sums its subscribed sidecars' demand and its servers' load, forgetting who disconnected", async () => {
    while (server.connectedCount() > 0) await new Promise((r) => setTimeout(r, 5));
    // Two endpoint ids of one server (two backends listing it) and another server.
    const twoServers: PoolSnapshot = {
      ...SNAPSHOT,
      version: 30,
      endpoints: [
        ...SNAPSHOT.endpoints,
        { ...SNAPSHOT.endpoints[0]!, id: 'again/10.0.0.7:8000', backend: 'again' },
        { ...SNAPSHOT.endpoints[0]!, id: 'gpus/10.0.0.8:8000', url: 'http://10.0.0.8:8000/v1' },
        { ...SNAPSHOT.endpoints[0]!, id: 'gpus/10.0.0.9:8000', drifted: true },
      ],
    };
    server.publish('apps/chat', twoServers, performance.now());
    assert.deepEqual(server.readyEndpoints(), [['apps/chat', 3]], 'the drifted one excluded');
    assert.deepEqual(server.localSignals(), new Map(), 'nobody subscribed: nothing known here');
    const report = async (sidecar: string, demand?: object): Promise<number> => {
      const res = await fetch(`${base}/v1/namespaces/apps/pools/chat/reports`, {
        method: 'POST',
        headers: { authorization: 'Bearer t', 'content-type': 'application/json' },
        body: JSON.stringify({
          sidecar,
          appliedVersion: 30,
          appliedHash: 'abc',
          endpoints: [],
          ...(demand === undefined ? {} : { demand }),
        }),
      });
      return res.status;
    };
    const streams = ['s1', 's2', 's3'].map((id) => {
      const req = http.get(`${base}/v1/namespaces/apps/pools/chat/snapshots?sidecar=${id}`, {
        headers: { authorization: 'Bearer t' },
      });
      req.on('error', () => undefined);
      return req;
    });
    while (server.connectedCount() < 3) await new Promise((r) => setTimeout(r, 5));
    assert.equal(
      await report('s1', { requestsPerSecond: 4, shedPerSecond: 1, queued: 2, held: 0 }),
      204,
    );
    assert.equal(
      await report('s2', { requestsPerSecond: 1.5, shedPerSecond: 0, queued: 0, held: 3 }),
      204,
    );
    assert.equal(await report('s3'), 204, 'an older sidecar, without demand');
    assert.equal(
      await report('gone', { requestsPerSecond: 99, shedPerSecond: 9, queued: 9, held: 9 }),
      204,
    );
    server.publishLoad('apps/chat', {
      endpoints: [
        { id: 'gpus/10.0.0.7:8000', running: 3, waiting: 4, kvCacheUsage: 0.5, ageMs: 10 },
        { id: 'again/10.0.0.7:8000', running: 3, waiting: 4, kvCacheUsage: 0.5, ageMs: 10 },
        { id: 'gpus/10.0.0.8:8000', running: 7, waiting: 0, kvCacheUsage: 0.9, ageMs: 10 },
      ],
    });
    assert.deepEqual(
      server.localSignals(),
      new Map([
        [
          'apps/chat',
          {
            demand: { requestsPerSecond: 5.5, shedPerSecond: 1, queued: 2, held: 3 },
            server: { servers: 2, running: 10, waiting: 4, kvCacheMean: 0.7, kvCacheMax: 0.9 },
          },
        ],
      ]),
      'the one not subscribed is not counted; the server behind two ids once',
    );
    streams[0]!.destroy();
    while (server.connectedCount() > 2) await new Promise((r) => setTimeout(r, 5));
    assert.deepEqual(server.localSignals().get('apps/chat')?.demand, {
      requestsPerSecond: 1.5,
      shedPerSecond: 0,
      queued: 0,
      held: 3,
    });
    for (const req of streams) req.destroy();
    while (server.connectedCount() > 0) await new Promise((r) => setTimeout(r, 5));
    assert.deepEqual(server.localSignals(), new Map());
    // Subscribed again: the last load is not kept (it is not scraped while nobody subscribes).
    const again = http.get(`${base}/v1/namespaces/apps/pools/chat/snapshots?sidecar=s1`, {
      headers: { authorization: 'Bearer t' },
    });
    again.on('error', () => undefined);
    while (server.connectedCount() === 0) await new Promise((r) => setTimeout(r, 5));
    assert.equal(server.localSignals().get('apps/chat')?.server, undefined);
    again.destroy();
    while (server.connectedCount() > 0) await new Promise((r) => setTimeout(r, 5));
  });
});
