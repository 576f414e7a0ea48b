import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import type { RequestOptions } from 'node:https';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { after, describe, test } from 'node:test';
import { stringify } from 'yaml';
import { FILE_REFRESH_MS, KubeConfigError, loadKubeClientConfig } from './kube-config.ts';

const dir = mkdtempSync(join(tmpdir(), 'kube-config-test-'));
after(() => rmSync(dir, { recursive: true, force: true }));
let files = 0;

/** Writes `content` (YAML for an object) to a new file under `dir`; returns its path. */
function write(content: unknown, name = `file-${++files}`): string {
  const path = join(dir, name);
  mkdirSync(join(path, '..'), { recursive: true });
  writeFileSync(path, typeof content === 'string' ? content : stringify(content));
  return path;
}

const b64 = (text: string): string => Buffer.from(text).toString('base64');

/** A kubeconfig with one context `ctx` of `cluster` and `user`. */
const kubeconfig = (cluster: Record<string, unknown>, user?: Record<string, unknown>) => ({
  apiVersion: 'v1',
  kind: 'Config',
  clusters: [{ name: 'c', cluster: { server: 'https://api.example:6443', ...cluster } }],
  users: user === undefined ? [] : [{ name: 'u', user }],
  contexts: [
    { name: 'ctx', context: { cluster: 'c', ...(user === undefined ? {} : { user: 'u' }) } },
  ],
  'current-context': 'ctx',
});

/** The options `config` sets on a request; its headers as a plain record. */
async function applied(config: { apply(o: RequestOptions): Promise<void> }) {
  const options: RequestOptions = { headers: { accept: 'application/json' } };
  await config.apply(options);
  return options as RequestOptions & { headers: Record<string, unknown> };
}

/** No ~/.kube/config, no mounted token, no $KUBECONFIG: only what a test gives counts. */
const nowhere = { env: {}, home: join(dir, 'no-home'), serviceAccountDir: join(dir, 'no-sa') };

describe('loading the kubeconfig without the Kubernetes client', () => {
  test('reads the server, CA, client certificate and token, files relative to the kubeconfig', async () => {
    write('CA PEM', 'certs/ca.crt');
    write('KEY PEM', 'certs/client.key');
    const file = write(
      kubeconfig(
        { server: 'https://api.example:6443/prefix/', 'certificate-authority': 'certs/ca.crt' },
        {
          'client-certificate-data': b64('CERT PEM'),
          'client-key': 'certs/client.key',
          token: 'secret-token',
          as: 'someone',
        },
      ),
    );
    const config = await loadKubeClientConfig({ ...nowhere, file });
    assert.equal(config.server.href, 'https://api.example:6443/prefix');
    assert.equal(config.source, file);
    assert.equal(config.fallback, undefined);
    const options = await applied(config);
    assert.equal(String(options.ca as Buffer), 'CA PEM');
    assert.equal(String(options.cert as Buffer), 'CERT PEM');
    assert.equal(String(options.key as Buffer), 'KEY PEM');
    assert.equal(options.rejectUnauthorized, undefined);
    assert.deepEqual(options.headers, {
      accept: 'application/json',
      authorization: 'Bearer secret-token',
      'impersonate-user': 'someone',
    });
  });

  test('honours insecure-skip-tls-verify, tls-server-name and basic auth', async () => {
    const file = write(
      kubeconfig(
        { 'insecure-skip-tls-verify': true, 'tls-server-name': 'kubernetes' },
        { username: 'admin', password: 'pw' },
      ),
    );
    const options = await applied(await loadKubeClientConfig({ ...nowhere, file }));
    assert.equal(options.rejectUnauthorized, false);
    assert.equal(options.servername, 'kubernetes');
    assert.equal(options.auth, 'admin:pw');
  });

  test('re-reads a token file once it is a minute old (tokens rotate)', async () => {
    const token = write('first\n');
    const file = write(kubeconfig({}, { 'token-file': token }));
    let now = 0;
    const config = await loadKubeClientConfig({ ...nowhere, file, nowMs: () => now });
    writeFileSync(token, 'second');
    assert.equal((await applied(config)).headers['authorization'], 'Bearer first');
    now = FILE_REFRESH_MS;
    assert.equal((await applied(config)).headers['authorization'], 'Bearer second');
    rmSync(token);
    now = 2 * FILE_REFRESH_MS;
    assert.equal(
      (await applied(config)).headers['authorization'],
      'Bearer second',
      'a failed re-read keeps the last token',
    );
  });

  test('follows current-context among several clusters, users and contexts', async () => {
    const file = write({
      clusters: [
        { name: 'dev', cluster: { server: 'https://dev:6443' } },
        { name: 'prod', cluster: { server: 'https://prod:6443' } },
      ],
      users: [
        { name: 'dev', user: { token: 'dev-token' } },
        { name: 'prod', user: { token: 'prod-token' } },
      ],
      contexts: [
        { name: 'dev', context: { cluster: 'dev', user: 'dev' } },
        { name: 'prod', context: { cluster: 'prod', user: 'prod' } },
      ],
      'current-context': 'prod',
    });
    const config = await loadKubeClientConfig({ ...nowhere, file });
    assert.equal(config.server.host, 'prod:6443');
    assert.equal((await applied(config)).headers['authorization'], 'Bearer prod-token');
  });

  test('says which file and which field is wrong', async () => {
    const cases: [unknown, RegExp][] = [
      [{ clusters: [{ name: 'c', cluster: {} }] }, /clusters\[0\]\.cluster\.server is missing/],
      [{ clusters: [{ cluster: { server: 'x' } }] }, /clusters\[0\]\.name is missing/],
      [{ clusters: 'c' }, /clusters must be a list/],
      [{ users: [{ name: 'u', user: { token: 7 } }] }, /users\[0\]\.user\.token must be a string/],
      [{ contexts: [{ name: 'x', context: {} }] }, /contexts\[0\]\.context\.cluster is missing/],
      [{ ...kubeconfig({}), 'current-context': undefined }, /current-context is not set/],
      [
        { ...kubeconfig({}), 'current-context': 'prod' },
        /current-context prod is not among the contexts \(they are: ctx\)/,
      ],
      [
        kubeconfig({ server: 'api:6443' }),
        /clusters\[0\]\.cluster\.server must be an http or https URL/,
      ],
      [
        kubeconfig({ 'insecure-skip-tls-verify': 'yes' }),
        /insecure-skip-tls-verify must be true or false/,
      ],
      [kubeconfig({ 'certificate-authority': 'missing.crt' }), /certificate-authority: ENOENT/],
      [
        {
          ...kubeconfig({}),
          contexts: [{ name: 'ctx', context: { cluster: 'c', user: 'nobody' } }],
        },
        /context ctx names user nobody, which is not defined/,
      ],
      ['clusters: [\n', /not valid YAML/],
      ['- a list', /not a kubeconfig/],
    ];
    for (const [content, message] of cases) {
      const file = write(content);
      await assert.rejects(loadKubeClientConfig({ ...nowhere, file }), (err: Error) => {
        assert.ok(err instanceof KubeConfigError, String(err));
        assert.ok(err.message.includes(file), `${err.message} names ${file}`);
        assert.match(err.message, message);
        return true;
      });
    }
    await assert.rejects(
      loadKubeClientConfig({ ...nowhere, file: join(dir, 'absent') }),
      /ENOENT.*absent/,
    );
  });

  test('merges the files of $KUBECONFIG as the library does', async () => {
    const first = write({
      clusters: [{ name: 'a', cluster: { server: 'https://a:6443' } }],
      contexts: [{ name: 'a', context: { cluster: 'a' } }],
      'current-context': 'a',
    });
    const second = write({
      clusters: [{ name: 'b', cluster: { server: 'https://b:6443' } }],
      contexts: [{ name: 'b', context: { cluster: 'b' } }],
      'current-context': 'b',
    });
    const env = { KUBECONFIG: [first, '', second].join(delimiter) };
    const config = await loadKubeClientConfig({ ...nowhere, env });
    assert.equal(config.server.host, 'b:6443', "the later file's current-context");
    await assert.rejects(
      loadKubeClientConfig({ ...nowhere, env: { KUBECONFIG: [first, first].join(delimiter) } }),
      /cluster a is also defined in/,
    );
  });

  test('takes --kubeconfig, else $KUBECONFIG, else ~/.kube/config, else in-cluster, else localhost', async () => {
    const home = join(dir, 'home');
    const sa = join(dir, 'sa');
    write(kubeconfig({ server: 'https://home:6443' }), 'home/.kube/config');
    write('sa-token', 'sa/token');
    write('SA CA', 'sa/ca.crt');
    const flag = write(kubeconfig({ server: 'https://flag:6443' }));
    const env = write(kubeconfig({ server: 'https://env:6443' }));
    const inPod = { KUBERNETES_SERVICE_HOST: 'fd00::1', KUBERNETES_SERVICE_PORT: '443' };
    const host = async (lookup: Parameters<typeof loadKubeClientConfig>[0]) =>
      (await loadKubeClientConfig(lookup)).server.host;
    const all = { home, serviceAccountDir: sa };
    assert.equal(await host({ ...all, file: flag, env: { KUBECONFIG: env } }), 'flag:6443');
    assert.equal(await host({ ...all, env: { KUBECONFIG: env, ...inPod } }), 'env:6443');
    assert.equal(await host({ ...all, env: inPod }), 'home:6443');
    const pod = await loadKubeClientConfig({ ...all, home: join(dir, 'none'), env: inPod });
    assert.equal(pod.server.href, 'https://[fd00::1]/');
    assert.equal(pod.source, 'in-cluster');
    const options = await applied(pod);
    assert.equal(options.headers['authorization'], 'Bearer sa-token');
    assert.equal(String(options.ca as Buffer), 'SA CA');
    await assert.rejects(
      loadKubeClientConfig({ ...all, home: join(dir, 'none'), env: {} }),
      /KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not both set/,
    );
    assert.equal((await loadKubeClientConfig(nowhere)).server.href, 'http://localhost:8080/');
  });

  test('hands exec users to @kubernetes/client-node, which runs the plugin', async () => {
    const credential = JSON.stringify({
      apiVersion: 'client.authentication.k8s.io/v1',
      kind: 'ExecCredential',
      status: { token: 'from-exec' },
    });
    const file = write(
      kubeconfig(
        {},
        {
          exec: {
            apiVersion: 'client.authentication.k8s.io/v1',
            command: 'sh',
            args: ['-c', `echo '${credential}'`],
            interactiveMode: 'Never',
          },
        },
      ),
    );
    const config = await loadKubeClientConfig({ ...nowhere, file });
    assert.equal(config.fallback, 'user u authenticates with exec');
    const options = await applied(config);
    assert.equal(options.headers['Authorization'], 'Bearer from-exec');
    assert.equal(options.agent, undefined, "kube-raw's own agents serve");
  });
});
