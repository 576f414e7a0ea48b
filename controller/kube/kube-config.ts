/**
 * Where the controller's API server is and how to authenticate to it, read without
 * @kubernetes/client-node: importing that library costs a replica ~78 MB of RSS (its generated API
 * modules alone ~21 MB of V8 heap), and the controller needs only a URL, TLS material and a
 * credential for its raw requests (kube-raw.ts).
 *
 * Sources, in the library's `loadFromDefault` order: `--kubeconfig`; else every file of
 * `$KUBECONFIG` (merged as the library merges them); else `~/.kube/config` when it exists; else
 * in-cluster (when the ServiceAccount token is mounted); else `http://localhost:8080` without
 * credentials. A kubeconfig user with `exec` or `auth-provider`, or a cluster with `proxy-url`,
 * needs code this module does not have: then the library is imported after all and sets up each
 * request (`fallback` says why).
 */
import { existsSync, readFileSync } from 'node:fs';
import type { RequestOptions } from 'node:https';
import { isIPv6 } from 'node:net';
import { homedir } from 'node:os';
import { delimiter, dirname, isAbsolute, join } from 'node:path';
import { parse } from 'yaml';

export const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

/**
 * How long a token, CA or client certificate read from a file is used before the file is read
 * again: kubelet rotates projected ServiceAccount tokens, and client-go and the library re-read
 * them once a minute too.
 */
export const FILE_REFRESH_MS = 60_000;

/** What kube-raw.ts needs to reach the API server. */
export interface KubeClientConfig {
  /** The API server's base URL (a path prefix, if any, is kept). */
  readonly server: URL;
  /** Where it was read from, for logs: a file, `$KUBECONFIG`, `in-cluster`, ... */
  readonly source: string;
  /** Why @kubernetes/client-node was loaded after all; undefined when it was not. */
  readonly fallback: string | undefined;
  /**
   * Sets the TLS options and credentials of one request. Only with `fallback` may it set
   * `options.agent` (the library's proxy agent for `proxy-url`).
   */
  apply(options: RequestOptions): Promise<void>;
}

/** A kubeconfig (or in-cluster configuration) that cannot be used; the message names the file and field. */
export class KubeConfigError extends Error {
  override readonly name = 'KubeConfigError';
  readonly code = 'KUBECONFIG_INVALID';
}

export interface KubeConfigLookup {
  /** `--kubeconfig`, when given. */
  file?: string | undefined;
  env?: NodeJS.ProcessEnv;
  home?: string | undefined;
  serviceAccountDir?: string;
  /** The wall clock of file re-reads (tests). */
  nowMs?: () => number;
}

/** Loads the configuration the way `KubeConfig#loadFromDefault` (or `#loadFromFile`) would. */
export async function loadKubeClientConfig(
  lookup: KubeConfigLookup = {},
): Promise<KubeClientConfig> {
  const env = lookup.env ?? process.env;
  const saDir = lookup.serviceAccountDir ?? SERVICE_ACCOUNT_DIR;
  const nowMs = lookup.nowMs ?? Date.now;
  let files: string[];
  let source: string;
  if (lookup.file !== undefined) {
    files = [lookup.file];
    source = lookup.file;
  } else if (env['KUBECONFIG'] !== undefined && env['KUBECONFIG'] !== '') {
    files = env['KUBECONFIG'].split(delimiter).filter((f) => f !== '');
    source = `$KUBECONFIG (${files.join(delimiter)})`;
  } else {
    const home = lookup.home ?? homeDir(env);
    const file = home === undefined ? undefined : join(home, '.kube', 'config');
    if (file !== undefined && existsSync(file)) {
      files = [file];
      source = file;
    } else if (existsSync(join(saDir, 'token'))) {
      return inCluster(env, saDir, nowMs);
    } else {
      return {
        server: new URL('http://localhost:8080'),
        source: 'the default (no kubeconfig, not in a pod)',
        fallback: undefined,
        apply: () => Promise.resolve(),
      };
    }
  }
  const merged = mergeKubeconfigs(files.map(readKubeconfig));
  const current = resolveCurrent(merged, source);
  const needs = libraryNeeded(current);
  if (needs !== undefined) return libraryConfig(lookup.file, current.server, source, needs);
  return directConfig(current, source, nowMs);
}

function homeDir(env: NodeJS.ProcessEnv): string | undefined {
  if (process.platform !== 'win32') {
    const home = env['HOME'];
    return home === undefined || home === '' ? undefined : home;
  }
  return homedir();
}

// ---------------------------------------------------------------------------------------------
// Kubeconfig files
// ---------------------------------------------------------------------------------------------

interface Cluster {
  name: string;
  file: string;
  at: string;
  server: string;
  caFile: string | undefined;
  caData: string | undefined;
  skipTlsVerify: boolean;
  tlsServerName: string | undefined;
  proxyUrl: string | undefined;
}

interface User {
  name: string;
  file: string;
  at: string;
  certFile: string | undefined;
  certData: string | undefined;
  keyFile: string | undefined;
  keyData: string | undefined;
  token: string | undefined;
  tokenFile: string | undefined;
  username: string | undefined;
  password: string | undefined;
  impersonate: string | undefined;
  exec: boolean;
  authProvider: string | undefined;
}

interface Context {
  name: string;
  file: string;
  cluster: string;
  user: string | undefined;
}

interface Kubeconfig {
  clusters: Cluster[];
  users: User[];
  contexts: Context[];
  currentContext: string | undefined;
  /** The file that set `currentContext`. */
  currentFrom: string | undefined;
}

type Entry = Record<string, unknown>;

const isEntry = (v: unknown): v is Entry =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

function fail(file: string, message: string): never {
  throw new KubeConfigError(`${file}: ${message}`);
}

/** A string field, or undefined when absent; anything else is an error naming the field. */
function text(file: string, entry: Entry, field: string, at: string): string | undefined {
  const value = entry[field];
  if (value === undefined || value === null || value === '') return undefined;
  if (typeof value !== 'string') fail(file, `${at}.${field} must be a string`);
  return value;
}

/** As the library does: a relative path is relative to the kubeconfig's directory. */
function pathIn(file: string, path: string | undefined): string | undefined {
  return path === undefined || isAbsolute(path) ? path : join(dirname(file), path);
}

function entries(file: string, doc: Entry, field: string): Entry[] {
  const list = doc[field];
  if (list === undefined || list === null) return [];
  if (!Array.isArray(list)) fail(file, `${field} must be a list`);
  return list.map((e: unknown, i) => {
    if (!isEntry(e)) fail(file, `${field}[${i}] must be a mapping`);
    return e;
  });
}

function named(file: string, e: Entry, at: string, inner: string): { name: string; body: Entry } {
  const name = text(file, e, 'name', at);
  if (name === undefined) fail(file, `${at}.name is missing`);
  const body = e[inner];
  if (inner !== 'user' && !isEntry(body)) fail(file, `${at}.${inner} is missing`);
  return { name, body: isEntry(body) ? body : {} };
}

/** One kubeconfig file, checked field by field (errors name the file and the field). */
export function parseKubeconfig(file: string, yamlText: string): Kubeconfig {
  let doc: unknown;
  try {
    doc = parse(yamlText);
  } catch (err) {
    fail(file, `not valid YAML: ${(err as Error).message}`);
  }
  if (doc === null || doc === undefined) doc = {};
  if (!isEntry(doc)) fail(file, 'not a kubeconfig (expected a mapping at the top)');
  const clusters = entries(file, doc, 'clusters').map((e, i): Cluster => {
    const at = `clusters[${i}]`;
    const { name, body } = named(file, e, at, 'cluster');
    const server = text(file, body, 'server', `${at}.cluster`);
    if (server === undefined) fail(file, `${at}.cluster.server is missing`);
    const skip = body['insecure-skip-tls-verify'];
    if (skip !== undefined && typeof skip !== 'boolean')
      fail(file, `${at}.cluster.insecure-skip-tls-verify must be true or false`);
    return {
      name,
      file,
      at: `${at}.cluster`,
      server: server.replace(/\/$/, ''),
      caFile: pathIn(file, text(file, body, 'certificate-authority', `${at}.cluster`)),
      caData: text(file, body, 'certificate-authority-data', `${at}.cluster`),
      skipTlsVerify: skip === true,
      tlsServerName: text(file, body, 'tls-server-name', `${at}.cluster`),
      proxyUrl: text(file, body, 'proxy-url', `${at}.cluster`),
    };
  });
  const users = entries(file, doc, 'users').map((e, i): User => {
    const at = `users[${i}]`;
    const { name, body } = named(file, e, at, 'user');
    const u = `${at}.user`;
    const provider = body['auth-provider'];
    return {
      name,
      file,
      at: u,
      certFile: pathIn(file, text(file, body, 'client-certificate', u)),
      certData: text(file, body, 'client-certificate-data', u),
      keyFile: pathIn(file, text(file, body, 'client-key', u)),
      keyData: text(file, body, 'client-key-data', u),
      token: text(file, body, 'token', u),
      tokenFile: pathIn(file, text(file, body, 'token-file', u)),
      username: text(file, body, 'username', u),
      password: text(file, body, 'password', u),
      impersonate: text(file, body, 'as', u),
      exec: body['exec'] !== undefined && body['exec'] !== null,
      authProvider:
        provider === undefined || provider === null
          ? undefined
          : isEntry(provider) && typeof provider['name'] === 'string'
            ? provider['name']
            : 'unnamed',
    };
  });
  const contexts = entries(file, doc, 'contexts').map((e, i): Context => {
    const at = `contexts[${i}]`;
    const { name, body } = named(file, e, at, 'context');
    const cluster = text(file, body, 'cluster', `${at}.context`);
    if (cluster === undefined) fail(file, `${at}.context.cluster is missing`);
    return { name, file, cluster, user: text(file, body, 'user', `${at}.context`) };
  });
  const currentContext = text(file, doc, 'current-context', 'the top level');
  return {
    clusters,
    users,
    contexts,
    currentContext,
    currentFrom: currentContext === undefined ? undefined : file,
  };
}

function readKubeconfig(file: string): Kubeconfig {
  let yamlText: string;
  try {
    yamlText = readFileSync(file, 'utf8');
  } catch (err) {
    throw new KubeConfigError((err as Error).message);
  }
  return parseKubeconfig(file, yamlText);
}

/**
 * `$KUBECONFIG`'s files merged as the library's `loadFromDefault` merges them: entries appended, a
 * name defined twice is an error, and a later file's current-context wins.
 */
export function mergeKubeconfigs(configs: readonly Kubeconfig[]): Kubeconfig {
  const merged: Kubeconfig = {
    clusters: [],
    users: [],
    contexts: [],
    currentContext: undefined,
    currentFrom: undefined,
  };
  for (const config of configs) {
    for (const [kind, from, into] of [
      ['cluster', config.clusters, merged.clusters],
      ['user', config.users, merged.users],
      ['context', config.contexts, merged.contexts],
    ] as const) {
      for (const entry of from) {
        const first = (into as readonly { name: string; file: string }[]).find(
          (e) => e.name === entry.name,
        );
        if (first !== undefined)
          fail(entry.file, `${kind} ${entry.name} is also defined in ${first.file}`);
        (into as { name: string }[]).push(entry);
      }
    }
    if (config.currentContext !== undefined) {
      merged.currentContext = config.currentContext;
      merged.currentFrom = config.currentFrom;
    }
  }
  return merged;
}

interface Current {
  cluster: Cluster;
  user: User | undefined;
  server: URL;
}

function resolveCurrent(config: Kubeconfig, source: string): Current {
  const name = config.currentContext;
  if (name === undefined) fail(source, 'current-context is not set');
  const where = config.currentFrom ?? source;
  const context = config.contexts.find((c) => c.name === name);
  if (context === undefined) {
    const names = config.contexts.map((c) => c.name);
    fail(
      where,
      `current-context ${name} is not among the contexts (they are: ${names.length === 0 ? 'none' : names.join(', ')})`,
    );
  }
  const cluster = config.clusters.find((c) => c.name === context.cluster);
  if (cluster === undefined)
    fail(context.file, `context ${name} names cluster ${context.cluster}, which is not defined`);
  const user =
    context.user === undefined ? undefined : config.users.find((u) => u.name === context.user);
  if (context.user !== undefined && user === undefined)
    fail(context.file, `context ${name} names user ${context.user}, which is not defined`);
  let server: URL;
  try {
    server = new URL(cluster.server);
  } catch {
    fail(cluster.file, `${cluster.at}.server is not a URL: ${cluster.server}`);
  }
  if (server.protocol !== 'https:' && server.protocol !== 'http:')
    fail(cluster.file, `${cluster.at}.server must be an http or https URL: ${cluster.server}`);
  return { cluster, user, server };
}

/** What needs the library, said for the log; undefined when nothing does. */
function libraryNeeded({ cluster, user }: Current): string | undefined {
  if (user?.exec === true) return `user ${user.name} authenticates with exec`;
  if (user?.authProvider !== undefined)
    return `user ${user.name} authenticates with auth-provider ${user.authProvider}`;
  if (cluster.proxyUrl !== undefined) return `cluster ${cluster.name} has a proxy-url`;
  return undefined;
}

// ---------------------------------------------------------------------------------------------
// Credentials
// ---------------------------------------------------------------------------------------------

/** A file's contents, read again once they are `FILE_REFRESH_MS` old (a failed re-read keeps the last). */
class RefreshedFile {
  readonly #path: string;
  readonly #nowMs: () => number;
  #value: Buffer;
  #readAtMs: number;

  /** Reads it now: a missing file fails at start, naming the field it came from. */
  constructor(path: string, field: string, nowMs: () => number) {
    this.#path = path;
    this.#nowMs = nowMs;
    try {
      this.#value = readFileSync(path);
    } catch (err) {
      throw new KubeConfigError(`${field}: ${(err as Error).message}`);
    }
    this.#readAtMs = nowMs();
  }

  get(): Buffer {
    const now = this.#nowMs();
    if (now - this.#readAtMs >= FILE_REFRESH_MS) {
      this.#readAtMs = now;
      try {
        this.#value = readFileSync(this.#path);
      } catch {
        // Mid-rotation or gone: the last contents are still the best guess.
      }
    }
    return this.#value;
  }
}

type Material =
  { kind: 'none' } | { kind: 'data'; value: Buffer } | { kind: 'file'; file: RefreshedFile };

function material(
  file: string | undefined,
  data: string | undefined,
  field: string,
  nowMs: () => number,
): Material {
  // The file wins over the data, as in the library.
  if (file !== undefined) return { kind: 'file', file: new RefreshedFile(file, field, nowMs) };
  if (data !== undefined) return { kind: 'data', value: Buffer.from(data, 'base64') };
  return { kind: 'none' };
}

const valueOf = (m: Material): Buffer | undefined =>
  m.kind === 'data' ? m.value : m.kind === 'file' ? m.file.get() : undefined;

interface Credentials {
  server: URL;
  source: string;
  ca: Material;
  cert: Material;
  key: Material;
  rejectUnauthorized: boolean | undefined;
  servername: string | undefined;
  token:
    { kind: 'none' } | { kind: 'static'; value: string } | { kind: 'file'; file: RefreshedFile };
  basic: string | undefined;
  impersonate: string | undefined;
}

function credentialsConfig(c: Credentials): KubeClientConfig {
  return {
    server: c.server,
    source: c.source,
    fallback: undefined,
    apply(options) {
      const ca = valueOf(c.ca);
      const cert = valueOf(c.cert);
      const key = valueOf(c.key);
      if (ca !== undefined) options.ca = ca;
      if (cert !== undefined) options.cert = cert;
      if (key !== undefined) options.key = key;
      if (c.rejectUnauthorized !== undefined) options.rejectUnauthorized = c.rejectUnauthorized;
      if (c.servername !== undefined) options.servername = c.servername;
      const headers = (options.headers ?? {}) as Record<string, string | number | string[]>;
      const token =
        c.token.kind === 'static'
          ? c.token.value
          : c.token.kind === 'file'
            ? c.token.file.get().toString('utf8').trim()
            : undefined;
      if (token !== undefined && token !== '') headers['authorization'] = `Bearer ${token}`;
      if (c.impersonate !== undefined) headers['impersonate-user'] = c.impersonate;
      options.headers = headers;
      if (c.basic !== undefined) options.auth = c.basic;
      return Promise.resolve();
    },
  };
}

function directConfig({ cluster, user, server }: Current, source: string, nowMs: () => number) {
  const field = (entry: Cluster | User, name: string): string =>
    `${entry.file}: ${entry.at}.${name}`;
  return credentialsConfig({
    server,
    source,
    ca: material(cluster.caFile, cluster.caData, field(cluster, 'certificate-authority'), nowMs),
    cert:
      user === undefined
        ? { kind: 'none' }
        : material(user.certFile, user.certData, field(user, 'client-certificate'), nowMs),
    key:
      user === undefined
        ? { kind: 'none' }
        : material(user.keyFile, user.keyData, field(user, 'client-key'), nowMs),
    rejectUnauthorized: cluster.skipTlsVerify ? false : undefined,
    servername: cluster.tlsServerName,
    token:
      user?.token !== undefined
        ? { kind: 'static', value: user.token }
        : user?.tokenFile !== undefined
          ? {
              kind: 'file',
              file: new RefreshedFile(user.tokenFile, field(user, 'token-file'), nowMs),
            }
          : { kind: 'none' },
    basic: user?.username === undefined ? undefined : `${user.username}:${user.password ?? ''}`,
    impersonate: user?.impersonate,
  });
}

/** In a pod: the API server from the service environment, the mounted token and CA. */
function inCluster(env: NodeJS.ProcessEnv, saDir: string, nowMs: () => number): KubeClientConfig {
  const host = env['KUBERNETES_SERVICE_HOST'];
  const port = env['KUBERNETES_SERVICE_PORT'];
  if (host === undefined || host === '' || port === undefined || port === '')
    throw new KubeConfigError(
      `in-cluster: ${saDir}/token is mounted but KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not both set`,
    );
  // The library's choice: these ports are plain HTTP (a local proxy), any other is HTTPS.
  const scheme = port === '80' || port === '8080' || port === '8001' ? 'http' : 'https';
  const server = new URL(`${scheme}://${isIPv6(host) ? `[${host}]` : host}:${port}`);
  const caPath = join(saDir, 'ca.crt');
  return credentialsConfig({
    server,
    source: 'in-cluster',
    ca: { kind: 'file', file: new RefreshedFile(caPath, `in-cluster: ${caPath}`, nowMs) },
    cert: { kind: 'none' },
    key: { kind: 'none' },
    rejectUnauthorized: undefined,
    servername: undefined,
    token: {
      kind: 'file',
      file: new RefreshedFile(join(saDir, 'token'), `in-cluster: ${saDir}/token`, nowMs),
    },
    basic: undefined,
    impersonate: undefined,
  });
}

/** The library sets up each request: it alone runs `exec` plugins, auth providers and proxies. */
async function libraryConfig(
  file: string | undefined,
  server: URL,
  source: string,
  why: string,
): Promise<KubeClientConfig> {
  const { KubeConfig } = await import('@kubernetes/client-node');
  const kubeConfig = new KubeConfig();
  if (file !== undefined) kubeConfig.loadFromFile(file);
  else kubeConfig.loadFromDefault();
  const proxied = kubeConfig.getCurrentCluster()?.proxyUrl !== undefined;
  return {
    server,
    source,
    fallback: why,
    async apply(options) {
      await kubeConfig.applyToHTTPSOptions(options);
      // Its agent is needed only to go through a proxy; otherwise kube-raw.ts's pooled ones serve.
      if (!proxied) delete options.agent;
    },
  };
}
