/**
 * The overhead benchmark's zero-latency backend: `node bench/overhead/backend.ts --port 0`.
 * Prints its URL (`http://127.0.0.1:<port>`) as the only stdout line once listening; SIGTERM
 * closes it.
 *
 * POST /v1/chat/completions
 *   - default: a fixed, small `chat.completion` JSON, answered at once (no parsing beyond the
 *     few flags below, no timers), so everything measured on top of it is the client and the
 *     proxy under test.
 *   - `"stream": true`: SSE chunks, the first at once, then one every `x_interval_ms` (default
 *     10) until `max_tokens` (default 16) chunks, then `data: [DONE]`. Every chunk carries
 *     `"x_sent_ns"`: `process.hrtime.bigint()` taken just before the write. That clock is
 *     CLOCK_MONOTONIC, shared by every process on the machine, so the client computes each
 *     chunk's delivery delay as its own hrtime at arrival minus this.
 *   - `"stream": true, "x_hold": true`: a held-open stream, a chunk at once and then one per
 *     `x_interval_ms` (default 1000) until the client goes away (the RSS test).
 * Anything else: 404.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: {
    port: { type: 'string', default: '0' },
    host: { type: 'string', default: '127.0.0.1' },
  },
});

const COMPLETION = Buffer.from(
  JSON.stringify({
    id: 'chatcmpl-bench',
    object: 'chat.completion',
    created: 1700000000,
    model: 'bench',
    choices: [
      {
        index: 0,
        message: { role: 'assistant', content: 'ok' },
        finish_reason: 'stop',
      },
    ],
    usage: { prompt_tokens: 8, completion_tokens: 1, total_tokens: 9 },
  }),
);
const JSON_HEADERS = {
  'content-type': 'application/json',
  'content-length': String(COMPLETION.length),
};
const SSE_HEADERS = {
  'content-type': 'text/event-stream',
  'cache-control': 'no-cache',
};
const CHUNK_HEAD =
  'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"bench",' +
  '"choices":[{"index":0,"delta":{"content":"tok "},"finish_reason":null}],"x_sent_ns":"';
const CHUNK_TAIL = '"}\n\n';

function chunk(): string {
  return CHUNK_HEAD + process.hrtime.bigint().toString() + CHUNK_TAIL;
}

interface StreamRequest {
  stream?: unknown;
  max_tokens?: unknown;
  x_interval_ms?: unknown;
  x_hold?: unknown;
}

function positive(value: unknown, fallback: number): number {
  return typeof value === 'number' && Number.isFinite(value) && value > 0 ? value : fallback;
}

function stream(res: http.ServerResponse, body: StreamRequest): void {
  const hold = body.x_hold === true;
  const intervalMs = positive(body.x_interval_ms, hold ? 1000 : 10);
  const total = hold ? Infinity : Math.floor(positive(body.max_tokens, 16));
  res.writeHead(200, SSE_HEADERS);
  let sent = 0;
  let timer: NodeJS.Timeout | undefined;
  const tick = (): void => {
    if (res.destroyed) return;
    res.write(chunk());
    sent++;
    if (sent >= total) {
      clearInterval(timer);
      res.end('data: [DONE]\n\n');
    }
  };
  tick();
  if (sent < total) timer = setInterval(tick, intervalMs);
  res.once('close', () => clearInterval(timer));
}

const server = http.createServer({ keepAliveTimeout: 65_000, requestTimeout: 0 }, (req, res) => {
  if (req.method !== 'POST' || req.url !== '/v1/chat/completions') {
    res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
    return;
  }
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    const raw = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
    // The fast path: only parse bodies that ask for a stream.
    if (raw.indexOf('"stream":true') === -1 && raw.indexOf('"stream": true') === -1) {
      res.writeHead(200, JSON_HEADERS);
      res.end(COMPLETION);
      return;
    }
    let body: StreamRequest;
    try {
      body = JSON.parse(raw.toString('utf8')) as StreamRequest;
    } catch {
      res.writeHead(400, { 'content-type': 'text/plain' }).end('bad json');
      return;
    }
    if (body.stream === true) stream(res, body);
    else {
      res.writeHead(200, JSON_HEADERS);
      res.end(COMPLETION);
    }
  });
});
server.headersTimeout = 30_000;

server.listen(Number(values.port), values.host, () => {
  const { address, port } = server.address() as AddressInfo;
  process.stdout.write(`http://${address}:${port}\n`);
});

const close = (): void => {
  server.close();
  server.closeAllConnections();
  setTimeout(() => process.exit(0), 500).unref();
};
process.once('SIGTERM', close);
process.once('SIGINT', close);
