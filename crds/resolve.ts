/**
 * Resolution of a validated pool into what the sidecar runs on: the `PoolPolicy` (every default
 * applied, every duration in ms), the endpoint list, and the upstream timeouts.
 *
 * `resolvePool` is for a STANDALONE pool file: only `url`/`urls` backends can be resolved, and
 * API keys come from the sidecar's environment (`apiKeyEnv`). `service` and `inferencePoolRef` backends and
 * `apiKeySecretRef` need the controller, which resolves them from EndpointSlices and Secrets with
 * `resolvePolicy` and `urlEndpoints` from here.
 *
 * Pure: the environment is passed in. Expects a pool that `validatePool` accepted; problems that
 * only show when resolving (a missing environment variable, two URLs that are the same endpoint)
 * come back as errors in the same `{path, message}` shape.
 */
import type {
  EndpointSpec,
  EndpointTls,
  FlowControlPolicy,
  PoolPolicy,
  PoolTimeouts,
  WorkloadSource,
} from './policy-types.ts';
import { budgetId } from './policy-defaults.ts';
import { parseDuration } from './duration.ts';
import type {
  Backend,
  BackendTls,
  FlowControl,
  InferencePool,
  InferencePoolSpec,
} from './inference-pool.schema.ts';
import { type PoolError, joinPath } from './path.ts';

export type PolicyResolution =
  { ok: true; policy: PoolPolicy; timeouts: PoolTimeouts } | { ok: false; errors: PoolError[] };

export type PoolResolution =
  | { ok: true; policy: PoolPolicy; endpoints: EndpointSpec[]; timeouts: PoolTimeouts }
  | { ok: false; errors: PoolError[] };

export type Environment = Readonly<Record<string, string | undefined>>;

/** Resolve a validated pool file: its policy, its url/urls endpoints with their API keys. */
export function resolvePool(pool: InferencePool, env: Environment): PoolResolution {
  const errors: PoolError[] = [];
  const resolved = resolvePolicy(pool.spec);
  if (!resolved.ok) errors.push(...resolved.errors);

  const endpoints: EndpointSpec[] = [];
  pool.spec.backends.forEach((backend, tier) => {
    const path = joinPath('spec.backends', tier);
    if (backend.service !== undefined) {
      errors.push({
        path: joinPath(path, 'service'),
        message: 'needs Kubernetes; a standalone pool file can only use url or urls',
      });
    }
    if (backend.inferencePoolRef !== undefined) {
      errors.push({
        path: joinPath(path, 'inferencePoolRef'),
        message: 'needs Kubernetes; a standalone pool file can only use url or urls',
      });
    }
    if (backend.apiKeySecretRef !== undefined) {
      errors.push({
        path: joinPath(path, 'apiKeySecretRef'),
        message: 'needs Kubernetes; a standalone pool file can only use apiKeyEnv',
      });
    }
    if (backend.tls?.caSecretRef !== undefined) {
      errors.push({
        path: joinPath(joinPath(path, 'tls'), 'caSecretRef'),
        message: 'needs Kubernetes; a standalone pool file can only use caBundle',
      });
    }
    const key = apiKeyFromEnv(backend, path, env);
    if (!key.ok) errors.push(key.error);
    const result = urlEndpoints(backend, tier, key.ok ? key.apiKey : undefined);
    if (result.ok) endpoints.push(...result.endpoints);
    else errors.push(...result.errors);
  });

  if (errors.length > 0 || !resolved.ok) return { ok: false, errors };
  return { ok: true, policy: resolved.policy, endpoints, timeouts: resolved.timeouts };
}

/** The policy and timeouts of a validated spec (every default is already in it). */
export function resolvePolicy(spec: InferencePoolSpec): PolicyResolution {
  const errors: PoolError[] = [];
  const ms = (section: string, field: string, value: string): number => {
    const parsed = parseDuration(value);
    if (parsed.ok) return parsed.ms;
    errors.push({
      path: `spec.${section === '' ? '' : `${section}.`}${field}`,
      message: parsed.reason,
    });
    return NaN;
  };
  const { affinity, health, retry, coldStart, timeouts } = spec;
  const policy: PoolPolicy = {
    mode: spec.mode,
    costWeightPerMs: spec.costWeightPerMs,
    defaultTtftMs: ms('', 'defaultTtft', spec.defaultTtft),
    models: [...(spec.models ?? [])],
    // Left out when there are none, so that an unchanged pool's snapshot hash stays the same.
    ...(spec.aliases === undefined || spec.aliases.length === 0
      ? {}
      : { aliases: spec.aliases.map(({ name, model }) => ({ name, model })) }),
    affinity: {
      key: affinity.key,
      header: affinity.header.toLowerCase(),
      prefixChars: affinity.prefixChars,
      maxSlowdown: affinity.maxSlowdown,
      maxExtraInFlight: affinity.maxExtraInFlight,
      loadFactor: affinity.loadFactor,
    },
    health: {
      windowMs: ms('health', 'window', health.window),
      minRequests: health.minRequests,
      maxErrorRate: health.maxErrorRate,
      consecutiveErrors: health.consecutiveErrors,
      max429Rate: health.max429Rate,
      maxTtftSlowdown: health.maxTtftSlowdown,
      openForMs: ms('health', 'openFor', health.openFor),
      maxOpenForMs: ms('health', 'maxOpenFor', health.maxOpenFor),
    },
    retry: {
      budgetPercent: retry.budgetPercent,
      minPerSecond: retry.minPerSecond,
      maxAttempts: retry.maxAttempts,
    },
    coldStart: { idleAfterMs: ms('coldStart', 'idleAfter', coldStart.idleAfter) },
    ...(spec.drift?.probeEvery === undefined
      ? {}
      : {
          drift: {
            probeEveryMs: ms('drift', 'probeEvery', spec.drift.probeEvery),
            expect: spec.drift.expect,
            action: spec.drift.action,
            ...(spec.drift.prompt === undefined ? {} : { prompt: spec.drift.prompt }),
          },
        }),
    // Left out when unset, so that a pool without flow control keeps its snapshot hash.
    ...(spec.flowControl === undefined
      ? {}
      : {
          flowControl: flowControlPolicy(
            spec.flowControl,
            ms('flowControl', 'maxQueueWait', spec.flowControl.maxQueueWait),
          ),
        }),
    // Left out when unset, so that a pool without it keeps its snapshot hash.
    ...(spec.scaleFromZero === undefined
      ? {}
      : {
          scaleFromZero: {
            maxWaitMs: ms('scaleFromZero', 'maxWait', spec.scaleFromZero.maxWait),
            maxRequests: spec.scaleFromZero.maxRequests,
            maxBytes: spec.scaleFromZero.maxBytes,
          },
        }),
  };
  const resolvedTimeouts: PoolTimeouts = {
    connectMs: ms('timeouts', 'connect', timeouts.connect),
    firstByteMs: ms('timeouts', 'firstByte', timeouts.firstByte),
    idleMs: ms('timeouts', 'idle', timeouts.idle),
    clientStallMs: ms('timeouts', 'clientStall', timeouts.clientStall),
  };
  if (errors.length > 0) return { ok: false, errors };
  return { ok: true, policy, timeouts: resolvedTimeouts };
}

/** `spec.flowControl` resolved: the wait in ms, header names in lower case, budget ids. */
function flowControlPolicy(flow: FlowControl, maxQueueWaitMs: number): FlowControlPolicy {
  const workload = workloadSource(flow.workload);
  return {
    defaultPriority: flow.defaultPriority,
    maxQueueWaitMs,
    maxQueuedRequests: flow.queue.maxRequests,
    maxQueuedBytes: flow.queue.maxBytes,
    kvCacheSaturation: flow.saturation.kvCacheUsage,
    sheddableHeadroom: flow.saturation.sheddableHeadroom,
    preemptSheddable: flow.saturation.preemptSheddable,
    ...(flow.saturation.maxInFlightPerEndpoint === undefined
      ? {}
      : { maxInFlightPerEndpoint: flow.saturation.maxInFlightPerEndpoint }),
    ...(workload === undefined ? {} : { workload }),
    budgets: (flow.budgets ?? []).map((b) => ({
      id: budgetId(b.workload),
      ...(b.workload === undefined ? {} : { workload: b.workload }),
      ...(b.requestsPerMinute === undefined ? {} : { requestsPerMinute: b.requestsPerMinute }),
      ...(b.tokensPerMinute === undefined ? {} : { tokensPerMinute: b.tokensPerMinute }),
    })),
  };
}

function workloadSource(w: FlowControl['workload']): WorkloadSource | undefined {
  if (w === undefined) return undefined;
  if (w.header !== undefined) return { kind: 'Header', header: w.header.toLowerCase() };
  if (w.podLabel !== undefined) return { kind: 'PodLabel', label: w.podLabel };
  // validatePool has checked that exactly one source is set.
  return { kind: 'ServiceAccount' };
}

type KeyResult = { ok: true; apiKey: string | undefined } | { ok: false; error: PoolError };

/** A character that cannot go into an HTTP header value: a control character other than tab. */
function notInHeader(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if ((c < 0x20 && c !== 0x09) || c === 0x7f) return true;
  }
  return false;
}

function apiKeyFromEnv(backend: Backend, path: string, env: Environment): KeyResult {
  const name = backend.apiKeyEnv;
  if (name === undefined) return { ok: true, apiKey: undefined };
  const at = joinPath(path, 'apiKeyEnv');
  const raw = Object.prototype.hasOwnProperty.call(env, name) ? env[name] : undefined;
  if (raw === undefined) {
    return {
      ok: false,
      error: { path: at, message: `the environment variable ${name} is not set` },
    };
  }
  const apiKey = raw.trim();
  if (apiKey === '') {
    return { ok: false, error: { path: at, message: `the environment variable ${name} is empty` } };
  }
  if (notInHeader(apiKey)) {
    // Never echo the key itself.
    return {
      ok: false,
      error: {
        path: at,
        message: `the environment variable ${name} holds characters that cannot go into an HTTP header`,
      },
    };
  }
  return { ok: true, apiKey };
}

export type EndpointResolution =
  { ok: true; endpoints: EndpointSpec[] } | { ok: false; errors: PoolError[] };

interface Located {
  path: string;
  url: string;
  hostPort: string;
  pathname: string;
}

/**
 * The endpoints of a `url`/`urls` backend (none for a `service` backend): one per URL, in list
 * order, with `tier` = the backend's index. The endpoint URL is the given one with a trailing "/"
 * removed (and the host in lower case, a default port left out). The id is
 * `<backend>/<host>:<port>`, plus the URL path when two URLs of the backend share host and port.
 * Two URLs that are the same endpoint are an error.
 */
export function urlEndpoints(
  backend: Backend,
  tier: number,
  apiKey: string | undefined,
): EndpointResolution {
  const path = joinPath('spec.backends', tier);
  const given: { path: string; text: string }[] =
    backend.url !== undefined
      ? [{ path: joinPath(path, 'url'), text: backend.url }]
      : (backend.urls ?? []).map((text, i) => ({
          path: joinPath(joinPath(path, 'urls'), i),
          text,
        }));

  const errors: PoolError[] = [];
  const located: Located[] = [];
  for (const { path: at, text } of given) {
    const url = URL.parse(text);
    if (url === null || (url.protocol !== 'http:' && url.protocol !== 'https:')) {
      errors.push({ path: at, message: 'must be an http or https URL' });
      continue;
    }
    const pathname = url.pathname.replace(/\/+$/, '');
    const port = url.port !== '' ? url.port : url.protocol === 'https:' ? '443' : '80';
    const base = `${url.protocol}//${url.host}${pathname}`;
    const same = located.find((l) => l.url === base);
    if (same !== undefined) {
      errors.push({ path: at, message: `is the same endpoint as ${same.path} (${base})` });
      continue;
    }
    located.push({ path: at, url: base, hostPort: `${url.hostname}:${port}`, pathname });
  }
  if (errors.length > 0) return { ok: false, errors };

  // `<backend>/<host>:<port>`; plus the path where host and port are shared; the whole URL in
  // the odd case that still collides (http and https on one port).
  const short = located.map((l) => {
    const shared = located.filter((o) => o.hostPort === l.hostPort).length > 1;
    return `${backend.name}/${l.hostPort}${shared ? l.pathname || '/' : ''}`;
  });
  const endpoints = located.map((l, i): EndpointSpec => {
    const id = short[i] ?? '';
    return {
      id: short.indexOf(id) === short.lastIndexOf(id) ? id : `${backend.name}/${l.url}`,
      backend: backend.name,
      tier,
      url: l.url,
      costPerMTok: backend.costPerMTok,
      ...(backend.model === undefined ? {} : { model: backend.model }),
      ...modelFields(backend),
      ...apiKeyFields(backend, apiKey),
      ...tlsFields(backend.tls, backend.tls?.caBundle),
    };
  });
  return { ok: true, endpoints };
}

/** An endpoint's key and, when it is not the default Authorization, the header it goes in. */
export function apiKeyFields(
  backend: Pick<Backend, 'apiKeyHeader'>,
  apiKey: string | undefined,
): Pick<EndpointSpec, 'apiKey' | 'apiKeyHeader'> {
  if (apiKey === undefined) return {};
  return backend.apiKeyHeader === 'x-api-key' ? { apiKey, apiKeyHeader: 'x-api-key' } : { apiKey };
}

/**
 * An endpoint's certificate checks: the backend's `tls` with its CA bundle resolved (`caBundle`:
 * the inline one, or the controller's reading of caSecretRef). Nothing when every field is the
 * default, so a pool without tls yields the same snapshot (and hash) as before the field existed.
 */
export function tlsFields(
  tls: BackendTls | undefined,
  caBundle: string | undefined,
): Pick<EndpointSpec, 'tls'> {
  if (tls === undefined) return {};
  const out: EndpointTls = {
    ...(caBundle === undefined ? {} : { caBundle }),
    ...(tls.serverName === undefined ? {} : { serverName: tls.serverName }),
    ...(tls.insecureSkipVerify ? { insecureSkipVerify: true } : {}),
  };
  return Object.keys(out).length === 0 ? {} : { tls: out };
}

/**
 * What an endpoint serves and its share of its tier: its backend's `models` and `weight`, each
 * left out when unset, so a pool without them yields the same snapshot (and hash) as before the
 * fields existed. `models` are served names: aliases are resolved before the policy looks at
 * them, so they are not applied here.
 */
export function modelFields(
  backend: Pick<Backend, 'models' | 'weight'>,
): Pick<EndpointSpec, 'models' | 'weight'> {
  return {
    ...(backend.models === undefined ? {} : { models: [...backend.models] }),
    ...(backend.weight === undefined ? {} : { weight: backend.weight }),
  };
}
