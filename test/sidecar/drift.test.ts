/**
 * Drift detection of a standalone sidecar (docs/drift.md): the sidecar probes the endpoints of
 * its pool file itself. Three real simulators, one answering another system_fingerprint.
 */
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { describe, it } from 'node:test';
import { balancePool } from '../../harness/pool-file.ts';
import {
  debugBackends,
  eventually,
  hello,
  rawChat,
  simConfig,
  simStats,
  startPool,
  type PoolFixture,
} from '../helpers.ts';

interface DriftEndpoint {
  id: string;
  drifted: boolean;
  fingerprint: string | null;
}

const endpoints = async (pool: PoolFixture): Promise<DriftEndpoint[]> =>
  (await debugBackends(pool.sidecar)).endpoints as unknown as DriftEndpoint[];

const sims = [
  { name: 'a', flags: ['--model', 'llama', '--fingerprint', 'fp_a'] },
  { name: 'b', flags: ['--model', 'llama', '--fingerprint', 'fp_a'] },
  { name: 'c', flags: ['--model', 'llama', '--fingerprint', 'fp_c'] },
];

describe('standalone drift detection', () => {
  it('Exclude: the odd endpoint is found within a probe period, gets no traffic, and comes back', async () => {
    const pool = await startPool(sims, (urls) =>
      balancePool(urls, '  drift: {probeEvery: 1s, expect: Majority}\n  affinity: {key: None}'),
    );
    try {
      await eventually(
        async () => (await endpoints(pool)).find((e) => e.id.startsWith('c/'))?.drifted === true,
        5_000,
        'c to be found drifted',
      );
      const view = await endpoints(pool);
      assert.match(
        view.find((e) => e.id.startsWith('c/'))?.fingerprint ?? '',
        /^llama\/fp_c\/[0-9a-f]{12}$/,
      );
      assert.match(view.find((e) => e.id.startsWith('a/'))?.fingerprint ?? '', /^llama\/fp_a\//);
      assert.equal(view.find((e) => e.id.startsWith('a/'))?.drifted, false);
      const before = (await simStats(pool.sims[2]!)).requests;
      for (let i = 0; i < 30; i++)
        assert.equal((await rawChat(pool.sidecar.url, hello('llama'))).status, 200);
      assert.equal(
        (await simStats(pool.sims[2]!)).requests - before <= 2,
        true,
        'only probes reach c',
      );
      // c is fixed: the next probe sees the majority's fingerprint and it is routed again.
      await simConfig(pool.sims[2]!, { fingerprint: 'fp_a' });
      await eventually(
        async () => (await endpoints(pool)).every((e) => !e.drifted),
        5_000,
        'c to recover',
      );
      // Three at a time: one after another, every endpoint has none in flight and the tie goes
      // by score, where c (which took no traffic for a while) may well be the slowest on a busy
      // machine and win a draw only after its idle fade (seconds); three at once fill all three.
      const served = (await simStats(pool.sims[2]!)).requests;
      for (let i = 0; i < 10; i++)
        await Promise.all([0, 1, 2].map(() => rawChat(pool.sidecar.url, hello('llama'))));
      assert.ok((await simStats(pool.sims[2]!)).requests - served >= 3, 'c serves again');
    } finally {
      await pool.stop();
    }
  });

  it('Warn: drifted is reported, the endpoint keeps its traffic', async () => {
    const pool = await startPool(sims, (urls) =>
      balancePool(urls, '  drift: {probeEvery: 1s, action: Warn}\n  affinity: {key: None}'),
    );
    try {
      await eventually(
        async () => (await endpoints(pool)).find((e) => e.id.startsWith('c/'))?.drifted === true,
        5_000,
        'c to be reported drifted',
      );
      const before = (await simStats(pool.sims[2]!)).requests;
      for (let i = 0; i < 10; i++)
        // three at a time, as above
        await Promise.all([0, 1, 2].map(() => rawChat(pool.sidecar.url, hello('llama'))));
      assert.ok((await simStats(pool.sims[2]!)).requests - before >= 3, 'c still serves');
    } finally {
      await pool.stop();
    }
  });

  it('an explicit expected fingerprint, set by a live pool file change; a failed probe is not drift', async () => {
    const pool = await startPool(sims, (urls) => balancePool(urls, '  drift: {probeEvery: 1s}'));
    try {
      await eventually(
        async () => (await endpoints(pool)).every((e) => e.fingerprint !== null),
        5_000,
        'every endpoint probed',
      );
      const wanted = (await endpoints(pool)).find((e) => e.id.startsWith('c/'))!.fingerprint!;
      const urls = pool.sims.map((s) => s.url);
      await writeFile(
        pool.poolFile,
        balancePool(urls, `  drift: {probeEvery: 1s, expect: '${wanted}'}`),
      );
      await eventually(
        async () => {
          const view = await endpoints(pool);
          return (
            view.filter((e) => e.drifted).length === 2 &&
            view.find((e) => e.id.startsWith('c/'))?.drifted === false
          );
        },
        5_000,
        'a and b to be drifted against the explicit fingerprint',
      );
      // a's probes fail from now on: its last fingerprint (and verdict) stands.
      await simConfig(pool.sims[0]!, { errorRate: 1 });
      await new Promise((r) => setTimeout(r, 1_500));
      const view = await endpoints(pool);
      assert.equal(view.find((e) => e.id.startsWith('a/'))?.drifted, true);
      assert.match(view.find((e) => e.id.startsWith('a/'))?.fingerprint ?? '', /fp_a/);
      for (let i = 0; i < 10; i++) {
        const r = await rawChat(pool.sidecar.url, hello('llama'));
        assert.equal(r.status, 200);
        assert.match(r.headers.get('x-switchyard-backend') ?? '', /^c\//);
      }
    } finally {
      await pool.stop();
    }
  });

  it('the passive check counts responses that contradict the probe, before the next probe', async () => {
    const pool = await startPool(sims, (urls) =>
      balancePool(urls, '  drift: {probeEvery: 10m}\n  affinity: {key: None}'),
    );
    try {
      await eventually(
        async () => (await endpoints(pool)).every((e) => e.fingerprint !== null),
        5_000,
        'every endpoint probed once',
      );
      // b is redeployed with another build between two probes.
      await simConfig(pool.sims[1]!, { fingerprint: 'fp_new' });
      for (let i = 0; i < 30; i++) {
        await rawChat(pool.sidecar.url, hello('llama'));
        await rawChat(pool.sidecar.url, hello('llama', { stream: true }));
      }
      const view = (await debugBackends(pool.sidecar)).endpoints as unknown as (DriftEndpoint & {
        driftMismatches: number;
      })[];
      assert.ok(view.find((e) => e.id.startsWith('b/'))!.driftMismatches > 0);
      assert.equal(view.find((e) => e.id.startsWith('a/'))!.driftMismatches, 0);
      const metrics = await (await fetch(`${pool.sidecar.adminUrl}/metrics`)).text();
      assert.match(metrics, /^switchyard_drift_mismatches_total\{[^}]*endpoint="b\/[^}]*\} [1-9]/m);
    } finally {
      await pool.stop();
    }
  });
});
