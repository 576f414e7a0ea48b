import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { POLICY_NAMES } from '../../lib/bench-names.ts';
import { smgLoadMonitorInterval } from './gateways.ts';
import { CENTRAL_SUFFIX } from './policy-definition.ts';
import { POLICIES } from './routers.ts';

const GATEWAY = /^(litellm|smg|vllm-router)-/;

describe('bench names', () => {
  it('lists every policy the bench can run, in report order', () => {
    assert.deepEqual(
      POLICIES.map((p) => p.name),
      [...POLICY_NAMES],
    );
  });

  it('runs every gateway once more as one central instance, named with -central', () => {
    const perPod = POLICIES.filter((p) => GATEWAY.test(p.name) && p.central !== true);
    assert.deepEqual(
      perPod.map((p) => p.name),
      [
        'litellm-simple-shuffle',
        'litellm-least-busy',
        'litellm-latency-based',
        'smg-cache-aware',
        'smg-p2c',
        'smg-prefix-hash',
        'vllm-router-cache-aware',
        'vllm-router-consistent-hash',
        'vllm-router-p2c',
      ],
    );
    for (const p of perPod) {
      const central = POLICIES.find((c) => c.name === `${p.name}${CENTRAL_SUFFIX}`);
      assert.ok(central !== undefined, `${p.name}${CENTRAL_SUFFIX}`);
      assert.equal(central.central, true);
      assert.equal(central.family, 'peer');
      assert.ok(central.describe.startsWith(p.describe));
      assert.equal(central.requires, p.requires);
    }
  });

  it('runs nothing else centrally but GAIE’s endpoint pickers, central by design', () => {
    const gaie = ['gaie-epp', 'gaie-lwepp'];
    for (const p of POLICIES.filter((c) => c.central === true && !gaie.includes(c.name)))
      assert.match(p.name, GATEWAY);
    for (const name of gaie) assert.equal(POLICIES.find((c) => c.name === name)?.central, true);
    for (const p of POLICIES.filter((c) => !GATEWAY.test(c.name)))
      assert.ok(!p.name.endsWith(CENTRAL_SUFFIX), p.name);
  });

  it('asks SMG and vllm-router for the health endpoint they register workers by', () => {
    for (const p of POLICIES.filter((c) => /^(smg|vllm-router)-/.test(c.name)))
      assert.deepEqual(
        p.requires?.map((r) => `${r.method} ${r.path}`),
        ['GET /health'],
        p.name,
      );
  });

  it('has SMG poll engine load every 10 s of the simulators’ time, as its default does in production', () => {
    assert.equal(smgLoadMonitorInterval(1), 10);
    assert.equal(smgLoadMonitorInterval(3.2), 3);
    // Whole seconds, at least one: SMG takes no shorter period.
    assert.equal(smgLoadMonitorInterval(12.8), 1);
    assert.equal(smgLoadMonitorInterval(100), 1);
  });
});
