/**
 * A property-based probe of client behaviour (issue 16): random mixes of clients that abort,
 * stall, read slowly, half-close, pipeline (up to past the sidecar's per-connection limit), reset
 * or close their connection at a random point (mid-head, mid-body, with requests queued,
 * mid-answer; issue 40), send Expect: 100-continue, compress their body or prefix it with a BOM,
 * all at once against healthy simulators. Whatever they do: no breaker opens, no error is
 * counted against an endpoint, each client that asked properly is answered, a bystander is
 * served, the process lives with bounded memory, and afterwards nothing is in flight and no
 * client connection is left. So that the next finding of this kind is caught here, not by a user.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { gzipSync } from 'node:zlib';
import fc from 'fast-check';
import { ask, completeStream } from '../../harness/ask.ts';
import { sidecarOn, type SidecarOnPool } from '../../harness/pool-file.ts';
import { establishedWith } from '../../harness/proc.ts';
import { startSim, type RunningProcess } from '../../harness/processes.ts';
import { debugBackends, eventually } from '../helpers.ts';
import { MAX_PIPELINED_REQUESTS } from '../../sidecar/proxy/client-request.ts';
import { rssMb } from '../../harness/proc.ts';
import { recordFigure } from './figures.ts';
import { poolYaml } from './fixtures.ts';
import { rawConnect, statusOf, streamedChatBody } from './raw-client.ts';

const IDLE_MS = 1_000;
/** Random mixes per run (each 6 to 14 clients at once). */
const RUNS = 12;
/** How much the sidecar's RSS may grow over the whole probe. */
const RSS_GROWTH_BOUND_MB = 200;

type Behaviour =
  | { kind: 'normal' | 'half-close' | 'expect' | 'gzip' | 'bom' | 'connection-header' }
  | { kind: 'unknown-encoding' }
  | { kind: 'abort'; afterBytes: number }
  | { kind: 'stall-read'; stallMs: number }
  | { kind: 'slow-read' }
  | { kind: 'pipeline'; count: number }
  /** Many requests queued on one connection, past the sidecar's limit at times. */
  | { kind: 'deep-pipeline'; count: number }
  /** The client resets (RST) or closes its connection at a random point. */
  | { kind: 'reset'; at: ResetPoint; afterBytes: number; rst: boolean };

/** Where a client may leave: inside its head, its body, with requests queued, or mid-answer. */
type ResetPoint = 'mid-head' | 'mid-body' | 'queued' | 'mid-stream';

const behaviourArb: fc.Arbitrary<Behaviour> = fc.oneof(
  fc.constantFrom<Behaviour>(
    { kind: 'normal' },
    { kind: 'half-close' },
    { kind: 'expect' },
    { kind: 'gzip' },
    { kind: 'bom' },
    { kind: 'connection-header' },
    { kind: 'unknown-encoding' },
    { kind: 'slow-read' },
  ),
  fc.record({ kind: fc.constant('abort' as const), afterBytes: fc.integer({ min: 0, max: 4000 }) }),
  fc.record({
    kind: fc.constant('stall-read' as const),
    stallMs: fc.integer({ min: IDLE_MS, max: 2 * IDLE_MS }),
  }),
  fc.record({ kind: fc.constant('pipeline' as const), count: fc.integer({ min: 2, max: 8 }) }),
  fc.record({
    kind: fc.constant('deep-pipeline' as const),
    count: fc.integer({ min: 20, max: MAX_PIPELINED_REQUESTS + 60 }),
  }),
  fc.record({
    kind: fc.constant('reset' as const),
    at: fc.constantFrom<ResetPoint>('mid-head', 'mid-body', 'queued', 'mid-stream'),
    afterBytes: fc.integer({ min: 0, max: 4000 }),
    rst: fc.boolean(),
  }),
);

const chat = streamedChatBody;
const head = (length: number, extra = ''): string =>
  `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${length}\r\n${extra}\r\n`;

/** Runs one behaviour; resolves with what it must have got ('answered', '415' or 'nothing'). */
async function run(port: number, b: Behaviour): Promise<{ ok: boolean; detail: string }> {
  const complete = (received: string, n = 1): boolean =>
    statusOf(received) === 200 && (received.match(/data: \[DONE\]/g)?.length ?? 0) === n;
  switch (b.kind) {
    case 'normal':
    case 'connection-header':
    case 'half-close':
    case 'bom': {
      const body = b.kind === 'bom' ? `\ufeff${chat(16)}` : chat(16);
      const extra =
        b.kind === 'connection-header'
          ? 'connection: close, x-private\r\nx-private: 1\r\n'
          : 'connection: close\r\n';
      const c = await rawConnect(port);
      const bytes = head(Buffer.byteLength(body), extra) + body;
      if (b.kind === 'half-close') c.socket.end(bytes);
      else c.socket.write(bytes);
      const { received } = await c.closed;
      return { ok: complete(received), detail: received.slice(0, 120) };
    }
    case 'gzip':
    case 'unknown-encoding': {
      // Raw, with `connection: close`: a kept-alive connection would look like a leak.
      const body = b.kind === 'gzip' ? gzipSync(chat(16)) : Buffer.from('not really brotli');
      const coding = b.kind === 'gzip' ? 'gzip' : 'br';
      const c = await rawConnect(port);
      c.socket.write(head(body.length, `content-encoding: ${coding}\r\nconnection: close\r\n`));
      c.socket.write(body);
      const { received } = await c.closed;
      const ok =
        b.kind === 'gzip'
          ? complete(received)
          : statusOf(received) === 415 && received.includes('unsupported_encoding');
      return { ok, detail: received.slice(0, 160) };
    }
    case 'expect': {
      const body = chat(16);
      return new Promise((resolve) => {
        const req = http.request(`http://127.0.0.1:${port}/v1/chat/completions`, {
          method: 'POST',
          agent: false,
          headers: {
            'content-type': 'application/json',
            'content-length': Buffer.byteLength(body),
            expect: '100-continue',
          },
        });
        req.on('continue', () => req.end(body));
        req.on('response', (res) => {
          let text = '';
          res.on('data', (d: Buffer) => (text += d.toString()));
          res.on('end', () =>
            resolve({ ok: res.statusCode === 200 && text.includes('[DONE]'), detail: text }),
          );
        });
        req.on('error', (err) => resolve({ ok: false, detail: err.message }));
      });
    }
    case 'abort': {
      const c = await rawConnect(port);
      const body = chat(200);
      c.socket.write(head(Buffer.byteLength(body)) + body);
      await eventually(() => c.received().length >= b.afterBytes, 10_000, 'bytes to abort after');
      c.socket.destroy();
      return { ok: true, detail: 'left' };
    }
    case 'stall-read':
    case 'slow-read': {
      // A long stream (a few MB), so that pausing fills every buffer on the way.
      const body = chat(b.kind === 'stall-read' ? 30_000 : 8_000);
      const c = await rawConnect(port);
      c.socket.write(head(Buffer.byteLength(body), 'connection: close\r\n') + body);
      await eventually(() => c.received().length > 0, 10_000, 'the response to start');
      if (b.kind === 'stall-read') {
        c.socket.pause();
        await sleep(b.stallMs);
        c.socket.resume();
      } else {
        // Reads in short bursts: paused most of the time.
        const timer = setInterval(() => {
          c.socket.pause();
          setTimeout(() => c.socket.resume(), 80);
        }, 100);
        void c.closed.then(() => clearInterval(timer));
      }
      const { received } = await c.closed;
      return {
        ok: complete(received) && !received.includes('upstream_stream_broken'),
        detail: `${received.length} bytes, broken: ${received.includes('upstream_stream_broken')}`,
      };
    }
    case 'pipeline': {
      const body = chat(8);
      const one = head(Buffer.byteLength(body)) + body;
      const last = head(Buffer.byteLength(body), 'connection: close\r\n') + body;
      const c = await rawConnect(port);
      c.socket.write(one.repeat(b.count - 1) + last);
      const { received } = await c.closed;
      return { ok: complete(received, b.count), detail: received.slice(0, 120) };
    }
    case 'deep-pipeline': {
      const body = chat(1);
      const one = head(Buffer.byteLength(body)) + body;
      const last = head(Buffer.byteLength(body), 'connection: close\r\n') + body;
      const c = await rawConnect(port);
      c.socket.write(one.repeat(b.count - 1) + last);
      const { received } = await c.closed;
      const statuses = received.match(/^HTTP\/1\.1 \d{3}/gm) ?? [];
      const answered = MAX_PIPELINED_REQUESTS + 1; // the running one and those queued behind it
      const ok =
        b.count <= answered
          ? complete(received, b.count)
          : statuses.length === answered + 1 &&
            statuses.slice(0, answered).every((s) => s === 'HTTP/1.1 200') &&
            statuses[answered] === 'HTTP/1.1 503' &&
            received.includes('too_many_pipelined_requests');
      return { ok, detail: `${statuses.length} answers, last ${statuses.at(-1)}` };
    }
    case 'reset': {
      const body = chat(b.at === 'queued' ? 30_000 : 200);
      const request = head(Buffer.byteLength(body)) + body;
      const c = await rawConnect(port);
      const leave = (): void => {
        if (b.rst) c.socket.resetAndDestroy();
        else c.socket.destroy();
      };
      if (b.at === 'mid-head' || b.at === 'mid-body') {
        const headLength = request.length - Buffer.byteLength(body);
        const cut =
          b.at === 'mid-head'
            ? 1 + (b.afterBytes % (headLength - 1))
            : headLength + (b.afterBytes % Buffer.byteLength(body));
        c.socket.write(request.slice(0, cut));
        await sleep(b.afterBytes % 50);
        leave();
        return { ok: true, detail: 'left' };
      }
      // Queued: a long stream first and small requests behind it; mid-stream: one request.
      const small = chat(1);
      // Up to 4,001 queued: thousands overflowed the stack before issue 40's fix.
      const queued =
        b.at === 'queued' ? (head(Buffer.byteLength(small)) + small).repeat(1 + b.afterBytes) : '';
      c.socket.write(request + queued);
      const after = b.at === 'queued' ? 1 : b.afterBytes;
      await eventually(() => c.received().length >= after, 10_000, 'bytes to leave after');
      leave();
      return { ok: true, detail: 'left' };
    }
  }
}

describe('random client behaviour against healthy backends', () => {
  let sims: RunningProcess[] = [];
  let fixture: SidecarOnPool;

  before(async () => {
    sims = [
      await startSim('a', ['--slots', '64', '--decode-ms-per-token', '0']),
      await startSim('b', ['--slots', '64', '--decode-ms-per-token', '0']),
    ];
    fixture = await sidecarOn(
      poolYaml(
        sims.map((s, i) => `{name: ${'ab'[i]}, url: '${s.url}/v1'}`),
        [
          `timeouts: {connect: 500ms, firstByte: 2s, idle: ${IDLE_MS}ms}`,
          // Slow ejection off: the probe's own multi-MB streams load the simulators' CPU, which
          // really does slow their answers; what is probed here is blame for client behaviour.
          'health: {minRequests: 3, maxErrorRate: 0.2, openFor: 60s, maxTtftSlowdown: 1000}',
        ],
      ),
    );
  });
  after(async () => {
    await fixture?.stop();
    for (const s of sims) await s.stop();
  });

  test('open no breaker, count no error, leak nothing, and leave other clients served', async (t) => {
    const { sidecar } = fixture;
    const port = Number(new URL(sidecar.url).port);
    let exited: number | string | undefined;
    void sidecar.exited.then((code) => (exited = code));
    const rssBeforeMb = rssMb(sidecar.pid) ?? 0;
    let rssPeakMb = rssBeforeMb;
    let clients = 0;
    const seen = new Map<string, number>();
    await fc.assert(
      fc.asyncProperty(fc.array(behaviourArb, { minLength: 6, maxLength: 14 }), async (mix) => {
        const bystander = ask(sidecar.url);
        const results = await Promise.all(mix.map((b) => run(port, b)));
        clients += mix.length;
        for (const b of mix) seen.set(b.kind, (seen.get(b.kind) ?? 0) + 1);
        results.forEach((r, i) =>
          assert.ok(r.ok, `${JSON.stringify(mix[i])} was not answered: ${r.detail}`),
        );
        assert.ok(completeStream(await bystander), 'the bystander was served');
        await eventually(
          async () =>
            (await debugBackends(sidecar)).endpoints.every((e) => e.inFlight === 0) &&
            establishedWith(sidecar.pid, port) === 0,
          10_000,
          'nothing in flight and no client connection left',
        );
        for (const e of (await debugBackends(sidecar)).endpoints) {
          assert.equal(e.breaker, 'closed', `${e.id}'s breaker: ${JSON.stringify(e)}`);
          assert.equal(e.errors, 0, `errors counted against ${e.id}`);
        }
        assert.equal(exited, undefined, `the sidecar exited:\n${sidecar.output().slice(-1_500)}`);
        const rss = rssMb(sidecar.pid) ?? 0;
        rssPeakMb = Math.max(rssPeakMb, rss);
        // Generous: the probe's own multi-MB streams pass through; a leak per client would not fit.
        assert.ok(
          rss < rssBeforeMb + RSS_GROWTH_BOUND_MB,
          `RSS ${rss} MB, ${rssBeforeMb} MB before`,
        );
      }),
      {
        numRuns: RUNS,
        seed: Number(process.env.SWITCHYARD_PROBE_SEED ?? 20261201),
        endOnFailure: true,
      },
    );
    recordFigure(t, {
      fault: 'client: random behaviour probe',
      load: `${clients} clients in ${RUNS} random mixes of 6-14 at once`,
      lost: 0,
      requests: clients,
      behaviours: Object.fromEntries(seen),
      rssBeforeMb: Math.round(rssBeforeMb),
      rssPeakMb: Math.round(rssPeakMb),
    });
  });
});
