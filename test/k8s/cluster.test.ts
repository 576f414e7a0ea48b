/**
 * The test cluster itself (harness/k8s/cluster.ts): a real kube-apiserver with the version it was
 * built as, TLS with our CA, static-token and service-account authentication, RBAC, TokenRequest
 * and TokenReview (audiences, pod-bound tokens), and a restart of kube-apiserver that keeps etcd.
 *
 * SWITCHYARD_K8S_TESTS=0 skips it.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { parse } from 'yaml';
import { startCluster, waitFor, type Cluster } from '../../harness/k8s/cluster.ts';

const enabled = process.env['SWITCHYARD_K8S_TESTS'] !== '0';
const NS = 'harness';

interface TokenReview {
  status: {
    authenticated?: boolean;
    audiences?: string[];
    user?: { username?: string; extra?: Record<string, string[]> };
  };
}

describe('test cluster', { skip: !enabled }, () => {
  let cluster: Cluster;

  before(async () => {
    cluster = await startCluster();
    await cluster.applyYaml(`apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ${NS}\n`);
  });

  after(async () => {
    await cluster?.stop();
  });

  async function review(token: string, audiences: string[]): Promise<TokenReview['status']> {
    const res = await cluster.request<TokenReview>(
      'POST',
      '/apis/authentication.k8s.io/v1/tokenreviews',
      {
        apiVersion: 'authentication.k8s.io/v1',
        kind: 'TokenReview',
        spec: { token, audiences },
      },
    );
    assert.equal(res.status, 201, res.text);
    return res.body.status;
  }

  it('reports the version it was built as and starts in seconds', async () => {
    assert.match(cluster.version, /^v1\.\d+\.\d+$/);
    const res = await cluster.request<{ major: string; minor: string }>('GET', '/version');
    assert.equal(res.body.major, '1');
    assert.ok(Number(res.body.minor) >= 34, res.text);
    // Generous: a loaded CI machine, but not the minutes of a build.
    assert.ok(cluster.startup.apiServerMs < 60_000, JSON.stringify(cluster.startup));
  });

  it('writes a kubeconfig for the admin token with the CA embedded', () => {
    const config = parse(readFileSync(cluster.kubeconfigPath, 'utf8')) as {
      clusters: { cluster: { server: string; 'certificate-authority-data': string } }[];
      users: { user: { token: string } }[];
    };
    assert.equal(config.clusters[0]?.cluster.server, cluster.server);
    assert.equal(
      Buffer.from(
        config.clusters[0]?.cluster['certificate-authority-data'] ?? '',
        'base64',
      ).toString(),
      cluster.caPem,
    );
    assert.equal(config.users[0]?.user.token, cluster.adminToken);
  });

  it('authenticates tokens and authorizes with RBAC', async () => {
    const pods = `/api/v1/namespaces/${NS}/pods`;
    assert.equal(
      (await cluster.request('GET', '/api/v1/namespaces', undefined, { token: '' })).status,
      403,
    );
    assert.equal(
      (await cluster.request('GET', '/api/v1/namespaces', undefined, { token: 'nope' })).status,
      401,
    );
    assert.equal((await cluster.request('GET', '/api/v1/namespaces')).status, 200);

    // A token for another audience is not one the API server accepts.
    const foreign = await cluster.createServiceAccountToken(NS, 'reader', {
      audience: 'switchyard',
    });
    const api = await cluster.createServiceAccountToken(NS, 'reader', {
      audience: cluster.apiAudience,
    });
    const list = (token: string): Promise<number> =>
      cluster.request('GET', pods, undefined, { token }).then((r) => r.status);
    assert.equal(await list(foreign.token), 401);
    assert.equal(await list(api.token), 403);
    await cluster.applyYaml(
      `apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: { name: pod-reader, namespace: ${NS} }
rules: [{ apiGroups: [''], resources: [pods], verbs: [get, list, watch] }]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: { name: reader, namespace: ${NS} }
roleRef: { apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-reader }
subjects: [{ kind: ServiceAccount, name: reader, namespace: ${NS} }]
`,
    );
    await waitFor('the RoleBinding to take effect', async () => (await list(api.token)) === 200);
  });

  it('issues TokenRequest tokens with an audience, and bound to a pod', async () => {
    const { token, expirationTimestamp } = await cluster.createServiceAccountToken(NS, 'sidecar', {
      audience: 'switchyard',
      expirationSeconds: 600,
    });
    assert.ok(Date.parse(expirationTimestamp) > Date.now());
    const ok = await review(token, ['switchyard']);
    assert.equal(ok.authenticated, true);
    assert.equal(ok.user?.username, `system:serviceaccount:${NS}:sidecar`);
    assert.deepEqual(ok.audiences, ['switchyard']);
    assert.notEqual((await review(token, ['something-else'])).authenticated, true);

    await cluster.applyYaml(
      `apiVersion: v1
kind: Pod
metadata: { name: app, namespace: ${NS} }
spec:
  serviceAccountName: sidecar
  containers: [{ name: app, image: registry.invalid/app:1 }]
`,
    );
    const bound = await cluster.createServiceAccountToken(NS, 'sidecar', {
      audience: 'switchyard',
      boundPod: 'app',
    });
    const status = await review(bound.token, ['switchyard']);
    assert.equal(status.authenticated, true);
    assert.deepEqual(status.user?.extra?.['authentication.kubernetes.io/pod-name'], ['app']);

    // (Deleting the pod invalidates the token, but the API server caches successful token
    // authentications for 10 s, so a test of that waits 10 s: see docs/testing.md.)
  });

  it('restarts kube-apiserver on the same port and keeps the data in etcd', async () => {
    await cluster.applyYaml(
      `apiVersion: v1\nkind: ConfigMap\nmetadata: { name: survivor, namespace: ${NS} }\ndata: { k: v }\n`,
    );
    const server = cluster.server;
    await cluster.restartApiServer();
    assert.equal(cluster.server, server);
    const res = await cluster.request<{ data: Record<string, string> }>(
      'GET',
      `/api/v1/namespaces/${NS}/configmaps/survivor`,
    );
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(res.body.data, { k: 'v' });
  });
});
