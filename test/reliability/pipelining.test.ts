/**
 * Deep pipelining on one connection (issue 40, item 1). A client that writes thousands of
 * requests ahead of their answers and then leaves must cost only its own connection: its queued
 * requests are dropped without running, every other client's stream goes on, the process lives.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { ask, completeStream } from '../../harness/ask.ts';
import { sidecarOn, type SidecarOnPool } from '../../harness/pool-file.ts';
import { startSim, type RunningProcess } from '../../harness/processes.ts';
import { debugBackends, eventually } from '../helpers.ts';
import { MAX_PIPELINED_REQUESTS } from '../../sidecar/proxy/client-request.ts';
import { recordFigure } from './figures.ts';
import { poolYaml } from './fixtures.ts';
import { rawConnect, statusOf, streamedChatBody } from './raw-client.ts';

const chat = streamedChatBody;
const request = (body: string, extra = ''): string =>
  `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n${extra}\r\n${body}`;

/** A stream of this many tokens at the simulator's 2 ms each: seconds, long enough to hold a queue. */
const LONG_TOKENS = 2_000;

describe('deep pipelining on one connection', () => {
  let sim: RunningProcess;
  let fixture: SidecarOnPool;

  before(async () => {
    sim = await startSim('a', ['--slots', '64']);
    fixture = await sidecarOn(
      poolYaml(
        [`{name: a, url: '${sim.url}/v1'}`],
        ['timeouts: {connect: 500ms, firstByte: 5s, idle: 5s}'],
      ),
    );
  });
  after(async () => {
    await fixture?.stop();
    await sim?.stop();
  });

  test('5,000 pipelined requests, then the client leaves: the process lives and a bystander stream completes', async (t) => {
    const { sidecar } = fixture;
    const port = Number(new URL(sidecar.url).port);
    let exited: number | string | undefined;
    void sidecar.exited.then((code) => (exited = code));

    const bystander = ask(sidecar.url, { ...JSON.parse(chat(LONG_TOKENS)) });
    const c = await rawConnect(port);
    // A long stream first, so the rest waits behind it; then 4,999 small ones (~1 MB).
    const queued = 4_999;
    const written = new Promise<void>((resolve) =>
      c.socket.write(request(chat(LONG_TOKENS)) + request(chat(8)).repeat(queued), () => resolve()),
    );
    await written;
    await eventually(() => c.received().length > 0, 10_000, 'the first answer to start');
    // Let the sidecar parse what it reads of the queue, then leave with it queued.
    await sleep(500);
    c.socket.destroy();

    const answer = await bystander;
    const tail = (): string => sidecar.output().slice(-1_500);
    assert.ok(
      completeStream(answer),
      `the bystander's stream completed (${answer.ended}):\n${tail()}`,
    );
    assert.equal(exited, undefined, `the sidecar exited:\n${tail()}`);
    assert.ok(completeStream(await ask(sidecar.url)), 'a new client is served');
    await eventually(
      async () => (await debugBackends(sidecar)).endpoints.every((e) => e.inFlight === 0),
      10_000,
      'nothing left in flight',
    );
    assert.doesNotMatch(sidecar.output(), /Maximum call stack/);
    recordFigure(t, {
      fault: 'client: 5,000 pipelined requests, then reset',
      load: '1 connection of 5,000 requests (~1 MB), 1 bystander stream',
      lost: 0,
      requests: 1,
    });
  });

  test('a connection that queues more than the limit gets its earlier answers, then a clear 503 and a close', async () => {
    const { sidecar } = fixture;
    const port = Number(new URL(sidecar.url).port);
    const c = await rawConnect(port);
    c.socket.write(request(chat(200)) + request(chat(1)).repeat(2_000));
    const { received } = await c.closed;
    const answers = received.match(/^HTTP\/1\.1 \d{3}/gm) ?? [];
    assert.equal(statusOf(received), 200);
    // The running one, the ones queued behind it, and the refusal of the first excess one.
    assert.equal(answers.length, MAX_PIPELINED_REQUESTS + 2, `${answers.length} answers`);
    assert.equal(answers.at(-1), 'HTTP/1.1 503', 'the excess is refused');
    assert.equal(answers.filter((a) => a !== 'HTTP/1.1 200').length, 1, 'once, last');
    assert.match(received, /too_many_pipelined_requests/);
    assert.ok(completeStream(await ask(sidecar.url)), 'a new client is served');
  });
});
