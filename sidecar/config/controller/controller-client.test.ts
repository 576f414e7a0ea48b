import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { chmod, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { constants as h2, type Http2ServerRequest } from 'node:http2';
import { createServer as createHttpsServer } from 'node:https';
import net, { type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setImmediate as tick, setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { after, before, describe, test, type TestContext } from 'node:test';
import { pino } from 'pino';
import { BALANCE_EXAMPLE } from '../../../crds/examples.ts';
import {
  connectionOf,
  DualHttpServer,
  type AnyRequest,
  type AnyResponse,
} from '../../../lib/dual-http-server.ts';
import {
  parseReport,
  reportPath,
  snapshotStreamPath,
  type EndpointHealthReport,
  type BudgetDemand,
  type PoolLoad,
  type PoolShares,
  type PoolSnapshot,
  type SidecarReport,
} from '../../../crds/snapshot.ts';
import {
  ControllerConnections,
  sharesFileOf,
  startControllerClient,
  type ControllerClient,
  type ControllerClientOptions,
} from './controller-client.ts';
import { endpointHealth } from './endpoint-health.ts';
import { backoffDelayMs } from './snapshot-stream.ts';
import { ActivePoolState } from '../active-pool.ts';
import { startControllerSource } from '../controller-source.ts';
import { loadPoolText } from '../pool-file.ts';
import { Balancer, type EndpointStatus } from '../../policy/index.ts';

const NS = 'apps';
const POOL = 'chat';
const SIDECAR = 'chat-7f9c5d-x2x9z';
const TOKEN_A = 'eyJ-token-a.rotating.jwt';
const TOKEN_B = 'eyJ-token-b.rotating.jwt';
const API_KEY = 'sk-never-log-this-4b1d';

// ---- fixtures --------------------------------------------------------------------------------

const loaded = loadPoolText(BALANCE_EXAMPLE, {});
if (!loaded.ok) throw new Error('the balance example does not load');

/** A valid snapshot of `apps/<pool>` (JSON-normal: as it arrives over the wire). */
function snapshot(version: number, hash: string, pool = POOL): PoolSnapshot {
  return JSON.parse(JSON.stringify(rawSnapshot(version, hash, pool))) as PoolSnapshot;
}

function rawSnapshot(version: number, hash: string, pool: string): PoolSnapshot {
  return {
    version,
    hash,
    pool: { namespace: NS, name: pool },
    policy: loaded.ok ? loaded.pool.policy : (undefined as never),
    timeouts: loaded.ok ? loaded.pool.timeouts : (undefined as never),
    endpoints: (loaded.ok ? loaded.pool.endpoints : []).map((e, i) =>
      i === 0 ? { ...e, apiKey: API_KEY } : { ...e },
    ),
  };
}

const HEALTH: EndpointHealthReport[] = [
  { id: 'a', breaker: 'closed', errorRate: 0, rateLimitRate: 0, ewmaTtftMs: 120, inFlight: 1 },
];

function sseEvent(value: unknown, type = 'snapshot'): string {
  const data = typeof value === 'string' ? value : JSON.stringify(value);
  const id = typeof value === 'object' && value !== null && 'version' in value ? value.version : 0;
  return `event: ${type}\nid: ${String(id)}\n${data
    .split('\n')
    .map((l) => `data: ${l}`)
    .join('\n')}\n\n`;
}

async function eventually(check: () => boolean, what: string, timeoutMs = 3_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (performance.now() < deadline) {
    if (check()) return;
    await sleep(5);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
}

// ---- a fake controller ------------------------------------------------------------------------

interface StreamConnection {
  at: number;
  token: string | undefined;
  sidecar: string | null;
  status: number;
  res: AnyResponse;
}

interface Tls {
  key: string;
  cert: string;
}

/** Serves one pool's stream and reports, checking the bearer token like the real controller. */
class FakeController {
  readonly listener: DualHttpServer;
  url = '';
  acceptedToken = TOKEN_A;
  /** Answered (in order) to the next stream requests instead of a stream. */
  refuse: number[] = [];
  /** Leaves the next stream requests without any answer. */
  hang = 0;
  /** Answers the next stream requests only after `slowMs` (a busy replica; PINGs are answered). */
  slow = 0;
  slowMs = 0;
  readonly #delayed = new WeakSet<AnyRequest>();
  current: PoolSnapshot | undefined;
  heartbeatMs: number | undefined;
  reportStatus = 204;
  connections: StreamConnection[] = [];
  reports: { token: string | undefined; at: number; body: SidecarReport }[] = [];
  /** The connections reports came on, in order. */
  readonly reportSockets: unknown[] = [];
  /** The connections streams came on, in order. */
  readonly streamSockets: unknown[] = [];
  /** Refuses the next reports unprocessed (RST_STREAM REFUSED_STREAM, as a server going away). */
  refuseReports = 0;
  /** Reads reports but never answers them (a controller that hangs). */
  holdReports = false;
  readonly open = new Set<AnyResponse>();
  /** What to do with a new open stream (default: send the current snapshot). */
  onStream: (res: AnyResponse) => void = (res) => {
    if (this.current !== undefined) res.write(sseEvent(this.current));
  };

  constructor(tls?: Tls) {
    this.listener = new DualHttpServer({ tls }, (req, res) => this.handle(req, res));
  }

  static async start(tls?: Tls): Promise<FakeController> {
    const fc = new FakeController(tls);
    await new Promise<void>((r) => fc.listener.server.listen(0, '127.0.0.1', r));
    const { port } = fc.listener.server.address() as AddressInfo;
    fc.url = `${tls ? 'https' : 'http'}://127.0.0.1:${port}`;
    return fc;
  }

  private handle(req: AnyRequest, res: AnyResponse): void {
    const url = new URL(req.url ?? '/', 'http://x');
    const auth = req.headers.authorization;
    const token = auth?.startsWith('Bearer ') ? auth.slice(7) : undefined;
    const refuse = (status: number, code: string): void => {
      res.writeHead(status, { 'content-type': 'application/json' });
      const message = status === 403 ? 'Pod app-1 does not follow pool chat' : undefined;
      res.end(JSON.stringify({ error: { code, message } }));
    };
    if (req.method === 'GET' && url.pathname === snapshotStreamPath(NS, POOL)) {
      if (this.slow > 0 && !this.#delayed.has(req)) {
        this.slow -= 1;
        this.#delayed.add(req);
        setTimeout(() => this.handle(req, res), this.slowMs);
        return;
      }
      const conn: StreamConnection = {
        at: performance.now(),
        token,
        sidecar: url.searchParams.get('sidecar'),
        status: 200,
        res,
      };
      this.connections.push(conn);
      if (!this.streamSockets.includes(connectionOf(req)))
        this.streamSockets.push(connectionOf(req));
      if (this.hang > 0) {
        this.hang -= 1;
        return;
      }
      const forced = this.refuse.shift();
      if (forced !== undefined) {
        conn.status = forced;
        const code = { 401: 'unauthenticated', 403: 'forbidden', 404: 'pool_not_found' }[
          forced as 401 | 403 | 404
        ];
        return refuse(forced, code ?? 'unavailable');
      }
      if (token !== this.acceptedToken) {
        conn.status = 401;
        return refuse(401, 'unauthenticated');
      }
      res.writeHead(200, {
        'content-type': 'text/event-stream',
        'cache-control': 'no-cache',
        'x-switchyard-protocol': '1',
      });
      // The headers go now, without a byte of the body (the real controller writes ": connected").
      (res as unknown as { flushHeaders(): void }).flushHeaders();
      this.open.add(res);
      let beat: NodeJS.Timeout | undefined;
      if (this.heartbeatMs !== undefined)
        beat = setInterval(() => res.write(': heartbeat\n\n'), this.heartbeatMs);
      res.on('close', () => {
        clearInterval(beat);
        this.open.delete(res);
      });
      this.onStream(res);
      return;
    }
    if (req.method === 'POST' && url.pathname === reportPath(NS, POOL)) {
      const connection = connectionOf(req);
      if (!this.reportSockets.includes(connection)) this.reportSockets.push(connection);
      const stream = (req as Partial<Http2ServerRequest>).stream;
      if (this.refuseReports > 0 && stream !== undefined) {
        this.refuseReports -= 1;
        stream.close(h2.NGHTTP2_REFUSED_STREAM);
        return;
      }
      if (this.holdReports) {
        req.resume();
        return;
      }
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (c: string) => (body += c));
      req.on('end', () => {
        const parsed = parseReport(JSON.parse(body));
        assert.ok(parsed.ok, 'the sidecar posted an invalid report');
        this.reports.push({ token, at: performance.now(), body: parsed.value });
        res.writeHead(token === this.acceptedToken ? this.reportStatus : 401).end();
      });
      return;
    }
    refuse(404, 'pool_not_found');
  }

  broadcast(text: string): void {
    for (const res of this.open) res.write(text);
  }

  /** Cuts every open stream (as a controller restart would). */
  dropAll(): void {
    for (const res of this.open) res.destroy();
  }

  async close(): Promise<void> {
    this.listener.closeAllConnections();
    await new Promise<void>((r) => this.listener.close(() => r()));
  }
}

// ---- a client under test ----------------------------------------------------------------------

interface Harness {
  client: ControllerClient;
  applied: { snapshot: PoolSnapshot; source: 'stream' | 'cache' }[];
  logs: { level: number; msg: string; [key: string]: unknown }[];
  logText(): string;
}

let dir = '';
let tls: Tls | undefined;
let caFile = '';
let tokenFile = '';

const openssl = promisify(execFile);

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'switchyard-controller-client-'));
  tokenFile = join(dir, 'token');
  caFile = join(dir, 'ca.pem');
  // One self-signed certificate for 127.0.0.1, which is also the CA bundle the client trusts.
  await openssl('openssl', [
    'req',
    '-x509',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:prime256v1',
    '-nodes',
    '-keyout',
    join(dir, 'key.pem'),
    '-out',
    caFile,
    '-days',
    '1',
    '-subj',
    '/CN=switchyard-controller',
    '-addext',
    'subjectAltName=IP:127.0.0.1,DNS:localhost',
  ]);
  tls = { key: await readFile(join(dir, 'key.pem'), 'utf8'), cert: await readFile(caFile, 'utf8') };
});

after(() => rm(dir, { recursive: true, force: true }));

/** Starts a fake controller (https unless `plain`), stopped when the test ends. */
async function controller(t: TestContext, plain = false): Promise<FakeController> {
  const fc = await FakeController.start(plain ? undefined : tls);
  t.after(() => fc.close());
  return fc;
}

/** Starts a client (token file holding `token`), closed when the test ends, secrets checked. */
async function client(
  t: TestContext,
  fc: { url: string } | string,
  overrides: Partial<ControllerClientOptions> = {},
  token = TOKEN_A,
): Promise<Harness> {
  await writeFile(tokenFile, token + '\n');
  const applied: Harness['applied'] = [];
  const raw: string[] = [];
  const logs: Harness['logs'] = [];
  const logger = pino(
    { level: 'debug' },
    {
      write(line: string) {
        raw.push(line);
        logs.push(JSON.parse(line) as Harness['logs'][number]);
      },
    },
  );
  const url = typeof fc === 'string' ? fc : fc.url;
  const client = startControllerClient({
    controllerUrl: url,
    namespace: NS,
    pool: POOL,
    tokenFile,
    caFile: url.startsWith('https:') ? caFile : undefined,
    sidecarId: SIDECAR,
    heartbeatTimeoutMs: 2_000,
    reportEveryMs: 60_000,
    // Every periodic report goes (these tests count them); skipping is tested on its own.
    unchangedReportPeriods: 1,
    backoff: { initialMs: 10, maxMs: 40 },
    logger,
    // As the active pool does: the same content in force is no change.
    onSnapshot: (snapshot, source) => {
      if (applied.at(-1)?.snapshot.hash === snapshot.hash) return false;
      applied.push({ snapshot, source });
      return true;
    },
    currentEndpoints: () => HEALTH,
    ...overrides,
  });
  const h: Harness = { client, applied, logs, logText: () => raw.join('') };
  t.after(async () => {
    await client.close();
    const text = h.logText();
    assert.ok(!text.includes(TOKEN_A) && !text.includes(TOKEN_B), 'a token was logged');
    assert.ok(!text.includes(API_KEY), 'an API key was logged');
  });
  return h;
}

function logged(h: Harness, level: 'debug' | 'info' | 'warn' | 'error', pattern: RegExp) {
  const n = { debug: 20, info: 30, warn: 40, error: 50 }[level];
  return h.logs.filter((l) => l.level === n && pattern.test(l.msg));
}

function gaps(conns: readonly { at: number }[]): number[] {
  return conns.slice(1).map((c, i) => c.at - conns[i]!.at);
}

// ---- tests -----------------------------------------------------------------------------------

describe('backoffDelayMs', () => {
  test('full jitter: uniform below min(max, initial × 2^failures)', () => {
    const b = { initialMs: 500, maxMs: 30_000 };
    assert.equal(
      backoffDelayMs(0, b, () => 0),
      0,
    );
    assert.equal(
      backoffDelayMs(0, b, () => 0.5),
      250,
    );
    assert.equal(
      backoffDelayMs(3, b, () => 0.5),
      2_000,
    );
    assert.equal(
      backoffDelayMs(6, b, () => 0.999),
      29_970,
    );
    assert.equal(
      backoffDelayMs(10_000, b, () => 1),
      30_000,
    );
    for (let f = 0; f < 12; f++) {
      const d = backoffDelayMs(f, b, Math.random);
      assert.ok(d >= 0 && d <= Math.min(30_000, 500 * 2 ** f), `failure ${f}: ${d}`);
    }
  });
});

describe('endpointHealth', () => {
  test('window rates, breaker, TTFT and in-flight from the balancer status', () => {
    const status: EndpointStatus = {
      id: 'a',
      backend: 'a',
      url: 'http://x/v1',
      tier: 0,
      inFlight: 2,
      load: 2,
      ewmaTtftMs: 140.5,
      driftMismatches: 0,
      ewmaSeeded: false,
      breaker: 'open',
      slow: false,
      drifted: false,
      requests: 100,
      errors: 9,
      rateLimited: 4,
      consecutiveErrors: 0,
      window: { requests: 20, errors: 5, rateLimited: 2 },
      costPerMTok: 0,
    };
    const [r] = endpointHealth([status]);
    assert.deepEqual(r, {
      id: 'a',
      breaker: 'open',
      errorRate: 0.25,
      rateLimitRate: 0.1,
      ewmaTtftMs: 140.5,
      inFlight: 2,
    });
  });
});

describe('controller source', () => {
  test('a report reads what it carries from the balancer, not its whole status()', async (t) => {
    const fc = await controller(t, true);
    fc.current = snapshot(1, 'h1');
    await writeFile(tokenFile, TOKEN_A + '\n');
    // status() finds slow endpoints (a sort of every EWMA) and estimates loads, for nothing a
    // report sends: at 4,096 endpoints 38-59 ms of the proxy's loop on every report.
    const status = t.mock.method(Balancer.prototype, 'status');
    const health = t.mock.method(Balancer.prototype, 'health');
    const logger = pino({ level: 'silent' });
    const active = new ActivePoolState({
      clock: { nowMs: () => performance.now() },
      rng: { next: Math.random },
      logger,
    });
    const source = await startControllerSource({
      controllerUrl: fc.url,
      namespace: NS,
      pool: POOL,
      tokenFile,
      caFile,
      sidecarId: SIDECAR,
      heartbeatTimeoutMs: 2_000,
      reportEveryMs: 60_000,
      backoff: { initialMs: 10, maxMs: 40 },
      active,
      logger,
    });
    t.after(() => source.close());
    await eventually(() => fc.reports.length >= 1, 'a report');
    const balancer = active.current()!.balancer;
    assert.deepEqual(fc.reports[0]!.body.endpoints, endpointHealth(balancer.status()));
    assert.deepEqual(
      fc.reports[0]!.body.endpoints.map((e) => e.id),
      fc.current.endpoints.map((e) => e.id),
    );
    assert.equal(status.mock.callCount(), 1, 'status() read only by this test');
    assert.ok(health.mock.callCount() >= 1);
  });

  test('reports carry the pool demand: rates since the last report, queued and held now', async (t) => {
    const fc = await controller(t, true);
    fc.current = snapshot(1, 'h1');
    await writeFile(tokenFile, TOKEN_A + '\n');
    const logger = pino({ level: 'silent' });
    let nowMs = 0;
    const active = new ActivePoolState({
      clock: { nowMs: () => nowMs },
      rng: { next: Math.random },
      logger,
    });
    let held = 0;
    const source = await startControllerSource({
      controllerUrl: fc.url,
      namespace: NS,
      pool: POOL,
      tokenFile,
      sidecarId: SIDECAR,
      heartbeatTimeoutMs: 2_000,
      reportEveryMs: 60_000,
      backoff: { initialMs: 10, maxMs: 40 },
      active,
      logger,
      heldRequests: () => held,
    });
    t.after(() => source.close());
    // The first report, right after the snapshot was applied: nothing sent yet.
    await eventually(() => fc.reports.length >= 1, 'a report');
    assert.deepEqual(fc.reports[0]!.body.demand, {
      requestsPerSecond: 0,
      shedPerSecond: 0,
      queued: 0,
      held: 0,
    });
    const meter = active.current()!.demand!;
    for (let i = 0; i < 30; i++) meter.request();
    for (let i = 0; i < 6; i++) meter.shed();
    nowMs += 3_000;
    // Requests start to be held (scale from zero): reported within a poll, not at the next period.
    held = 4;
    await eventually(() => fc.reports.length >= 2, 'a report once requests are held');
    assert.deepEqual(fc.reports[1]!.body.demand, {
      requestsPerSecond: 10,
      shedPerSecond: 2,
      queued: 0,
      held: 4,
    });
    // A count the schema would refuse is reported as 0, so that the report still goes.
    held = Number.NaN;
    fc.current = snapshot(2, 'h2');
    fc.dropAll();
    await eventually(() => fc.reports.length >= 3, 'a report after the next snapshot');
    assert.equal(fc.reports.at(-1)!.body.demand?.held, 0);
  });
});

describe('controller client', () => {
  for (const plain of [false, true]) {
    test(`applies the snapshot streamed over ${plain ? 'http' : 'https'} and reports it`, async (t) => {
      const fc = await controller(t, plain);
      fc.current = snapshot(1, 'h1');
      const h = await client(t, fc);
      await h.client.ready;
      await eventually(() => h.applied.length === 1, 'the snapshot applied');
      assert.equal(h.applied[0]!.source, 'stream');
      assert.deepEqual(h.applied[0]!.snapshot, fc.current);
      assert.equal(h.client.connected(), true);
      assert.equal(h.client.lastAppliedVersion(), 1);
      assert.equal(fc.connections[0]!.token, TOKEN_A);
      assert.equal(fc.connections[0]!.sidecar, SIDECAR);
      // A report follows every applied snapshot, with the same token.
      await eventually(() => fc.reports.length >= 1, 'a report');
      assert.deepEqual(fc.reports[0], {
        token: TOKEN_A,
        at: fc.reports[0]!.at,
        body: { sidecar: SIDECAR, appliedVersion: 1, appliedHash: 'h1', endpoints: HEALTH },
      });
      const info = logged(h, 'info', /snapshot applied/)[0];
      assert.deepEqual(
        info?.endpoints,
        fc.current.endpoints.map((e) => e.id),
        'endpoints are logged by id only',
      );
    });
  }

  test('a snapshot whose hash is already applied is not applied again', async (t) => {
    const fc = await controller(t, true);
    fc.current = snapshot(1, 'h1');
    const h = await client(t, fc);
    await eventually(() => h.applied.length === 1, 'the first snapshot');
    fc.broadcast(sseEvent(snapshot(1, 'h1')));
    fc.broadcast(sseEvent(snapshot(2, 'h1'))); // a new leader renumbering the same content
    fc.broadcast(sseEvent(snapshot(3, 'h3')));
    await eventually(() => h.applied.length === 2, 'the changed snapshot');
    assert.deepEqual(
      h.applied.map((a) => a.snapshot.version),
      [1, 3],
    );
    assert.equal(logged(h, 'debug', /same snapshot content under a new version/).length, 1);
    assert.equal(h.client.lastAppliedVersion(), 3);
  });

  test('re-reads the token file on every reconnect (the kubelet rotates it)', async (t) => {
    const fc = await controller(t);
    fc.current = snapshot(1, 'h1');
    const h = await client(t, fc, { reportEveryMs: 30 });
    await eventually(() => h.client.connected(), 'connected');
    fc.acceptedToken = TOKEN_B;
    await writeFile(tokenFile, TOKEN_B + '\n');
    fc.dropAll();
    await eventually(
      () => fc.connections.some((c) => c.token === TOKEN_B && c.status === 200),
      'a connection with the new token',
    );
    assert.ok(fc.connections.every((c) => c.token === TOKEN_A || c.token === TOKEN_B));
    await eventually(() => fc.reports.some((r) => r.token === TOKEN_B), 'a report with it');
    assert.equal(h.applied.length, 1, 'the same snapshot after reconnecting is not re-applied');
  });

  test('401: logs what to check, backs off exponentially, retries and then succeeds', async (t) => {
    const fc = await controller(t, true);
    fc.current = snapshot(1, 'h1');
    const h = await client(
      t,
      fc,
      { backoff: { initialMs: 40, maxMs: 1_000 }, random: () => 1 },
      'not-the-right-token',
    );
    await eventually(() => fc.connections.length >= 3, 'three refused attempts');
    assert.equal(h.applied.length, 0);
    assert.equal(h.client.connected(), false);
    const [g1, g2] = gaps(fc.connections);
    assert.ok(g1! >= 38 && g2! >= 78, `waits double: ${g1}, ${g2}`);
    const errors = logged(h, 'error', /rejected the token \(401\)/);
    assert.ok(errors.length >= 2);
    assert.match(errors[0]!.msg, /audience "switchyard"/);
    assert.equal(errors[0]!.code, 'unauthenticated');
    assert.ok(!h.logText().includes('not-the-right-token'));
    await writeFile(tokenFile, TOKEN_A);
    await eventually(() => h.applied.length === 1, 'applied once the token is right');
  });

  test('403 and 404 name what to check and are retried (the pool may come later)', async (t) => {
    const fc = await controller(t, true);
    fc.current = snapshot(1, 'h1');
    fc.refuse = [403, 404, 404];
    const h = await client(t, fc);
    await eventually(() => h.applied.length === 1, 'applied after the refusals');
    assert.equal(fc.connections.length, 4);
    const forbidden = logged(h, 'error', /\(403\)/)[0]!;
    assert.match(forbidden.msg, /namespace "apps".*labelled switchyard.dev\/pool=/);
    assert.equal(
      (forbidden as unknown as { message?: string }).message,
      'Pod app-1 does not follow pool chat',
      "the controller's reason is logged",
    );
    assert.match(logged(h, 'error', /\(404\)/)[0]!.msg, /--namespace and --pool/);
  });

  test('no event or heartbeat within the timeout: reconnects', async (t) => {
    const fc = await controller(t, true);
    fc.current = snapshot(1, 'h1');
    const h = await client(t, fc, { heartbeatTimeoutMs: 200, random: () => 0 });
    await eventually(() => fc.connections.length >= 2, 'a reconnect', 2_000);
    assert.ok(gaps(fc.connections)[0]! >= 195);
    assert.equal(logged(h, 'warn', /no snapshot or heartbeat/).length, 1);
    assert.equal(h.applied.length, 1);
  });

  test('heartbeat comments keep the stream open', async (t) => {
    const fc = await controller(t, true);
    fc.current = snapshot(1, 'h1');
    fc.heartbeatMs = 40;
    const h = await client(t, fc, { heartbeatTimeoutMs: 150 });
    await eventually(() => h.applied.length === 1, 'applied');
    await sleep(500);
    assert.equal(fc.connections.length, 1);
    assert.equal(h.client.connected(), true);
  });

  test('a controller that never answers is given up on after the timeout', async (t) => {
    const fc = await controller(t, true);
    fc.current = snapshot(1, 'h1');
    fc.hang = 1;
    const h = await client(t, fc, { heartbeatTimeoutMs: 150, random: () => 0 });
    await eventually(() => h.applied.length === 1, 'applied on the second connection');
    assert.equal(logged(h, 'warn', /did not answer in time/).length, 1);
  });

  test('a controller that answers PINGs but not yet the stream is waited for, not asked again', async (t) => {
    const fc = await controller(t, true);
    fc.current = snapshot(1, 'h1');
    fc.slow = 1;
    fc.slowMs = 400; // past two timeouts of 150 ms, within the four a live connection gets
    const h = await client(t, fc, { heartbeatTimeoutMs: 150, random: () => 0 });
    await eventually(() => h.applied.length === 1, 'applied');
    assert.equal(fc.connections.length, 1, 'one request: no retry queued behind the first');
    assert.ok(logged(h, 'info', /alive but has not answered yet/).length >= 2);
    assert.equal(logged(h, 'warn', /did not answer in time/).length, 0);
  });

  test('a controller that accepted the connection but not yet the TLS handshake is waited for', async (t) => {
    // TCP accepted, TLS never answered: a replica whose event loop is far behind.
    const accepted: net.Socket[] = [];
    const server = net.createServer((socket) => {
      accepted.push(socket);
      socket.on('error', () => undefined);
      socket.resume();
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    t.after(() => {
      for (const s of accepted) s.destroy();
      server.close();
    });
    const port = (server.address() as AddressInfo).port;
    const h = await client(t, `https://127.0.0.1:${port}`, {
      heartbeatTimeoutMs: 100,
      backoff: { initialMs: 5_000, maxMs: 5_000 },
    });
    await eventually(
      () => logged(h, 'warn', /did not answer in time/).length === 1,
      'given up after the waits',
    );
    assert.equal(logged(h, 'info', /not finished the TLS handshake yet/).length, 3);
    assert.equal(accepted.length, 1, 'one connection, not one per timeout');
    await h.client.close();
  });

  test('stream closed by the controller: reconnects with full-jitter exponential waits', async (t) => {
    const fc = await controller(t, true);
    fc.current = snapshot(1, 'h1');
    fc.onStream = (res) => res.end(); // headers, then nothing: not a working stream
    const draws: number[] = [];
    const h = await client(t, fc, {
      backoff: { initialMs: 160, maxMs: 400 },
      random: () => (draws.push(0.5), 0.5),
    });
    await eventually(() => fc.connections.length >= 5, 'five connections');
    // A stream that delivered something resets the waits.
    fc.onStream = (res) => res.end(sseEvent(snapshot(1, 'h1')));
    await eventually(() => fc.connections.length >= 7, 'two more');
    const g = gaps(fc.connections);
    const expected = [80, 160, 200, 200, 200, 80]; // 0.5 × min(400, 160 × 2^n), then reset
    for (const [i, e] of expected.entries())
      assert.ok(g[i]! >= e - 3 && g[i]! < e + 100, `wait ${i}: ${g[i]} ms, expected ~${e}`);
    assert.ok(draws.length >= 6);
    assert.ok(logged(h, 'warn', /disconnected from the controller/).length >= 5);
  });

  test('an invalid snapshot is logged and ignored; the last good one stays', async (t) => {
    const fc = await controller(t, true);
    fc.current = snapshot(1, 'h1');
    const h = await client(t, fc);
    await eventually(() => h.applied.length === 1, 'the first snapshot');
    const badUrl = snapshot(2, 'h2');
    badUrl.endpoints[0]!.url = 'ftp://wrong';
    const duplicate = snapshot(3, 'h3');
    duplicate.endpoints[1]!.id = duplicate.endpoints[0]!.id;
    fc.broadcast(sseEvent(badUrl));
    fc.broadcast(sseEvent(`{"version": 4, "apiKey": "${API_KEY}"`)); // cut JSON quoting a key
    fc.broadcast(sseEvent(duplicate));
    fc.broadcast(sseEvent(snapshot(5, 'h5', 'other-pool')));
    fc.broadcast(sseEvent(snapshot(6, 'h6'), 'unknown-event'));
    fc.broadcast(sseEvent(snapshot(7, 'h7')));
    await eventually(() => h.applied.length === 2, 'the next good snapshot');
    assert.deepEqual(
      h.applied.map((a) => a.snapshot.version),
      [1, 7],
    );
    const rejected = logged(h, 'error', /snapshot rejected/);
    assert.equal(rejected.length, 4);
    assert.deepEqual((rejected[0]!.errors as { path: string }[])[0]!.path, '/endpoints/0/url');
    assert.match(rejected[1]!.msg, /not valid JSON/);
    assert.match(JSON.stringify(rejected[2]!.errors), /duplicate endpoint id/);
    assert.match(rejected[3]!.msg, /another pool/);
    assert.equal(fc.connections.length, 1, 'the stream stays open');
  });

  test('load events reach onLoad between snapshots; a bad one is dropped quietly', async (t) => {
    const fc = await controller(t, true);
    fc.current = snapshot(1, 'h1');
    const loads: PoolLoad[] = [];
    const h = await client(t, fc, { onLoad: (load) => loads.push(load) });
    await eventually(() => h.applied.length === 1, 'the snapshot');
    fc.broadcast(sseEvent('{"endpoints": [', 'load'));
    fc.broadcast(sseEvent({ endpoints: [{ id: 'a', waiting: -1, ageMs: 0 }] }, 'load'));
    fc.broadcast(sseEvent({ endpoints: [{ id: 'a', running: 3, waiting: 1, ageMs: 40 }] }, 'load'));
    await eventually(() => loads.length === 1, 'the good load event');
    assert.deepEqual(loads[0], { endpoints: [{ id: 'a', running: 3, waiting: 1, ageMs: 40 }] });
    assert.equal(h.applied.length, 1, 'load changes no snapshot');
    assert.equal(logged(h, 'debug', /load event ignored/).length, 2);
    assert.equal(logged(h, 'error', /./).length, 0, 'nothing above debug');
    assert.equal(fc.connections.length, 1, 'the stream stays open');
  });

  test('an event past the size cap drops the connection, then reconnects', async (t) => {
    const fc = await controller(t, true);
    fc.onStream = (res) => res.write(`data: ${'x'.repeat(5_000)}`);
    const h = await client(t, fc, { maxEventSize: 1_000 });
    await eventually(() => fc.connections.length >= 2, 'a reconnect');
    assert.ok(logged(h, 'error', /larger than 1000/).length >= 1);
  });

  test('a wrong CA: the TLS error is logged with a hint, and retried', async (t) => {
    const fc = await controller(t);
    const h = await client(t, fc, { caFile: undefined }); // system CAs: the test CA is unknown
    await eventually(() => logged(h, 'warn', /cannot reach the controller/).length >= 2, 'retries');
    assert.match(logged(h, 'warn', /cannot reach/)[0]!.msg, /--ca-file/);
    assert.equal(fc.connections.length, 0);
  });

  test('a controller older than the sidecar (HTTP/1.1 only): the log says to upgrade it', async (t) => {
    // The controller's stream server before one connection per sidecar: node:https, no ALPN.
    const old = createHttpsServer(tls!, (_req, res) => res.writeHead(404).end());
    await new Promise<void>((r) => old.listen(0, '127.0.0.1', r));
    t.after(() => new Promise<void>((r) => old.close(() => r())));
    const url = `https://127.0.0.1:${(old.address() as AddressInfo).port}`;
    const h = await client(t, url);
    await eventually(() => logged(h, 'warn', /cannot reach the controller/).length >= 1, 'a try');
    assert.match(
      logged(h, 'warn', /cannot reach/)[0]!.msg,
      /speaks no HTTP\/2.*upgrade the controller/,
    );
  });

  test('the cache is written 0600 and restored at start while the controller is down', async (t) => {
    const cacheFile = join(dir, 'cache', 'snapshot.json');
    const fc = await controller(t, true);
    fc.current = snapshot(4, 'h4');
    const first = await client(t, fc, { cacheFile });
    await first.client.ready;
    assert.equal(logged(first, 'info', /no snapshot cache yet/).length, 1);
    await eventually(() => first.applied.length === 1, 'applied');
    await first.client.close(); // waits for the cache write
    assert.equal((await stat(cacheFile)).mode & 0o777, 0o600);
    assert.deepEqual(JSON.parse(await readFile(cacheFile, 'utf8')), fc.current);

    // An older, world-readable file is replaced by a 0600 one.
    await chmod(cacheFile, 0o644);
    fc.current = snapshot(5, 'h5');
    const second = await client(t, fc, { cacheFile });
    await eventually(() => second.applied.length === 2, 'cache, then stream');
    await second.client.close();
    assert.equal((await stat(cacheFile)).mode & 0o777, 0o600);
    await fc.close();

    const down = await client(t, fc.url, { cacheFile });
    await down.client.ready;
    assert.deepEqual(
      down.applied.map((a) => [a.source, a.snapshot.version]),
      [['cache', 5]],
    );
    assert.equal(down.client.lastAppliedVersion(), 5);
    assert.equal(down.client.connected(), false);
  });

  test('a restored snapshot equal to the streamed one is not applied twice', async (t) => {
    const cacheFile = join(dir, 'same', 'snapshot.json');
    const fc = await controller(t, true);
    fc.current = snapshot(4, 'h4');
    const first = await client(t, fc, { cacheFile });
    await eventually(() => first.applied.length === 1, 'applied');
    await first.client.close();
    const second = await client(t, fc, { cacheFile });
    await eventually(() => fc.reports.length >= 2, 'the second sidecar reports');
    assert.deepEqual(
      second.applied.map((a) => a.source),
      ['cache'],
    );
    assert.equal(fc.reports.at(-1)!.body.appliedVersion, 4);
  });

  test('a corrupt, invalid or foreign cache is logged and ignored', async (t) => {
    const cacheFile = join(dir, 'corrupt.json');
    const down = 'http://127.0.0.1:9'; // nothing listens: connection refused
    const cases: [string, RegExp][] = [
      [`{"version": 1, "apiKey": "${API_KEY}"`, /not valid JSON/],
      [JSON.stringify({ ...snapshot(1, 'h1'), version: 0 }), /not a valid snapshot/],
      [JSON.stringify(snapshot(1, 'h1', 'other')), /another pool/],
    ];
    for (const [text, message] of cases) {
      await writeFile(cacheFile, text);
      const h = await client(t, down, { cacheFile });
      await h.client.ready;
      assert.equal(h.applied.length, 0);
      assert.equal(logged(h, 'warn', message).length, 1, String(message));
      assert.equal(h.client.lastAppliedVersion(), undefined);
      await h.client.close();
    }
  });

  test('shares events reach onShares and stay in force when the stream closes', async (t) => {
    const fc = await controller(t, true);
    fc.current = snapshot(1, 'h1');
    const shares: PoolShares[] = [];
    const h = await client(t, fc, { onShares: (s) => shares.push(s) });
    await eventually(() => h.applied.length === 1, 'the snapshot');
    fc.broadcast(sseEvent('{"budgets": [', 'shares'));
    fc.broadcast(sseEvent({ budgets: [{ id: 'pool', requestsPerMinute: -1 }] }, 'shares'));
    fc.broadcast(
      sseEvent({ workload: 'billing', budgets: [{ id: 'pool', requestsPerMinute: 30 }] }, 'shares'),
    );
    await eventually(() => shares.length === 1, 'the good shares event');
    assert.deepEqual(shares[0], {
      workload: 'billing',
      budgets: [{ id: 'pool', requestsPerMinute: 30 }],
    });
    assert.equal(logged(h, 'warn', /shares event ignored/).length, 2);
    fc.refuse = Array.from({ length: 1_000 }, () => 503);
    fc.dropAll();
    await eventually(() => !h.client.connected(), 'disconnected');
    assert.equal(shares.length, 1, 'nothing resets the shares when the stream closes');
  });

  test('the last shares are kept beside the cache and restored while the controller is down', async (t) => {
    const fc = await controller(t, true);
    fc.current = snapshot(1, 'h1');
    const cacheFile = join(dir, 'shares-snapshot.json');
    const first: PoolShares[] = [];
    const h = await client(t, fc, { cacheFile, onShares: (s) => first.push(s) });
    await eventually(() => h.applied.length === 1, 'the snapshot');
    const event = { budgets: [{ id: 'pool', requestsPerMinute: 42 }] };
    fc.broadcast(sseEvent(event, 'shares'));
    await eventually(() => first.length === 1, 'the shares');
    await h.client.close();
    assert.equal(sharesFileOf(cacheFile), join(dir, 'shares-snapshot.shares.json'));
    assert.equal(sharesFileOf('/x/cache'), '/x/cache.shares');
    assert.equal((await stat(sharesFileOf(cacheFile))).mode & 0o777, 0o600);
    const restored: PoolShares[] = [];
    const down = 'http://127.0.0.1:9'; // nothing listens: connection refused
    const again = await client(t, down, { cacheFile, onShares: (s) => restored.push(s) });
    await again.client.ready;
    assert.deepEqual(restored, [event]);
    await again.client.close();
    // A corrupt or invalid shares cache is logged and ignored.
    for (const [text, message] of [
      ['{"budgets": [', /not valid JSON/],
      ['{"budgets": 1}', /shares cache is invalid/],
    ] as const) {
      await writeFile(sharesFileOf(cacheFile), text);
      const none: PoolShares[] = [];
      const bad = await client(t, down, { cacheFile, onShares: (s) => none.push(s) });
      await bad.client.ready;
      assert.equal(none.length, 0);
      assert.equal(logged(bad, 'warn', message).length, 1);
      await bad.client.close();
    }
  });

  test('with budgets, reports carry them every budget period and at once on demand', async (t) => {
    const fc = await controller(t, true);
    fc.current = snapshot(2, 'h2');
    let budgets: BudgetDemand[] | undefined = [{ id: 'pool', requests: { used: 3, wanted: 9 } }];
    const h = await client(t, fc, { reportEveryMs: 60_000, budgets: () => budgets });
    await eventually(() => h.client.connected(), 'connected');
    h.client.reportDemandNow();
    h.client.reportDemandNow();
    await eventually(() => fc.reports.length >= 1, 'a demand report');
    assert.deepEqual(fc.reports[0]!.body.budgets, budgets);
    budgets = [];
    await sleep(50);
    const n = fc.reports.length;
    h.client.reportDemandNow();
    await eventually(() => fc.reports.length > n, 'another demand report');
    assert.equal(fc.reports.at(-1)!.body.budgets, undefined, 'no budgets: none reported');
  });

  test('a periodic report the same as the last one taken is skipped, up to 6 periods', async (t) => {
    const fc = await controller(t, true);
    fc.current = snapshot(1, 'h1');
    let health = HEALTH;
    const h = await client(t, fc, {
      reportEveryMs: 40,
      unchangedReportPeriods: undefined, // the default: 6
      currentEndpoints: () => health,
    });
    // The first (the snapshot was applied), then nothing new to say: the next ~6 periods later.
    await eventually(() => fc.reports.length >= 1, 'the first report');
    const first = fc.reports[0]!.at;
    await eventually(() => fc.reports.length >= 2, 'the unchanged report, periods later');
    const gap = fc.reports[1]!.at - first;
    assert.ok(gap >= 40 * 5, `an unchanged report went after ${Math.round(gap)} ms`);
    // Something changed: reported at the next period, not 6 later.
    const before = fc.reports.length;
    const changedAt = performance.now();
    health = HEALTH.map((e) => ({ ...e, inFlight: e.inFlight + 1 }));
    await eventually(() => fc.reports.length > before, 'the changed report');
    assert.ok(fc.reports.at(-1)!.at - changedAt < 40 * 3, 'a change waits one period at most');
    assert.deepEqual(fc.reports.at(-1)!.body.endpoints, health);
    // A refused report stands for nothing: the next period sends again.
    fc.reportStatus = 500;
    health = HEALTH;
    await eventually(() => fc.reports.length >= before + 4, 'refused reports, sent every period');
    assert.equal(h.client.connected(), true);
  });

  test('reports every reportEveryMs while connected; refusals are not fatal', async (t) => {
    const fc = await controller(t, true);
    fc.current = snapshot(2, 'h2');
    fc.reportStatus = 500;
    const h = await client(t, fc, { reportEveryMs: 25 });
    await eventually(() => fc.reports.length >= 4, 'four reports');
    assert.ok(fc.reports.every((r) => r.body.appliedVersion === 2 && r.token === TOKEN_A));
    assert.ok(logged(h, 'debug', /report refused/).length >= 3);
    assert.equal(h.client.connected(), true);
    // Disconnected: no reports.
    fc.refuse = Array.from({ length: 1_000 }, () => 503);
    fc.dropAll();
    await eventually(() => !h.client.connected(), 'disconnected');
    const count = fc.reports.length;
    await sleep(150);
    assert.ok(fc.reports.length <= count + 1);
  });

  for (const plain of [false, true])
    test(`the stream and its reports share one ${plain ? 'h2c' : 'HTTP/2 TLS'} connection (one replica, one handshake)`, async (t) => {
      const fc = await controller(t, plain);
      fc.current = snapshot(1, 'h1');
      await client(t, fc, { reportEveryMs: 10 });
      await eventually(() => fc.reports.length >= 5, 'five reports');
      assert.equal(fc.reportSockets.length, 1);
      assert.deepEqual(fc.streamSockets, fc.reportSockets, 'the stream on the same connection');
    });

  test('pools of one sidecar share one connection: every stream and report on it', async (t) => {
    const fc = await controller(t);
    fc.current = snapshot(1, 'h1');
    const connections = new ControllerConnections();
    t.after(() => connections.close());
    const a = await client(t, fc, { reportEveryMs: 10, connections });
    const b = await client(t, fc, { reportEveryMs: 10, connections, sidecarId: 'app-2' });
    await eventually(() => fc.connections.length >= 2 && fc.reports.length >= 6, 'both report');
    assert.equal(fc.streamSockets.length, 1, 'both streams on one connection');
    assert.deepEqual(fc.reportSockets, fc.streamSockets, 'the reports too');
    assert.equal(connections.size, 1);
    // One client closing ends its own stream, not the shared connection.
    await a.client.close();
    const reports = fc.reports.length;
    await eventually(() => fc.reports.length >= reports + 3, 'the other still reports');
    assert.equal(b.client.connected(), true);
    assert.equal(connections.size, 1);
  });

  test('an open stream gone silent: its connection is reset under reports in flight, and it reconnects', async (t) => {
    const fc = await controller(t, true);
    fc.current = snapshot(1, 'h1');
    fc.holdReports = true; // every report is in flight when the connection is reset
    const h = await client(t, fc, {
      heartbeatTimeoutMs: 300,
      reportEveryMs: 20,
      backoff: { initialMs: 10, maxMs: 20 },
    });
    await eventually(() => fc.connections.length >= 3, 'two reconnects after silences');
    assert.ok(logged(h, 'warn', /no snapshot or heartbeat/).length >= 2);
    assert.ok(logged(h, 'debug', /report failed/).length >= 1, 'the cut reports fail, logged');
    assert.equal(logged(h, 'error', /failed; reports go on/).length, 0, 'no handler failed');
  });

  test('a report the controller refused unprocessed (REFUSED_STREAM) is sent again at once', async (t) => {
    const fc = await controller(t);
    fc.current = snapshot(1, 'h1');
    const h = await client(t, fc); // reports every 60 s: only applied snapshots send one now
    await eventually(() => fc.reports.length === 1, 'the first report');
    fc.refuseReports = 1;
    fc.broadcast(sseEvent(snapshot(2, 'h2')));
    await eventually(() => fc.reports.length === 2, 'the second report, retried');
    assert.equal(fc.reports[1]!.body.appliedVersion, 2);
    assert.equal(fc.refuseReports, 0, 'the first try was refused');
    assert.equal(logged(h, 'debug', /report failed/).length, 1);
  });

  test('close() leaves no timer, socket or request behind, in any state', async (t) => {
    const kinds = new Set(['Timeout', 'TCPSocketWrap', 'TLSWrap', 'TCPWRAP', 'FSReqPromise']);
    const count = () => process.getActiveResourcesInfo().filter((r) => kinds.has(r)).length;
    await tick();
    const baseline = count();

    // Connected, with reports and heartbeats flowing.
    const fc = await FakeController.start(tls);
    fc.current = snapshot(1, 'h1');
    fc.heartbeatMs = 10;
    const live = await client(t, fc, { reportEveryMs: 5 });
    await eventually(() => fc.reports.length >= 3, 'reports flowing');
    // Connecting: the controller accepted the connection but does not answer.
    fc.hang = 1;
    const hanging = await client(t, fc);
    await eventually(() => fc.connections.length >= 2, 'the hanging connection');
    // Backing off: nothing listens.
    const backingOff = await client(t, 'http://127.0.0.1:9', {
      backoff: { initialMs: 5_000, maxMs: 5_000 },
    });
    await eventually(() => logged(backingOff, 'warn', /cannot reach/).length === 1, 'refused');

    const started = performance.now();
    await Promise.all([live.client.close(), hanging.client.close(), backingOff.client.close()]);
    assert.ok(performance.now() - started < 500, 'close is prompt');
    assert.equal(live.client.connected(), false);
    await fc.close();
    // Handles destroyed a moment ago stay listed until libuv's close phase: allow a few turns of
    // the event loop, no more (a leaked timer or socket would stay for good).
    for (let turn = 0; turn < 20 && count() > baseline; turn++) await sleep(1);
    assert.ok(count() <= baseline, `left behind: ${process.getActiveResourcesInfo().join(', ')}`);
    await live.client.close(); // idempotent
  });
});
