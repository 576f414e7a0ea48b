/**
 * Random malformed upstream responses through a real sidecar: status lines, headers and body
 * framing assembled by fast-check from valid and broken pieces (bad tokens, control bytes,
 * duplicate and contradictory lengths, 1xx and 101 answers, truncation, resets, silence). For
 * every one, the client's request must end (no hang past the pool's timeouts), every answer the
 * sidecar itself makes must be OpenAI-shaped, and the sidecar must survive them all with nothing
 * left in flight.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import fc from 'fast-check';
import { ask, completeStream, STREAM_BODY } from '../../harness/ask.ts';
import { sidecarOn, type SidecarOnPool } from '../../harness/pool-file.ts';
import { debugBackends, eventually } from '../helpers.ts';
import { errorOf } from './client.ts';
import {
  chunk,
  FAULTS,
  sseEvent,
  startFaultBackend,
  type Fault,
  type FaultBackend,
} from './fault-backend.ts';
import { recordFigure } from './figures.ts';
import { poolYaml } from './fixtures.ts';

const statusLine = fc.constantFrom(
  'HTTP/1.1 200 OK',
  'HTTP/1.1 201 Created',
  'HTTP/1.1 204 No Content',
  'HTTP/1.1 304 Not Modified',
  'HTTP/1.1 429 Too Many Requests',
  'HTTP/1.1 500 Internal Server Error',
  'HTTP/1.1 503 Service Unavailable',
  'HTTP/1.1 999 Whatever',
  'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK',
  'HTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\nHTTP/1.1 200 OK',
  'HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade',
  'HTTP/1.0 200 OK',
  'HTTP/2 200',
  'HTTP/1.1 20 OK',
  'HTTP/1.1 200',
  'ICY 200 OK',
  '',
);

const header = fc.oneof(
  fc.constantFrom(
    'content-type: text/event-stream',
    'content-type: application/json',
    'content-type: text/event-stream; charset=utf-8',
    'content-length: 0',
    'content-length: 5',
    'content-length: 100000',
    'content-length: -1',
    'content-length: 12abc',
    'content-length: 5\r\ncontent-length: 6',
    'transfer-encoding: chunked',
    'transfer-encoding: gzip, chunked',
    'transfer-encoding: chunked, identity',
    'transfer-encoding: chunked\r\ncontent-length: 5',
    'connection: close',
    'connection: keep-alive',
    'keep-alive: timeout=1',
    'x-switchyard-backend: spoofed',
    'retry-after: 99999999999',
    'retry-after: Wed, 21 Oct 2015 07:28:00 GMT',
    'set-cookie: a=b',
    'trailer: x-checksum',
    'x-empty:',
    ': no name',
    'bad name: value',
    'x-ctl: a\u0001b',
    'x-del: a\u007fb',
    'x-obs: caf\u00e9',
    'x-bare-cr: a\rb',
    'x-fold: a\r\n folded',
  ),
  fc.integer({ min: 1, max: 40 }).map((kib) => `x-big: ${'a'.repeat(kib * 1024)}`),
  fc
    .integer({ min: 50, max: 400 })
    .map((n) => Array.from({ length: n }, (_, i) => `x-h${i}: v`).join('\r\n')),
);

const body = fc.oneof(
  fc.constant([chunk(sseEvent('Hello')), chunk('data: [DONE]\n\n'), '0\r\n\r\n']),
  fc.constant([chunk(sseEvent('Hello'))]),
  fc.constant(['5\r\nhel']),
  fc.constant(['zz\r\nnope\r\n']),
  fc.constant(['0\r\n\r\n']),
  fc.constant(['0\r\nx-checksum: 1\r\n\r\n']),
  fc.constant(['{"id":"x","object":"chat.completion","choices":[]}']),
  fc.constant(['hello']),
  fc.constant([]),
  fc.string({ maxLength: 200 }).map((s) => [s]),
  fc.uint8Array({ maxLength: 200 }).map((b) => [Buffer.from(b)]),
);

const fault: fc.Arbitrary<Fault> = fc
  .record({
    status: statusLine,
    headers: fc.array(header, { maxLength: 5 }),
    endHead: fc.boolean(),
    body,
    then: fc.constantFrom<Fault['then']>('end', 'reset', 'stall'),
  })
  .map(({ status, headers, endHead, body, then }) => ({
    parts: [`${[status, ...headers].join('\r\n')}\r\n${endHead ? '\r\n' : ''}`, ...body],
    then,
    gapMs: 5,
  }));

describe('random malformed upstream responses', () => {
  let faulty: FaultBackend;
  let fixture: SidecarOnPool;

  before(async () => {
    faulty = await startFaultBackend();
    fixture = await sidecarOn(
      poolYaml(
        [`{name: faulty, url: '${faulty.url}/v1'}`],
        [
          // One attempt per request and no breaker: every request meets its own fault.
          'health: {minRequests: 1000000, consecutiveErrors: 0}',
          'retry: {maxAttempts: 1}',
          'timeouts: {connect: 200ms, firstByte: 300ms, idle: 300ms}',
        ],
      ),
      // The fault backend plays its current fault to every request, a load scrape included.
      ['--load-scrape-every', '0'],
    );
  });
  after(async () => {
    await fixture?.stop();
    await faulty?.close();
  });

  test('end every request, answer in OpenAI shape, and never take the sidecar down', async (t) => {
    const { sidecar } = fixture;
    let exited: number | string | undefined;
    void sidecar.exited.then((code) => (exited = code));
    const outcomes: Record<string, number> = {};
    let cases = 0;
    await fc.assert(
      fc.asyncProperty(fault, fc.boolean(), async (f, streamed) => {
        cases++;
        faulty.setFault(f);
        const a = await ask(
          sidecar.url,
          { ...STREAM_BODY, stream: streamed },
          { timeoutMs: 5_000 },
        );
        assert.notEqual(a.error, 'client timeout', 'the request hung');
        assert.equal(exited, undefined, 'the sidecar died');
        const key = `${a.status} ${a.ended}`;
        outcomes[key] = (outcomes[key] ?? 0) + 1;
        const own =
          a.headers['x-switchyard-attempts'] !== undefined &&
          a.headers['x-switchyard-backend'] === undefined;
        if (own)
          assert.ok(
            errorOf(a)?.code !== undefined,
            `a sidecar answer not in OpenAI shape: ${a.body}`,
          );
        if (a.headers['x-switchyard-backend'] !== undefined)
          assert.match(
            String(a.headers['x-switchyard-backend']),
            /^faulty\//,
            'the upstream cannot spoof it',
          );
      }),
      { numRuns: 300, seed: 6 },
    );
    await eventually(
      async () => (await debugBackends(sidecar)).endpoints.every((e) => e.inFlight === 0),
      5_000,
      'nothing in flight',
    );
    faulty.setFault(FAULTS.ok);
    assert.ok(completeStream(await ask(sidecar.url)), 'the sidecar still serves');
    recordFigure(t, {
      fault: 'backend: random malformed responses (fuzz)',
      load: `${cases} generated responses, one request each`,
      lost: 0,
      requests: cases,
      outcomes,
      note: 'lost counts sidecar failures; every request met a broken upstream by design',
    });
  });
});
