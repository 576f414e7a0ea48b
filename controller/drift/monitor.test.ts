import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { pino } from 'pino';
import type { EndpointSpec } from '../../crds/policy-types.ts';
import { startSim, type SimHandle } from '../../sim/server.ts';
import { DriftMonitor, type DriftChange } from './monitor.ts';

describe('DriftMonitor (against simulators)', () => {
  const sims: SimHandle[] = [];
  before(async () => {
    for (const fingerprint of ['fp_a', 'fp_a', 'fp_b'])
      sims.push(await startSim({ model: 'llama', fingerprint, speed: 50, seed: 3 }));
  });
  after(async () => {
    await Promise.all(sims.map((s) => s.close()));
  });
  const endpoints = (): EndpointSpec[] =>
    sims.map((s, i) => ({
      id: `gpus/e${i}`,
      backend: 'gpus',
      tier: 0,
      url: `${s.url}/v1`,
      costPerMTok: 0,
    }));
  const policy = { probeEveryMs: 150, expect: 'Majority', action: 'Exclude' as const };

  it('finds the odd one out, says so once, and clears it when it matches again', async () => {
    const changes: DriftChange[] = [];
    let leader = true;
    const monitor = new DriftMonitor({
      logger: pino({ level: 'silent' }),
      isLeader: () => leader,
      onChange: (_key, c) => changes.push(...c),
    });
    try {
      monitor.sync('apps/chat', policy, endpoints(), undefined);
      const waitFor = async (what: string, ok: () => boolean): Promise<void> => {
        const deadline = performance.now() + 10_000;
        while (!ok()) {
          if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
          await new Promise((r) => setTimeout(r, 20));
        }
      };
      await waitFor('the drift', () => changes.some((c) => c.kind === 'drifted'));
      const section = monitor.section('apps/chat');
      assert.ok(section !== null && section !== undefined);
      assert.match(section.expected ?? '', /^llama\/fp_a\//);
      assert.deepEqual(section.endpoints[0]?.id, 'gpus/e2', 'drifted first');
      assert.equal(section.endpoints[0]?.drifted, true);
      assert.match(section.endpoints[0]?.fingerprint ?? '', /^llama\/fp_b\//);
      assert.deepEqual(
        changes.filter((c) => c.kind === 'drifted').map((c) => c.endpoint),
        ['gpus/e2'],
      );
      sims[2]!.configure({ fingerprint: 'fp_a' });
      await waitFor('the recovery', () => changes.some((c) => c.kind === 'cleared'));
      assert.equal(
        monitor.section('apps/chat')?.endpoints.some((e) => e.drifted),
        false,
      );
      // A probe failure is not drift: the last fingerprint stands, the error is shown.
      sims[1]!.configure({ errorRate: 1 });
      await waitFor(
        'the error',
        () => monitor.section('apps/chat')?.endpoints.some((e) => e.error !== undefined) === true,
      );
      const failing = monitor.section('apps/chat')?.endpoints.find((e) => e.id === 'gpus/e1');
      assert.equal(failing?.drifted, false);
      assert.match(failing?.fingerprint ?? '', /fp_a/);
      assert.match(failing?.error ?? '', /HTTP 500/);
      sims[1]!.configure({ errorRate: 0 });
      // Not the leader: no probes.
      leader = false;
      monitor.leadershipChanged();
      assert.deepEqual(monitor.drifted().get('apps/chat')?.drifted, new Set());
      monitor.sync('apps/chat', undefined, endpoints(), undefined);
      assert.equal(monitor.section('apps/chat'), null, 'detection off: the section goes');
    } finally {
      monitor.stop();
    }
  });

  it('a new leader starts from the verdicts in the status', () => {
    const monitor = new DriftMonitor({
      logger: pino({ level: 'silent' }),
      isLeader: () => false,
      onChange: () => undefined,
    });
    monitor.sync('apps/chat', policy, endpoints(), {
      expected: 'llama/fp_a/aaaaaaaaaaaa',
      endpoints: [
        { id: 'gpus/e0', fingerprint: 'llama/fp_a/aaaaaaaaaaaa', drifted: false },
        { id: 'gpus/e1', fingerprint: 'llama/fp_a/aaaaaaaaaaaa', drifted: false },
        {
          id: 'gpus/e2',
          fingerprint: 'llama/fp_b/bbbbbbbbbbbb',
          drifted: true,
          probedAt: '2026-12-01T00:00:00.000Z',
        },
      ],
    });
    const section = monitor.section('apps/chat');
    assert.equal(section?.endpoints[0]?.id, 'gpus/e2');
    assert.equal(section?.endpoints[0]?.drifted, true);
    assert.equal(section?.endpoints[0]?.probedAt, '2026-12-01T00:00:00.000Z');
    monitor.stop();
  });
});
