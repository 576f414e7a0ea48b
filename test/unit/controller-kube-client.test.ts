/**
 * The controller process does not load @kubernetes/client-node (~80 MB of RSS a replica): it
 * reads its kubeconfig and lists and watches over node:http (controller/kube/). A resolve hook in
 * a real `switchyard controller` reports every module of the client it loads; the controller runs
 * against a stand-in API server until its informers watch, so the modules it imports on demand
 * are counted too. The same run with an `exec` user shows the hook does see the client when the
 * fallback loads it.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { stringify } from 'yaml';
import { waitFor } from '../../harness/k8s/cluster.ts';
import { SWITCHYARD_BIN } from '../../harness/processes.ts';
import { fakeApiServer, type FakeApiServer } from '../../controller/kube/testing.ts';

const HOOK = `data:text/javascript,${encodeURIComponent(
  "import { registerHooks } from 'node:module'; import { writeSync } from 'node:fs';" +
    'registerHooks({ resolve(s, c, next) { const r = next(s, c);' +
    " if (r.url.includes('@kubernetes/client-node')) writeSync(2, 'LOADED ' + r.url + '\\n'); return r; } });",
)}`;

/** What a controller just started needs: empty lists, held watches, no Lease yet, writes accepted. */
async function apiServer(): Promise<FakeApiServer> {
  return fakeApiServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    res.setHeader('content-type', 'application/json');
    if (url.searchParams.get('watch') === 'true') {
      res.writeHead(200).flushHeaders();
      return;
    }
    if (req.method === 'GET' && /\/leases\/[^/]+$/.test(url.pathname)) {
      res.writeHead(404).end(JSON.stringify({ kind: 'Status', code: 404 }));
      return;
    }
    if (req.method === 'GET') {
      res.end(JSON.stringify({ metadata: { resourceVersion: '1' }, items: [] }));
      return;
    }
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => res.writeHead(201).end(Buffer.concat(chunks).toString() || '{}'));
  });
}

/** Runs the controller until it watches pools, Services and EndpointSlices; its output. */
async function controllerOutput(
  api: FakeApiServer,
  kubeconfig: string,
): Promise<{ stdout: string; stderr: string }> {
  const seen = api.requests.length;
  const child = spawn(
    process.execPath,
    [
      '--import',
      HOOK,
      SWITCHYARD_BIN,
      'controller',
      '--kubeconfig',
      kubeconfig,
      '--insecure-http',
      '--listen',
      '127.0.0.1:0',
      '--admin',
      '127.0.0.1:0',
      '--log-level',
      'warn',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  const exited = new Promise((resolve) => child.on('exit', resolve));
  try {
    await waitFor(
      'the controller to watch',
      () => {
        const watches = api.requests.slice(seen).filter((r) => r.includes('watch=true'));
        return ['inferencepools', 'services', 'endpointslices'].every((kind) =>
          watches.some((w) => w.includes(`/${kind}?`)),
        );
      },
      { timeoutMs: 30_000, intervalMs: 50 },
    );
  } finally {
    child.kill('SIGKILL');
    await exited;
  }
  return { stdout, stderr };
}

describe('the controller process', () => {
  let api: FakeApiServer;
  let dir: string;
  before(async () => {
    api = await apiServer();
    dir = mkdtempSync(join(tmpdir(), 'controller-kube-client-'));
  });
  after(async () => {
    await api.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const kubeconfig = (name: string, user: Record<string, unknown>): string => {
    const file = join(dir, name);
    writeFileSync(
      file,
      stringify({
        clusters: [{ name: 'c', cluster: { server: api.url, 'insecure-skip-tls-verify': true } }],
        users: [{ name: 'u', user }],
        contexts: [{ name: 'x', context: { cluster: 'c', user: 'u' } }],
        'current-context': 'x',
      }),
    );
    return file;
  };

  test('runs without loading @kubernetes/client-node', async () => {
    const { stderr } = await controllerOutput(api, kubeconfig('token', { token: 'secret' }));
    assert.doesNotMatch(stderr, /LOADED/);
  });

  test('loads it, and says so, only for a kubeconfig that needs it (an exec user)', async () => {
    const credential = JSON.stringify({
      apiVersion: 'client.authentication.k8s.io/v1',
      kind: 'ExecCredential',
      status: { token: 'from-exec' },
    });
    const { stdout, stderr } = await controllerOutput(
      api,
      kubeconfig('exec', {
        exec: {
          apiVersion: 'client.authentication.k8s.io/v1',
          command: 'sh',
          args: ['-c', `echo '${credential}'`],
          interactiveMode: 'Never',
        },
      }),
    );
    assert.ok(
      stderr.split('\n').some((l) => l.startsWith('LOADED ')),
      'the hook sees the client',
    );
    assert.match(stdout, /the kubeconfig needs @kubernetes\/client-node/);
  });
});
