import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_SIM_OPTIONS } from '../options.ts';
import { Engine, MIN_TICK_MS } from './engine.ts';
import type { JobSink, Work } from './engine.ts';
import type { EngineOptions } from './engine-options.ts';
import { blockKeys } from './prefix-cache.ts';
import { fakeTime } from './testing.ts';
import type { FakeTime } from './testing.ts';

interface Delivery {
  atMs: number;
  from: number;
  to: number;
  tokensPerChunk: number;
}

/** What the engine did with one job, as its sink saw it. */
interface Record {
  deliveries: Delivery[];
  completedAtMs: number | undefined;
  cachedTokens: number | undefined;
  stopped: boolean;
}

function setup(options: Partial<EngineOptions> = {}): {
  time: FakeTime;
  engine: Engine;
  submit: (work: Partial<Work>) => Record & { job: ReturnType<Engine['admit']> };
} {
  const time = fakeTime();
  const engine = new Engine({ ...DEFAULT_SIM_OPTIONS, ...options }, time);
  const submit = (work: Partial<Work>) => {
    const rec: Record = {
      deliveries: [],
      completedAtMs: undefined,
      cachedTokens: undefined,
      stopped: false,
    };
    const sink: JobSink = {
      tokens: (from, to, tokensPerChunk) =>
        rec.deliveries.push({ atMs: time.nowMs(), from, to, tokensPerChunk }),
      complete: (cachedTokens) => {
        rec.completedAtMs = time.nowMs();
        rec.cachedTokens = cachedTokens;
      },
      stopped: () => {
        rec.stopped = true;
      },
    };
    const job = engine.admit(
      {
        promptTokens: 0,
        blockKeys: [],
        outputTokens: 1,
        stream: true,
        stall: false,
        ...work,
      },
      sink,
    );
    return Object.assign(rec, { job });
  };
  return { time, engine, submit };
}

const approx = (actual: number | undefined, expected: number, what: string) =>
  assert.ok(
    actual !== undefined && Math.abs(actual - expected) < 1e-6,
    `${what}: ${actual} ≠ ${expected}`,
  );

void test('a lone stream: the first token when its prefill ends, then one per decodeMsPerToken', () => {
  const { time, submit } = setup({ prefillMsPerToken: 0.5, decodeMsPerToken: 10 });
  const job = submit({ promptTokens: 100, outputTokens: 4 });
  time.advance(49);
  assert.equal(job.deliveries.length, 0);
  time.advance(100);
  assert.deepEqual(
    job.deliveries.map((d) => [d.atMs, d.from, d.to]),
    [
      [50, 0, 1],
      [60, 1, 2],
      [70, 2, 3],
      [80, 3, 4],
    ],
  );
  assert.equal(job.completedAtMs, 80);
  assert.equal(job.cachedTokens, 0);
});

void test('speed divides every delay', () => {
  const { time, submit } = setup({ prefillMsPerToken: 0.5, decodeMsPerToken: 10, speed: 10 });
  const job = submit({ promptTokens: 100, outputTokens: 4 });
  time.advance(100);
  approx(job.deliveries[0]?.atMs, 5, 'TTFT');
  approx(job.completedAtMs, 8, 'end');
});

void test('a non-streaming job gets its tokens in two pieces and completes at TTFT + (n − 1) × decode', () => {
  const { time, submit } = setup({ prefillMsPerToken: 1, decodeMsPerToken: 10 });
  const job = submit({ promptTokens: 20, outputTokens: 5, stream: false });
  time.advance(1000);
  assert.deepEqual(
    job.deliveries.map((d) => [d.atMs, d.from, d.to]),
    [
      [20, 0, 1],
      [60, 1, 5],
    ],
  );
  assert.equal(job.completedAtMs, 60);
});

void test('decode slows with the busy slots and speeds up again when one frees', () => {
  // Two busy slots of two, loadSlowdown 1: 10 × (1 + 1 × 1/2) = 15 ms a token.
  const { time, submit } = setup({ slots: 2, decodeMsPerToken: 10, loadSlowdown: 1 });
  const long = submit({ outputTokens: 11, stream: false });
  const short = submit({ outputTokens: 3, stream: false });
  time.advance(1000);
  approx(short.completedAtMs, 30, 'short job: 2 tokens at 15 ms');
  // The long job: 3 tokens by t = 30 at 15 ms, then 8 alone at 10 ms (not 10 × 15 = 150).
  approx(long.completedAtMs, 110, 'long job');
});

void test('FIFO queue behind the slots; a full queue refuses and counts the refusal', () => {
  const { time, engine, submit } = setup({ slots: 1, queueLimit: 1, decodeMsPerToken: 10 });
  assert.deepEqual(engine.checkRoom(), { kind: 'room' });
  const first = submit({ outputTokens: 3 });
  assert.deepEqual(engine.checkRoom(), { kind: 'room' });
  const second = submit({ outputTokens: 2 });
  const { kvCacheUsage: _usage, ...load } = engine.load();
  assert.deepEqual(load, {
    waiting: 1,
    running: 1,
    slots: 1,
    cachedBlocks: 0,
    cacheCapacityBlocks: DEFAULT_SIM_OPTIONS.cacheBlocks,
    runningAdapters: [],
    waitingAdapters: [],
  });
  assert.deepEqual(engine.checkRoom(), { kind: 'full', slots: 1, queued: 1 });
  assert.equal(engine.counters().rateLimited, 1);
  assert.equal(engine.counters().queueRejected, 1);
  time.advance(1000);
  assert.equal(first.completedAtMs, 20);
  // The second starts when the first gives its slot back: its first token is due at once.
  assert.equal(second.deliveries[0]?.atMs, 20);
  assert.equal(second.completedAtMs, 30);
  assert.equal(engine.counters().completed, 2);
  assert.equal(engine.load().running, 0);
});

void test('abandoning frees the slot or the queue place at once, and the queue moves on', () => {
  const { time, engine, submit } = setup({ slots: 1, decodeMsPerToken: 10 });
  const running = submit({ outputTokens: 100 });
  const leaving = submit({ outputTokens: 1 });
  const waiting = submit({ outputTokens: 1 });
  time.advance(15);
  engine.abandon(leaving.job);
  assert.equal(engine.load().waiting, 1);
  engine.abandon(running.job);
  engine.abandon(running.job); // twice is once
  time.advance(1);
  assert.equal(waiting.completedAtMs, 15);
  assert.equal(leaving.deliveries.length, 0);
  const delivered = running.deliveries.length;
  time.advance(1000);
  assert.equal(running.deliveries.length, delivered, 'nothing after abandon');
  assert.equal(running.completedAtMs, undefined);
  assert.equal(engine.counters().aborted, 2);
  assert.equal(time.pending(), 0);
});

void test('prefix cache: a repeated prompt skips its cached blocks, a shared prefix only its own', () => {
  const { time, engine, submit } = setup({
    prefillMsPerToken: 1,
    blockTokens: 4,
    charsPerToken: 1,
  });
  const text = 'abcdefghijklmnopqr'; // 18 tokens: 4 full blocks and a partial one
  const keys = blockKeys(text, 4);
  const cold = submit({ promptTokens: 18, blockKeys: keys });
  time.advance(100);
  assert.equal(cold.deliveries[0]?.atMs, 18);
  assert.equal(cold.cachedTokens, 0);
  const warm = submit({ promptTokens: 18, blockKeys: keys });
  time.advance(100);
  assert.equal(warm.cachedTokens, 16);
  assert.equal(warm.deliveries[0]?.atMs, 100 + 2, 'only the partial block is computed');
  const half = submit({ promptTokens: 18, blockKeys: blockKeys('abcdefghXXXXXXXXXX', 4) });
  time.advance(100);
  assert.equal(half.cachedTokens, 8);
  const c = engine.counters();
  assert.equal(c.cacheHitBlocks, 4 + 2);
  assert.equal(c.cacheMissBlocks, 4 + 0 + 2);
  assert.equal(c.cachedPromptTokens, 24);
  assert.equal(engine.load().cachedBlocks, 6);
});

void test('cold start: the first job waits for the warm-up, so does the first after coldIdleMs idle', () => {
  const { time, engine, submit } = setup({ coldStartMs: 100, coldIdleMs: 1000 });
  const first = submit({});
  time.advance(500);
  assert.equal(first.deliveries[0]?.atMs, 100);
  const warm = submit({});
  time.advance(999);
  assert.equal(warm.deliveries[0]?.atMs, 500, 'idle for 400 ms: still warm');
  const edge = submit({});
  time.advance(1000);
  assert.equal(edge.deliveries[0]?.atMs, 1499, 'idle for 999 ms: still warm');
  assert.equal(engine.counters().coldStarts, 1);
  const cold = submit({});
  time.advance(200);
  assert.equal(cold.deliveries[0]?.atMs, 2499 + 100, 'idle for 1000 ms: cold again');
  assert.equal(engine.counters().coldStarts, 2);
});

void test('a stall holds its slot and delivers nothing until abandoned', () => {
  const { time, engine, submit } = setup({ slots: 1 });
  const stall = submit({ stall: true, outputTokens: 5 });
  const next = submit({});
  time.advance(60_000);
  assert.equal(stall.deliveries.length, 0);
  assert.equal(next.deliveries.length, 0);
  assert.deepEqual([engine.load().running, engine.load().waiting], [1, 1]);
  assert.equal(engine.counters().stalled, 1);
  engine.abandon(stall.job);
  time.advance(0);
  assert.equal(next.completedAtMs, 60_000);
});

void test('streams: deliveries at least MIN_TICK_MS apart and ending on chunk boundaries', () => {
  for (const tokensPerChunk of [1, 3, 8]) {
    const { time, submit } = setup({ decodeMsPerToken: 0.1, tokensPerChunk });
    const job = submit({ outputTokens: 50 });
    time.advance(100);
    assert.equal(job.completedAtMs !== undefined, true);
    let expected = 0;
    for (const [i, d] of job.deliveries.entries()) {
      assert.equal(d.from, expected, 'contiguous');
      expected = d.to;
      assert.equal(d.tokensPerChunk, tokensPerChunk);
      if (i === 0) assert.equal(d.to, 1, 'the first token alone');
      else if (d.to < 50) assert.equal((d.to - 1) % tokensPerChunk, 0, `boundary ${d.to}`);
      // Tokens come every 0.1 ms: deliveries batch them (only the last one may come sooner).
      const previous = job.deliveries[i - 1];
      if (previous !== undefined && i > 1 && d.to < 50)
        assert.ok(d.atMs - previous.atMs >= MIN_TICK_MS - 1e-9, `batched at ${d.atMs}`);
    }
    assert.equal(expected, 50);
  }
});

void test('embeddings-like work: no output tokens, complete when the prefill ends', () => {
  const { time, engine, submit } = setup({ prefillMsPerToken: 1 });
  const job = submit({ promptTokens: 7, outputTokens: 0, stream: false });
  time.advance(10);
  assert.equal(job.deliveries.length, 0);
  assert.equal(job.completedAtMs, 7);
  assert.equal(engine.counters().completionTokens, 0);
  assert.equal(engine.counters().promptTokens, 7);
});

void test('run-time options: more slots start queued jobs at once, fewer cache blocks evict', () => {
  const { time, engine, submit } = setup({ slots: 1, decodeMsPerToken: 10, blockTokens: 1 });
  const keys = blockKeys('abcdefgh', 4);
  submit({ outputTokens: 100, promptTokens: 2, blockKeys: keys });
  const queued = submit({ outputTokens: 1 });
  time.advance(5);
  assert.equal(engine.load().cachedBlocks, 2);
  engine.setOptions({
    ...DEFAULT_SIM_OPTIONS,
    slots: 2,
    decodeMsPerToken: 10,
    blockTokens: 1,
    cacheBlocks: 1,
  });
  assert.equal(engine.load().waiting, 0);
  assert.equal(engine.load().cachedBlocks, 1);
  time.advance(0);
  assert.equal(queued.completedAtMs, 5);
  engine.setOptions({ ...DEFAULT_SIM_OPTIONS, blockTokens: 2 });
  assert.equal(engine.load().cachedBlocks, 0, 'another block size: the old keys mean nothing');
});

void test('reset: counters zeroed, cache emptied, cold again when idle, faults start over', () => {
  const { time, engine, submit } = setup({
    coldStartMs: 50,
    errorRate: 0.5,
    rateLimitRate: 0.5,
    charsPerToken: 1,
    blockTokens: 1,
  });
  const faults = () => Array.from({ length: 8 }, () => engine.drawFault().kind).join(',');
  const before = faults();
  submit({ promptTokens: 4, blockKeys: blockKeys('abcd', 1) });
  time.advance(100);
  assert.equal(engine.counters().coldStarts, 1);
  engine.reset();
  assert.deepEqual(
    Object.values(engine.counters()).filter((n) => n !== 0),
    [],
  );
  assert.equal(engine.load().cachedBlocks, 0);
  assert.equal(faults(), before);
  const cold = submit({});
  time.advance(100);
  assert.equal(cold.deliveries[0]?.atMs, 150);
});

void test('close stops every job, running or queued, and leaves no timer', () => {
  const { time, engine, submit } = setup({ slots: 1, decodeMsPerToken: 10 });
  const running = submit({ outputTokens: 100 });
  const queued = submit({ outputTokens: 100 });
  time.advance(25);
  assert.ok(time.pending() > 0);
  engine.close();
  assert.equal(time.pending(), 0);
  assert.deepEqual([running.stopped, queued.stopped], [true, true]);
  assert.deepEqual([engine.load().running, engine.load().waiting], [0, 0]);
  engine.abandon(running.job); // the response closing afterwards is harmless
  assert.equal(engine.counters().aborted, 0);
});

void test("KV cache usage: the running requests' prompt and output blocks over the capacity", () => {
  const { time, engine, submit } = setup({
    slots: 2,
    blockTokens: 16,
    cacheBlocks: 100,
    decodeMsPerToken: 10,
    prefillMsPerToken: 0,
  });
  assert.equal(engine.load().kvCacheUsage, 0);
  submit({ promptTokens: 160, outputTokens: 50 });
  submit({ promptTokens: 320, outputTokens: 50 });
  time.advance(5);
  // 480 prompt tokens plus the first token of each: ⌈482 / 16⌉ = 31 blocks of 100.
  assert.equal(engine.load().kvCacheUsage, 0.31);
  time.advance(10_000);
  assert.equal(engine.load().kvCacheUsage, 0);
  const off = setup({ cacheBlocks: 0 });
  off.submit({ promptTokens: 100, outputTokens: 5 });
  assert.equal(off.engine.load().kvCacheUsage, 0);
});

void test("inter-token latency: one observation per token after the first, at the model's rate", () => {
  const { time, engine, submit } = setup({ decodeMsPerToken: 20, prefillMsPerToken: 1 });
  const job = submit({ promptTokens: 10, outputTokens: 11 });
  time.advance(1000);
  assert.equal(job.completedAtMs !== undefined, true);
  const itl = engine.interTokenLatency();
  // The first token ends the prefill; the ten after it came 20 ms apart.
  assert.equal(itl.count, 10);
  assert.ok(Math.abs(itl.sum - 10 * 0.02) < 1e-9, `sum ${itl.sum}`);
  assert.equal(itl.cumulative[itl.bounds.indexOf(0.025)], 10);
  assert.equal(itl.cumulative[itl.bounds.indexOf(0.01)], 0);
  engine.reset();
  assert.equal(engine.interTokenLatency().count, 0);
});

void test('inter-token latency: tokens batched into one delivery share its interval', () => {
  const { time, engine, submit } = setup({ decodeMsPerToken: 0.1, prefillMsPerToken: 0 });
  submit({ promptTokens: 1, outputTokens: 101 });
  time.advance(100);
  const itl = engine.interTokenLatency();
  assert.equal(itl.count, 100);
  // Deliveries come at least MIN_TICK_MS apart, but the mean is the decode rate.
  assert.ok(Math.abs(itl.sum / itl.count - 0.0001) < 1e-6, `mean ${itl.sum / itl.count}`);
});

void test('inter-token latency: a 4× slower decode reports 4× the latency', () => {
  const mean = (decodeMsPerToken: number) => {
    const { time, engine, submit } = setup({ decodeMsPerToken });
    submit({ promptTokens: 4, outputTokens: 50 });
    time.advance(60_000);
    const itl = engine.interTokenLatency();
    return itl.sum / itl.count;
  };
  assert.ok(Math.abs(mean(40) / mean(10) - 4) < 1e-9);
});
