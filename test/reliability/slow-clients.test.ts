/**
 * Slow-loris: hundreds of connections that send their request head or body too slowly, or not at
 * all, while normal traffic goes on. Each must get a 408 in OpenAI shape and be closed (head
 * within CLIENT_HEADERS_TIMEOUT_MS, whole request within CLIENT_REQUEST_TIMEOUT_MS); the normal
 * traffic loses nothing; afterwards the sidecar holds no more connections than before.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { ask, completeStream } from '../../harness/ask.ts';
import { sidecarOn, type SidecarOnPool } from '../../harness/pool-file.ts';
import { establishedWith, holdings } from '../../harness/proc.ts';
import { startSim, type RunningProcess } from '../../harness/processes.ts';
import {
  CLIENT_HEADERS_TIMEOUT_MS,
  CLIENT_REQUEST_TIMEOUT_MS,
} from '../../sidecar/proxy/proxy-server.ts';
import { eventually } from '../helpers.ts';
import { recordFigure } from './figures.ts';
import { poolYaml } from './fixtures.ts';
import { rawConnect, statusOf, type RawConnection } from './raw-client.ts';

const HEAD = 'POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n';
const BODY = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] });

describe('slow-loris clients', () => {
  let sim: RunningProcess;
  let fixture: SidecarOnPool;

  before(async () => {
    sim = await startSim('a', ['--slots', '64']);
    // No load scrape: its keep-alive connection would blur the file-handle count.
    fixture = await sidecarOn(poolYaml([`{name: a, url: '${sim.url}/v1'}`]), [
      '--load-scrape-every',
      '0',
    ]);
  });
  after(async () => {
    await fixture?.stop();
    await sim?.stop();
  });

  test('are cut off with a 408 while normal traffic loses nothing', async (t) => {
    const { sidecar } = fixture;
    const port = Number(new URL(sidecar.url).port);
    const baseline = holdings(sidecar.pid);
    const kinds = {
      /** Connects and sends nothing. */
      silent: (_c: RawConnection) => undefined,
      /** Sends its head one byte every 200 ms (it would take ~20 s). */
      headTrickle: (c: RawConnection) => c.trickle(`${HEAD}content-length: 60\r\n\r\n`, 200),
      /** Sends its head, a third of its body, then nothing. */
      bodyStall: (c: RawConnection) =>
        c.socket.write(`${HEAD}content-length: ${BODY.length}\r\n\r\n${BODY.slice(0, 20)}`),
      /** Sends its head, then its body one byte every 700 ms (it would take ~60 s). */
      bodyTrickle: (c: RawConnection) => {
        c.socket.write(`${HEAD}content-length: ${BODY.length}\r\n\r\n`);
        c.trickle(BODY, 700);
      },
    };
    const PER_KIND = 75;
    const slow: { kind: keyof typeof kinds; closed: RawConnection['closed'] }[] = [];
    for (const kind of Object.keys(kinds) as (keyof typeof kinds)[]) {
      for (let i = 0; i < PER_KIND; i++) {
        const c = await rawConnect(port);
        kinds[kind](c);
        slow.push({ kind, closed: c.closed });
      }
    }

    let normal = 0;
    let normalLost = 0;
    let running = true;
    const traffic = Promise.all(
      Array.from({ length: 4 }, async () => {
        while (running) {
          const a = await ask(sidecar.url);
          normal++;
          if (!completeStream(a)) normalLost++;
        }
      }),
    );
    const ends = await Promise.all(slow.map(async (s) => ({ kind: s.kind, ...(await s.closed) })));
    running = false;
    await traffic;

    assert.equal(normalLost, 0, `${normalLost} of ${normal} normal requests failed`);
    for (const end of ends) {
      assert.equal(statusOf(end.received), 408, `${end.kind}: ${end.received.slice(0, 80)}`);
      assert.match(end.received, /"code":"request_timeout"/);
    }
    await eventually(
      () => establishedWith(sidecar.pid, port) === 0,
      5_000,
      'no client connection left open on the sidecar',
    );
    assert.ok(
      holdings(sidecar.pid).fds <= baseline.fds + 4,
      'file handles back to baseline (+ idle upstream keep-alive)',
    );
    const metrics = await (await fetch(`${sidecar.adminUrl}/metrics`)).text();
    assert.match(
      metrics,
      new RegExp(`switchyard_responses_total\\{pool="reliability",code="408"\\} ${ends.length}\\b`),
    );

    const closedAfter = (kind: keyof typeof kinds): number =>
      Math.max(...ends.filter((e) => e.kind === kind).map((e) => e.atMs));
    recordFigure(t, {
      fault: 'client: slow-loris',
      load: `${ends.length} slow connections (${PER_KIND} each: silent, head trickle, body stall, body trickle) + 4 normal streams at a time`,
      lost: normalLost,
      requests: normal,
      cutHeadsAfterMs: Math.round(Math.max(closedAfter('silent'), closedAfter('headTrickle'))),
      cutBodiesAfterMs: Math.round(Math.max(closedAfter('bodyStall'), closedAfter('bodyTrickle'))),
      limitsMs: { head: CLIENT_HEADERS_TIMEOUT_MS, request: CLIENT_REQUEST_TIMEOUT_MS },
    });
  });
});
