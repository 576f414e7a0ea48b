import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, test } from 'node:test';
import { gunzipSync } from 'node:zlib';
import {
  SharedRender,
  gzipBody,
  renderInSlices,
  sendBody,
  type RenderedBody,
} from './shared-render.ts';

const text = (body: RenderedBody): string => Buffer.concat(body.chunks).toString();

/** Pieces that count how many renders began, and can be held before their last piece. */
function source(pieces: string[]) {
  const state = { renders: 0, release: Promise.resolve() };
  async function* render(): AsyncGenerator<string> {
    state.renders += 1;
    for (const piece of pieces.slice(0, -1)) yield piece;
    await state.release;
    yield pieces.at(-1)!;
  }
  return { state, render };
}

describe('rendering in slices', () => {
  test('lets the event loop run between two pieces', async () => {
    const order: string[] = [];
    function* pieces(): Generator<string> {
      order.push('piece 1');
      setImmediate(() => order.push('other work'));
      yield 'a';
      order.push('piece 2');
      yield 'b';
    }
    const body = await renderInSlices(pieces());
    assert.deepEqual(order, ['piece 1', 'other work', 'piece 2']);
    assert.equal(text(body), 'ab');
    assert.equal(body.bytes, 2);
  });

  test('encodes small pieces together and counts bytes, not characters', async () => {
    const big = 'x'.repeat(70_000);
    const body = await renderInSlices(['é', 'b', big, 'c']);
    assert.equal(text(body), `éb${big}c`);
    assert.equal(body.bytes, 70_004);
    assert.deepEqual(
      body.chunks.map((c) => c.length),
      [70_003, 1],
    );
  });
});

describe('a shared render', () => {
  test('serves one render to concurrent requests and within the TTL, then renders anew', async () => {
    const clock = { ms: 0 };
    const { state, render } = source(['a', 'b']);
    const shared = new SharedRender(render, 1_000, () => clock.ms);
    const [one, two] = await Promise.all([shared.get(), shared.get()]);
    assert.equal(one, two);
    clock.ms = 999;
    assert.equal(await shared.get(), one);
    assert.equal(state.renders, 1);
    clock.ms = 1_000;
    assert.notEqual(await shared.get(), one);
    assert.equal(state.renders, 2);
  });

  test('gzips a render once, for every request that asks while it is current', async () => {
    const clock = { ms: 0 };
    const { state, render } = source(['metric_a 1\n'.repeat(10_000), 'metric_b 2\n']);
    const shared = new SharedRender(render, 1_000, () => clock.ms);
    const [one, two] = await Promise.all([shared.getGzipped(), shared.getGzipped()]);
    assert.equal(one, two);
    assert.equal(gunzipSync(Buffer.concat(one.chunks)).toString(), text(await shared.get()));
    assert.equal(one.bytes, Buffer.concat(one.chunks).length);
    assert.ok(one.bytes < (await shared.get()).bytes / 10, `${one.bytes} bytes gzipped`);
    clock.ms = 1_000;
    const fresh = await shared.getGzipped();
    assert.notEqual(fresh, one);
    assert.equal(state.renders, 2);
  });

  test('never overlaps renders, nor serves one half done', async () => {
    const clock = { ms: 0 };
    const { state, render } = source(['a', 'b', 'c']);
    const shared = new SharedRender(render, 1_000, () => clock.ms);
    const first = await shared.get();
    let release = (): void => undefined;
    state.release = new Promise((resolve) => (release = resolve));
    clock.ms = 5_000;
    const during = shared.get();
    // Slower than the TTL: later requests still wait for the render in progress.
    clock.ms = 9_000;
    const later = shared.get();
    assert.equal(later, during);
    release();
    const [a, b] = await Promise.all([during, later]);
    assert.equal(state.renders, 2);
    assert.equal(text(a), 'abc');
    assert.equal(a, b);
    assert.notEqual(a, first);
    // Counted from the end of the render, not its start.
    clock.ms = 9_999;
    assert.equal(await shared.get(), a);
  });

  test('with TTL 0 only requests during a render share it', async () => {
    const { state, render } = source(['a']);
    const shared = new SharedRender(render, 0, () => 0);
    await Promise.all([shared.get(), shared.get()]);
    await shared.get();
    assert.equal(state.renders, 2);
  });

  test('a failed render fails its requests, and the next request renders again', async () => {
    let fail = true;
    const shared = new SharedRender(
      function* () {
        if (fail) throw new Error('boom');
        yield 'ok';
      },
      1_000,
      () => 0,
    );
    await assert.rejects(shared.get(), /boom/);
    fail = false;
    assert.equal(text(await shared.get()), 'ok');
  });
});

describe('sending a rendered body', () => {
  test('writes every chunk with the total length, as the client reads', async () => {
    const chunks = Array.from({ length: 40 }, (_, i) => Buffer.alloc(256 * 1024, 97 + (i % 26)));
    const body = { chunks, bytes: 40 * 256 * 1024 };
    const server = http.createServer((_req, res) => void sendBody(res, 'text/plain', body));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = server.address() as AddressInfo;
      const res = await fetch(`http://127.0.0.1:${port}/`);
      assert.equal(res.headers.get('content-length'), String(body.bytes));
      assert.equal(res.headers.get('content-type'), 'text/plain');
      assert.ok(Buffer.from(await res.arrayBuffer()).equals(Buffer.concat(chunks)));
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });

  test('stops when the client leaves in the middle', async () => {
    const chunks = Array.from({ length: 40 }, () => Buffer.alloc(256 * 1024, 97));
    let sending: Promise<void> | undefined;
    const server = http.createServer((_req, res) => {
      sending = sendBody(res, 'text/plain', { chunks, bytes: 40 * 256 * 1024 });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = server.address() as AddressInfo;
      await new Promise<void>((resolve) => {
        http.get(`http://127.0.0.1:${port}/`, (res) => {
          res.once('data', () => {
            res.destroy();
            resolve();
          });
        });
      });
      await sending; // settles: it does not wait for a drain that never comes
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });
});

describe('gzipping a rendered body', () => {
  test('gives what gunzip turns back into the same bytes, empty bodies too', async () => {
    for (const chunks of [[], [Buffer.from('é'), Buffer.alloc(300_000, 120)]]) {
      const body = { chunks, bytes: chunks.reduce((n, c) => n + c.length, 0) };
      const gzipped = await gzipBody(body);
      assert.deepEqual(gunzipSync(Buffer.concat(gzipped.chunks)), Buffer.concat(chunks));
    }
  });
});
