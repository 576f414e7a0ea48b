/**
 * A sidecar cut off from the controller through a network-namespace boundary, then reconnected.
 *
 * The "pod" is a test host: the sidecar, two simulated backends and the app's traffic (a load
 * script) all run inside it, so the data plane is local to the pod as in a cluster where the
 * backends stay reachable. The controller runs in the root namespace, listening on the host's
 * peer address. Taking the root side of the veth down cuts exactly the sidecar ↔ controller path.
 * During each cut the pool changes; the sidecar must route on its last snapshot with zero failed
 * requests, and take the change once the link is back:
 *
 * - a short cut (5 s): the TCP connection survives and retransmission delivers the change;
 * - a long cut (40 s, past the sidecar's 35 s heartbeat timeout): the sidecar drops the silent
 *   stream, reconnects with backoff, and resyncs on the new connection.
 *
 * SWITCHYARD_K8S_TESTS=0 skips it.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it, type TestContext } from 'node:test';
import {
  controllerSidecarArgs,
  SWITCHYARD_BIN,
  stopAll,
  type RunningProcess,
} from '../../harness/processes.ts';
import { recordFigure } from '../reliability/figures.ts';
import { startCluster, waitFor, type Cluster } from '../../harness/k8s/cluster.ts';
import { installInferencePoolCrd } from '../../harness/k8s/crd.ts';
import { createNamespaces, startPlainController } from './test-controller.ts';
import {
  assertTestAddress,
  createTestHost,
  startSwitchyardIn,
  type HostProcess,
  type TestHost,
} from './test-hosts.ts';
import type { TrafficCount } from './traffic.ts';

const enabled = process.env['SWITCHYARD_K8S_TESTS'] !== '0';
const NS = 'apps';
const POOL = `/apis/switchyard.dev/v1alpha1/namespaces/${NS}/inferencepools/chat`;
const LOAD_SCRIPT = fileURLToPath(new URL('./netns-load.ts', import.meta.url));
const SIM_FLAGS = ['--prefill-ms-per-token', '0.01', '--decode-ms-per-token', '1', '--slots', '16'];

/** Versions of the snapshots the sidecar applied, from its log. */
function appliedVersions(sidecar: HostProcess): number[] {
  return sidecar
    .output()
    .split('\n')
    .filter((line) => line.includes('"msg":"snapshot applied"'))
    .map((line) => (JSON.parse(line) as { version: number }).version);
}

/** The load script's latest counts. */
function loadCounts(load: HostProcess, key: 'progress' | 'final'): TrafficCount | undefined {
  const lines = load.output().trim().split('\n').reverse();
  for (const line of lines) {
    if (!line.startsWith('{')) continue;
    const parsed = JSON.parse(line) as Partial<Record<'progress' | 'final', TrafficCount>>;
    if (parsed[key] !== undefined) return parsed[key];
  }
  return undefined;
}

describe(
  'a sidecar cut off from the controller',
  { skip: !enabled && 'SWITCHYARD_K8S_TESTS=0', timeout: 10 * 60_000 },
  () => {
    let cluster: Cluster;
    let dir: string;
    let pod: TestHost;
    const inPod: HostProcess[] = [];
    let controller: RunningProcess | undefined;
    let sidecar: HostProcess;
    let load: HostProcess;
    let minRequests = 1000;

    const link = (state: 'up' | 'down'): void => {
      execFileSync('ip', ['link', 'set', pod.name, state]);
    };
    const changePool = async (): Promise<void> => {
      minRequests -= 1;
      const res = await cluster.request('PATCH', POOL, { spec: { health: { minRequests } } });
      assert.equal(res.status, 200, res.text);
    };

    before(async () => {
      dir = mkdtempSync(join(tmpdir(), 'switchyard-partition-'));
      cluster = await startCluster();
      await installInferencePoolCrd(cluster);
      pod = await createTestHost('pod');
      for (const port of ['8000', '8001'])
        inPod.push(
          await startSwitchyardIn(pod, ['sim', '--port', port, '--name', port, ...SIM_FLAGS]),
        );
      assertTestAddress(pod.ip);
      await createNamespaces(cluster, ['switchyard']);
      const token = await cluster.createServiceAccountToken(NS, 'app', { audience: 'switchyard' });
      await cluster.applyYaml(
        `apiVersion: switchyard.dev/v1alpha1
kind: InferencePool
metadata: {name: chat, namespace: ${NS}}
spec:
  backends:
  - {name: a, url: 'http://${pod.ip}:8000/v1'}
  - {name: b, url: 'http://${pod.ip}:8001/v1'}
  health: {minRequests: ${minRequests}}
`,
      );
      const tokenFile = join(dir, 'token');
      writeFileSync(tokenFile, token.token);
      // Plain HTTP: the certificate of tls.ts names 127.0.0.1 only, and TLS is not under test.
      controller = await startPlainController(cluster, `${pod.peerIp}:0`, ['--heartbeat', '1s']);
      sidecar = pod.spawn(process.execPath, [
        SWITCHYARD_BIN,
        ...controllerSidecarArgs({
          controllerUrl: controller.url,
          pool: 'chat',
          namespace: NS,
          tokenFile,
          cacheFile: join(dir, 'snapshot.json'),
          sidecarId: 'pod-1',
          listen: '127.0.0.1:8080', // the pod's own loopback: no other process can hold it
          admin: '127.0.0.1:9090',
        }),
      ]);
      inPod.push(sidecar);
      await sidecar.waitForLine(/"msg":"snapshot applied"/, 30_000);
      load = pod.spawn(process.execPath, [LOAD_SCRIPT, 'http://127.0.0.1:8080', '2']);
      inPod.push(load);
      await load.waitForLine(/^load started$/);
    });

    after(async () => {
      if (pod !== undefined) link('up');
      await Promise.all(inPod.map((p) => p.stop()));
      await stopAll([controller]);
      await pod?.remove();
      await cluster?.stop();
      rmSync(dir, { recursive: true, force: true });
    });

    /** Cuts the link for `cutMs`, changes the pool meanwhile, and measures the resync. */
    async function cut(t: TestContext, cutMs: number, what: string): Promise<void> {
      const before = Math.max(...appliedVersions(sidecar));
      const sentBefore = loadCounts(load, 'progress')?.sent ?? 0;
      link('down');
      await changePool();
      await new Promise((r) => setTimeout(r, cutMs));
      const during = loadCounts(load, 'progress');
      assert.ok((during?.sent ?? 0) > sentBefore, 'traffic kept flowing during the cut');
      assert.equal(during?.failed, 0, `failures during the cut: ${during?.firstFailure}`);
      assert.equal(Math.max(...appliedVersions(sidecar)), before, 'nothing got through the cut');
      link('up');
      const restored = performance.now();
      await waitFor(
        'the change made during the cut',
        () => Math.max(...appliedVersions(sidecar)) > before,
        {
          timeoutMs: 90_000,
          intervalMs: 20,
        },
      );
      const resyncMs = performance.now() - restored;
      const counts = loadCounts(load, 'progress');
      recordFigure(t, {
        fault: `control plane: sidecar cut off from the controller for ${cutMs / 1000} s (${what})`,
        load: '2 requests at a time from inside the pod',
        lost: (counts?.failed ?? 0) - (during?.failed ?? 0),
        requests: (counts?.sent ?? 0) - sentBefore,
        recoveryMs: Math.round(resyncMs),
      });
    }

    it('routes on its snapshot through a 5 s cut, and takes the change made meanwhile', (t) =>
      cut(t, 5_000, 'the connection survives'));

    it('routes on its snapshot through a 40 s cut, reconnects and resyncs', async (t) => {
      await cut(t, 40_000, 'past the 35 s heartbeat timeout: a new connection');
      assert.match(sidecar.output(), /no snapshot or heartbeat from the controller in time/);
    });

    it('lost no request in all', async () => {
      await load.stop();
      const final = loadCounts(load, 'final');
      assert.ok(final !== undefined && final.sent > 0);
      assert.equal(
        final.failed,
        0,
        `${final.failed} of ${final.sent} failed: ${final.firstFailure}`,
      );
    });
  },
);
