/**
 * Clients that read slowly or stop reading for a while. Backpressure pauses the upstream, which
 * then (rightly) sends nothing: that silence is the client's doing, so it must neither trip
 * `timeouts.idle` nor count against the endpoint (docs/policy.md, "Whose fault an attempt is").
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { ask, completeStream } from '../../harness/ask.ts';
import { sidecarOn, type SidecarOnPool } from '../../harness/pool-file.ts';
import { startSim, type RunningProcess } from '../../harness/processes.ts';
import { eventually } from '../helpers.ts';
import { endpointOf, poolYaml } from './fixtures.ts';
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
