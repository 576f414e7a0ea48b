/**
 * The I/O of `switchyard status`: read an InferencePool from the API server, or a sidecar's admin
 * API, and build the view (view.ts). Every failure to read is a `StatusSourceError` whose message
 * says what to check; the CLI prints it and exits 2. What those messages say is decided by the
 * pure functions `kubeErrorMessage` and `fetchErrorMessage`, unit-tested beside this file.
 *
 * @kubernetes/client-node is imported on demand, inside `collectPool`: the CLI loads every
 * command module at start, and the sidecar process must not pay for the Kubernetes client.
 */
import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { KubeConfig } from '@kubernetes/client-node';
import { GROUP, PLURAL, VERSION } from '../crds/inference-pool.schema.ts';
import { poolView, sidecarView, type PoolStatusView, type SidecarStatusView } from './view.ts';

/** The source could not be read (exit code 2). The message is for the person at the terminal. */
export class StatusSourceError extends Error {
  override readonly name = 'StatusSourceError';
}

/** Rejects with a StatusSourceError saying `what` did not answer within `ms`. */
async function within<T>(ms: number, what: string, work: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new StatusSourceError(`${what} did not answer within ${ms / 1000} s`)),
      ms,
    );
  });
  try {
    return await Promise.race([work, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

// ---------------------------------------------------------------------------------------------
// A sidecar's admin API
// ---------------------------------------------------------------------------------------------

/**
 * The admin API's base URL from what a person types: `http://127.0.0.1:9090`, `127.0.0.1:9090`,
 * `:9090` or `9090` (loopback). Undefined when it is none of these.
 */
export function adminBaseUrl(value: string): string | undefined {
  const text = value.trim();
  let candidate: string;
  if (/^https?:\/\//i.test(text)) candidate = text;
  else if (/^:?\d+$/.test(text)) candidate = `http://127.0.0.1:${text.replace(/^:/, '')}`;
  else candidate = `http://${text}`;
  try {
    const url = new URL(candidate);
    if (url.username !== '' || url.password !== '' || url.search !== '' || url.hash !== '')
      return undefined;
    return url.href.replace(/\/+$/, '');
  } catch {
    return undefined;
  }
}

/** What to tell the person when fetching `url` threw `err` (a network error, a timeout). */
export function fetchErrorMessage(base: string, err: unknown): string {
  const cause = (err as { cause?: { code?: unknown; message?: unknown } }).cause;
  const code = typeof cause?.code === 'string' ? cause.code : undefined;
  const detail =
    code ?? (typeof cause?.message === 'string' ? cause.message : (err as Error).message);
  const hint =
    code === 'ECONNREFUSED'
      ? ' (is the sidecar running, and is this its --admin address? In a pod: kubectl port-forward pod/<pod> 9090)'
      : '';
  return `cannot reach the sidecar's admin API at ${base}: ${detail}${hint}`;
}

async function getJson(
  url: string,
  timeoutMs: number,
  base: string,
): Promise<{ httpStatus: number; body: unknown; text: string }> {
  let res: Response;
  let text: string;
  try {
    res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
    text = await res.text();
  } catch (err) {
    if ((err as Error).name === 'TimeoutError')
      throw new StatusSourceError(`${url} did not answer within ${timeoutMs / 1000} s`);
    throw new StatusSourceError(fetchErrorMessage(base, err));
  }
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  return { httpStatus: res.status, body, text };
}

const NOT_ADMIN =
  'not the admin API of a switchyard sidecar (give its --admin address, default 127.0.0.1:9090, not the proxy port)';

/** Reads /readyz and /debug/backends of the sidecar whose admin API is at `base`. */
export async function collectSidecar(
  base: string,
  options: { timeoutMs: number },
): Promise<SidecarStatusView> {
  const [readyz, debug] = await Promise.all([
    getJson(`${base}/readyz`, options.timeoutMs, base),
    getJson(`${base}/debug/backends`, options.timeoutMs, base),
  ]);
  const endpoints = (debug.body as { endpoints?: unknown } | undefined)?.endpoints;
  if (debug.httpStatus !== 200 || !Array.isArray(endpoints))
    throw new StatusSourceError(
      `${base}/debug/backends answered HTTP ${debug.httpStatus}: ${NOT_ADMIN}`,
    );
  if (readyz.httpStatus !== 200 && readyz.httpStatus !== 503)
    throw new StatusSourceError(`${base}/readyz answered HTTP ${readyz.httpStatus}: ${NOT_ADMIN}`);
  return sidecarView(base, readyz, debug.body);
}

// ---------------------------------------------------------------------------------------------
// Kubernetes
// ---------------------------------------------------------------------------------------------

export interface PoolSource {
  pool: string;
  /** Default: the namespace of the kubeconfig's context, else `default`. */
  namespace?: string | undefined;
  /** Default: $KUBECONFIG, ~/.kube/config, or the pod's service account. */
  kubeconfig?: string | undefined;
  /** Default: the kubeconfig's current context. */
  context?: string | undefined;
  timeoutMs: number;
}

/** Where the Kubernetes client would look for credentials without --kubeconfig. */
export interface KubeconfigLookup {
  env: Record<string, string | undefined>;
  home: string;
  exists: (path: string) => boolean;
}

export const SERVICE_ACCOUNT_TOKEN = '/var/run/secrets/kubernetes.io/serviceaccount/token';

/**
 * Undefined when the client finds a configuration without --kubeconfig ($KUBECONFIG, then
 * ~/.kube/config, then the pod's service account: `loadFromDefault`); otherwise what to say.
 * Without this check the client quietly falls back to http://localhost:8080.
 */
export function missingKubeconfig(lookup: KubeconfigLookup): string | undefined {
  const fromEnv = lookup.env['KUBECONFIG'];
  if (fromEnv !== undefined && fromEnv !== '') return undefined;
  const file = join(lookup.home, '.kube', 'config');
  if (lookup.exists(file)) return undefined;
  if (lookup.exists(SERVICE_ACCOUNT_TOKEN)) return undefined;
  return `no kubeconfig: $KUBECONFIG is not set, ${file} does not exist and this is not a pod with a service account token; give --kubeconfig <file>`;
}

/** The parts of an error of @kubernetes/client-node (ApiException) or of the network looked at. */
interface ClientError {
  code?: unknown;
  body?: unknown;
  message?: unknown;
  cause?: { code?: unknown; message?: unknown };
}

function statusBody(body: unknown): { message?: string; reason?: string } | undefined {
  let parsed = body;
  if (typeof body === 'string') {
    try {
      parsed = JSON.parse(body);
    } catch {
      return undefined;
    }
  }
  if (typeof parsed !== 'object' || parsed === null) return undefined;
  const { message, reason, kind } = parsed as Record<string, unknown>;
  if (kind !== 'Status') return undefined;
  return {
    ...(typeof message === 'string' ? { message } : {}),
    ...(typeof reason === 'string' ? { reason } : {}),
  };
}

/** What to tell the person when reading pool `namespace/name` from `server` failed with `err`. */
export function kubeErrorMessage(
  err: unknown,
  where: { pool: string; namespace: string; server: string; user: string },
): string {
  const e = (err ?? {}) as ClientError;
  const { pool, namespace, server, user } = where;
  const resource = `${PLURAL}.${GROUP}`;
  if (typeof e.code === 'number') {
    const status = statusBody(e.body);
    const said = status?.message === undefined ? '' : `: ${status.message}`;
    switch (e.code) {
      case 404:
        // A missing object is a Status; a resource the server does not serve is a plain 404.
        if (status !== undefined)
          return `switchyard InferencePool ${namespace}/${pool} not found (kubectl get ipool -n ${namespace})`;
        return `the API server at ${server} does not serve ${resource}/${VERSION}: is the switchyard InferencePool CRD installed? (kubectl get crd ${resource})`;
      case 401:
        return `the API server at ${server} did not accept the credentials of user ${user} in the kubeconfig (401 Unauthorized): the token or client certificate is invalid or expired`;
      case 403:
        return `user ${user} may not read InferencePool ${namespace}/${pool} (403 Forbidden): it needs RBAC permission "get" on ${PLURAL} (API group ${GROUP}) in namespace ${namespace}${said}`;
      default:
        return `the API server at ${server} answered HTTP ${e.code} reading InferencePool ${namespace}/${pool}${said}`;
    }
  }
  const code = typeof e.cause?.code === 'string' ? e.cause.code : undefined;
  const detail =
    code ??
    (typeof e.cause?.message === 'string'
      ? e.cause.message
      : typeof e.message === 'string'
        ? e.message
        : String(err));
  return `cannot reach the API server at ${server}: ${detail}`;
}

/** Loads the kubeconfig as the flags say; every failure is a StatusSourceError. */
async function loadKubeConfig(
  source: PoolSource,
): Promise<{ kubeConfig: KubeConfig; namespace: string }> {
  const { KubeConfig } = await import('@kubernetes/client-node');
  const kubeConfig = new KubeConfig();
  if (source.kubeconfig !== undefined) {
    try {
      kubeConfig.loadFromFile(source.kubeconfig);
    } catch (err) {
      throw new StatusSourceError(
        `cannot load the kubeconfig ${source.kubeconfig}: ${(err as Error).message}`,
      );
    }
  } else {
    const missing = missingKubeconfig({ env: process.env, home: homedir(), exists: existsSync });
    if (missing !== undefined) throw new StatusSourceError(missing);
    try {
      kubeConfig.loadFromDefault();
    } catch (err) {
      throw new StatusSourceError(`cannot load the kubeconfig: ${(err as Error).message}`);
    }
  }
  if (source.context !== undefined) {
    if (kubeConfig.getContextObject(source.context) === null) {
      const names = kubeConfig.getContexts().map((c) => c.name);
      throw new StatusSourceError(
        `the kubeconfig has no context ${source.context} (it has: ${names.length === 0 ? 'none' : names.join(', ')})`,
      );
    }
    kubeConfig.setCurrentContext(source.context);
  }
  if (kubeConfig.getCurrentCluster() === null)
    throw new StatusSourceError(
      `the kubeconfig's current context (${kubeConfig.getCurrentContext() || 'none'}) names no cluster: give --context`,
    );
  const namespace =
    source.namespace ??
    kubeConfig.getContextObject(kubeConfig.getCurrentContext())?.namespace ??
    'default';
  return { kubeConfig, namespace };
}

/** Reads the InferencePool and builds its view. */
export async function collectPool(source: PoolSource): Promise<PoolStatusView> {
  const { kubeConfig, namespace } = await loadKubeConfig(source);
  const { CustomObjectsApi } = await import('@kubernetes/client-node');
  const server = kubeConfig.getCurrentCluster()?.server ?? '(no server)';
  const user = kubeConfig.getCurrentUser()?.name ?? '(none)';
  const api = kubeConfig.makeApiClient(CustomObjectsApi);
  let object: unknown;
  try {
    object = await within(
      source.timeoutMs,
      `the API server at ${server}`,
      api.getNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        namespace,
        plural: PLURAL,
        name: source.pool,
      }) as Promise<unknown>,
    );
  } catch (err) {
    if (err instanceof StatusSourceError) throw err;
    throw new StatusSourceError(
      kubeErrorMessage(err, { pool: source.pool, namespace, server, user }),
    );
  }
  return poolView(object, namespace);
}
