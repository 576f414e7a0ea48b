/**
 * Drift detection and the fleet view end to end, on the real API server (harness/k8s/cluster.ts):
 * three simulators on test hosts behind a Service, one of them another build (another
 * system_fingerprint), a real controller probing them, and two real sidecars fed by it.
 *
 * SWITCHYARD_K8S_TESTS=0 skips it.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { RunningProcess } from '../../harness/processes.ts';
import { waitFor } from '../../harness/k8s/cluster.ts';
import {
  POOL_NAMESPACE,
  POOL_PATH,
  configureSim,
  startServicePool,
  type ServicePool,
} from './test-controller.ts';
import { assertTestAddress, startSwitchyardIn, type TestHost } from './test-hosts.ts';
import { postChat } from './traffic.ts';

const enabled = process.env['SWITCHYARD_K8S_TESTS'] !== '0';
const PROBE_EVERY_MS = 2_000;

interface PoolStatus {
  status?: {
    endpoints?: { ready?: number; total?: number; drifted?: number };
    drift?: {
      expected?: string;
      endpoints: { id: string; fingerprint?: string; drifted: boolean; error?: string }[];
    };
    endpointHealth?: {
      id: string;
      breakerOpen: number;
      reporting: number;
      errorPercent?: number;
    }[];
  };
}

interface DebugEndpoint {
  id: string;
  drifted: boolean;
  fingerprint: string | null;
  breaker: string;
}

describe(
  'drift detection and the fleet view on a real API server',
  { skip: !enabled && 'SWITCHYARD_K8S_TESTS=0' },
  () => {
    let pool: ServicePool;
    const sidecars: RunningProcess[] = [];
    const id = (h: TestHost): string => pool.endpointId(h);

    const status = async (): Promise<NonNullable<PoolStatus['status']>> =>
      (await pool.cluster.request<PoolStatus>('GET', POOL_PATH)).body.status ?? {};
    /** Waits up to four probe periods for status to show every endpoint undrifted. */
    const noDriftInStatus = (what: string): Promise<unknown> =>
      waitFor(
        what,
        async () => (await status()).drift?.endpoints.every((e) => !e.drifted) === true,
        { timeoutMs: PROBE_EVERY_MS * 4 },
      );
    const debug = async (s: RunningProcess): Promise<DebugEndpoint[]> =>
      (
        (await (await fetch(`${s.adminUrl}/debug/backends`)).json()) as {
          endpoints: DebugEndpoint[];
        }
      ).endpoints;
    const simRequests = async (h: TestHost): Promise<number> => {
      assertTestAddress(h.ip);
      return (
        (await (await fetch(`http://${h.ip}:8000/admin/stats`)).json()) as { requests: number }
      ).requests;
    };
    const chat = (s: RunningProcess): Promise<Response> => postChat(s.url, 'llama');
    // `n` requests at once, alternating between the sidecars, while every backend takes 300 ms
    // to answer, so that they are all in flight together and the least-loaded step spreads them
    // over every endpoint in routing. Answered at once, they reach the sidecars one after another
    // (CI saw it): every endpoint is idle at each pick, and the tie goes by two random choices on
    // the score, where the slowest of three wins only once its idle fade has brought its score
    // under a peer's, about ln(slowdown) × 10 s after its last request: an endpoint kept in
    // routing could see none of a test's few requests (docs/policy.md §4, "Idle fade").
    const burst = async (n: number): Promise<void> => {
      const decodeMsPerToken = async (h: TestHost): Promise<number> => {
        assertTestAddress(h.ip);
        const res = await fetch(`http://${h.ip}:8000/admin/config`);
        return ((await res.json()) as { decodeMsPerToken: number }).decodeMsPerToken;
      };
      const usual = await Promise.all(pool.hosts.map(decodeMsPerToken));
      await Promise.all(pool.hosts.map((h) => configureSim(h, { decodeMsPerToken: 100 })));
      try {
        await Promise.all(
          Array.from({ length: n }, (_, i) => chat(sidecars[i % 2]!).then((r) => r.text())),
        );
      } finally {
        await Promise.all(
          pool.hosts.map((h, i) => configureSim(h, { decodeMsPerToken: usual[i] })),
        );
      }
    };
    const events = async (reason: string): Promise<{ message: string }[]> =>
      (
        await pool.cluster.request<{
          items: { reason: string; message: string; involvedObject: { name: string } }[];
        }>('GET', `/api/v1/namespaces/${POOL_NAMESPACE}/events`)
      ).body.items.filter((e) => e.reason === reason && e.involvedObject.name === 'chat');

    before(async () => {
      const fingerprints: Record<string, string> = { g1: 'fp_a', g2: 'fp_a', g3: 'fp_b' };
      pool = await startServicePool({
        name: 'drift-e2e',
        hosts: Object.keys(fingerprints),
        serve: (host, label) =>
          startSwitchyardIn(host, [
            'sim',
            '--port',
            '8000',
            '--name',
            label,
            '--model',
            'llama',
            '--fingerprint',
            fingerprints[label]!,
            '--prefill-ms-per-token',
            '0.01',
            '--decode-ms-per-token',
            '1',
            '--slots',
            '16',
          ]),
        spec: [
          'health: {minRequests: 5, openFor: 60s}',
          `drift: {probeEvery: ${PROBE_EVERY_MS / 1000}s, expect: Majority, action: Exclude}`,
        ],
      });
      for (const sidecarId of ['app-1', 'app-2']) sidecars.push(await pool.startSidecar(sidecarId));
    });

    after(async () => {
      await pool?.stop();
    });

    it('finds the other build within one probe period, records it in status, excludes it in every sidecar', async (t) => {
      const started = performance.now();
      const s = await waitFor(
        'the drifted endpoint in status',
        async () => {
          const st = await status();
          return st.drift?.endpoints.some((e) => e.drifted) === true ? st : undefined;
        },
        { timeoutMs: 15_000, intervalMs: 50 },
      );
      t.diagnostic(
        `drift in status ${(performance.now() - started).toFixed(0)} ms after the sidecars connected`,
      );
      assert.match(s.drift?.expected ?? '', /^llama\/fp_a\/[0-9a-f]{12}$/);
      const drifted = s.drift?.endpoints.filter((e) => e.drifted) ?? [];
      assert.deepEqual(
        drifted.map((e) => e.id),
        [id(pool.hosts[2]!)],
      );
      assert.match(drifted[0]?.fingerprint ?? '', /^llama\/fp_b\//);
      await waitFor('the counts', async () => (await status()).endpoints?.drifted === 1);
      assert.equal((await status()).endpoints?.ready, 2);
      for (const sidecar of sidecars)
        await waitFor(`the exclusion in ${sidecar.url}`, async () => {
          const g3 = (await debug(sidecar)).find((e) => e.id === id(pool.hosts[2]!));
          return g3?.drifted === true && (g3.fingerprint ?? '').includes('fp_b');
        });
      const before = await simRequests(pool.hosts[2]!);
      for (let i = 0; i < 20; i++) assert.equal((await chat(sidecars[i % 2]!)).status, 200);
      assert.ok(
        (await simRequests(pool.hosts[2]!)) - before <= 2,
        'only the controller’s probes reach g3',
      );
      const warnings = await waitFor('the EndpointDrifted Event', async () => {
        const found = await events('EndpointDrifted');
        return found.length > 0 ? found : undefined;
      });
      assert.match(
        warnings[0]?.message ?? '',
        /answers llama\/fp_b\/.*the pool expects llama\/fp_a\/.*no traffic/,
      );
      const metrics = await (await fetch(`${pool.controllers[0]!.adminUrl}/metrics`)).text();
      assert.match(
        metrics,
        new RegExp(
          `^switchyard_endpoint_drifted\\{pool="apps/chat",endpoint="gpus/${pool.hosts[2]!.ip.replaceAll('.', '\\.')}:8000"\\} 1$`,
          'm',
        ),
      );
      assert.match(metrics, /^switchyard_controller_drift_probes_total\{result="ok"\} [1-9]/m);
    });

    it('takes it back when it answers the majority again, and says so', async () => {
      await configureSim(pool.hosts[2]!, { fingerprint: 'fp_a' });
      await noDriftInStatus('recovery in status');
      for (const sidecar of sidecars)
        await waitFor('recovery in the sidecar', async () =>
          (await debug(sidecar)).every((e) => !e.drifted),
        );
      const before = await simRequests(pool.hosts[2]!);
      await burst(30);
      assert.ok((await simRequests(pool.hosts[2]!)) - before >= 3, 'g3 serves again');
      await waitFor(
        'the EndpointDriftCleared Event',
        async () => (await events('EndpointDriftCleared')).length > 0,
      );
    });

    it('Warn: reported in status and by the sidecars, but kept in routing', async () => {
      const res = await pool.cluster.request('PATCH', POOL_PATH, {
        spec: { drift: { action: 'Warn' } },
      });
      assert.equal(res.status, 200, res.text);
      await configureSim(pool.hosts[2]!, { fingerprint: 'fp_c' });
      await waitFor(
        'the warning in status',
        async () => (await status()).drift?.endpoints.some((e) => e.drifted) === true,
        {
          timeoutMs: PROBE_EVERY_MS * 4,
        },
      );
      await waitFor('drifted (warned) in the sidecars', async () => {
        for (const sidecar of sidecars)
          if ((await debug(sidecar)).find((e) => e.id === id(pool.hosts[2]!))?.drifted !== true)
            return false;
        return true;
      });
      const before = await simRequests(pool.hosts[2]!);
      await burst(30);
      assert.ok((await simRequests(pool.hosts[2]!)) - before >= 3, 'g3 still serves');
      assert.equal((await status()).endpoints?.ready, 3, 'nothing excluded');
    });

    it('a failing probe is not drift; the fleet view shows who sees the failing endpoint broken', async () => {
      await configureSim(pool.hosts[2]!, { fingerprint: 'fp_a' });
      await noDriftInStatus('recovery');
      await configureSim(pool.hosts[0]!, { errorRate: 1 });
      // Traffic until both sidecars' breakers for g1 are open (minRequests 5) and status says so.
      const st = await waitFor(
        'g1 open in both sidecars in status',
        async () => {
          await burst(10);
          const s = await status();
          const g1 = s.endpointHealth?.find((e) => e.id === id(pool.hosts[0]!));
          return g1?.breakerOpen === 2 ? s : undefined;
        },
        { timeoutMs: 30_000, intervalMs: 200 },
      );
      const g1 = st.endpointHealth?.find((e) => e.id === id(pool.hosts[0]!));
      assert.equal(g1?.reporting, 2);
      // The window's error rate is in the fleet view. Its value is not asserted: it decays once a
      // breaker keeps traffic away, and the reports lag by up to their period, so when the
      // second sidecar's breaker opens late the first one's window can already read 0.
      assert.equal(typeof g1?.errorPercent, 'number', `errorPercent ${g1?.errorPercent}`);
      assert.ok((g1?.errorPercent ?? -1) >= 0);
      const probe = await waitFor(
        'the probe error in status',
        async () => {
          const e = (await status()).drift?.endpoints.find((x) => x.id === id(pool.hosts[0]!));
          return e?.error !== undefined ? e : undefined;
        },
        { timeoutMs: PROBE_EVERY_MS * 4 },
      );
      assert.equal(probe.drifted, false);
      assert.match(probe.fingerprint ?? '', /fp_a/);
      assert.match(probe.error ?? '', /HTTP 500/);
      await configureSim(pool.hosts[0]!, { errorRate: 0 });
    });
  },
);
