/**
 * Clients that read slowly or stop reading for a while. Backpressure pauses the upstream, which
 * then (rightly) sends nothing: that silence is the client's doing, so it must neither trip
 * `timeouts.idle` nor count against the endpoint (docs/policy.md, "Whose fault an attempt is").
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { ask, completeStream } from '../../harness/ask.ts';
import { sidecarOn, type SidecarOnPool } from '../../harness/pool-file.ts';
import { startSim, type RunningProcess } from '../../harness/processes.ts';
import { debugBackends, eventually } from '../helpers.ts';
import { recordFigure } from './figures.ts';
import { endpointOf, poolYaml, startScript, type ScriptProcess } from './fixtures.ts';
import { rawConnect } from './raw-client.ts';

/** Short, so a stall the sidecar wrongly blames on the upstream shows within the test. */
const IDLE_MS = 1_000;

/** A long stream (tens of MB of SSE): more than every socket buffer between sim and client holds. */
function longStreamRequest(): string {
  const body = JSON.stringify({
    model: 'm',
    stream: true,
    max_tokens: 120_000,
    messages: [{ role: 'user', content: 'tell me a long story' }],
  });
  return (
    'POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n' +
    `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`
  );
}

describe('slow-reading clients', () => {
  let sim: RunningProcess;
  let fixture: SidecarOnPool;

  before(async () => {
    sim = await startSim('a', ['--slots', '64', '--decode-ms-per-token', '0']);
    fixture = await sidecarOn(
      poolYaml(
        [`{name: a, url: '${sim.url}/v1'}`],
        [
          `timeouts: {connect: 500ms, firstByte: 2s, idle: ${IDLE_MS}ms}`,
          'health: {minRequests: 1, maxErrorRate: 0.5, openFor: 30s}',
        ],
      ),
    );
  });
  after(async () => {
    await fixture?.stop();
    await sim?.stop();
  });

  test('a client that stops reading for longer than the idle timeout still gets its whole stream, and the endpoint is not blamed', async () => {
    const { sidecar } = fixture;
    const port = Number(new URL(sidecar.url).port);
    const c = await rawConnect(port);
    c.socket.write(longStreamRequest());
    // Let the response start, then stop reading for three idle timeouts: every buffer fills
    // and the sidecar pauses the upstream.
    await eventually(() => c.received().length > 0, 10_000, 'the response head');
    c.socket.pause();
    await sleep(3 * IDLE_MS);
    c.socket.resume();
    const { received } = await c.closed;
    // (Not assert.match: a failure would print tens of MB.)
    assert.equal(received.slice(0, 12), 'HTTP/1.1 200');
    assert.ok(!received.includes('upstream_stream_broken'), 'the stream was not broken off');
    assert.ok(received.includes('data: [DONE]'), 'the stream ran to its end');
    assert.ok(received.length > 5_000_000, `a long stream (${received.length} bytes)`);

    const endpoint = await endpointOf(sidecar, 'a');
    assert.equal(endpoint?.errors, 0, 'no error counted against the endpoint');
    assert.equal(endpoint?.breaker, 'closed');
    assert.equal(endpoint?.inFlight, 0);
    // And the endpoint still serves others.
    assert.ok(completeStream(await ask(sidecar.url)));
  });
});

/**
 * A client that asks for a long stream and never reads a byte of it: the socket is paused from
 * the start, so the kernel's buffers fill and the sidecar must pause the upstream.
 */
async function pausedClient(port: number): Promise<net.Socket> {
  const socket = net.connect(port, '127.0.0.1');
  socket.on('error', () => undefined);
  socket.pause();
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  socket.write(longStreamRequest());
  return socket;
}

const IMPATIENT_BACKEND = fileURLToPath(new URL('./impatient-backend.ts', import.meta.url));

describe('clients that stop reading and then leave (issue 40, item 6)', () => {
  /** As the issue found it: a short idle timeout, a breaker that opens after 3 requests. */
  const PAUSED_IDLE_MS = 2_000;
  const CLIENTS = 8;
  const PAUSED_FOR_MS = 8_000;
  /** The backends drop a reader whose writes have not drained for this long. */
  const GIVE_UP_MS = 1_000;
  let backends: ScriptProcess[] = [];
  let fixture: SidecarOnPool;

  before(async () => {
    backends = await Promise.all(
      ['a', 'b'].map(() =>
        startScript(IMPATIENT_BACKEND, ['--give-up-ms', String(GIVE_UP_MS), '--chunks', '5000']),
      ),
    );
    fixture = await sidecarOn(
      poolYaml(
        backends.map((s, i) => `{name: ${'ab'[i]}, url: '${s.url}/v1'}`),
        [
          `timeouts: {connect: 500ms, firstByte: 2s, idle: ${PAUSED_IDLE_MS}ms}`,
          'health: {minRequests: 3, maxErrorRate: 0.5, openFor: 60s}',
        ],
      ),
    );
  });
  after(async () => {
    await fixture?.stop();
    for (const b of backends) await b.stop();
  });

  test('8 clients never read and leave after 8 s: whatever ends their streams meanwhile is theirs, no breaker opens, the next client is served', async (t) => {
    const { sidecar } = fixture;
    const port = Number(new URL(sidecar.url).port);
    const clients = await Promise.all(Array.from({ length: CLIENTS }, () => pausedClient(port)));
    await sleep(PAUSED_FOR_MS);
    for (const c of clients) c.destroy();

    await eventually(
      async () => (await debugBackends(sidecar)).endpoints.every((e) => e.inFlight === 0),
      10_000,
      'nothing left in flight',
    );
    const endpoints = (await debugBackends(sidecar)).endpoints;
    for (const e of endpoints) {
      assert.equal(e.breaker, 'closed', `${e.id}'s breaker: ${JSON.stringify(e)}`);
      assert.equal(e.errors, 0, `errors counted against ${e.id}: ${JSON.stringify(e)}`);
    }
    // The backends did drop the readers that held their streams (else this proves nothing).
    await backends[0]!.line(/^gave up/);
    const next = await ask(sidecar.url);
    assert.equal(next.status, 200, `the next client: ${next.status} ${next.body.slice(0, 300)}`);
    assert.ok(next.body.includes('data: [DONE]'), 'the next client got its whole stream');
    recordFigure(t, {
      fault: 'client: paused from the start, then gone',
      load: `${CLIENTS} streams of 5,000 × 4 KB never read, left after ${PAUSED_FOR_MS / 1000} s; idle ${PAUSED_IDLE_MS / 1000} s, backends drop stalled readers after ${GIVE_UP_MS / 1000} s`,
      lost: 0,
      requests: 1,
      breakersOpen: endpoints.filter((e) => e.breaker !== 'closed').length,
      errorsCounted: endpoints.reduce((sum, e) => sum + e.errors, 0),
    });
  });

  test('8 clients stop reading until the backends drop them, then read on: the broken streams are theirs, no breaker opens', async (t) => {
    const { sidecar } = fixture;
    const port = Number(new URL(sidecar.url).port);
    const clients = await Promise.all(Array.from({ length: CLIENTS }, () => pausedClient(port)));
    const received = clients.map((c) => {
      let text = '';
      c.setEncoding('latin1');
      c.on('data', (d: string) => (text += d));
      c.pause(); // still paused: the listener only records what is read once it resumes
      return {
        text: () => text,
        closed: new Promise<void>((resolve) => c.once('close', () => resolve())),
      };
    });
    // Well past the backends' patience, and within the sidecar's idle and client-stall limits.
    await sleep(4 * GIVE_UP_MS);
    for (const c of clients) c.resume();
    await Promise.all(received.map((r) => r.closed));
    const broken = received.filter((r) => !r.text().includes('data: [DONE]')).length;

    const endpoints = (await debugBackends(sidecar)).endpoints;
    for (const e of endpoints) {
      assert.equal(e.breaker, 'closed', `${e.id}'s breaker: ${JSON.stringify(e)}`);
      assert.equal(e.errors, 0, `errors counted against ${e.id}: ${JSON.stringify(e)}`);
    }
    assert.ok(broken > 0, 'the backends dropped the streams of the readers that stopped');
    const next = await ask(sidecar.url);
    assert.equal(next.status, 200, `the next client: ${next.status} ${next.body.slice(0, 300)}`);
    assert.ok(next.body.includes('data: [DONE]'), 'the next client got its whole stream');
    recordFigure(t, {
      fault: 'client: paused until the backend drops it, then reads on',
      load: `${CLIENTS} streams of 5,000 × 4 KB paused ${(4 * GIVE_UP_MS) / 1000} s; backends drop stalled readers after ${GIVE_UP_MS / 1000} s`,
      lost: 0,
      requests: 1,
      brokenForThePausedClients: broken,
      breakersOpen: endpoints.filter((e) => e.breaker !== 'closed').length,
    });
  });
});
