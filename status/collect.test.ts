import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import {
  SERVICE_ACCOUNT_TOKEN,
  StatusSourceError,
  adminBaseUrl,
  collectSidecar,
  fetchErrorMessage,
  kubeErrorMessage,
  missingKubeconfig,
} from './collect.ts';
import { READY, debugBackends, debugEndpoint } from './testing.ts';

describe('adminBaseUrl', () => {
  it('takes a URL, host:port, :port or a port', () => {
    assert.equal(adminBaseUrl('http://127.0.0.1:9090'), 'http://127.0.0.1:9090');
    assert.equal(adminBaseUrl('http://127.0.0.1:9090/'), 'http://127.0.0.1:9090');
    assert.equal(adminBaseUrl('HTTPS://pod.local:9443'), 'https://pod.local:9443');
    assert.equal(adminBaseUrl('10.0.0.7:9090'), 'http://10.0.0.7:9090');
    assert.equal(adminBaseUrl('[::1]:9090'), 'http://[::1]:9090');
    assert.equal(adminBaseUrl(':9090'), 'http://127.0.0.1:9090');
    assert.equal(adminBaseUrl(' 9090 '), 'http://127.0.0.1:9090');
  });

  it('refuses what is not a base URL', () => {
    for (const bad of [
      '',
      'http://',
      'a b',
      'http://u:p@host:1',
      'http://h:1/?q=1',
      'http://h:1/#x',
    ])
      assert.equal(adminBaseUrl(bad), undefined, bad);
  });
});

describe('fetchErrorMessage', () => {
  it('names the address, the cause and what to check on a refused connection', () => {
    const refused = new TypeError('fetch failed', {
      cause: Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:9090'), {
        code: 'ECONNREFUSED',
      }),
    });
    assert.equal(
      fetchErrorMessage('http://127.0.0.1:9090', refused),
      "cannot reach the sidecar's admin API at http://127.0.0.1:9090: ECONNREFUSED (is the sidecar running, and is this its --admin address? In a pod: kubectl port-forward pod/<pod> 9090)",
    );
    assert.equal(
      fetchErrorMessage(
        'http://x:1',
        new TypeError('fetch failed', { cause: new Error('bad port') }),
      ),
      "cannot reach the sidecar's admin API at http://x:1: bad port",
    );
    assert.equal(
      fetchErrorMessage('http://x:1', new Error('boom')),
      "cannot reach the sidecar's admin API at http://x:1: boom",
    );
  });
});

describe('missingKubeconfig', () => {
  const lookup = (env: Record<string, string>, files: string[]) => ({
    env,
    home: '/home/op',
    exists: (p: string) => files.includes(p),
  });
  it('is quiet when $KUBECONFIG, ~/.kube/config or a service account token is there', () => {
    assert.equal(missingKubeconfig(lookup({ KUBECONFIG: '/etc/kc' }, [])), undefined);
    assert.equal(missingKubeconfig(lookup({}, ['/home/op/.kube/config'])), undefined);
    assert.equal(missingKubeconfig(lookup({}, [SERVICE_ACCOUNT_TOKEN])), undefined);
  });
  it('says so when there is none (the client would quietly try localhost:8080)', () => {
    assert.equal(
      missingKubeconfig(lookup({ KUBECONFIG: '' }, [])),
      'no kubeconfig: $KUBECONFIG is not set, /home/op/.kube/config does not exist and this is not a pod with a service account token; give --kubeconfig <file>',
    );
  });
});

describe('kubeErrorMessage', () => {
  const where = { pool: 'chat', namespace: 'apps', server: 'https://k8s:6443', user: 'oncall' };
  const status = (code: number, message: string, reason: string) =>
    JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Failure', message, reason, code });

  it('a missing pool', () => {
    assert.equal(
      kubeErrorMessage(
        {
          code: 404,
          body: status(404, 'inferencepools.switchyard.dev "chat" not found', 'NotFound'),
        },
        where,
      ),
      'switchyard InferencePool apps/chat not found (kubectl get ipool -n apps)',
    );
  });

  it('a missing CRD (a plain 404, not a Status)', () => {
    assert.equal(
      kubeErrorMessage({ code: 404, body: '404 page not found\n' }, where),
      'the API server at https://k8s:6443 does not serve inferencepools.switchyard.dev/v1alpha1: is the switchyard InferencePool CRD installed? (kubectl get crd inferencepools.switchyard.dev)',
    );
  });

  it('401 and 403 say which credentials and which permission', () => {
    assert.equal(
      kubeErrorMessage({ code: 401, body: undefined }, where),
      'the API server at https://k8s:6443 did not accept the credentials of user oncall in the kubeconfig (401 Unauthorized): the token or client certificate is invalid or expired',
    );
    const forbidden =
      'inferencepools.switchyard.dev "chat" is forbidden: User "oncall" cannot get resource "inferencepools" in API group "switchyard.dev" in the namespace "apps"';
    assert.equal(
      kubeErrorMessage({ code: 403, body: { kind: 'Status', message: forbidden } }, where),
      `user oncall may not read InferencePool apps/chat (403 Forbidden): it needs RBAC permission "get" on inferencepools (API group switchyard.dev) in namespace apps: ${forbidden}`,
    );
  });

  it('another status, and a network error', () => {
    assert.equal(
      kubeErrorMessage({ code: 500, body: status(500, 'etcd is down', 'InternalError') }, where),
      'the API server at https://k8s:6443 answered HTTP 500 reading InferencePool apps/chat: etcd is down',
    );
    assert.equal(
      kubeErrorMessage({ code: 503, body: 'not json' }, where),
      'the API server at https://k8s:6443 answered HTTP 503 reading InferencePool apps/chat',
    );
    assert.equal(
      kubeErrorMessage(new TypeError('fetch failed', { cause: { code: 'ECONNREFUSED' } }), where),
      'cannot reach the API server at https://k8s:6443: ECONNREFUSED',
    );
    assert.equal(
      kubeErrorMessage(
        new TypeError('fetch failed', { cause: { message: 'self-signed certificate' } }),
        where,
      ),
      'cannot reach the API server at https://k8s:6443: self-signed certificate',
    );
    assert.equal(
      kubeErrorMessage(new Error('boom'), where),
      'cannot reach the API server at https://k8s:6443: boom',
    );
    assert.equal(
      kubeErrorMessage('odd', where),
      'cannot reach the API server at https://k8s:6443: odd',
    );
    assert.equal(
      kubeErrorMessage(undefined, where),
      'cannot reach the API server at https://k8s:6443: undefined',
    );
  });
});

describe('collectSidecar, against a stand-in admin server', () => {
  let server: http.Server;
  let base: string;
  /** What the stand-in answers per path: status, body, delay. */
  let answers: Record<string, { status: number; body: string; delayMs?: number }>;
  before(async () => {
    server = http.createServer((req, res) => {
      const answer = answers[req.url ?? ''] ?? { status: 404, body: '{"error":{}}' };
      setTimeout(() => {
        res.writeHead(answer.status, { 'content-type': 'application/json' });
        res.end(answer.body);
      }, answer.delayMs ?? 0);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  const sidecar = (
    readyzStatus = 200,
    extra: Record<string, { status: number; body: string; delayMs?: number }> = {},
  ) => {
    answers = {
      '/readyz': { status: readyzStatus, body: JSON.stringify(READY.body) },
      '/debug/backends': {
        status: 200,
        body: JSON.stringify(debugBackends([debugEndpoint('a/10.0.0.1:8000')])),
      },
      ...extra,
    };
  };

  it('builds the view from /readyz and /debug/backends', async () => {
    sidecar();
    const view = await collectSidecar(base, { timeoutMs: 2_000 });
    assert.equal(view.admin, base);
    assert.equal(view.ready, true);
    assert.equal(view.exitCode, 0);
    assert.deepEqual(
      view.rows.map((r) => r.id),
      ['a/10.0.0.1:8000'],
    );
    sidecar(503);
    assert.equal((await collectSidecar(base, { timeoutMs: 2_000 })).exitCode, 1);
  });

  const refused = async (message: RegExp): Promise<void> => {
    await assert.rejects(collectSidecar(base, { timeoutMs: 300 }), (err: Error) => {
      assert.ok(err instanceof StatusSourceError);
      assert.match(err.message, message);
      return true;
    });
  };

  it('refuses what is not a sidecar admin API: the proxy port, another server', async () => {
    sidecar(200, { '/debug/backends': { status: 404, body: '{"error":{"code":"unknown_url"}}' } });
    await refused(/\/debug\/backends answered HTTP 404: not the admin API of a switchyard sidecar/);
    sidecar(200, { '/debug/backends': { status: 200, body: '<html>' } });
    await refused(/\/debug\/backends answered HTTP 200: not the admin API/);
    sidecar(404);
    await refused(/\/readyz answered HTTP 404: not the admin API/);
  });

  it('gives up after the timeout', async () => {
    sidecar(200, { '/readyz': { status: 200, body: '{}', delayMs: 2_000 } });
    await refused(/\/readyz did not answer within 0\.3 s/);
  });

  it('says when nothing listens', async () => {
    const closed = http.createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    await assert.rejects(
      collectSidecar(`http://127.0.0.1:${port}`, { timeoutMs: 2_000 }),
      new RegExp(
        `cannot reach the sidecar's admin API at http://127\\.0\\.0\\.1:${port}: ECONNREFUSED`,
      ),
    );
  });
});
