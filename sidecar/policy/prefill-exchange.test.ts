import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { MAX_QUEUE_POSITIONS, MIN_SAMPLE_BYTES, PrefillExchange } from './prefill-exchange.ts';

describe('PrefillExchange', () => {
  test('is worth nothing until it has measured both rates', () => {
    const exchange = new PrefillExchange();
    assert.equal(exchange.positionsWorth(1_000_000, 6), 0);
    assert.deepEqual(exchange.snapshot(), { prefillMsPerKiB: undefined, holdMs: undefined });
  });

  test('a prefix is worth the prefill it saves over the time a position takes', () => {
    const exchange = new PrefillExchange();
    // 32 KiB to a first token in 512 ms: 16 ms a KiB. A slot held 1,200 ms in a batch of 6: a
    // position every 200 ms.
    exchange.observe(512, 1200, 32_768);
    assert.deepEqual(exchange.snapshot(), { prefillMsPerKiB: 16, holdMs: 1200 });
    assert.equal(exchange.positionsWorth(25_600, 6), 2, '400 ms of prefill: two positions');
    assert.equal(exchange.positionsWorth(12_800, 6), 1);
    assert.equal(exchange.positionsWorth(12_000, 6), 0, 'less than a position is worth none');
    assert.equal(exchange.positionsWorth(25_600, 1), 0, 'a batch of one frees a slot every 1.2 s');
  });

  test("a request's own prefill, in holds of a typical request", () => {
    const exchange = new PrefillExchange();
    assert.equal(exchange.prefillInHolds(32_768), undefined, 'not measured yet');
    exchange.observe(512, 1200, 32_768);
    // 75 KiB at 16 ms a KiB: 1,200 ms, one hold.
    assert.equal(exchange.prefillInHolds(76_800), 1);
    assert.equal(exchange.prefillInHolds(0), 0);
    for (const unknown of [undefined, -1, Number.NaN, Infinity])
      assert.equal(exchange.prefillInHolds(unknown), undefined);
  });

  test('caps what any prefix buys', () => {
    const exchange = new PrefillExchange();
    exchange.observe(512, 1200, 32_768);
    assert.equal(exchange.positionsWorth(10_000_000, 6), MAX_QUEUE_POSITIONS);
  });

  test('moves slowly: one odd sample does not change the rate much', () => {
    const exchange = new PrefillExchange();
    exchange.observe(512, 1200, 32_768);
    exchange.observe(5120, 12_000, 32_768);
    const { prefillMsPerKiB, holdMs } = exchange.snapshot();
    assert.ok((prefillMsPerKiB as number) < 24, `${prefillMsPerKiB}`);
    assert.ok((holdMs as number) < 1800, `${holdMs}`);
  });

  test('ignores small requests and unusable numbers', () => {
    const exchange = new PrefillExchange();
    exchange.observe(100, 200, MIN_SAMPLE_BYTES - 1);
    exchange.observe(Number.NaN, 200, 32_768);
    exchange.observe(-1, 200, 32_768);
    exchange.observe(300, 200, 32_768); // held less than its TTFT: a broken clock
    exchange.observe(300, Number.POSITIVE_INFINITY, 32_768);
    exchange.observe(300, 600, Number.POSITIVE_INFINITY);
    assert.deepEqual(exchange.snapshot(), { prefillMsPerKiB: undefined, holdMs: undefined });
  });

  test('asks a batch of at least one and some prefix', () => {
    const exchange = new PrefillExchange();
    exchange.observe(512, 1200, 32_768);
    assert.equal(exchange.positionsWorth(25_600, 0), 0);
    assert.equal(exchange.positionsWorth(25_600, Number.NaN), 0);
    assert.equal(exchange.positionsWorth(0, 6), 0);
    assert.equal(exchange.positionsWorth(-5, 6), 0);
  });
});
