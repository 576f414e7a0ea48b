/**
 * A mixed pool under traffic, on the real API server (harness/k8s/cluster.ts): a Service-backed
 * tier (two simulators on test hosts behind Service `vllm`) and, in Failover after it, an external
 * https tier (a simulator serving TLS on a third test host, with a certificate of a CA made at test
 * time and given through `tls.caSecretRef`, and requiring an API key that comes from a Secret). A
 * sidecar fed by a real controller carries steady client traffic while the in-cluster tier fails
 * (every answer a 500), comes back, is scaled to zero (its EndpointSlice emptied) and comes back
 * again. The client counts what it saw: every request answered 200, by the in-cluster tier while
 * it serves, by the external tier while it does not.
 *
 * SWITCHYARD_K8S_TESTS=0 skips it.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { get } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it, type TestContext } from 'node:test';
import { createCa, issueServingCertificate } from '../../controller/tls/certificates.ts';
import type { RunningProcess } from '../../harness/processes.ts';
import { waitFor } from '../../harness/k8s/cluster.ts';
import { recordFigure } from '../reliability/figures.ts';
import {
  POOL_NAMESPACE,
  configureSim,
  startServicePool,
  type ServicePool,
} from './test-controller.ts';
import {
  assertTestAddress,
  createTestHost,
  startSwitchyardIn,
  type HostProcess,
  type TestHost,
} from './test-hosts.ts';
import { postChat } from './traffic.ts';

const enabled = process.env['SWITCHYARD_K8S_TESTS'] !== '0';
const API_KEY = 'sk-external-test-key';
const PROVIDER_NAME = 'provider.test';
const SLICE_PATH = `/apis/discovery.k8s.io/v1/namespaces/${POOL_NAMESPACE}/endpointslices/vllm-1`;
const CONCURRENCY = 4;
/** Consecutive answers from one tier that show traffic has settled there. */
const SETTLED = 20;
const FAST_SIM = ['--prefill-ms-per-token', '0.01', '--decode-ms-per-token', '1', '--slots', '16'];

/** What the client saw in one phase: answers by tier (backend name), and failures. */
interface PhaseCount {
  sent: number;
  failed: number;
  firstFailure?: string | undefined;
  /** Answers that took more than one attempt (`x-switchyard-attempts`): retried, unseen. */
  retried: number;
  byBackend: Record<string, number>;
  /** The backends of the answers, in the order they came. */
  order: string[];
}

/** One row of docs/reliability.md: what the client saw in a phase. */
function figure(t: TestContext, fault: string, count: PhaseCount): void {
  recordFigure(t, {
    fault,
    load: `${count.sent} chats, ${CONCURRENCY} at a time`,
    lost: count.failed,
    requests: count.sent,
    byBackend: count.byBackend,
    retried: count.retried,
  });
}

const base64 = (text: string): string => Buffer.from(text).toString('base64');

describe(
  'a mixed pool under traffic on a real API server',
  { skip: !enabled && 'SWITCHYARD_K8S_TESTS=0' },
  () => {
    let pool: ServicePool;
    let external: TestHost;
    let externalSim: HostProcess & { url: string };
    let sidecar: RunningProcess;
    /** The in-cluster simulators by host, as last started. */
    const inCluster = new Map<TestHost, HostProcess>();
    const startInCluster = async (host: TestHost, label: string): Promise<HostProcess> => {
      const sim = await startSwitchyardIn(host, [
        'sim',
        '--port',
        '8000',
        '--name',
        label,
        ...FAST_SIM,
      ]);
      inCluster.set(host, sim);
      return sim;
    };
    let ca = '';
    let dir = '';
    const totals = { sent: 0, failed: 0 };

    /** The external simulator's API request count, over https with the test CA. */
    const externalRequests = (): Promise<number> => {
      assertTestAddress(external.ip);
      return new Promise((resolve, reject) => {
        get(`${externalSim.url}/admin/stats`, { ca, servername: PROVIDER_NAME }, (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (d: string) => (text += d));
          res.on('end', () => {
            resolve((JSON.parse(text) as { requests: number }).requests);
          });
        }).on('error', reject);
      });
    };

    const sidecarEndpoints = async (): Promise<string[]> =>
      (
        (await (await fetch(`${sidecar.adminUrl}/debug/backends`)).json()) as {
          endpoints: { id: string }[];
        }
      ).endpoints.map((e) => e.id);

    /**
     * Sends chat requests, CONCURRENCY at a time, until `done` says so (checked after each answer)
     * or `timeoutMs` passes; `during` runs once traffic is flowing. Counts what the client saw.
     */
    async function phase(
      t: TestContext,
      name: string,
      done: (c: PhaseCount) => boolean,
      during: () => Promise<void> = async () => {},
      timeoutMs = 60_000,
    ): Promise<PhaseCount> {
      for (const h of [...pool.hosts, external]) assertTestAddress(h.ip);
      const count: PhaseCount = { sent: 0, failed: 0, retried: 0, byBackend: {}, order: [] };
      const deadline = Date.now() + timeoutMs;
      let stop = false;
      const loops = Array.from({ length: CONCURRENCY }, async () => {
        while (!stop && Date.now() < deadline) {
          let failure: string | undefined;
          try {
            const res = await postChat(sidecar.url);
            const text = await res.text();
            if (res.status === 200) {
              const backend = (res.headers.get('x-switchyard-backend') ?? '?').split('/')[0]!;
              count.byBackend[backend] = (count.byBackend[backend] ?? 0) + 1;
              count.order.push(backend);
              if (Number(res.headers.get('x-switchyard-attempts') ?? '1') > 1) count.retried++;
            } else failure = `${res.status} ${text.slice(0, 300)}`;
          } catch (error) {
            failure = String(error);
          }
          count.sent++;
          if (failure !== undefined) {
            count.failed++;
            count.firstFailure ??= failure;
          }
          if (done(count)) stop = true;
        }
      });
      await during();
      await Promise.all(loops);
      totals.sent += count.sent;
      totals.failed += count.failed;
      const { order: _order, ...shown } = count;
      t.diagnostic(`${name}: ${JSON.stringify(shown)}`);
      assert.ok(
        done(count),
        `${name}: did not settle within ${timeoutMs} ms: ${JSON.stringify(shown)}`,
      );
      assert.equal(count.failed, 0, `${name}: the client saw a failure: ${count.firstFailure}`);
      return count;
    }

    /** The last `n` answers all came from `backend`. */
    const settledOn =
      (backend: string, n = SETTLED) =>
      (c: PhaseCount): boolean =>
        c.order.length >= n && c.order.slice(-n).every((b) => b === backend);

    before(async () => {
      dir = mkdtempSync(join(tmpdir(), 'switchyard-mixed-pool-'));
      const signer = await createCa('switchyard-test-provider-ca', Date.now());
      ca = signer.ca;
      const { cert, key } = await issueServingCertificate(signer, [PROVIDER_NAME], Date.now());
      writeFileSync(join(dir, 'provider.crt'), cert);
      writeFileSync(join(dir, 'provider.key'), key, { mode: 0o600 });
      external = await createTestHost('provider');
      externalSim = await startSwitchyardIn(external, [
        'sim',
        '--port',
        '8443',
        '--name',
        'provider',
        '--tls-cert',
        join(dir, 'provider.crt'),
        '--tls-key',
        join(dir, 'provider.key'),
        '--api-key',
        API_KEY,
        ...FAST_SIM,
      ]);
      assert.equal(externalSim.url, `https://${external.ip}:8443`);
      pool = await startServicePool({
        name: 'mixed-pool',
        hosts: ['g1', 'g2'],
        serve: startInCluster,
        objects: [
          JSON.stringify({
            apiVersion: 'v1',
            kind: 'Secret',
            metadata: { name: 'provider-key' },
            data: { apiKey: base64(API_KEY) },
          }),
          JSON.stringify({
            apiVersion: 'v1',
            kind: 'Secret',
            metadata: { name: 'provider-ca' },
            data: { 'ca.crt': base64(ca) },
          }),
        ],
        backends: [
          `{name: external, url: '${externalSim.url}/v1', apiKeySecretRef: {name: provider-key, key: apiKey}, ` +
            `tls: {caSecretRef: {name: provider-ca, key: ca.crt}, serverName: ${PROVIDER_NAME}}}`,
        ],
        spec: [
          'mode: Failover',
          'health: {window: 10s, minRequests: 3, openFor: 1s, maxOpenFor: 2s}',
          'retry: {maxAttempts: 3, budgetPercent: 100, minPerSecond: 50}',
          'timeouts: {connect: 2s, firstByte: 10s, idle: 10s}',
        ],
      });
      sidecar = await pool.startSidecar('app-1');
      await waitFor('all three endpoints in the sidecar', async () => {
        const ids = await sidecarEndpoints();
        return ids.length === 3 && ids.includes(`external/${external.ip}:8443`);
      });
    });

    after(async () => {
      await pool?.stop();
      await externalSim?.stop();
      await external?.remove();
      if (dir !== '') rmSync(dir, { recursive: true, force: true });
    });

    it('traffic goes to the in-cluster tier while it serves', async (t) => {
      const before = await externalRequests();
      const count = await phase(t, 'in-cluster serving', (c) => c.sent >= 40);
      assert.deepEqual(Object.keys(count.byBackend), ['gpus']);
      assert.equal(await externalRequests(), before, 'the external tier got nothing');
      figure(t, 'mixed pool: in-cluster tier serving', count);
    });

    it('the in-cluster pods fail: traffic fails over to the external https tier, nothing lost', async (t) => {
      const before = await externalRequests();
      await Promise.all(pool.hosts.map((h) => configureSim(h, { errorRate: 1 })));
      const count = await phase(t, 'in-cluster failing', settledOn('external'));
      assert.ok((count.byBackend['external'] ?? 0) >= SETTLED);
      assert.ok((await externalRequests()) - before >= SETTLED, 'the external sim answered them');
      figure(t, 'mixed pool: in-cluster pods answer 500', count);
    });

    it('the pods come back: traffic returns to the in-cluster tier', async (t) => {
      await Promise.all(pool.hosts.map((h) => configureSim(h, { errorRate: 0 })));
      const count = await phase(t, 'in-cluster back', settledOn('gpus'));
      figure(t, 'mixed pool: in-cluster pods healthy again', count);
    });

    it('the in-cluster pods are killed, then started again: the same, nothing lost', async (t) => {
      const down = await phase(t, 'in-cluster killed', settledOn('external'), async () => {
        await Promise.all([...inCluster.values()].map((sim) => sim.stop()));
      });
      const up = await phase(t, 'in-cluster restarted', settledOn('gpus'), async () => {
        await Promise.all(pool.hosts.map((h, i) => startInCluster(h, `g${i + 1}`)));
      });
      for (const [fault, count] of [
        ['mixed pool: in-cluster pods killed (connections refused)', down],
        ['mixed pool: in-cluster pods started again', up],
      ] as const)
        figure(t, fault, count);
    });

    it('scaled to zero (EndpointSlice emptied) and back: traffic follows, nothing lost', async (t) => {
      const slice = await pool.cluster.request<{ endpoints: unknown[] }>('GET', SLICE_PATH);
      const endpoints = slice.body.endpoints;
      assert.equal(endpoints.length, 2);
      const scaled = await phase(t, 'scaled to zero', settledOn('external'), async () => {
        const res = await pool.cluster.request('PATCH', SLICE_PATH, { endpoints: [] });
        assert.equal(res.status, 200, res.text);
        await waitFor('the sidecar without in-cluster endpoints', async () =>
          (await sidecarEndpoints()).every((id) => id.startsWith('external/')),
        );
      });
      const back = await phase(t, 'scaled back', settledOn('gpus'), async () => {
        const res = await pool.cluster.request('PATCH', SLICE_PATH, { endpoints });
        assert.equal(res.status, 200, res.text);
      });
      for (const [fault, count] of [
        ['mixed pool: in-cluster EndpointSlice emptied', scaled],
        ['mixed pool: in-cluster endpoints back', back],
      ] as const)
        figure(t, fault, count);
      assert.equal(totals.failed, 0, `of ${totals.sent} requests in all`);
      // The sidecar lived through it all, with no certificate or key complaint (401 as a word:
      // a snapshot hash such as 5a94fb340102530c holds the digits).
      assert.doesNotMatch(sidecar.output(), /certificate rejected|\b401\b/);
    });
  },
);
