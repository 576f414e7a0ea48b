import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { costTermMs, IDLE_FADE_MS, idleFade, score } from './score.ts';

describe('score', () => {
  test('is (inFlight + 1) × EWMA TTFT for pure latency routing', () => {
    assert.equal(score({ inFlight: 0, ewmaTtftMs: 200, costPerMTok: 5 }, undefined), 200);
    assert.equal(score({ inFlight: 3, ewmaTtftMs: 200, costPerMTok: 5 }, undefined), 800);
  });

  test('adds costPerMTok / costWeightPerMs when a weight is set', () => {
    // 0.60 $/Mtok at 0.001 $/Mtok per ms = 600 ms.
    assert.equal(score({ inFlight: 1, ewmaTtftMs: 100, costPerMTok: 0.6 }, 0.001), 200 + 600);
  });

  test('lets a cheap slow endpoint beat an expensive fast one at the configured exchange rate', () => {
    const cheap = score({ inFlight: 0, ewmaTtftMs: 300, costPerMTok: 0.2 }, 0.002);
    const pricey = score({ inFlight: 0, ewmaTtftMs: 200, costPerMTok: 0.6 }, 0.002);
    assert.ok(cheap < pricey);
  });

  test('treats a zero, negative or non-finite weight as pure latency', () => {
    for (const weight of [0, -1, Number.NaN, Infinity, -Infinity]) {
      assert.equal(costTermMs(1, weight), 0, String(weight));
      assert.equal(score({ inFlight: 0, ewmaTtftMs: 100, costPerMTok: 1 }, weight), 100);
    }
  });

  test('counts a missing, negative or non-finite price as free', () => {
    for (const price of [0, -3, Number.NaN, Infinity]) assert.equal(costTermMs(price, 0.001), 0);
  });

  test('never lets a negative in-flight count shrink the queue term below one request', () => {
    assert.equal(score({ inFlight: -5, ewmaTtftMs: 100, costPerMTok: 0 }, undefined), 100);
  });
});

describe('idleFade', () => {
  test('is e^(−idle / IDLE_FADE_MS): e per 10 s idle, toward 0', () => {
    assert.equal(IDLE_FADE_MS, 10_000);
    assert.equal(idleFade(0), 1);
    assert.ok(Math.abs(idleFade(10_000) - 1 / Math.E) < 1e-12);
    assert.ok(idleFade(600_000) > 0 && idleFade(600_000) < 1e-20);
  });

  test('is 1 for a negative idleness (a clock gone back) or NaN', () => {
    for (const idle of [-5_000, Number.NaN]) assert.equal(idleFade(idle), 1);
  });
});
