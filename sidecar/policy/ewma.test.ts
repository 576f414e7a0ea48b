import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { median } from './median.ts';
import {
  EWMA_NEW_SAMPLE_WEIGHT,
  FALLBACK_DEFAULT_TTFT_MS,
  MEASURED_WINDOW,
  MIN_TTFT_MS,
  TtftEwmas,
  blendEwma,
  isUsableTtftSample,
} from './ewma.ts';

describe('blendEwma', () => {
  test('puts weight 0.2 on the newest sample', () => {
    assert.equal(EWMA_NEW_SAMPLE_WEIGHT, 0.2);
    assert.equal(blendEwma(100, 200), 120);
    assert.equal(blendEwma(500, 100), 420);
  });
});

describe('isUsableTtftSample', () => {
  test('accepts finite non-negative samples only', () => {
    assert.equal(isUsableTtftSample(0), true);
    assert.equal(isUsableTtftSample(123.4), true);
    for (const bad of [-1, Number.NaN, Infinity, -Infinity]) {
      assert.equal(isUsableTtftSample(bad), false, String(bad));
    }
  });
});

describe('TtftEwmas', () => {
  test('measures each endpoint from its own samples: the median of its last five', () => {
    assert.equal(MEASURED_WINDOW, 5);
    const ewmas = new TtftEwmas(5_000);
    assert.equal(ewmas.measured('a'), undefined);
    ewmas.observe('a', 10);
    assert.deepEqual(ewmas.measured('a'), { ms: 10, samples: 1 });
    assert.ok(ewmas.valueMs('a') > 4_000, 'the scoring EWMA still leans on its seed');
    // A burst of slow samples, then fast ones: forgotten after three fast samples.
    for (const ms of [600, 400]) ewmas.observe('a', ms);
    assert.deepEqual(ewmas.measured('a'), { ms: 400, samples: 3 });
    for (const ms of [12, 15]) ewmas.observe('a', ms);
    assert.deepEqual(ewmas.measured('a'), { ms: 15, samples: 5 });
    ewmas.observe('a', 11); // the first sample leaves the window
    assert.deepEqual(ewmas.measured('a'), { ms: 15, samples: 6 });
    ewmas.observe('a', 9);
    assert.deepEqual(ewmas.measured('a'), { ms: 12, samples: 7 });
    // A server that stays slow: after three slow samples.
    for (const ms of [900, 900]) ewmas.observe('a', ms);
    assert.equal(ewmas.measured('a')?.ms, 15);
    ewmas.observe('a', 900);
    assert.equal(ewmas.measured('a')?.ms, 900);
    ewmas.observe('a', Number.NaN);
    assert.equal(ewmas.measured('a')?.samples, 10, 'an unusable sample is not counted');
    ewmas.observe('b', 0);
    assert.equal(ewmas.measured('b')?.ms, MIN_TTFT_MS);
    ewmas.observe('b', 3);
    assert.equal(ewmas.measured('b')?.ms, 2, 'an even count: the mean of the middle two');
    ewmas.forget('a');
    assert.equal(ewmas.measured('a'), undefined);
  });

  test('reads as the default while no endpoint has samples, and says it is seeded', () => {
    const ewmas = new TtftEwmas(500);
    assert.equal(ewmas.valueMs('a'), 500);
    assert.equal(ewmas.hasSamples('a'), false);
    assert.equal(ewmas.seedMs(), 500);
  });

  test('blends the first sample into the seed, then follows the EWMA formula', () => {
    const ewmas = new TtftEwmas(500);
    assert.equal(ewmas.observe('a', 100), true);
    assert.equal(ewmas.valueMs('a'), 420);
    assert.equal(ewmas.hasSamples('a'), true);
    ewmas.observe('a', 100);
    assert.ok(Math.abs(ewmas.valueMs('a') - 356) < 1e-9);
    // After n equal samples s from seed v: s + (v − s)·0.8^n.
    for (let i = 0; i < 8; i++) ewmas.observe('a', 100);
    assert.ok(Math.abs(ewmas.valueMs('a') - (100 + 400 * 0.8 ** 10)) < 1e-9);
  });

  test('seeds a new endpoint at the median of the endpoints with samples, never at zero', () => {
    const ewmas = new TtftEwmas(500);
    ewmas.observe('a', 100); // seed 500 → 420
    assert.equal(ewmas.valueMs('new'), 420);
    ewmas.observe('b', 1000); // seed 420 → 536
    assert.equal(ewmas.valueMs('new'), 478);
    ewmas.observe('c', 0); // seed 478, sample raised to MIN_TTFT_MS → 382.6
    assert.equal(ewmas.valueMs('new'), 420);
    assert.equal(ewmas.hasSamples('new'), false);
    ewmas.observe('d', 500); // seed 420 → 436; sorted 382.6, 420, 436, 536
    assert.equal(ewmas.valueMs('new'), (420 + 436) / 2);
    assert.ok(ewmas.valueMs('c') > 0);
  });

  test('keeps a seeded endpoint on the current median until its own first sample', () => {
    const ewmas = new TtftEwmas(500);
    assert.equal(ewmas.valueMs('late'), 500);
    ewmas.observe('a', 100);
    assert.equal(ewmas.valueMs('late'), 420);
    ewmas.observe('late', 100); // blended into the seed of that moment
    assert.equal(ewmas.valueMs('late'), 0.8 * 420 + 0.2 * 100);
  });

  test('ignores NaN, infinite and negative samples', () => {
    const ewmas = new TtftEwmas(500);
    for (const bad of [Number.NaN, Infinity, -Infinity, -5]) {
      assert.equal(ewmas.observe('a', bad), false);
    }
    assert.equal(ewmas.hasSamples('a'), false);
    assert.equal(ewmas.valueMs('a'), 500);
  });

  test('raises zero samples to MIN_TTFT_MS so the EWMA never reaches zero', () => {
    const ewmas = new TtftEwmas(500);
    for (let i = 0; i < 500; i++) ewmas.observe('a', 0);
    assert.ok(ewmas.valueMs('a') >= MIN_TTFT_MS);
  });

  test('replaces a zero, negative or non-finite default with the fallback', () => {
    for (const bad of [0, -1, Number.NaN, Infinity]) {
      assert.equal(new TtftEwmas(bad).valueMs('a'), FALLBACK_DEFAULT_TTFT_MS, String(bad));
    }
    const ewmas = new TtftEwmas(500);
    ewmas.setDefault(Number.NaN);
    assert.equal(ewmas.seedMs(), FALLBACK_DEFAULT_TTFT_MS);
  });

  test('applies a new default to seeded endpoints while nobody has samples', () => {
    const ewmas = new TtftEwmas(500);
    assert.equal(ewmas.valueMs('a'), 500);
    ewmas.setDefault(800);
    assert.equal(ewmas.valueMs('a'), 800);
  });

  test('forgets a removed endpoint so it no longer moves the median', () => {
    const ewmas = new TtftEwmas(500);
    ewmas.observe('a', 100); // 420
    ewmas.observe('b', 2500); // seed 420 → 836
    assert.equal(ewmas.seedMs(), 628);
    ewmas.forget('b');
    assert.equal(ewmas.seedMs(), 420);
    ewmas.forget('unknown');
    assert.equal(ewmas.seedMs(), 420);
  });

  test('property: the EWMA stays between the smallest and largest of seed and samples', () => {
    fc.assert(
      fc.property(
        fc.array(fc.double({ min: 0, max: 1e6, noNaN: true }), { minLength: 1, maxLength: 50 }),
        (samples) => {
          const ewmas = new TtftEwmas(500);
          for (const s of samples) ewmas.observe('a', s);
          const floor = Math.min(500, ...samples.map((s) => Math.max(s, MIN_TTFT_MS)));
          const ceiling = Math.max(500, ...samples);
          const v = ewmas.valueMs('a');
          assert.ok(v >= floor - 1e-9 && v <= ceiling + 1e-9, `${v} outside ${floor}..${ceiling}`);
        },
      ),
    );
  });
});

describe('the seed kept in order', () => {
  test('is the median of the endpoints with samples after any sequence of samples and removals', () => {
    const op = fc.oneof(
      fc.record({
        kind: fc.constant('observe' as const),
        id: fc.integer({ min: 0, max: 5 }),
        ms: fc.integer({ min: 1, max: 5000 }),
      }),
      fc.record({ kind: fc.constant('forget' as const), id: fc.integer({ min: 0, max: 5 }) }),
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 40 }), (ops) => {
        const ewmas = new TtftEwmas(250);
        const ids = ['e0', 'e1', 'e2', 'e3', 'e4', 'e5'];
        for (const o of ops) {
          if (o.kind === 'observe') ewmas.observe(`e${o.id}`, o.ms);
          else ewmas.forget(`e${o.id}`);
          const own = ids.filter((id) => ewmas.hasSamples(id)).map((id) => ewmas.valueMs(id));
          assert.equal(ewmas.seedMs(), median(own) ?? 250);
        }
      }),
    );
  });
});
