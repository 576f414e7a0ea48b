import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Counter, Registry } from 'prom-client';
import { CachedMetricsText } from './metrics-cache.ts';

function setup(): { registry: Registry; counter: Counter; clock: { ms: number } } {
  const registry = new Registry();
  const counter = new Counter({ name: 'c_total', help: 'c', registers: [registry] });
  new Counter({ name: 'd_total', help: 'd', registers: [registry] }).inc(2);
  return { registry, counter, clock: { ms: 0 } };
}

describe('cached metrics text', () => {
  test('renders what Registry.metrics() renders', async () => {
    const { registry, counter } = setup();
    counter.inc();
    assert.equal(await new CachedMetricsText(registry).get(), await registry.metrics());
  });

  test('serves one render to concurrent scrapes and within the TTL, then renders anew', async () => {
    const { registry, counter, clock } = setup();
    const cache = new CachedMetricsText(registry, 1_000, () => clock.ms);
    const [a, b] = await Promise.all([cache.get(), cache.get()]);
    assert.equal(a, b);
    counter.inc();
    clock.ms = 999;
    assert.match(await cache.get(), /^c_total 0$/m, 'a second-old render is served');
    clock.ms = 1_000;
    assert.match(await cache.get(), /^c_total 1$/m, 'then rendered again');
  });
});
