import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as promClient from 'prom-client';
import { Counter, Registry, collectDefaultMetrics } from './prom.ts';

/** The metric families of a registry: name, type and help. */
async function families(registry: Registry): Promise<string[]> {
  return (await registry.getMetricsAsJSON()).map((m) => `${m.name} ${m.type} ${m.help}`).sort();
}

test('the default metrics are prom-client’s own, loaded without its index', async () => {
  const ours = new Registry();
  collectDefaultMetrics({ register: ours, prefix: 'x_' });
  const theirs = new promClient.Registry();
  promClient.collectDefaultMetrics({ register: theirs, prefix: 'x_' });
  assert.deepEqual(await families(ours), await families(theirs));
  const cpu = await ours.getSingleMetricAsString('x_process_cpu_seconds_total');
  assert.match(cpu, /^x_process_cpu_seconds_total \d/m);
});

test('the file-by-file classes are the ones the index exports', () => {
  assert.equal(Counter, promClient.Counter);
  assert.equal(Registry, promClient.Registry);
});
