/**
 * Scale from zero (issue 44; docs/sidecar.md, Scale from zero) through real processes: a
 * `switchyard sidecar` fed by a stand-in controller stream (harness/snapshot-server.ts: a pool
 * file cannot have zero endpoints) and a `switchyard sim`. While the pool's snapshot lists no
 * endpoint, requests are held within their bounds; a snapshot with the sim releases them.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import OpenAI from 'openai';
import type { PoolSnapshot } from '../../crds/snapshot.ts';
import { balancePool } from '../../harness/pool-file.ts';
import {
  controllerSidecarArgs,
  startSim,
  startSwitchyard,
  stopAll,
  type RunningProcess,
} from '../../harness/processes.ts';
import { SnapshotServer } from '../../harness/snapshot-server.ts';
import {
  SPAN_KIND_SERVER,
  startOtlpReceiver,
  type OtlpReceiver,
} from '../../harness/otlp-receiver.ts';
import { loadPoolText } from '../../sidecar/config/pool-file.ts';

const NS = 'apps';
const POOL = 'chat';
let dir: string;
let sim: RunningProcess;
let sidecar: RunningProcess;
let controller: SnapshotServer;
let receiver: OtlpReceiver;
let version = 0;

/** The pool's snapshot: scaleFromZero as given, and the sim as its endpoint unless `empty`. */
function snapshot(scaleFromZero: string, empty: boolean, extra = ''): PoolSnapshot {
  const spec = `  scaleFromZero: ${scaleFromZero}\n${extra}`;
  const yaml = balancePool([sim.url], spec, ['gpu']).replace(
    'metadata: {name: test}',
    `metadata: {name: ${POOL}}`,
  );
  const loaded = loadPoolText(yaml, {});
  if (!loaded.ok) throw new Error(JSON.stringify(loaded.problems));
  const { policy, timeouts, endpoints } = loaded.pool;
  version += 1;
  return {
    version,
    hash: `h${version}`,
    pool: { namespace: NS, name: POOL },
    policy,
    timeouts,
    endpoints: empty ? [] : endpoints,
  };
}

async function waitFor(what: string, check: () => Promise<boolean> | boolean): Promise<void> {
  const deadline = performance.now() + 10_000;
  while (!(await check())) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * The sidecar's `switchyard_scale_from_zero_held_requests` of the pool, from its admin port (whose
 * /metrics is rendered at most once a second: waits on it take up to that).
 */
async function held(of = sidecar): Promise<number | undefined> {
  const text = await (await fetch(`${of.adminUrl}/metrics`)).text();
  const line = /^switchyard_scale_from_zero_held_requests\{pool="chat"\} (\d+)$/m.exec(text);
  return line === null ? undefined : Number(line[1]);
}

/** Whether the sidecar applied the snapshot of `v` (its /readyz says so; /metrics is cached 1 s). */
async function applied(v: number, of = sidecar): Promise<boolean> {
  const ready = (await (await fetch(`${of.adminUrl}/readyz`)).json()) as {
    snapshotVersion?: number;
  };
  return (ready.snapshotVersion ?? 0) >= v;
}

async function publish(scaleFromZero: string, empty: boolean, extra = ''): Promise<void> {
  const s = snapshot(scaleFromZero, empty, extra);
  controller.publish(s);
  await waitFor(`snapshot ${s.version} applied`, () => applied(s.version));
}

/** The sidecar's log has a line matching `pattern` (soon: it is written as the answer goes). */
function logged(pattern: RegExp): Promise<void> {
  return waitFor(`a log line ${String(pattern)}`, () => pattern.test(sidecar.output()));
}

async function simRequests(): Promise<number> {
  return ((await (await fetch(`${sim.url}/admin/stats`)).json()) as { requests: number }).requests;
}

/** The attributes of the sidecar's server span of the request that carried trace `traceId`. */
async function serverSpanOf(traceId: string): Promise<Record<string, unknown>> {
  const spans = await receiver.waitForTrace(traceId, (all) =>
    all.some((span) => span.kind === SPAN_KIND_SERVER),
  );
  return spans.find((span) => span.kind === SPAN_KIND_SERVER)!.attributes;
}

function chat(
  body: Record<string, unknown> = {},
  signal?: AbortSignal,
  traceId?: string,
): Promise<Response> {
  return fetch(`${sidecar.url}/v1/chat/completions`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      ...(traceId === undefined ? {} : { traceparent: `00-${traceId}-00f067aa0ba902b7-01` }),
    },
    body: JSON.stringify({
      model: 'sim-model',
      max_tokens: 2,
      messages: [{ role: 'user', content: 'hi' }],
      ...body,
    }),
    signal,
  });
}

async function startSidecar(): Promise<RunningProcess> {
  const tokenFile = join(dir, 'token');
  await writeFile(tokenFile, 'token');
  const args = controllerSidecarArgs({
    controllerUrl: controller.url,
    pool: POOL,
    namespace: NS,
    tokenFile,
    sidecarId: 'app-1',
  });
  return startSwitchyard([...args, '--log-level', 'info', '--shutdown-grace', '20s'], {
    env: { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_BSP_SCHEDULE_DELAY: '50' },
  });
}

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'switchyard-zero-'));
  sim = await startSim('gpu', ['--model', 'sim-model']);
  controller = await SnapshotServer.start(NS, POOL);
  receiver = await startOtlpReceiver();
  controller.publish(snapshot('{maxWait: 30s, maxRequests: 2, maxBytes: 2000}', true));
  sidecar = await startSidecar();
  await waitFor('the first snapshot', () => applied(1));
});

after(async () => {
  await stopAll([sidecar, sim]);
  await controller.close();
  await receiver.close();
  await rm(dir, { recursive: true, force: true });
});

test('bounds: a body over maxBytes and a request past maxRequests get the 503 at once', async () => {
  assert.equal(await held(), 0);
  const big = await chat({ padding: 'x'.repeat(3_000) });
  assert.equal(big.status, 503);
  assert.equal(big.headers.get('retry-after'), '1');
  const bigError = ((await big.json()) as { error: { code: string; message: string } }).error;
  assert.equal(bigError.code, 'scale_from_zero_full');
  assert.match(bigError.message, /scaleFromZero\.maxBytes, 2000/);

  const leaving = new AbortController();
  const first = chat({}, leaving.signal).catch((err: unknown) => err);
  const second = chat({}, leaving.signal).catch((err: unknown) => err);
  await waitFor('two held', async () => (await held()) === 2);
  const third = await chat();
  assert.equal(third.status, 503);
  const thirdError = ((await third.json()) as { error: { code: string } }).error;
  assert.equal(thirdError.code, 'scale_from_zero_full');

  // Clients that leave while held are dropped at once: nothing is sent, even once the sim comes.
  leaving.abort();
  await Promise.all([first, second]);
  await waitFor('none held', async () => (await held()) === 0);
  await logged(/every held request left \(its client disconnected\)/);
  const before = await simRequests();
  await publish('{maxWait: 30s, maxRequests: 2, maxBytes: 2000}', false);
  await new Promise((r) => setTimeout(r, 100));
  assert.equal(await simRequests(), before, 'the aborted requests never reached the sim');
  await publish('{maxWait: 30s, maxRequests: 2, maxBytes: 2000}', true);
});

test('held past maxWait: 503 scale_from_zero_timeout with Retry-After', async () => {
  await publish('{maxWait: 1s}', true);
  const client = new OpenAI({ baseURL: `${sidecar.url}/v1`, apiKey: 'k', maxRetries: 0 });
  const started = performance.now();
  const err = await client.chat.completions
    .create({ model: 'sim-model', max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] })
    .then(
      () => assert.fail('answered'),
      (e: unknown) => e,
    );
  const waited = performance.now() - started;
  assert.ok(err instanceof OpenAI.APIError, String(err));
  assert.equal(err.status, 503);
  assert.equal(err.code, 'scale_from_zero_timeout');
  assert.equal((err.headers as Headers | undefined)?.get('retry-after'), '1');
  assert.ok(waited >= 950 && waited < 5_000, `answered after ${waited} ms`);
  await logged(/no endpoint came within scaleFromZero\.maxWait/);
  const traceId = '4bf92f3577b34da6a3ce929d0e0e0001';
  assert.equal((await chat({}, undefined, traceId)).status, 503);
  const span = await serverSpanOf(traceId);
  assert.equal(span['switchyard.scale_from_zero.outcome'], 'timeout');
  assert.ok(Number(span['switchyard.scale_from_zero.held_ms']) >= 950);
  assert.equal(span['switchyard.shed'], true);
});

test('held until the first endpoint is ready, then served (openai client)', async () => {
  await publish('{maxWait: 30s}', true);
  const client = new OpenAI({ baseURL: `${sidecar.url}/v1`, apiKey: 'k', maxRetries: 0 });
  const before = await simRequests();
  const traceId = '4bf92f3577b34da6a3ce929d0e0e0002';
  const traced = chat({}, undefined, traceId);
  const answers = [1, 2].map((n) =>
    client.chat.completions
      .create({ model: 'sim-model', max_tokens: 2, messages: [{ role: 'user', content: `${n}` }] })
      .withResponse(),
  );
  await waitFor('three held', async () => (await held()) === 3);
  const heldFor = performance.now();
  await new Promise((r) => setTimeout(r, 200));
  assert.equal(await simRequests(), before, 'nothing sent while the pool has no endpoint');
  const releasedAt = performance.now();
  await publish('{maxWait: 30s}', false);
  assert.equal((await traced).status, 200);
  for (const answer of await Promise.all(answers)) {
    assert.equal(answer.response.status, 200);
    assert.match(answer.response.headers.get('x-switchyard-backend') ?? '', /^gpu\//);
    assert.ok(answer.data.choices.length > 0);
  }
  assert.ok(performance.now() - releasedAt < 5_000);
  assert.equal(await simRequests(), before + 3);
  const span = await serverSpanOf(traceId);
  assert.equal(span['switchyard.scale_from_zero.outcome'], 'released');
  assert.ok(Number(span['switchyard.scale_from_zero.held_ms']) >= releasedAt - heldFor);
  assert.equal(span['http.response.status_code'], 200);
  await logged(/holding its requests until the first one is ready/);
  await logged(/an endpoint is ready; held requests released/);
  await waitFor('none held, three released in the histogram', async () => {
    const text = await (await fetch(`${sidecar.adminUrl}/metrics`)).text();
    return (
      /^switchyard_scale_from_zero_held_requests\{pool="chat"\} 0$/m.test(text) &&
      /^switchyard_scale_from_zero_held_seconds_count\{pool="chat",outcome="released"\} 3$/m.test(
        text,
      )
    );
  });
});

test('released requests still pass flow control: one endpoint with room for one', async () => {
  const flow = '  flowControl: {saturation: {maxInFlightPerEndpoint: 1}}';
  await publish('{maxWait: 30s}', true, flow);
  const answers = [chat({ max_tokens: 40 }), chat({ max_tokens: 40 })];
  await waitFor('two held', async () => (await held()) === 2);
  await publish('{maxWait: 30s}', false, flow);
  for (const res of await Promise.all(answers)) assert.equal(res.status, 200, await res.text());
  // The second one released found the endpoint full and waited in the flow-control queue.
  await waitFor('one request through the flow-control queue', async () => {
    const text = await (await fetch(`${sidecar.adminUrl}/metrics`)).text();
    return /^switchyard_flow_queue_wait_seconds_count\{pool="chat",priority="0"\} 1$/m.test(text);
  });
});

test('at shutdown held requests get the 503 at once, not after the grace', async () => {
  await publish('{maxWait: 30s}', true);
  const answer = chat();
  await waitFor('one held', async () => (await held()) === 1);
  const started = performance.now();
  const stopped = sidecar.stop(25_000);
  const res = await answer;
  assert.equal(res.status, 503);
  assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'shutting_down');
  await stopped;
  assert.ok(performance.now() - started < 5_000, 'well within the 20 s grace');
});
