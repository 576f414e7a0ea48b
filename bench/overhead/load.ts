/**
 * The overhead benchmark's load generator, written on node:http (keep-alive agents, no
 * client-side retries): closed loop at a fixed concurrency, open loop at a fixed offered rate
 * paced from the monotonic clock, SSE streams with per-chunk delivery delay, and held-open
 * streams for the memory test. All times come from `process.hrtime.bigint()` (CLOCK_MONOTONIC,
 * the same clock the backend stamps SSE chunks with).
 */
import http from 'node:http';
import { Worker } from 'node:worker_threads';

export const CHAT_PATH = '/v1/chat/completions';

/** The request every non-streaming measurement sends (about 100 bytes, like a short prompt). */
export const CHAT_BODY = Buffer.from(
  JSON.stringify({
    model: 'bench',
    messages: [{ role: 'user', content: 'Say ok.' }],
    max_tokens: 1,
  }),
);

/** A chat request whose prompt is about `kb` KiB: real prompts are KBs, and the sidecar parses them. */
export function chatBodyOfSize(kb: number): Buffer {
  const words =
    'the sidecar parses every request body once to read the model and the prompt prefix ';
  const content = words.repeat(Math.ceil((kb * 1024) / words.length)).slice(0, kb * 1024);
  return Buffer.from(
    JSON.stringify({
      model: 'bench',
      messages: [
        { role: 'system', content: 'You are terse.' },
        { role: 'user', content },
      ],
      max_tokens: 1,
    }),
  );
}

const now = (): bigint => process.hrtime.bigint();
const nsToMs = (ns: bigint): number => Number(ns) / 1e6;

export interface Percentiles {
  n: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
  mean: number;
}

/** Nearest-rank percentiles of `values` (ms), rounded to 3 decimals (microseconds). */
export function percentiles(values: ArrayLike<number>): Percentiles {
  const sorted = Float64Array.from(values).sort();
  const n = sorted.length;
  const at = (p: number): number => (n === 0 ? NaN : sorted[Math.max(0, Math.ceil(p * n) - 1)]!);
  let sum = 0;
  for (const v of sorted) sum += v;
  return {
    n,
    p50: round3(at(0.5)),
    p90: round3(at(0.9)),
    p99: round3(at(0.99)),
    max: round3(n === 0 ? NaN : sorted[n - 1]!),
    mean: round3(n === 0 ? NaN : sum / n),
  };
}

export function round3(x: number): number {
  return Math.round(x * 1000) / 1000;
}

function newAgent(): http.Agent {
  return new http.Agent({ keepAlive: true, maxSockets: Infinity, scheduling: 'lifo' });
}

/** A chat POST of `body` through `agent`; the caller listens for its errors and ends it. */
function chatRequest(
  agent: http.Agent,
  url: URL,
  body: Buffer,
  onResponse: (res: http.IncomingMessage) => void,
): http.ClientRequest {
  return http.request(
    {
      host: url.hostname,
      port: url.port,
      path: CHAT_PATH,
      method: 'POST',
      agent,
      headers: { 'content-type': 'application/json', 'content-length': body.length },
    },
    onResponse,
  );
}

/**
 * One POST of `body`; `done(ok)` once the response has fully arrived (ok: a 200 with a body)
 * or failed. The response body is read and dropped.
 */
function post(
  agent: http.Agent,
  url: URL,
  body: Buffer,
  done: (ok: boolean, error?: string) => void,
): http.ClientRequest {
  let settled = false;
  const finish = (ok: boolean, error?: string): void => {
    if (settled) return;
    settled = true;
    done(ok, error);
  };
  const req = chatRequest(agent, url, body, (res) => {
    let bytes = 0;
    res.on('data', (chunk: Buffer) => {
      bytes += chunk.length;
    });
    res.on('end', () =>
      finish(res.statusCode === 200 && bytes > 0, `status ${res.statusCode ?? '?'}`),
    );
    res.on('error', (err) => finish(false, err.message));
  });
  req.on('error', (err) => finish(false, err.message));
  req.end(body);
  return req;
}

/** How many of a set of streams succeeded and failed, and why the first failure failed. */
interface Tally {
  ok: number;
  failed: number;
  firstError: string | undefined;
}

type Finish = (ok: boolean, error?: string) => void;

/**
 * One SSE stream of `body`, counted in `tally` once: a non-200 head or an error fails it, else
 * `onStream` reads the answer and calls `finish` (later calls are ignored). `onRequest` sees the
 * request before it is sent. Resolves once the stream is counted.
 */
function sseStream(
  agent: http.Agent,
  url: URL,
  body: Buffer,
  tally: Tally,
  onStream: (res: http.IncomingMessage, finish: Finish) => void,
  onRequest?: (req: http.ClientRequest, finish: Finish) => void,
): Promise<void> {
  return new Promise((resolve) => {
    let done = false;
    const finish: Finish = (ok, error) => {
      if (done) return;
      done = true;
      if (ok) tally.ok++;
      else {
        tally.failed++;
        tally.firstError ??= error;
      }
      resolve();
    };
    const req = chatRequest(agent, url, body, (res) => {
      if (res.statusCode !== 200) {
        res.resume();
        finish(false, `status ${res.statusCode ?? '?'}`);
        return;
      }
      onStream(res, finish);
      res.on('error', (err) => finish(false, err.message));
    });
    req.on('error', (err) => finish(false, err.message));
    onRequest?.(req, finish);
    req.end(body);
  });
}

export interface ClosedResult {
  concurrency: number;
  seconds: number;
  completed: number;
  errors: number;
  firstError?: string | undefined;
  rps: number;
  latencyMs: Percentiles;
}

/**
 * Closed loop: `concurrency` workers, each sending its next request as soon as the previous
 * one completed, for `durationMs`. Requests still in flight at the end are awaited but not
 * counted.
 */
export function closedLoop(
  baseUrl: string,
  concurrency: number,
  durationMs: number,
  body: Buffer = CHAT_BODY,
): Promise<ClosedResult> {
  const url = new URL(baseUrl);
  const agent = newAgent();
  const latencies: number[] = [];
  let completed = 0;
  let errors = 0;
  let firstError: string | undefined;
  const start = now();
  const deadline = start + BigInt(Math.round(durationMs * 1e6));
  let inFlight = 0;
  return new Promise((resolve) => {
    let resolved = false;
    const settle = (): void => {
      if (resolved) return;
      resolved = true;
      clearTimeout(watchdog);
      const seconds = durationMs / 1000;
      agent.destroy();
      resolve({
        concurrency,
        seconds,
        completed,
        errors,
        firstError,
        rps: Math.round(completed / seconds),
        latencyMs: percentiles(latencies),
      });
    };
    const worker = (): void => {
      const sent = now();
      if (sent >= deadline) {
        if (inFlight === 0) settle();
        return;
      }
      inFlight++;
      post(agent, url, body, (ok, error) => {
        inFlight--;
        const end = now();
        if (end <= deadline) {
          if (ok) {
            completed++;
            latencies.push(nsToMs(end - sent));
          } else {
            errors++;
            firstError ??= error;
          }
        }
        worker();
      });
    };
    // Requests that hang past the end are given up on (and were never counted).
    const watchdog = setTimeout(settle, durationMs + 15_000);
    for (let i = 0; i < concurrency; i++) worker();
  });
}

export type Pacer = 'worker' | 'timer' | 'spin';

export interface OpenResult {
  rate: number;
  seconds: number;
  pacer: Pacer;
  sent: number;
  completed: number;
  errors: number;
  firstError?: string | undefined;
  /** Achieved send rate (req/s). */
  achievedRate: number;
  maxInFlight: number;
  /** From the intended send time (includes any queueing in the client: no coordinated omission). */
  fromIntendedMs: Percentiles;
  /** From the moment the request was actually handed to node:http. */
  fromSentMs: Percentiles;
  /** How late the client sent (actual − intended). */
  sendLagMs: Percentiles;
  /** The raw samples (ms), for pooling rounds; not written to the results. */
  samples?: { fromIntended: number[]; fromSent: number[]; lag: number[] } | undefined;
}

/**
 * Open loop: requests at a fixed offered `rate`, scheduled on the monotonic clock. Sends that
 * came due while the client was busy go out at once (catch-up), and their latency is counted
 * from when they were due as well as from when they went out.
 *
 * Pacer `timer` sleeps with setTimeout until the next send is due (ms granularity, so sends
 * are released up to ~1 ms late in small batches; the client stays off the CPU); `spin` polls
 * with setImmediate when the next send is less than 1.5 ms away (sub-ms pacing, but it keeps one
 * of the machine's cores busy, which the proxy under test then competes for).
 */
export function openLoop(
  baseUrl: string,
  rate: number,
  durationMs: number,
  pacer: Pacer,
): Promise<OpenResult> {
  const url = new URL(baseUrl);
  const agent = newAgent();
  const total = Math.max(1, Math.round((rate * durationMs) / 1000));
  const intervalNs = 1e9 / rate;
  const fromIntended: number[] = [];
  const fromSent: number[] = [];
  const lag: number[] = [];
  let sent = 0;
  let settledCount = 0;
  let completed = 0;
  let errors = 0;
  let firstError: string | undefined;
  let inFlight = 0;
  let maxInFlight = 0;
  const start = now() + 2_000_000n; // first send 2 ms from now
  let lastSend = start;
  return new Promise((resolve) => {
    let resolved = false;
    let watchdog: NodeJS.Timeout | undefined;
    const settle = (): void => {
      if (resolved) return;
      resolved = true;
      clearTimeout(watchdog);
      errors += total - settledCount;
      agent.destroy();
      const seconds = Number(lastSend - start) / 1e9 || durationMs / 1000;
      resolve({
        rate,
        seconds: round3(durationMs / 1000),
        pacer,
        sent,
        completed,
        errors,
        firstError,
        achievedRate: Math.round(total > 1 ? (total - 1) / seconds : total),
        maxInFlight,
        fromIntendedMs: percentiles(fromIntended),
        fromSentMs: percentiles(fromSent),
        sendLagMs: percentiles(lag),
        samples: { fromIntended, fromSent, lag },
      });
    };
    const sendOne = (intended: bigint, actual: bigint): void => {
      inFlight++;
      if (inFlight > maxInFlight) maxInFlight = inFlight;
      lag.push(nsToMs(actual - intended));
      post(agent, url, CHAT_BODY, (ok, error) => {
        const end = now();
        inFlight--;
        settledCount++;
        if (ok) {
          completed++;
          fromIntended.push(nsToMs(end - intended));
          fromSent.push(nsToMs(end - actual));
        } else {
          errors++;
          firstError ??= error;
        }
        if (settledCount === total) settle();
      });
    };
    const intendedAt = (i: number): bigint => start + BigInt(Math.round(i * intervalNs));
    const loop = (): void => {
      let t = now();
      while (sent < total && intendedAt(sent) <= t) {
        sendOne(intendedAt(sent), t);
        lastSend = t;
        sent++;
        t = now();
      }
      if (sent >= total) {
        // Requests that hang 15 s past the last send are counted as errors.
        watchdog = setTimeout(settle, 15_000);
        return;
      }
      const waitMs = Number(intendedAt(sent) - t) / 1e6;
      if (pacer === 'worker') return; // the ticker thread wakes us
      if (pacer === 'spin') {
        if (waitMs < 1.5) setImmediate(loop);
        else setTimeout(loop, Math.floor(waitMs - 1));
      } else {
        setTimeout(loop, Math.max(1, Math.floor(waitMs)));
      }
    };
    if (pacer === 'worker') {
      const ticker = startTicker(start, intervalNs, total);
      ticker.on('message', () => {
        loop();
        if (sent >= total) void ticker.terminate();
      });
      return;
    }
    const first = Number(start - now()) / 1e6;
    setTimeout(loop, Math.max(0, Math.floor(first)));
  });
}

/**
 * A thread that sleeps (a futex wait with a sub-millisecond timeout, no spinning) until each
 * send is due and then posts a message, which wakes the main event loop at once.
 */
const TICKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const start = BigInt(workerData.start);
const intervalNs = workerData.intervalNs;
const cell = new Int32Array(new SharedArrayBuffer(4));
for (let i = 0; i < workerData.total; i++) {
  const due = start + BigInt(Math.round(i * intervalNs));
  const waitMs = Number(due - process.hrtime.bigint()) / 1e6;
  if (waitMs > 0.02) Atomics.wait(cell, 0, 0, waitMs);
  parentPort.postMessage(i);
}
`;

function startTicker(start: bigint, intervalNs: number, total: number): Worker {
  return new Worker(TICKER_SOURCE, {
    eval: true,
    workerData: { start: start.toString(), intervalNs, total },
  });
}

export interface SseResult {
  streams: number;
  chunksPerStream: number;
  intervalMs: number;
  /** Chunks received (excluding each stream's first, which also carries the response head). */
  chunks: number;
  complete: number;
  errors: number;
  firstError?: string | undefined;
  /** Per-chunk delivery delay: client hrtime at arrival − backend hrtime just before its write. */
  delayMs: Percentiles;
  /** The first chunk of each stream (waits for the response head too). */
  firstChunkDelayMs: Percentiles;
}

const SENT_NS = /"x_sent_ns":"(\d+)"/;

/** `streams` concurrent SSE streams of `chunks` chunks every `intervalMs`, per-chunk delays. */
export function sseRun(
  baseUrl: string,
  streams: number,
  chunks: number,
  intervalMs: number,
): Promise<SseResult> {
  const url = new URL(baseUrl);
  const agent = newAgent();
  const body = Buffer.from(
    JSON.stringify({
      model: 'bench',
      messages: [{ role: 'user', content: 'Count.' }],
      stream: true,
      max_tokens: chunks,
      x_interval_ms: intervalMs,
    }),
  );
  const delays: number[] = [];
  const firsts: number[] = [];
  const tally: Tally = { ok: 0, failed: 0, firstError: undefined };
  const one = (): Promise<void> => {
    let buffer = '';
    let seen = 0;
    return sseStream(agent, url, body, tally, (res, finish) => {
      res.setEncoding('latin1');
      res.on('data', (text: string) => {
        const arrival = now();
        buffer += text;
        let end: number;
        while ((end = buffer.indexOf('\n\n')) !== -1) {
          const event = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const match = SENT_NS.exec(event);
          if (match === null) continue;
          const delay = nsToMs(arrival - BigInt(match[1]!));
          if (seen++ === 0) firsts.push(delay);
          else delays.push(delay);
        }
      });
      res.on('end', () => finish(seen === chunks, `${seen}/${chunks} chunks`));
    });
  };
  return Promise.all(Array.from({ length: streams }, one)).then(() => {
    agent.destroy();
    return {
      streams,
      chunksPerStream: chunks,
      intervalMs,
      chunks: delays.length,
      complete: tally.ok,
      errors: tally.failed,
      firstError: tally.firstError,
      delayMs: percentiles(delays),
      firstChunkDelayMs: percentiles(firsts),
    };
  });
}

export interface HeldStreams {
  requested: number;
  /** Streams whose first chunk arrived. */
  open: number;
  failed: number;
  firstError?: string | undefined;
  /** Seconds it took to open them all. */
  openSeconds: number;
  /** Destroys every stream (client side) and resolves at once. */
  close(): void;
}

/**
 * Opens `count` held-open SSE streams (a chunk per second each, until closed), `batch` at a
 * time, and resolves once every one has delivered its first chunk or failed.
 */
export async function holdStreams(
  baseUrl: string,
  count: number,
  batch = 100,
  timeoutMs = 30_000,
): Promise<HeldStreams> {
  const url = new URL(baseUrl);
  const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });
  const body = Buffer.from(
    JSON.stringify({
      model: 'bench',
      messages: [{ role: 'user', content: 'Hold.' }],
      stream: true,
      x_hold: true,
      x_interval_ms: 1000,
    }),
  );
  const requests: http.ClientRequest[] = [];
  const tally: Tally = { ok: 0, failed: 0, firstError: undefined };
  const started = now();
  const one = (): Promise<void> =>
    sseStream(
      agent,
      url,
      body,
      tally,
      (res, finish) => {
        res.on('data', () => finish(true));
        res.on('end', () => finish(false, 'stream ended'));
      },
      (req, finish) => {
        req.setTimeout(timeoutMs, () => finish(false, 'timeout waiting for the first chunk'));
        requests.push(req);
      },
    );
  for (let i = 0; i < count; i += batch) {
    await Promise.all(Array.from({ length: Math.min(batch, count - i) }, one));
  }
  const openSeconds = round3(Number(now() - started) / 1e9);
  return {
    requested: count,
    open: tally.ok,
    failed: tally.failed,
    firstError: tally.firstError,
    openSeconds,
    close: () => {
      for (const req of requests) req.destroy();
      agent.destroy();
    },
  };
}

/** One request; throws unless it is a 200 chat.completion. */
export function probe(baseUrl: string): Promise<void> {
  const url = new URL(baseUrl);
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: url.hostname,
        port: url.port,
        path: CHAT_PATH,
        method: 'POST',
        headers: { 'content-type': 'application/json', 'content-length': CHAT_BODY.length },
        timeout: 5_000,
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (text += c));
        res.on('end', () => {
          if (res.statusCode === 200 && text.includes('chat.completion')) resolve();
          else reject(new Error(`status ${res.statusCode ?? '?'}: ${text.slice(0, 300)}`));
        });
      },
    );
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end(CHAT_BODY);
  });
}
