/**
 * LoRA residency in the engine model: at most `maxLoras` adapters resident, least recently used
 * evicted (never one a running request uses), a load cost before the prefill of a request whose
 * adapter was not resident, and requests that cannot get their adapter in waiting while others go.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_SIM_OPTIONS } from '../options.ts';
import { Engine } from './engine.ts';
import type { JobSink, Work } from './engine.ts';
import type { EngineOptions } from './engine-options.ts';
import { fakeTime } from './testing.ts';

function setup(options: Partial<EngineOptions>) {
  const time = fakeTime();
  const engine = new Engine(
    { ...DEFAULT_SIM_OPTIONS, prefillMsPerToken: 0, decodeMsPerToken: 10, ...options },
    time,
  );
  const submit = (adapter: string | undefined, outputTokens = 1) => {
    const rec = {
      firstAtMs: undefined as number | undefined,
      doneAtMs: undefined as number | undefined,
    };
    const sink: JobSink = {
      tokens: (from) => {
        if (from === 0) rec.firstAtMs = time.nowMs();
      },
      complete: () => {
        rec.doneAtMs = time.nowMs();
      },
      stopped: () => {},
    };
    const work: Work = {
      promptTokens: 0,
      blockKeys: [],
      outputTokens,
      stream: true,
      stall: false,
      adapter,
    };
    return { rec, job: engine.admit(work, sink) };
  };
  return { time, engine, submit };
}

void test('a request for a non-resident adapter waits the load time; a resident one does not', () => {
  const { time, engine, submit } = setup({ maxLoras: 2, loraLoadMs: 100 });
  const a = submit('a');
  time.advance(99);
  assert.equal(a.rec.firstAtMs, undefined);
  time.advance(1);
  assert.equal(a.rec.firstAtMs, 100);
  const again = submit('a');
  time.advance(0);
  assert.equal(again.rec.firstAtMs, 100, 'resident: no load');
  const base = submit(undefined);
  time.advance(0);
  assert.equal(base.rec.firstAtMs, 100, 'the base model never loads');
  assert.equal(engine.counters().loraAdapterLoads, 1);
  assert.deepEqual(engine.residentAdapters(), ['a']);
});

void test('LRU eviction: the least recently used idle adapter makes room', () => {
  const { time, engine, submit } = setup({ maxLoras: 2, loraLoadMs: 10 });
  submit('a');
  time.advance(20);
  submit('b');
  time.advance(20);
  submit('a'); // a is now the most recently used
  time.advance(20);
  submit('c'); // evicts b
  time.advance(20);
  assert.deepEqual(engine.residentAdapters(), ['a', 'c']);
  assert.equal(engine.counters().loraAdapterLoads, 3);
  submit('b');
  time.advance(20);
  assert.deepEqual(engine.residentAdapters(), ['c', 'b']);
  assert.equal(engine.counters().loraAdapterLoads, 4);
});

void test('an adapter in use is not evicted: its rival waits, the base model goes ahead', () => {
  const { time, engine, submit } = setup({ maxLoras: 1, loraLoadMs: 10, slots: 4 });
  const a = submit('a', 10); // holds a slot (and adapter a) for 10 + 9 × decode
  const b = submit('b');
  const base = submit(undefined);
  time.advance(0);
  assert.equal(base.rec.firstAtMs, 0, 'the base model is not held up');
  assert.deepEqual(engine.load().runningAdapters, ['a']);
  assert.deepEqual(engine.load().waitingAdapters, ['b']);
  time.advance(1000);
  assert.ok(a.rec.doneAtMs !== undefined);
  assert.ok(b.rec.firstAtMs! >= a.rec.doneAtMs + 10, 'b loads after a is done');
  assert.deepEqual(engine.residentAdapters(), ['b']);
  assert.deepEqual(engine.load().waitingAdapters, []);
});

void test('reset empties the resident set and the counter; maxLoras lowered evicts', () => {
  const { time, engine, submit } = setup({ maxLoras: 3, loraLoadMs: 0 });
  for (const n of ['a', 'b', 'c']) submit(n);
  time.advance(50);
  engine.setOptions({ ...DEFAULT_SIM_OPTIONS, maxLoras: 1, loraLoadMs: 0 });
  assert.deepEqual(engine.residentAdapters(), ['c']);
  engine.reset();
  assert.deepEqual(engine.residentAdapters(), []);
  assert.equal(engine.counters().loraAdapterLoads, 0);
});
