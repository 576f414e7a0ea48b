/**
 * `switchyard status --pool` on a real kube-apiserver (harness/k8s/cluster.ts): the CLI reads an
 * InferencePool whose status this test writes directly (a merge patch of the status subresource,
 * as the controller's leader does), and prints its endpoints; exit codes 0, 1 and 2; the messages
 * for a missing CRD, a missing pool, bad credentials, missing RBAC and no kubeconfig at all.
 *
 * SWITCHYARD_K8S_TESTS=0 skips it.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { SWITCHYARD_BIN } from '../../harness/processes.ts';
import { SERVICE_ACCOUNT_TOKEN } from '../../status/collect.ts';
import { startCluster, statusMessage, type Cluster } from '../../harness/k8s/cluster.ts';
import { installInferencePoolCrd } from '../../harness/k8s/crd.ts';

const enabled = process.env['SWITCHYARD_K8S_TESTS'] !== '0';
const NS = 'apps';
const POOL_PATH = `/apis/switchyard.dev/v1alpha1/namespaces/${NS}/inferencepools/chat`;
const T = '2026-01-31T12:00:00Z';
const FP = 'llama/fp_a/0123456789ab';

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

function status(args: string[], env: Record<string, string> = {}): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [SWITCHYARD_BIN, 'status', ...args],
      { timeout: 15_000, env: { ...process.env, ...env } },
      (error, stdout, stderr) => {
        const code = error === null ? 0 : typeof error.code === 'number' ? error.code : -1;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

const condition = (type: string, status: string, reason: string, message = '') => ({
  type,
  status,
  reason,
  message,
  observedGeneration: 1,
  lastTransitionTime: T,
});

const HEALTHY = {
  observedGeneration: 1,
  conditions: [
    condition('Accepted', 'True', 'Accepted'),
    condition('ResolvedRefs', 'True', 'BackendsResolved'),
    condition('Ready', 'True', 'EndpointsReady'),
  ],
  endpoints: { ready: 3, total: 3, drifted: 0 },
  snapshot: { version: 7, hash: '5f1c0a2b3d4e6f70' },
  sidecars: { connected: 3, inSync: 3 },
  drift: {
    expected: FP,
    endpoints: [
      { id: 'a/10.0.0.1:8000', fingerprint: FP, drifted: false, probedAt: T },
      { id: 'a/10.0.0.2:8000', fingerprint: FP, drifted: false, probedAt: T },
    ],
  },
  endpointHealth: [],
};

const UNHEALTHY = {
  ...HEALTHY,
  conditions: [
    condition('Accepted', 'True', 'Accepted'),
    condition('ResolvedRefs', 'True', 'BackendsResolved'),
    condition('Ready', 'True', 'EndpointsReady'),
  ],
  endpoints: { ready: 2, total: 5, drifted: 1 },
  sidecars: { connected: 3, inSync: 2 },
  drift: {
    expected: FP,
    endpoints: [
      { id: 'b/10.0.0.9:8000', fingerprint: 'llama/fp_x/ffffffffffff', drifted: true, probedAt: T },
      { id: 'a/10.0.0.1:8000', fingerprint: FP, drifted: false, probedAt: T },
      {
        id: 'a/10.0.0.3:8000',
        fingerprint: FP,
        drifted: false,
        probedAt: T,
        error: 'connect ECONNREFUSED 10.0.0.3:8000',
      },
    ],
  },
  endpointHealth: [
    {
      id: 'a/10.0.0.2:8000',
      breakerOpen: 2,
      halfOpen: 0,
      reporting: 3,
      errorPercent: 100,
      rateLimitPercent: 0,
      ewmaTtftMs: 1200,
    },
    {
      id: 'a/10.0.0.1:8000',
      breakerOpen: 0,
      halfOpen: 1,
      reporting: 3,
      errorPercent: 12,
      rateLimitPercent: 3,
      ewmaTtftMs: 640,
      driftMismatches: 2,
    },
  ],
};

describe('switchyard status --pool on a real API server', { skip: !enabled }, () => {
  let cluster: Cluster;
  let kubeconfig: string;
  const pool = (...more: string[]): Promise<Run> =>
    status(['--pool', 'chat', '--kubeconfig', kubeconfig, ...more]);
  const setStatus = async (value: unknown): Promise<void> => {
    // A merge patch replaces lists whole: each call writes the entire status it names.
    const res = await cluster.request('PATCH', `${POOL_PATH}/status`, { status: value });
    assert.equal(res.status, 200, statusMessage(res));
  };

  before(async () => {
    cluster = await startCluster();
    kubeconfig = cluster.kubeconfigPath;
  });

  after(async () => {
    await cluster?.stop();
  });

  it('says the CRD is missing, then that the pool is missing (exit code 2)', async () => {
    const noCrd = await pool('-n', NS);
    assert.equal(noCrd.code, 2, noCrd.stderr);
    assert.match(
      noCrd.stderr,
      /does not serve inferencepools\.switchyard\.dev\/v1alpha1: is the switchyard InferencePool CRD installed\?/,
    );
    await installInferencePoolCrd(cluster);
    await cluster.applyYaml(`apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ${NS}\n`);
    const missing = await pool('-n', NS);
    assert.equal(missing.code, 2);
    assert.equal(
      missing.stderr,
      'switchyard status: switchyard InferencePool apps/chat not found (kubectl get ipool -n apps)\n',
    );
    assert.equal(missing.stdout, '');
  });

  it('a pool the controller has not written status for: exit code 1', async () => {
    await cluster.applyYaml(
      [
        'apiVersion: switchyard.dev/v1alpha1',
        'kind: InferencePool',
        'metadata: {name: chat}',
        'spec:',
        '  backends: [{name: a, url: "http://10.0.0.1:8000/v1"}]',
        '',
      ].join('\n'),
      { namespace: NS },
    );
    const run = await pool('-n', NS);
    assert.equal(run.code, 1, run.stderr);
    assert.match(run.stdout, /^Pool +apps\/chat \(mode Balance\)$/m);
    assert.match(run.stdout, /^Status +none written yet \(is the controller running\?\)$/m);
  });

  it('a healthy status: its rows, exit code 0; the namespace comes from the context', async () => {
    await setStatus(HEALTHY);
    const [run, fromContext] = await Promise.all([
      pool('-n', NS),
      status([
        '--pool',
        'chat',
        '--kubeconfig',
        cluster.writeKubeconfig(cluster.adminToken, undefined, NS),
      ]),
    ]);
    assert.equal(run.code, 0, run.stdout + run.stderr);
    assert.equal(run.stderr, '');
    const lines = run.stdout.split('\n');
    assert.deepEqual(lines.slice(0, 8), [
      'Pool          apps/chat (mode Balance)',
      'Ready         True',
      'Accepted      True',
      'ResolvedRefs  True',
      'Snapshot      version 7 (hash 5f1c0a2b3d4e6f70)',
      'Sidecars      3 connected, 3 in sync',
      'Endpoints     3/3 ready, 0 drifted',
      `Drift         expected ${FP}`,
    ]);
    assert.deepEqual(lines.slice(9, 12), [
      'ID               HEALTH  ERR%  429%  TTFT  DRIFT  FINGERPRINT',
      `a/10.0.0.1:8000  ok         -     -     -  ok     ${FP}`,
      `a/10.0.0.2:8000  ok         -     -     -  ok     ${FP}`,
    ]);
    assert.match(run.stdout, /^1 endpoint not listed above: healthy in every sidecar/m);
    assert.match(run.stdout, /\nOK\n$/);
    assert.equal(fromContext.code, 0, fromContext.stderr);
    assert.equal(fromContext.stdout, run.stdout, 'the context namespace is apps');
  });

  it('an unhealthy status: open, half-open and drifted rows, worst first, exit code 1', async () => {
    await setStatus(UNHEALTHY);
    const [run, json] = await Promise.all([pool('-n', NS), pool('-n', NS, '-o', 'json')]);
    assert.equal(run.code, 1, run.stdout + run.stderr);
    const lines = run.stdout.split('\n');
    const table = lines.slice(lines.findIndex((l) => l.startsWith('ID ')));
    assert.deepEqual(table.slice(0, 5), [
      'ID               HEALTH                ERR%  429%   TTFT  DRIFT             FINGERPRINT',
      'a/10.0.0.2:8000  open on 2/3 sidecars   100     0  1.20s  -                 -',
      'a/10.0.0.1:8000  half-open on 1/3        12     3  640ms  ok, 2 mismatches  llama/fp_a/0123456789ab',
      'b/10.0.0.9:8000  ok                       -     -      -  drifted           llama/fp_x/ffffffffffff',
      'a/10.0.0.3:8000  ok                       -     -      -  ok, probe failed  llama/fp_a/0123456789ab',
    ]);
    assert.ok(
      table.includes('Probe of a/10.0.0.3:8000 failed: connect ECONNREFUSED 10.0.0.3:8000'),
    );
    assert.ok(table.some((l) => l.startsWith('1 endpoint not listed above')));
    assert.match(run.stdout, /^Sidecars +3 connected, 2 in sync \(1 behind\)$/m);
    assert.match(run.stdout, /^Endpoints +2\/5 ready, 1 drifted$/m);
    assert.match(
      run.stdout,
      /UNHEALTHY \(exit code 1\):\n {2}- a\/10\.0\.0\.2:8000: breaker open on 2\/3 sidecars\n {2}- a\/10\.0\.0\.1:8000: breaker half-open on 1\/3\n {2}- b\/10\.0\.0\.9:8000: drifted \(llama\/fp_x\/ffffffffffff\)\n$/,
    );

    assert.equal(json.code, 1);
    const view = JSON.parse(json.stdout) as Record<string, unknown> & {
      rows: Record<string, unknown>[];
    };
    assert.equal(view.source, 'kubernetes');
    assert.equal(view.namespace, NS);
    assert.equal(view.exitCode, 1);
    assert.equal(view.unlistedEndpoints, 1);
    assert.deepEqual(view.rows[0], {
      id: 'a/10.0.0.2:8000',
      breakerOpen: 2,
      halfOpen: 0,
      reporting: 3,
      errorPercent: 100,
      rateLimitPercent: 0,
      ewmaTtftMs: 1200,
      driftMismatches: null,
      drifted: null,
      fingerprint: null,
      probedAt: null,
      probeError: null,
    });
    assert.deepEqual(
      Object.keys(view),
      [
        'source',
        'pool',
        'namespace',
        'mode',
        'generation',
        'observedGeneration',
        'conditions',
        'snapshot',
        'sidecars',
        'endpoints',
        'drift',
        'rows',
        'unlistedEndpoints',
        'models',
        'budgets',
        'exitCode',
        'problems',
      ],
      'the documented shape (docs/status.md)',
    );
  });

  it('a False condition with its reason and message', async () => {
    await setStatus({
      ...HEALTHY,
      conditions: [
        condition('Accepted', 'True', 'Accepted'),
        condition(
          'ResolvedRefs',
          'False',
          'SecretNotFound',
          'Backend provider: Secret provider-key not found',
        ),
        condition('Ready', 'True', 'EndpointsReady'),
      ],
    });
    const run = await pool('-n', NS);
    assert.equal(run.code, 1);
    assert.match(
      run.stdout,
      /^ResolvedRefs {2}False {2}SecretNotFound: Backend provider: Secret provider-key not found$/m,
    );
    assert.match(run.stdout, /^ {2}- ResolvedRefs is False \(SecretNotFound\)$/m);
  });

  it('exit code 2 with a message for bad credentials, missing RBAC, a missing context or kubeconfig', async () => {
    const { token } = await cluster.createServiceAccountToken(NS, 'nobody', {
      audience: cluster.apiAudience,
    });
    const home = mkdtempSync(join(tmpdir(), 'switchyard-status-home-'));
    try {
      const [unauthorized, forbidden, noContext, noFile, none] = await Promise.all([
        status([
          '--pool',
          'chat',
          '-n',
          NS,
          '--kubeconfig',
          cluster.writeKubeconfig('not-a-token'),
        ]),
        status(['--pool', 'chat', '-n', NS, '--kubeconfig', cluster.writeKubeconfig(token)]),
        pool('-n', NS, '--context', 'prod'),
        status(['--pool', 'chat', '--kubeconfig', join(home, 'missing')]),
        status(['--pool', 'chat'], { KUBECONFIG: '', HOME: home }),
      ]);
      assert.equal(unauthorized.code, 2);
      assert.match(
        unauthorized.stderr,
        /did not accept the credentials of user user in the kubeconfig \(401 Unauthorized\)/,
      );
      assert.equal(forbidden.code, 2);
      assert.match(
        forbidden.stderr,
        /^switchyard status: user user may not read InferencePool apps\/chat \(403 Forbidden\): it needs RBAC permission "get" on inferencepools \(API group switchyard\.dev\) in namespace apps: .*system:serviceaccount:apps:nobody/,
      );
      assert.equal(noContext.code, 2);
      assert.match(
        noContext.stderr,
        /the kubeconfig has no context prod \(it has: switchyard-test\)/,
      );
      assert.equal(noFile.code, 2);
      assert.match(noFile.stderr, /cannot load the kubeconfig .*missing: ENOENT/);
      if (!existsSync(SERVICE_ACCOUNT_TOKEN)) {
        assert.equal(none.code, 2);
        assert.match(none.stderr, /^switchyard status: no kubeconfig: \$KUBECONFIG is not set/);
      }
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });
});
