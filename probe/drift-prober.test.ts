import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startSim, type SimHandle } from '../sim/server.ts';
import { DriftProber, probeOnce, type ProbeResult, type ProbeTarget } from './drift-prober.ts';

describe('drift probes against simulators', () => {
  const sims: SimHandle[] = [];
  before(async () => {
    sims.push(await startSim({ model: 'llama', fingerprint: 'fp_a', speed: 50, seed: 7 }));
    sims.push(await startSim({ model: 'llama', fingerprint: 'fp_a', speed: 50, seed: 7 }));
    sims.push(await startSim({ model: 'llama', fingerprint: 'fp_b', speed: 50, seed: 7 }));
    sims.push(await startSim({ model: 'llama', fingerprint: 'fp_a', speed: 50, seed: 8 }));
  });
  after(async () => {
    await Promise.all(sims.map((s) => s.close()));
  });
  const target = (i: number): ProbeTarget => ({ id: `e${i}`, url: `${sims[i]!.url}/v1` });
  const probe = (i: number) => probeOnce(target(i), { prompt: 'p', timeoutMs: 5_000 });

  it('the same build answers the same fingerprint; another fingerprint or another build differs', async () => {
    const [a, b, c, d] = await Promise.all([0, 1, 2, 3].map(probe));
    for (const r of [a, b, c, d]) assert.equal(r?.ok, true);
    const fp = (r: ProbeResult | undefined): string => (r?.ok === true ? r.fingerprint : '');
    assert.equal(fp(a), fp(b));
    assert.match(fp(a), /^llama\/fp_a\/[0-9a-f]{12}$/);
    assert.notEqual(fp(a), fp(c), 'system_fingerprint differs');
    assert.notEqual(
      fp(a),
      fp(d),
      'the deterministic answer differs (another seed: another artefact)',
    );
    assert.equal(fp(a).split('/')[2], fp(c).split('/')[2], 'same weights, same answer');
  });

  it('a failure is a result, never a throw', async () => {
    const down = await probeOnce(
      { id: 'x', url: 'http://127.0.0.1:1/v1' },
      { prompt: 'p', timeoutMs: 1_000 },
    );
    assert.equal(down.ok, false);
    sims[0]!.configure({ errorRate: 1 });
    const failing = await probe(0);
    sims[0]!.configure({ errorRate: 0 });
    assert.deepEqual(failing.ok ? '' : failing.error, 'completion: HTTP 500');
  });

  it('the prober probes every target soon after it is added, then every period', async () => {
    const seen: string[] = [];
    const prober = new DriftProber({
      everyMs: 200,
      concurrency: 2,
      onResult: (t) => seen.push(t.id),
    });
    prober.setTargets([target(0), target(1), target(2)]);
    await new Promise((r) => setTimeout(r, 1_500));
    prober.setTargets([target(0)]);
    const before = seen.length;
    // Until e0 has been probed twice more after the two probes that may have been in flight when
    // the targets changed (by count, not a fixed wait: a busy machine delays every period).
    const deadline = performance.now() + 15_000;
    while (
      seen.slice(before + 2).filter((id) => id === 'e0').length < 2 &&
      performance.now() < deadline
    )
      await new Promise((r) => setTimeout(r, 50));
    prober.stop();
    for (const id of ['e0', 'e1', 'e2'])
      assert.ok(seen.slice(0, before).includes(id), `${id} probed`);
    assert.ok(seen.filter((id) => id === 'e0').length >= 3, 'probed again each period');
    assert.deepEqual(
      new Set(seen.slice(before + 2)),
      new Set(['e0']),
      'removed targets are not probed',
    );
  });
});
