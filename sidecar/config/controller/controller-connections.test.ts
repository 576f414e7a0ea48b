import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { REVIEW_TICKET_HEADER } from '../../../crds/snapshot.ts';
import { DualHttpServer } from '../../../lib/dual-http-server.ts';
import { ControllerConnections, postJson } from './controller-connections.ts';

describe('ControllerConnections: review tickets', () => {
  /** The ticket header of each request the fake controller saw, in order ('' for none). */
  const seen: string[] = [];
  let issued = 0;
  const server = new DualHttpServer({}, (req, res) => {
    const ticket = req.headers[REVIEW_TICKET_HEADER];
    seen.push(typeof ticket === 'string' ? ticket : '');
    req.resume();
    req.on('end', () => {
      // Each answer carries a new ticket, as a replica's answers do.
      res.setHeader(REVIEW_TICKET_HEADER, `ticket-${++issued}`);
      res.writeHead(204);
      res.end();
    });
  });
  let url: URL;
  before(async () => {
    await new Promise<void>((r) => server.server.listen(0, '127.0.0.1', r));
    url = new URL(`http://127.0.0.1:${(server.server.address() as AddressInfo).port}/v1/report`);
  });
  after(() => server.server.close());

  test('the last ticket goes back with the same token, on a new connection too', async () => {
    const connections = new ControllerConnections();
    const post = (token: string) =>
      postJson(connections, url, { token, ca: undefined }, '{}', 5_000).done;
    assert.equal((await post('token-a')).status, 204);
    assert.equal((await post('token-a')).status, 204);
    // The controller's replica died: every connection ends, the ticket stays.
    server.closeAllConnections();
    await new Promise((r) => setTimeout(r, 50));
    assert.equal((await post('token-a')).status, 204);
    // The token was rotated: the ticket vouches for the old one, so none is sent.
    assert.equal((await post('token-b')).status, 204);
    assert.deepEqual(seen, ['', 'ticket-1', 'ticket-2', '']);
    await connections.close();
  });
});

describe('ControllerConnections: idle connections', () => {
  /** Requests to /slow are never answered (a replica busy reviewing thousands of tokens). */
  const server = new DualHttpServer({}, (req, res) => {
    req.resume();
    if (req.url === '/slow') return;
    req.on('end', () => {
      res.writeHead(204);
      res.end();
    });
  });
  let origin: string;
  before(async () => {
    await new Promise<void>((r) => server.server.listen(0, '127.0.0.1', r));
    origin = `http://127.0.0.1:${(server.server.address() as AddressInfo).port}`;
  });
  after(() => {
    server.closeAllConnections();
    server.server.close();
  });
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  test('a connection with a stream still waiting for its answer is not closed for quiet', async () => {
    const connections = new ControllerConnections({ idleTimeoutMs: 100 });
    const stream = connections.request(
      new URL(`${origin}/slow`),
      { token: 't', ca: undefined },
      { ':method': 'GET' },
      { endStream: true },
    );
    let closed = false;
    stream.on('close', () => (closed = true));
    stream.on('error', () => undefined);
    await sleep(500); // five idle periods
    assert.equal(closed, false, 'the waiting stream was ended by the idle timeout');
    assert.equal(stream.session?.closed, false);
    assert.equal(connections.size, 1);
    await connections.close();
  });

  test('a connection without streams is closed once idle, and the next request opens one', async () => {
    const connections = new ControllerConnections({ idleTimeoutMs: 100 });
    const url = new URL(`${origin}/report`);
    assert.equal(
      (await postJson(connections, url, { token: 't', ca: undefined }, '{}', 5_000).done).status,
      204,
    );
    assert.equal(connections.size, 1);
    await sleep(400);
    assert.equal(connections.size, 0, 'the idle connection is still open');
    assert.equal(
      (await postJson(connections, url, { token: 't', ca: undefined }, '{}', 5_000).done).status,
      204,
    );
    await connections.close();
  });
});
