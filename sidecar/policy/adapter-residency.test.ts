import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ADAPTER_SERVED_RECENTLY_MS, AdapterResidency } from './adapter-residency.ts';
import { testPolicy } from './testing.ts';

const MAX_AGE_MS = 2_000;

function residency(parents: Record<string, string> = {}): AdapterResidency {
  return new AdapterResidency((model) => parents[model] !== undefined);
}

interface E {
  id: string;
  load: number;
}

function prefer(r: AdapterResidency, endpoints: E[], model: string | undefined, nowMs = 0) {
  return r
    .prefer(endpoints, model, {
      nowMs,
      reportMaxAgeMs: MAX_AGE_MS,
      affinity: testPolicy().affinity,
      load: (s) => s.load,
    })
    .map((s) => s.id);
}

const idle = (...ids: string[]): E[] => ids.map((id) => ({ id, load: 0 }));

describe('AdapterResidency', () => {
  it('a model is an adapter when a report lists it or a discovered list gives it a parent', () => {
    const r = residency({ 'with-parent': 'base' });
    assert.equal(r.isKnownAdapter('with-parent'), true);
    assert.equal(r.isKnownAdapter('reported'), false);
    r.report('a', ['reported'], 0);
    r.report('b', ['reported'], 0);
    assert.equal(r.isKnownAdapter('reported'), true);
    r.report('a', [], 1);
    assert.equal(r.isKnownAdapter('reported'), true, 'b still lists it');
    r.forget('b');
    assert.equal(r.isKnownAdapter('reported'), false);
  });

  it('a fresh report or recent use makes an adapter resident', () => {
    const r = residency();
    r.report('a', ['x'], 1_000);
    assert.equal(r.isResident('a', 'x', 1_000, MAX_AGE_MS), true);
    assert.equal(r.isResident('a', 'y', 1_000, MAX_AGE_MS), false);
    r.report('a', undefined, 1_500); // an ORCA header says nothing of adapters
    r.report('a', ['y'], 500); // older than the one held: dropped
    assert.equal(r.isResident('a', 'x', 1_500, MAX_AGE_MS), true);
    r.served('a', 'x', 1_600);
    r.report('a', ['y'], 1_600);
    // vLLM's gauge names only adapters in use: one resident but idle is in no report.
    assert.equal(
      r.isResident('a', 'x', 1_600, MAX_AGE_MS),
      true,
      'recent use counts beside a report',
    );
    assert.equal(r.isResident('a', 'y', 1_600, MAX_AGE_MS), true, 'the fresh report counts');
    // The report ages out: recent use counts.
    r.served('a', 'x', 1_700);
    assert.equal(r.isResident('a', 'x', 1_600 + MAX_AGE_MS + 1, MAX_AGE_MS), true);
    assert.equal(r.isResident('a', 'x', 1_700 + ADAPTER_SERVED_RECENTLY_MS + 1, MAX_AGE_MS), false);
  });

  it('remembers use of adapters only, and forgets what is over a minute old', () => {
    const r = residency({ l1: 'base', l2: 'base' });
    r.served('a', 'base', 0);
    assert.equal(r.isResident('a', 'base', 0, MAX_AGE_MS), false, 'a base model is not recorded');
    r.served('a', 'l1', 0);
    assert.equal(r.isResident('a', 'l1', ADAPTER_SERVED_RECENTLY_MS, MAX_AGE_MS), true);
    r.served('a', 'l2', ADAPTER_SERVED_RECENTLY_MS + 1);
    assert.equal(r.isResident('a', 'l1', ADAPTER_SERVED_RECENTLY_MS + 1, MAX_AGE_MS), false);
    assert.equal(r.isResident('a', 'l2', ADAPTER_SERVED_RECENTLY_MS + 1, MAX_AGE_MS), true);
    r.forget('a');
    assert.equal(r.isResident('a', 'l2', ADAPTER_SERVED_RECENTLY_MS + 1, MAX_AGE_MS), false);
  });

  it('ignores adapter lists that are not lists, and names that are not names', () => {
    const r = residency();
    r.report('a', 'x' as unknown as string[], 0);
    assert.equal(r.isKnownAdapter('x'), false);
    r.report('a', ['', 7 as unknown as string, 'x'], 0);
    assert.equal(r.isKnownAdapter(''), false);
    assert.equal(r.isKnownAdapter('x'), true);
  });

  it('prefers the endpoints where the adapter is resident', () => {
    const r = residency();
    r.report('b', ['lora'], 0);
    r.report('c', ['lora'], 0);
    assert.deepEqual(prefer(r, idle('a', 'b', 'c', 'd'), 'lora'), ['b', 'c']);
  });

  it('no preference for a base model, no model, one candidate, none or all resident', () => {
    const r = residency({ 'lora-2': 'base' });
    r.report('b', ['lora'], 0);
    r.report('a', ['other'], 0);
    assert.deepEqual(prefer(r, idle('a', 'b'), 'base'), ['a', 'b']);
    assert.deepEqual(prefer(r, idle('a', 'b'), undefined), ['a', 'b']);
    assert.deepEqual(prefer(r, idle('b'), 'lora'), ['b']);
    assert.deepEqual(prefer(r, idle('a', 'b'), 'lora-2'), ['a', 'b'], 'resident nowhere');
    r.report('a', ['lora'], 1);
    assert.deepEqual(prefer(r, idle('a', 'b'), 'lora'), ['a', 'b'], 'resident everywhere');
  });

  it('a resident endpoint over the load bound is not preferred', () => {
    const r = residency();
    r.report('a', ['lora'], 0);
    r.report('b', ['lora'], 0);
    // Bound: under ⌈1.25 × (total + 1) / n⌉ or at most maxExtraInFlight (3) above the least.
    const endpoints = [
      { id: 'a', load: 9 },
      { id: 'b', load: 3 },
      { id: 'c', load: 0 },
      { id: 'd', load: 0 },
    ];
    assert.deepEqual(prefer(r, endpoints, 'lora'), ['b']);
    endpoints[1]!.load = 8;
    assert.deepEqual(prefer(r, endpoints, 'lora'), ['a', 'b', 'c', 'd'], 'none fits: all');
  });
});
