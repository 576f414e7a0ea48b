import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { pino } from 'pino';
import { listen } from '../../lib/listen.ts';
import { ActivePoolState } from '../config/active-pool.ts';
import { loadPoolText } from '../config/pool-file.ts';
import { seededRng, type EndpointSpec } from '../policy/index.ts';
import { SidecarMetrics } from './metrics.ts';
import {
  mergeModelLists,
  parseModelList,
  planModelsRequest,
  type EndpointStanding,
} from './models-union.ts';
import { SidecarProxy } from './proxy-server.ts';

const endpoint = (id: string, tier: number, extra: Partial<EndpointSpec> = {}): EndpointSpec => ({
  id,
  backend: id.split('/')[0] as string,
  tier,
  url: `http://${id.split('/')[1] ?? 'h'}/v1`,
  costPerMTok: 0,
  ...extra,
});

const closed: EndpointStanding = { breaker: 'closed', inFlight: 0 };
const standingOf =
  (table: Record<string, EndpointStanding>) =>
  (id: string): EndpointStanding | undefined =>
    table[id] ?? closed;

describe('planModelsRequest', () => {
  test('asks one endpoint per backend, in pool (tier) order', () => {
    const plan = planModelsRequest(
      [endpoint('b/1', 1), endpoint('a/1', 0), endpoint('a/2', 0), endpoint('b/2', 1)],
      standingOf({}),
    );
    assert.equal(plan.kind, 'ask');
    if (plan.kind !== 'ask') return;
    assert.deepEqual(
      plan.endpoints.map((e) => e.id),
      ['a/1', 'b/1'],
    );
    assert.deepEqual(plan.notLive, []);
  });

  test('prefers a closed breaker, then the fewest in flight; never an open one', () => {
    const plan = planModelsRequest(
      [endpoint('a/1', 0), endpoint('a/2', 0), endpoint('a/3', 0), endpoint('b/1', 1)],
      standingOf({
        'a/1': { breaker: 'open', inFlight: 0 },
        'a/2': { breaker: 'half-open', inFlight: 0 },
        'a/3': { breaker: 'closed', inFlight: 5 },
        'b/1': { breaker: 'half-open', inFlight: 3 },
      }),
    );
    assert.equal(plan.kind, 'ask');
    if (plan.kind !== 'ask') return;
    assert.deepEqual(
      plan.endpoints.map((e) => e.id),
      ['a/3', 'b/1'],
    );
  });

  test('leaves out a backend whose endpoints are all open or drift-excluded, and names it', () => {
    const plan = planModelsRequest(
      [endpoint('a/1', 0), endpoint('b/1', 1, { drifted: true }), endpoint('c/1', 2)],
      standingOf({ 'a/1': { breaker: 'open', inFlight: 0 } }),
    );
    assert.equal(plan.kind, 'ask');
    if (plan.kind !== 'ask') return;
    assert.deepEqual(
      plan.endpoints.map((e) => e.id),
      ['c/1'],
    );
    assert.deepEqual(plan.notLive, ['a', 'b']);
  });

  test('does not ask a backend that rewrites the model: its own names are internal', () => {
    const plan = planModelsRequest(
      [endpoint('a/1', 0, { model: 'provider-name' }), endpoint('b/1', 1)],
      standingOf({}),
    );
    assert.equal(plan.kind, 'ask');
    if (plan.kind !== 'ask') return;
    assert.deepEqual(
      plan.endpoints.map((e) => e.id),
      ['b/1'],
    );
  });

  test('every backend rewrites: no client-side name is known', () => {
    const plan = planModelsRequest([endpoint('a/1', 0, { model: 'x' })], standingOf({}));
    assert.deepEqual(plan, { kind: 'no-names' });
  });

  test('nothing to ask: no endpoint, or none live', () => {
    assert.deepEqual(planModelsRequest([], standingOf({})), { kind: 'nothing-live' });
    assert.deepEqual(
      planModelsRequest(
        [endpoint('a/1', 0)],
        standingOf({ 'a/1': { breaker: 'open', inFlight: 0 } }),
      ),
      { kind: 'nothing-live' },
    );
  });
});

describe('mergeModelLists', () => {
  test('keeps each id once, as the first list in pool order sent it, fields untouched', () => {
    const merged = mergeModelLists([
      [{ id: 'm', max_model_len: 1000, root: '/models/m' }, { id: 'n' }],
      [
        { id: 'm', max_model_len: 2000 },
        { id: 'o', permission: [{ allow_view: true }] },
      ],
      [],
    ]);
    assert.deepEqual(merged, [
      { id: 'm', max_model_len: 1000, root: '/models/m' },
      { id: 'n' },
      { id: 'o', permission: [{ allow_view: true }] },
    ]);
  });

  test('a repeated id within one list is listed once', () => {
    assert.deepEqual(
      mergeModelLists([
        [
          { id: 'm', a: 1 },
          { id: 'm', a: 2 },
        ],
      ]),
      [{ id: 'm', a: 1 }],
    );
  });
});

describe('parseModelList', () => {
  test('reads the data entries that have a string id', () => {
    assert.deepEqual(
      parseModelList('{"object":"list","data":[{"id":"m","x":1},{"id":7},null,"s",{"id":"n"}]}'),
      [{ id: 'm', x: 1 }, { id: 'n' }],
    );
  });

  test('anything but an object with a data array is not a list', () => {
    for (const text of ['', 'nope', '[]', 'null', '{"data":{}}', '{"object":"list"}'])
      assert.equal(parseModelList(text), undefined, text);
  });
});

/** A backend that answers /v1/models with `answer`, recording the headers it got. */
interface FakeBackend {
  url: string;
  seen: http.IncomingHttpHeaders[];
  close(): Promise<void>;
}

async function fakeBackend(
  answer: (req: http.IncomingMessage, res: http.ServerResponse) => void,
): Promise<FakeBackend> {
  const seen: http.IncomingHttpHeaders[] = [];
  const server = http.createServer((req, res) => {
    seen.push(req.headers);
    answer(req, res);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    seen,
    async close() {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    },
  };
}

const listOf =
  (...ids: string[]) =>
  (_req: http.IncomingMessage, res: http.ServerResponse): void => {
    const body = JSON.stringify({ object: 'list', data: ids.map((id) => ({ id })) });
    res.writeHead(200, { 'content-type': 'application/json' }).end(body);
  };

interface Answer {
  status: number;
  body: string;
}

function getModels(url: string, headers: Record<string, string> = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.get(`${url}/v1/models`, { agent: false, headers });
    req.on('error', reject);
    req.on('response', (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
  });
}

/** A proxy on a pool file's text; `env` holds the keys of `apiKeyEnv`. */
async function proxyOn(
  yaml: string,
  env: Record<string, string> = {},
): Promise<{ url: string; close(): void }> {
  const loaded = loadPoolText(yaml, env);
  if (!loaded.ok) throw new Error(JSON.stringify(loaded.problems));
  const logger = pino({ level: 'silent' });
  const active = new ActivePoolState({
    clock: { nowMs: () => performance.now() },
    rng: seededRng(1),
    logger,
  });
  active.apply(loaded.pool);
  const proxy = new SidecarProxy({
    pool: () => active.current(),
    metrics: new SidecarMetrics('test'),
    logger,
    maxBodyBytes: 1 << 20,
    nowMs: () => performance.now(),
    isDraining: () => false,
  });
  const url = await listen(proxy.server, { host: '127.0.0.1', port: 0 });
  return {
    url,
    close() {
      proxy.server.close();
      proxy.server.closeAllConnections();
      proxy.close();
    },
  };
}

const poolOf = (backends: string[], extra = ''): string =>
  [
    'apiVersion: switchyard.dev/v1alpha1',
    'kind: InferencePool',
    'metadata: {name: union}',
    'spec:',
    '  backends:',
    ...backends.map((b) => `  - ${b}`),
    extra,
    '',
  ].join('\n');

describe('GET /v1/models without a declared list, through the proxy', () => {
  let listing: FakeBackend;
  let hanging: FakeBackend;
  let refusing: FakeBackend;
  let keyed: FakeBackend;
  let compressed: FakeBackend;
  before(async () => {
    listing = await fakeBackend(listOf('m', 'shared'));
    hanging = await fakeBackend(() => undefined); // takes the request, never answers
    refusing = await fakeBackend((_req, res) => res.writeHead(500).end('{}'));
    keyed = await fakeBackend(listOf('k', 'shared'));
    compressed = await fakeBackend((_req, res) =>
      res.writeHead(200, { 'content-encoding': 'gzip' }).end('not really gzip'),
    );
  });
  after(async () => {
    for (const b of [listing, hanging, refusing, keyed, compressed]) await b.close();
  });

  test('a backend that does not answer is left out once the deadline passes', async (t) => {
    const proxy = await proxyOn(
      poolOf(
        [`{name: slow, url: '${hanging.url}'}`, `{name: ok, url: '${listing.url}'}`],
        '  timeouts: {connect: 200ms}',
      ),
    );
    t.after(() => proxy.close());
    const answer = await getModels(proxy.url);
    assert.equal(answer.status, 200);
    assert.deepEqual(
      (JSON.parse(answer.body) as { object: string; data: { id: string }[] }).data.map((m) => m.id),
      ['m', 'shared'],
    );
  });

  test('only backends that do not answer: 504 upstream_timeout naming the deadline', async (t) => {
    const proxy = await proxyOn(
      poolOf(
        [`{name: slow, url: '${hanging.url}'}`],
        '  timeouts: {connect: 5s, firstByte: 150ms}',
      ),
    );
    t.after(() => proxy.close());
    const answer = await getModels(proxy.url);
    assert.equal(answer.status, 504);
    const error = (JSON.parse(answer.body) as { error: { code: string; message: string } }).error;
    assert.equal(error.code, 'upstream_timeout');
    assert.match(error.message, /answered \/v1\/models within 150 ms/);
  });

  test('no backend answers: 502 upstream_unreachable saying why for each', async (t) => {
    const proxy = await proxyOn(
      poolOf([`{name: err, url: '${refusing.url}'}`, `{name: gz, url: '${compressed.url}'}`]),
    );
    t.after(() => proxy.close());
    const answer = await getModels(proxy.url);
    assert.equal(answer.status, 502);
    const error = (JSON.parse(answer.body) as { error: { code: string; message: string } }).error;
    assert.equal(error.code, 'upstream_unreachable');
    assert.match(error.message, /No backend of pool union answered \/v1\/models/);
    assert.match(error.message, /err\/127\.0\.0\.1:\d+: HTTP 500/);
    assert.match(error.message, /gz\/127\.0\.0\.1:\d+: a compressed answer/);
  });

  test("each backend gets its own key in its own header; the client's stays away from it", async (t) => {
    const proxy = await proxyOn(
      poolOf([
        `{name: plain, url: '${listing.url}'}`,
        `{name: keyed, url: '${keyed.url}', apiKeyEnv: KEY, apiKeyHeader: x-api-key}`,
      ]),
      { KEY: 'backend-secret' },
    );
    t.after(() => proxy.close());
    const answer = await getModels(proxy.url, { authorization: 'Bearer client-key' });
    assert.equal(answer.status, 200);
    assert.deepEqual(
      (JSON.parse(answer.body) as { data: { id: string }[] }).data.map((m) => m.id),
      ['m', 'shared', 'k'],
    );
    const atKeyed = keyed.seen.at(-1)!;
    assert.equal(atKeyed['x-api-key'], 'backend-secret');
    assert.equal(atKeyed.authorization, undefined);
    assert.equal(atKeyed['accept-encoding'], 'identity');
    // A backend without a key gets what the client sent, as on every other path.
    assert.equal(listing.seen.at(-1)?.authorization, 'Bearer client-key');
  });

  test('a client that resets its connection ends the requests still waiting on backends', async (t) => {
    let arrived: () => void = () => undefined;
    const backendGotIt = new Promise<void>((r) => (arrived = r));
    let backendClosed: () => void = () => undefined;
    const upstreamClosed = new Promise<void>((r) => (backendClosed = r));
    const silent = await fakeBackend((req) => {
      req.socket.once('close', backendClosed);
      arrived();
    });
    t.after(() => silent.close());
    const proxy = await proxyOn(
      poolOf([`{name: slow, url: '${silent.url}'}`], '  timeouts: {connect: 60s}'),
    );
    t.after(() => proxy.close());
    const req = http.get(`${proxy.url}/v1/models`, { agent: false });
    req.on('error', () => undefined);
    await backendGotIt;
    // A reset: a FIN alone reads as a half-close the proxy still answers (proxy-server.ts).
    req.socket?.resetAndDestroy();
    await upstreamClosed; // long before the 60 s deadline: the test would time out otherwise
  });

  test('a pool whose every backend rewrites the model lists nothing', async (t) => {
    const proxy = await proxyOn(poolOf([`{name: p, url: '${listing.url}', model: internal}`]));
    t.after(() => proxy.close());
    const before = listing.seen.length;
    const answer = await getModels(proxy.url);
    assert.equal(answer.status, 200);
    assert.deepEqual(JSON.parse(answer.body), { object: 'list', data: [] });
    assert.equal(listing.seen.length, before, 'the rewriting backend was not asked');
  });
});
