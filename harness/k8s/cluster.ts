/**
 * A real Kubernetes control plane for tests and the controller bench: etcd and kube-apiserver (built by
 * scripts/k8s/build.sh) on free loopback ports, with everything in a temp dir.
 *
 * No kubelet, scheduler or controller manager: objects are stored and validated exactly as in a
 * cluster (CRD schemas and CEL rules, RBAC, admission, TokenRequest/TokenReview), but nothing
 * reconciles them — pods stay Pending, no `default` ServiceAccount appears in a namespace (so the
 * ServiceAccount admission plugin is off; PodSecurity stays on).
 *
 *   const cluster = await startCluster();
 *   try { await cluster.applyYaml(text); ... } finally { await cluster.stop(); }
 *
 * Authentication: a static admin token (group system:masters) from --token-auth-file, and
 * service account tokens. Authorization: Node,RBAC. TLS: a CA and a serving cert for 127.0.0.1
 * made with the openssl CLI.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  readdirSync,
  readlinkSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { request as httpsRequest, Agent } from 'node:https';
import type { IncomingHttpHeaders } from 'node:http';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseAllDocuments, stringify } from 'yaml';
import { k8sBinaries } from './binaries.ts';
import { onExit } from '../exit-hooks.ts';
import { isAlive } from '../proc.ts';

export interface ClusterOptions {
  /** Kubernetes version to build/run, e.g. 'v1.34.4'. Default: the one pinned in build.sh. */
  version?: string;
  /** Extra kube-apiserver flags, appended last (so they override the defaults). */
  apiServerArgs?: string[];
  /**
   * Default flags to leave out, by name (e.g. '--disable-admission-plugins' for a cluster with a
   * controller manager): list flags add up rather than override.
   */
  dropDefaultArgs?: string[];
  /** Extra subjectAltNames for the serving cert, e.g. ['IP:10.77.3.1']. */
  extraSans?: string[];
  /** How long to wait for etcd and for kube-apiserver's /readyz. Default 60 s each. */
  startTimeoutMs?: number;
  /** Leave the temp dir (certs, logs, etcd data) after stop(). Also: SWITCHYARD_K8S_KEEP=1. */
  keepTempDir?: boolean;
}

export interface ApiResponse<T = unknown> {
  status: number;
  /** Parsed JSON when the server sent JSON, else the text. */
  body: T;
  text: string;
  headers: IncomingHttpHeaders;
}

export interface RequestOptions {
  /** Content-Type of the body. Default: application/merge-patch+json for PATCH, else JSON. */
  contentType?: string;
  /** Bearer token to use instead of the admin token; '' sends none (anonymous). */
  token?: string;
  /** Extra request headers. */
  headers?: Record<string, string>;
}

/** The parts of a Kubernetes object the harness looks at. */
export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; uid?: string; [key: string]: unknown };
  [key: string]: unknown;
}

export interface ServiceAccountTokenOptions {
  /** The token's audience(s), as checked by TokenReview (spec.audiences). */
  audience: string | string[];
  /** Bind the token to this pod (in the same namespace): it dies with the pod. */
  boundPod?: string;
  /** Lifetime; the API server enforces at least 600. Default: the server's (1 h). */
  expirationSeconds?: number;
}

export interface ServiceAccountToken {
  token: string;
  expirationTimestamp: string;
}

export interface Cluster {
  /** https://127.0.0.1:<port> */
  server: string;
  /** What the server reports as gitVersion, e.g. 'v1.34.4'. */
  version: string;
  /** PEM file of the CA that signed the serving cert. */
  caFile: string;
  caPem: string;
  /** The audience the API server accepts in service account tokens (its issuer URL). */
  apiAudience: string;
  /** Bearer token of user 'admin' in group system:masters. */
  adminToken: string;
  /** A kubeconfig for the admin token (CA embedded), current context namespace 'default'. */
  kubeconfigPath: string;
  /** The temp dir: certs, kubeconfig, etcd data, etcd.log, kube-apiserver.log. */
  dir: string;
  /** How long the start took, in ms (etcd ready, then kube-apiserver ready). */
  startup: { etcdMs: number; apiServerMs: number };
  /** One API request (path with query, e.g. '/api/v1/namespaces?limit=1'); never throws on a status. */
  request<T = unknown>(
    method: string,
    path: string,
    body?: unknown,
    options?: RequestOptions,
  ): Promise<ApiResponse<T>>;
  /**
   * Server-side applies every document of a YAML stream (field manager 'switchyard-test',
   * force), in order; namespaced objects without a namespace go to `namespace` (default
   * 'default'). Returns the objects as stored. Throws with the server's message on a rejection.
   */
  applyYaml(text: string, options?: { namespace?: string }): Promise<K8sObject[]>;
  /** The REST path of a kind (via discovery, cached), e.g. '/apis/apps/v1/namespaces/ns/deployments/x'. */
  resourcePath(
    apiVersion: string,
    kind: string,
    namespace?: string,
    name?: string,
  ): Promise<string>;
  /**
   * A TokenRequest for `serviceAccount` in `namespace`; creates the namespace and the service
   * account first when they do not exist (nothing else would: there is no controller manager).
   */
  createServiceAccountToken(
    namespace: string,
    serviceAccount: string,
    options: ServiceAccountTokenOptions,
  ): Promise<ServiceAccountToken>;
  /** Writes a kubeconfig for `token` (default: a new file in the temp dir); returns its path. */
  writeKubeconfig(token: string, file?: string, namespace?: string): string;
  /** Stops kube-apiserver by PID and starts it again on the same port; etcd keeps running. */
  restartApiServer(): Promise<void>;
  /** The last `lines` lines of a component's log. */
  logs(component: 'etcd' | 'kube-apiserver', lines?: number): string;
  /** Stops kube-apiserver, then etcd, and removes the temp dir. Safe to call twice. */
  stop(): Promise<void>;
}

/** Error of a failed API call, with the server's Status message. */
export class ApiError extends Error {
  readonly status: number;
  readonly body: unknown;
  constructor(what: string, res: ApiResponse) {
    super(`${what}: HTTP ${res.status}: ${statusMessage(res)}`);
    this.status = res.status;
    this.body = res.body;
  }
}

/** The `message` of a Status response, or the response text. */
export function statusMessage(res: ApiResponse): string {
  const body = res.body as { message?: unknown } | undefined;
  return typeof body?.message === 'string' ? body.message : res.text;
}

/** Polls `check` until it returns a value other than undefined/false; throws after `timeoutMs`. */
export async function waitFor<T>(
  what: string,
  check: () => Promise<T | undefined | false> | T | undefined | false,
  { timeoutMs = 30_000, intervalMs = 100 }: { timeoutMs?: number; intervalMs?: number } = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const result = await check();
      if (result !== undefined && result !== false) return result;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) {
      const reason = last instanceof Error ? `: ${last.message}` : '';
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${reason}`);
    }
    await sleep(intervalMs);
  }
}

// ---------------------------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------------------------

interface Component {
  name: 'etcd' | 'kube-apiserver';
  child: ChildProcess;
  exited: Promise<string>;
  logFile: string;
}

function tail(file: string, lines: number): string {
  if (!existsSync(file)) return '';
  return readFileSync(file, 'utf8')
    .split('\n')
    .slice(-lines - 1)
    .join('\n');
}

function launch(name: Component['name'], binary: string, args: string[], dir: string): Component {
  const logFile = join(dir, `${name}.log`);
  const fd = openSync(logFile, 'a');
  const child = spawn(binary, args, { stdio: ['ignore', fd, fd], cwd: dir });
  closeSync(fd);
  const exited = new Promise<string>((resolve) => {
    child.once('exit', (code, signal) => resolve(signal ?? `exit code ${code}`));
    child.once('error', (error) => resolve(`failed to start: ${error.message}`));
  });
  return { name, child, exited, logFile };
}

async function terminate(component: Component, graceMs = 10_000): Promise<void> {
  const { child } = component;
  if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined) return;
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await component.exited;
  clearTimeout(timer);
}

function killNow(component: Component | undefined): void {
  const child = component?.child;
  if (child === undefined || child.exitCode !== null || child.signalCode !== null) return;
  child.kill('SIGKILL');
}

/**
 * Waits until `ready` resolves true; fails early when the process exits, with its log's tail.
 */
async function waitReady(
  component: Component,
  ready: () => Promise<boolean>,
  timeoutMs: number,
): Promise<void> {
  let exitReason: string | undefined;
  void component.exited.then((reason) => (exitReason = reason));
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (exitReason !== undefined) {
      throw new Error(
        `${component.name} exited (${exitReason}) before it was ready; ${component.logFile}:\n` +
          tail(component.logFile, 40),
      );
    }
    if (await ready().catch(() => false)) return;
    if (Date.now() > deadline) {
      throw new Error(
        `${component.name} was not ready within ${timeoutMs} ms; ${component.logFile}:\n` +
          tail(component.logFile, 40),
      );
    }
    await sleep(100);
  }
}

/** `count` distinct free TCP ports on 127.0.0.1 (held together, then released). */
export async function freePorts(count: number): Promise<number[]> {
  const servers = await Promise.all(
    Array.from(
      { length: count },
      () =>
        new Promise<ReturnType<typeof createServer>>((resolve, reject) => {
          const server = createServer();
          server.once('error', reject);
          server.listen(0, '127.0.0.1', () => resolve(server));
        }),
    ),
  );
  const ports = servers.map((s) => {
    const address = s.address();
    if (address === null || typeof address === 'string') throw new Error('no port');
    return address.port;
  });
  await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))));
  return ports;
}

// ---------------------------------------------------------------------------------------------
// Leftovers of runs that were SIGKILLed
// ---------------------------------------------------------------------------------------------

/** One file per running cluster: who started it, its temp dir and its processes. */
const RUNS_DIR = join(tmpdir(), 'switchyard-k8s-runs');

interface RunRecord {
  owner: number;
  dir: string;
  processes: { pid: number; exe: string }[];
}

/**
 * Kills the etcd/kube-apiserver processes of clusters whose test process is gone, and removes
 * their temp dirs. A process is killed only if /proc/<pid>/exe is still the binary recorded for
 * it, so a reused PID is never hit.
 */
export function reapStaleClusters(): void {
  if (!existsSync(RUNS_DIR)) return;
  for (const file of readdirSync(RUNS_DIR)) {
    const path = join(RUNS_DIR, file);
    let record: RunRecord;
    try {
      record = JSON.parse(readFileSync(path, 'utf8')) as RunRecord;
    } catch {
      continue;
    }
    if (isAlive(record.owner)) continue;
    for (const { pid, exe } of record.processes) {
      try {
        if (readlinkSync(`/proc/${pid}/exe`) === exe) process.kill(pid, 'SIGKILL');
      } catch {
        // gone already
      }
    }
    rmSync(record.dir, { recursive: true, force: true });
    rmSync(path, { force: true });
  }
}

// ---------------------------------------------------------------------------------------------
// Certificates
// ---------------------------------------------------------------------------------------------

function openssl(dir: string, args: string[]): void {
  try {
    execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (error) {
    const e = error as { stderr?: Buffer; message: string };
    throw new Error(`openssl ${args.join(' ')} failed: ${e.stderr?.toString() ?? e.message}`, {
      cause: error,
    });
  }
}

/** ca.crt/ca.key, server.crt/server.key (SAN 127.0.0.1, localhost, ...), sa.key/sa.pub. */
function makeCertificates(dir: string, extraSans: string[]): void {
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  const ca = [
    '-keyout',
    'ca.key',
    '-out',
    'ca.crt',
    '-days',
    '3',
    '-subj',
    '/CN=switchyard-test-ca',
  ];
  openssl(dir, ['req', '-x509', ...ec, ...ca]);
  const sans = [
    'IP:127.0.0.1',
    'DNS:localhost',
    'DNS:kubernetes',
    'DNS:kubernetes.default',
    'DNS:kubernetes.default.svc',
    'DNS:kubernetes.default.svc.cluster.local',
    ...extraSans,
  ];
  writeFileSync(
    join(dir, 'server.ext'),
    [
      `subjectAltName=${sans.join(',')}`,
      'basicConstraints=CA:FALSE',
      'keyUsage=critical,digitalSignature,keyEncipherment',
      'extendedKeyUsage=serverAuth',
      '',
    ].join('\n'),
  );
  openssl(dir, [
    'req',
    ...ec,
    '-keyout',
    'server.key',
    '-out',
    'server.csr',
    '-subj',
    '/CN=kube-apiserver',
  ]);
  openssl(dir, [
    'x509',
    '-req',
    '-in',
    'server.csr',
    '-CA',
    'ca.crt',
    '-CAkey',
    'ca.key',
    '-CAcreateserial',
    '-days',
    '3',
    '-extfile',
    'server.ext',
    '-out',
    'server.crt',
  ]);
  openssl(dir, [
    'genpkey',
    '-algorithm',
    'EC',
    '-pkeyopt',
    'ec_paramgen_curve:P-256',
    '-out',
    'sa.key',
  ]);
  openssl(dir, ['pkey', '-in', 'sa.key', '-pubout', '-out', 'sa.pub']);
}

// ---------------------------------------------------------------------------------------------
// The cluster
// ---------------------------------------------------------------------------------------------

const SERVICE_ACCOUNT_ISSUER = 'https://kubernetes.default.svc.cluster.local';
const FIELD_MANAGER = 'switchyard-test';

export async function startCluster(options: ClusterOptions = {}): Promise<Cluster> {
  const binaries = await k8sBinaries(options.version);
  reapStaleClusters();
  const timeoutMs = options.startTimeoutMs ?? 60_000;
  const keep = options.keepTempDir === true || process.env['SWITCHYARD_K8S_KEEP'] === '1';

  const dir = mkdtempSync(join(tmpdir(), 'switchyard-cluster-'));
  mkdirSync(RUNS_DIR, { recursive: true });
  const runFile = join(RUNS_DIR, `${process.pid}-${dir.split('-').pop()}.json`);
  let etcd: Component | undefined;
  let apiServer: Component | undefined;
  const recordRun = (): void => {
    const processes = [etcd, apiServer].flatMap((c) =>
      c?.child.pid === undefined
        ? []
        : [
            {
              pid: c.child.pid,
              exe: realpathSync(c.name === 'etcd' ? binaries.etcd : binaries.kubeApiserver),
            },
          ],
    );
    const record: RunRecord = { owner: process.pid, dir, processes };
    writeFileSync(runFile, JSON.stringify(record));
  };
  const removeExitHook = onExit(() => {
    killNow(apiServer);
    killNow(etcd);
    if (!keep) rmSync(dir, { recursive: true, force: true });
    rmSync(runFile, { force: true });
  });

  try {
    makeCertificates(dir, options.extraSans ?? []);
    const caFile = join(dir, 'ca.crt');
    const caPem = readFileSync(caFile, 'utf8');
    const adminToken = randomBytes(24).toString('hex');
    writeFileSync(join(dir, 'tokens.csv'), `${adminToken},admin,admin-uid,"system:masters"\n`);
    const [etcdClientPort, etcdPeerPort, apiPort] = (await freePorts(3)) as [
      number,
      number,
      number,
    ];

    // etcd ------------------------------------------------------------------------------------
    const etcdStart = Date.now();
    const etcdUrl = `http://127.0.0.1:${etcdClientPort}`;
    const peerUrl = `http://127.0.0.1:${etcdPeerPort}`;
    etcd = launch(
      'etcd',
      binaries.etcd,
      [
        '--name=test',
        `--data-dir=${join(dir, 'etcd-data')}`,
        `--listen-client-urls=${etcdUrl}`,
        `--advertise-client-urls=${etcdUrl}`,
        `--listen-peer-urls=${peerUrl}`,
        `--initial-advertise-peer-urls=${peerUrl}`,
        `--initial-cluster=test=${peerUrl}`,
        '--initial-cluster-state=new',
        '--unsafe-no-fsync=true',
        '--log-level=warn',
      ],
      dir,
    );
    recordRun();
    await waitReady(
      etcd,
      async () => {
        const res = await fetch(`${etcdUrl}/health`, { signal: AbortSignal.timeout(2_000) });
        return res.ok && ((await res.json()) as { health?: string }).health === 'true';
      },
      timeoutMs,
    );
    const etcdMs = Date.now() - etcdStart;

    // kube-apiserver --------------------------------------------------------------------------
    const server = `https://127.0.0.1:${apiPort}`;
    const apiServerArgs = [
      `--etcd-servers=${etcdUrl}`,
      '--bind-address=127.0.0.1',
      `--secure-port=${apiPort}`,
      '--advertise-address=127.0.0.1',
      `--cert-dir=${join(dir, 'apiserver-certs')}`,
      `--tls-cert-file=${join(dir, 'server.crt')}`,
      `--tls-private-key-file=${join(dir, 'server.key')}`,
      `--client-ca-file=${caFile}`,
      `--token-auth-file=${join(dir, 'tokens.csv')}`,
      '--authorization-mode=Node,RBAC',
      `--service-account-issuer=${SERVICE_ACCOUNT_ISSUER}`,
      `--service-account-key-file=${join(dir, 'sa.pub')}`,
      `--service-account-signing-key-file=${join(dir, 'sa.key')}`,
      `--api-audiences=${SERVICE_ACCOUNT_ISSUER}`,
      '--service-cluster-ip-range=10.0.0.0/24',
      // No controller manager creates the `default` ServiceAccount this plugin insists on.
      '--disable-admission-plugins=ServiceAccount',
      '--allow-privileged=true',
      // The `kubernetes` Service's endpoint would be 127.0.0.1, which Endpoints reject.
      '--endpoint-reconciler-type=none',
      '--profiling=false',
    ]
      .filter((arg) => !(options.dropDefaultArgs ?? []).includes(arg.split('=')[0]!))
      .concat(options.apiServerArgs ?? []);
    const agent = (): Agent => new Agent({ ca: caPem, keepAlive: false });
    let httpsAgent = agent();

    const request = <T = unknown>(
      method: string,
      path: string,
      body?: unknown,
      requestOptions: RequestOptions = {},
    ): Promise<ApiResponse<T>> => {
      const payload =
        body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body);
      const contentType =
        requestOptions.contentType ??
        (method.toUpperCase() === 'PATCH' ? 'application/merge-patch+json' : 'application/json');
      const token = requestOptions.token ?? adminToken;
      const headers: Record<string, string> = {
        accept: 'application/json',
        ...(token === '' ? {} : { authorization: `Bearer ${token}` }),
        ...(payload === undefined
          ? {}
          : { 'content-type': contentType, 'content-length': String(Buffer.byteLength(payload)) }),
        ...requestOptions.headers,
      };
      return new Promise((resolve, reject) => {
        const req = httpsRequest(
          new URL(path, server),
          { method: method.toUpperCase(), headers, agent: httpsAgent, timeout: 30_000 },
          (res) => {
            let text = '';
            res.setEncoding('utf8');
            res.on('data', (chunk: string) => (text += chunk));
            res.on('error', reject);
            res.on('end', () => {
              let parsed: unknown = text;
              if ((res.headers['content-type'] ?? '').includes('json') && text !== '') {
                try {
                  parsed = JSON.parse(text);
                } catch {
                  // keep the text
                }
              }
              resolve({
                status: res.statusCode ?? 0,
                body: parsed as T,
                text,
                headers: res.headers,
              });
            });
          },
        );
        req.on('timeout', () => req.destroy(new Error(`${method} ${path}: timed out`)));
        req.on('error', reject);
        req.end(payload);
      });
    };

    const startApiServer = async (): Promise<void> => {
      apiServer = launch('kube-apiserver', binaries.kubeApiserver, apiServerArgs, dir);
      recordRun();
      await waitReady(
        apiServer,
        async () => (await request('GET', '/readyz')).status === 200,
        timeoutMs,
      );
    };
    const apiStart = Date.now();
    await startApiServer();
    const apiServerMs = Date.now() - apiStart;
    const version = (await request<{ gitVersion: string }>('GET', '/version')).body.gitVersion;

    const writeKubeconfig = (token: string, file?: string, namespace = 'default'): string => {
      const path = file ?? join(mkdtempSync(join(dir, 'kubeconfig-')), 'kubeconfig');
      const config = {
        apiVersion: 'v1',
        kind: 'Config',
        clusters: [
          {
            name: 'switchyard-test',
            cluster: {
              server,
              'certificate-authority-data': Buffer.from(caPem).toString('base64'),
            },
          },
        ],
        users: [{ name: 'user', user: { token } }],
        contexts: [
          {
            name: 'switchyard-test',
            context: { cluster: 'switchyard-test', user: 'user', namespace },
          },
        ],
        'current-context': 'switchyard-test',
      };
      writeFileSync(path, stringify(config), { mode: 0o600 });
      return path;
    };
    const kubeconfigPath = writeKubeconfig(adminToken, join(dir, 'kubeconfig'));

    // Discovery: apiVersion -> its resource list.
    const discovery = new Map<string, { name: string; kind: string; namespaced: boolean }[]>();
    const resourcePath = async (
      apiVersion: string,
      kind: string,
      namespace?: string,
      name?: string,
    ): Promise<string> => {
      const prefix = apiVersion.includes('/') ? `/apis/${apiVersion}` : `/api/${apiVersion}`;
      const find = async (): Promise<{ name: string; namespaced: boolean } | undefined> => {
        let resources = discovery.get(apiVersion);
        if (resources?.some((r) => r.kind === kind) !== true) {
          const res = await request<{
            resources?: { name: string; kind: string; namespaced: boolean }[];
          }>('GET', prefix);
          resources = res.status === 200 ? (res.body.resources ?? []) : [];
          discovery.set(apiVersion, resources);
        }
        return resources.find((r) => r.kind === kind && !r.name.includes('/'));
      };
      // A CRD that was just established can take a moment to show up in discovery.
      const resource = await waitFor(`discovery of ${kind} in ${apiVersion}`, find, {
        timeoutMs: 10_000,
      });
      const ns = resource.namespaced
        ? `/namespaces/${encodeURIComponent(namespace ?? 'default')}`
        : '';
      return `${prefix}${ns}/${resource.name}${name === undefined ? '' : `/${encodeURIComponent(name)}`}`;
    };

    const applyYaml = async (
      text: string,
      applyOptions: { namespace?: string } = {},
    ): Promise<K8sObject[]> => {
      const applied: K8sObject[] = [];
      for (const doc of parseAllDocuments(text)) {
        if (doc.errors.length > 0) throw new Error(`applyYaml: ${doc.errors[0]?.message}`);
        const object = doc.toJS() as K8sObject | null;
        if (object === null || object === undefined) continue;
        const namespace = object.metadata.namespace ?? applyOptions.namespace;
        const path = await resourcePath(
          object.apiVersion,
          object.kind,
          namespace,
          object.metadata.name,
        );
        const res = await request<K8sObject>(
          'PATCH',
          `${path}?fieldManager=${FIELD_MANAGER}&force=true`,
          JSON.stringify(object),
          { contentType: 'application/apply-patch+yaml' },
        );
        if (res.status !== 200 && res.status !== 201) {
          throw new ApiError(`apply ${object.kind} ${object.metadata.name}`, res);
        }
        applied.push(res.body);
      }
      return applied;
    };

    const createIfMissing = async (path: string, object: unknown): Promise<void> => {
      const res = await request('POST', path, object);
      if (res.status !== 201 && res.status !== 409) throw new ApiError(`POST ${path}`, res);
    };

    const createServiceAccountToken = async (
      namespace: string,
      serviceAccount: string,
      tokenOptions: ServiceAccountTokenOptions,
    ): Promise<ServiceAccountToken> => {
      await createIfMissing('/api/v1/namespaces', {
        apiVersion: 'v1',
        kind: 'Namespace',
        metadata: { name: namespace },
      });
      const ns = `/api/v1/namespaces/${encodeURIComponent(namespace)}`;
      await createIfMissing(`${ns}/serviceaccounts`, {
        apiVersion: 'v1',
        kind: 'ServiceAccount',
        metadata: { name: serviceAccount },
      });
      let boundObjectRef: Record<string, string> | undefined;
      if (tokenOptions.boundPod !== undefined) {
        const pod = await request<K8sObject>(
          'GET',
          `${ns}/pods/${encodeURIComponent(tokenOptions.boundPod)}`,
        );
        if (pod.status !== 200)
          throw new ApiError(`get pod ${namespace}/${tokenOptions.boundPod}`, pod);
        boundObjectRef = {
          apiVersion: 'v1',
          kind: 'Pod',
          name: tokenOptions.boundPod,
          uid: pod.body.metadata.uid ?? '',
        };
      }
      const audiences = [tokenOptions.audience].flat();
      const res = await request<{ status: ServiceAccountToken }>(
        'POST',
        `${ns}/serviceaccounts/${encodeURIComponent(serviceAccount)}/token`,
        {
          apiVersion: 'authentication.k8s.io/v1',
          kind: 'TokenRequest',
          spec: {
            audiences,
            ...(tokenOptions.expirationSeconds === undefined
              ? {}
              : { expirationSeconds: tokenOptions.expirationSeconds }),
            ...(boundObjectRef === undefined ? {} : { boundObjectRef }),
          },
        },
      );
      if (res.status !== 201)
        throw new ApiError(`TokenRequest for ${namespace}/${serviceAccount}`, res);
      return {
        token: res.body.status.token,
        expirationTimestamp: res.body.status.expirationTimestamp,
      };
    };

    const restartApiServer = async (): Promise<void> => {
      if (apiServer !== undefined) await terminate(apiServer);
      httpsAgent.destroy();
      httpsAgent = agent();
      await startApiServer();
    };

    let stopped: Promise<void> | undefined;
    const stop = (): Promise<void> => {
      stopped ??= (async () => {
        if (apiServer !== undefined) await terminate(apiServer);
        if (etcd !== undefined) await terminate(etcd);
        httpsAgent.destroy();
        removeExitHook();
        rmSync(runFile, { force: true });
        if (!keep) rmSync(dir, { recursive: true, force: true });
      })();
      return stopped;
    };

    return {
      server,
      version,
      caFile,
      caPem,
      apiAudience: SERVICE_ACCOUNT_ISSUER,
      adminToken,
      kubeconfigPath,
      dir,
      startup: { etcdMs, apiServerMs },
      request,
      applyYaml,
      resourcePath,
      createServiceAccountToken,
      writeKubeconfig,
      restartApiServer,
      logs: (component, lines = 100) => tail(join(dir, `${component}.log`), lines),
      stop,
    };
  } catch (error) {
    if (apiServer !== undefined) await terminate(apiServer, 2_000);
    if (etcd !== undefined) await terminate(etcd, 2_000);
    removeExitHook();
    rmSync(runFile, { force: true });
    if (!keep) rmSync(dir, { recursive: true, force: true });
    else if (error instanceof Error) error.message += `\n(temp dir kept: ${dir})`;
    throw error;
  }
}
