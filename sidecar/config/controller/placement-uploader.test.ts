import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import type { PoolPlacements } from '../../../crds/snapshot.ts';
import { connectionOf, DualHttpServer } from '../../../lib/dual-http-server.ts';
import { encodeHashes } from '../../../lib/placement-hashes.ts';
import { ControllerConnections } from './controller-connections.ts';
import { PlacementUploader } from './placement-uploader.ts';
import { PlacementsEvents, placementsBudget } from './placements-event.ts';

const silent = pino({ level: 'silent' });
const batch = (n: number): PoolPlacements => ({
  endpoints: ['e'],
  placements: [{ endpoint: 0, ageMs: n, hashes: encodeHashes([n]) }],
});

/** A controller's upload endpoint: answers `status` after `delayMs`, counting what it sees. */
let server: DualHttpServer;
let url: URL;
let status = 204;
let delayMs = 0;
let inFlight = 0;
let maxInFlight = 0;
let bodies: PoolPlacements[] = [];
const sockets = new Set<unknown>();

before(async () => {
  server = new DualHttpServer({}, (req, res) => {
    sockets.add(connectionOf(req));
    inFlight += 1;
    maxInFlight = Math.max(maxInFlight, inFlight);
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (body += c));
    req.on('end', () => {
      bodies.push(JSON.parse(body) as PoolPlacements);
      setTimeout(() => {
        inFlight -= 1;
        res.writeHead(status).end();
      }, delayMs);
    });
  });
  await new Promise<void>((r) => server.server.listen(0, '127.0.0.1', r));
  url = new URL(`http://127.0.0.1:${(server.server.address() as AddressInfo).port}/placements`);
});
after(async () => {
  server.closeAllConnections();
  await new Promise<void>((r) => server.close(() => r()));
});

function uploader(take: () => PoolPlacements | undefined) {
  status = 204;
  delayMs = 0;
  inFlight = 0;
  maxInFlight = 0;
  bodies = [];
  sockets.clear();
  const counts = { uploaded: 0, failed: 0, taken: 0 };
  const connections = new ControllerConnections();
  const u = new PlacementUploader({
    url,
    connections,
    log: silent,
    everyMs: 10,
    take: () => {
      counts.taken += 1;
      return take();
    },
    uploaded: (n) => (counts.uploaded += n),
    failed: () => (counts.failed += 1),
  });
  const close = async () => {
    u.close();
    await u.closed();
    await connections.close();
  };
  return { u, counts, close };
}

const session = { token: 't', ca: undefined };

/** Waits until the server saw `n` uploads (a loaded machine may tick late). */
async function uploadsSeen(n: number): Promise<void> {
  const deadline = performance.now() + 5_000;
  while (bodies.length < n) {
    if (performance.now() > deadline) throw new Error(`only ${bodies.length} of ${n} uploads`);
    await sleep(5);
  }
}

describe('PlacementUploader', () => {
  test('uploads only between start and stop, reusing one connection', async () => {
    let n = 0;
    const { u, counts, close } = uploader(() => batch(++n));
    try {
      await sleep(50);
      assert.equal(counts.taken, 0, 'nothing before a stream that relays placements');
      u.start(session);
      assert.equal(u.active, true);
      await uploadsSeen(3);
      u.stop();
      await sleep(20); // one in flight at stop still ends
      const sent = bodies.length;
      assert.ok(sent >= 3, `${sent} uploads`);
      assert.equal(counts.uploaded, sent);
      assert.equal(sockets.size, 1, 'one keep-alive connection');
      await sleep(50);
      assert.equal(bodies.length, sent, 'none after stop');
    } finally {
      await close();
    }
  });

  test('never more than one upload in flight; a tick meanwhile takes nothing', async () => {
    const { u, counts, close } = uploader(() => batch(1));
    try {
      delayMs = 60;
      u.start(session);
      await uploadsSeen(3);
      assert.equal(maxInFlight, 1);
      assert.ok(counts.taken <= bodies.length + 1, `${counts.taken} taken, ${bodies.length} sent`);
    } finally {
      await close();
    }
  });

  test('a failed upload is dropped and counted, not retried', async () => {
    let n = 0;
    const { u, counts, close } = uploader(() => (n < 3 ? batch(++n) : undefined));
    try {
      status = 500;
      u.start(session);
      await uploadsSeen(3);
      await sleep(60);
      assert.equal(bodies.length, 3, 'each batch once');
      assert.deepEqual(
        bodies.map((b) => b.placements[0]!.ageMs),
        [1, 2, 3],
      );
      assert.equal(counts.failed, 3);
      assert.equal(counts.uploaded, 0);
    } finally {
      await close();
    }
  });

  test('a 404 (the controller relays no placements) stops uploads until the next start', async () => {
    const { u, close } = uploader(() => batch(1));
    try {
      status = 404;
      u.start(session);
      await uploadsSeen(1);
      await sleep(60);
      assert.equal(bodies.length, 1);
      assert.equal(u.active, false);
    } finally {
      await close();
    }
  });

  test('close ends an upload in flight and resolves', async () => {
    const { u, counts, close } = uploader(() => batch(1));
    delayMs = 5_000;
    u.start(session);
    await uploadsSeen(1);
    const started = performance.now();
    await close();
    assert.ok(performance.now() - started < 1_000);
    assert.equal(counts.failed, 1);
  });
});

describe('the placements event', () => {
  test('the header: a positive byte rate, else none', () => {
    assert.equal(placementsBudget('8192'), 8192);
    assert.equal(placementsBudget(undefined), undefined);
    assert.equal(placementsBudget('0'), undefined);
    assert.equal(placementsBudget('lots'), undefined);
  });

  test('a valid batch is applied with its size; invalid ones warned once a minute', () => {
    const lines: string[] = [];
    const log = pino({ level: 'warn' }, { write: (l: string) => lines.push(l) });
    const events = new PlacementsEvents(log);
    const applied: number[] = [];
    const good = JSON.stringify(batch(5));
    events.accept(good, (_, bytes) => applied.push(bytes));
    assert.deepEqual(applied, [Buffer.byteLength(good)]);
    for (const bad of [
      '{',
      '{"endpoints":[],"placements":[{"endpoint":3,"ageMs":0,"hashes":"AAAAAAAAAA"}]}',
    ])
      events.accept(bad, () => assert.fail('an invalid batch is not applied'));
    assert.equal(lines.length, 1, 'one warning for both');
    assert.match(lines[0]!, /placements event ignored/);
  });
});
