import type { Server, ServerResponse } from 'node:http';
import { http } from '../../lib/node-http.ts';
import type { SidecarMetrics } from '../proxy/metrics.ts';
import type { EndpointStatus } from '../policy/index.ts';
import { SharedRender, sendBody, type RenderedBody } from './shared-render.ts';
import { prettyJsonInSlices } from './sliced-json.ts';
import type { ActivePool } from '../config/active-pool.ts';

/**
 * How long a `/metrics` text is reused: a scrape storm costs one render a second. Scrapes are
 * seconds apart in practice, and a second-old counter changes no dashboard.
 */
export const METRICS_TTL_MS = 1_000;

/** Endpoints per slice of `/debug/backends`: about a millisecond of work each. */
const DEBUG_ENDPOINTS_PER_SLICE = 64;

/** One pool of a sidecar that follows several, as the admin port shows it. */
export interface AdminPool {
  readonly name: string;
  readonly current: ActivePool | undefined;
}

export interface AdminOptions {
  /** The pool of a sidecar that follows one; see `pools`. */
  pool: () => ActivePool | undefined;
  /**
   * Every pool, in order, when the sidecar follows several: `/readyz` then waits for all of them,
   * and `/debug/backends?pool=<name>` shows one (the first by default). `pool` is not read.
   */
  pools?: (() => readonly AdminPool[]) | undefined;
  metrics: SidecarMetrics;
  isDraining: () => boolean;
  /** Why the sidecar counts as started (`/startupz`), or undefined while it does not yet. */
  startup?: () => 'configured' | 'grace over' | undefined;
}

/**
 * One pool as `/debug/flow` shows it: whether flow control is on, its queue by priority (higher
 * first) and its budgets (limit, this sidecar's share, use and demand over the last minute).
 */
export function describeFlow(name: string, pool: ActivePool | undefined): unknown {
  const flow = pool?.flow;
  if (flow === undefined) return { pool: name, flowControl: false };
  const counts = [...flow.queue.countsByPriority()].sort((a, b) => b[0] - a[0]);
  return {
    pool: name,
    flowControl: true,
    sharing: flow.sharing,
    workload: flow.sidecarWorkload ?? null,
    queue: {
      requests: flow.queue.size,
      bytes: flow.queue.bytes,
      maxRequests: flow.policy.maxQueuedRequests,
      maxBytes: flow.policy.maxQueuedBytes,
      maxWaitMs: flow.policy.maxQueueWaitMs,
      byPriority: counts.map(([priority, requests]) => ({ priority, requests })),
    },
    budgets: flow.budgets(),
  };
}

function json(res: ServerResponse, status: number, value: unknown): void {
  const body = JSON.stringify(value, null, 2);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
  });
  res.end(body);
}

/** One endpoint as `/debug/backends` shows it: as the balancer sees it. */
function describeEndpoint(s: EndpointStatus): unknown {
  return {
    id: s.id,
    backend: s.backend,
    url: s.url,
    tier: s.tier,
    inFlight: s.inFlight,
    // The load the balancer uses: in-flight here, corrected by what the server last reported.
    load: s.load,
    reported: s.reported ?? null,
    ewmaTtftMs: Math.round(s.ewmaTtftMs * 100) / 100,
    ewmaSeeded: s.ewmaSeeded,
    // Its own samples, without the seed: what affinity's slowdown check compares.
    measuredTtftMs: s.measuredTtft === undefined ? null : Math.round(s.measuredTtft.ms * 100) / 100,
    ttftSamples: s.measuredTtft?.samples ?? 0,
    // How long since its newest sample: a slow verdict older than a second with nothing in
    // flight is rechecked (docs/policy.md §3).
    lastTtftSampleAgeMs:
      s.lastTtftSampleAgeMs === undefined ? null : Math.round(s.lastTtftSampleAgeMs),
    // Its server's time per token next to the others' median: from 1.5 it gets less traffic.
    reportedSlowdown:
      s.reportedSlowdown === undefined ? null : Math.round(s.reportedSlowdown * 100) / 100,
    breaker: s.breaker,
    slow: s.slow,
    drifted: s.drifted,
    fingerprint: s.fingerprint ?? null,
    driftMismatches: s.driftMismatches,
    requests: s.requests,
    errors: s.errors,
    rateLimited: s.rateLimited,
    // Errors in a row: the breaker opens at health.consecutiveErrors, below minRequests too.
    consecutiveErrors: s.consecutiveErrors,
    window: s.window,
    costPerMTok: s.costPerMTok,
  };
}

/**
 * What `/debug/backends` answers, as pretty-printed JSON in pieces: the pool in force, then every
 * endpoint, `perSlice` endpoints a piece, each read from the balancer when its piece is written.
 */
export function describeBackends(
  pool: ActivePool | undefined,
  perSlice = DEBUG_ENDPOINTS_PER_SLICE,
): Iterable<string> {
  if (pool === undefined)
    return [
      JSON.stringify({ pool: null, mode: null, snapshotVersion: null, endpoints: [] }, null, 2),
    ];
  const head = {
    pool: pool.name,
    mode: pool.policy.mode,
    snapshotVersion: pool.version,
    snapshotHash: pool.hash,
  };
  return prettyJsonInSlices(
    head,
    'endpoints',
    () => pool.balancer.statusSlices(perSlice),
    describeEndpoint,
  );
}

/**
 * Whether an Accept-Encoding header accepts gzip: listed (or `*`) without `q=0`. Prometheus sends
 * `Accept-Encoding: gzip` unless its scrape config turns compression off.
 */
export function acceptsGzip(header: string | undefined): boolean {
  if (header === undefined) return false;
  const weights = new Map<string, number>();
  for (const part of header.split(',')) {
    const [coding = '', ...params] = part.split(';').map((p) => p.trim().toLowerCase());
    const q = params.find((p) => p.startsWith('q='));
    weights.set(coding, q === undefined ? 1 : Number(q.slice(2)));
  }
  const weight = weights.get('gzip') ?? weights.get('*') ?? 0; // an explicit gzip beats `*`
  return weight > 0;
}

/**
 * The admin port (127.0.0.1:9090 by default): metrics, probes and a JSON view of the balancer.
 * `/readyz` fails while no configuration is applied and while draining, so Kubernetes stops
 * routing to a pod whose sidecar cannot route. `/startupz` (the injected sidecar's startup probe)
 * fails until a configuration was first applied or the startup grace is over: the kubelet starts
 * the app container only after it passes, so the app's first request finds a sidecar that can
 * route; it never fails again after passing.
 */
export function createAdminServer(options: AdminOptions): Server {
  const metricsText = new SharedRender(() => options.metrics.exposition(), METRICS_TTL_MS);
  // Not reused, but concurrent requests share one render, so pollers cannot pile renders up.
  const backendsText = new SharedRender(() => describeBackends(options.pool()), 0);
  // One per pool of a sidecar that follows several, made on first use.
  const backendsByPool = new Map<string, SharedRender>();
  const pools = options.pools;
  const send = (
    res: ServerResponse,
    contentType: string,
    body: Promise<RenderedBody>,
    failedCode: string,
    headers: Record<string, string> = {},
  ): void => {
    body.then(
      (rendered) => sendBody(res, contentType, rendered, headers),
      (err: unknown) =>
        json(res, 500, { error: { message: String(err), type: 'server_error', code: failedCode } }),
    );
  };
  return http.createServer((req, res) => {
    const [path, query] = (req.url ?? '/').split('?');
    if (req.method !== 'GET') {
      json(res, 405, {
        error: {
          message: 'The admin API is read-only (GET).',
          type: 'invalid_request_error',
          code: 'method_not_allowed',
        },
      });
      return;
    }
    switch (path) {
      case '/healthz':
        json(res, 200, { status: 'ok' });
        return;
      case '/startupz': {
        // Without a `startup` callback (no controller to wait for), started from the first moment.
        const started = options.startup === undefined ? 'configured' : options.startup();
        if (started === undefined) json(res, 503, { status: 'no configuration applied yet' });
        else json(res, 200, { status: 'started', reason: started });
        return;
      }
      case '/readyz': {
        if (pools !== undefined) {
          readyzOfPools(res, pools(), options.isDraining());
          return;
        }
        const pool = options.pool();
        if (options.isDraining()) json(res, 503, { status: 'draining' });
        else if (pool === undefined) json(res, 503, { status: 'no configuration applied yet' });
        else json(res, 200, { status: 'ready', pool: pool.name, snapshotVersion: pool.version });
        return;
      }
      case '/debug/backends': {
        if (pools === undefined) {
          send(res, 'application/json', backendsText.get(), 'backends_failed');
          return;
        }
        const all = pools();
        const wanted = new URLSearchParams(query ?? '').get('pool') ?? all[0]?.name ?? '';
        if (!all.some((p) => p.name === wanted)) {
          json(res, 404, {
            error: {
              message: `No pool ${JSON.stringify(wanted.slice(0, 200))} here; this sidecar follows ${all.map((p) => p.name).join(', ')} (?pool=<name>).`,
              type: 'invalid_request_error',
              code: 'unknown_pool',
            },
          });
          return;
        }
        let render = backendsByPool.get(wanted);
        if (render === undefined) {
          render = new SharedRender(
            () => describeBackends(pools().find((p) => p.name === wanted)?.current),
            0,
          );
          backendsByPool.set(wanted, render);
        }
        send(res, 'application/json', render.get(), 'backends_failed');
        return;
      }
      case '/debug/flow': {
        const all = pools?.() ?? [{ name: options.pool()?.name ?? '', current: options.pool() }];
        json(res, 200, { pools: all.map((p) => describeFlow(p.name, p.current)) });
        return;
      }
      case '/metrics': {
        const type = options.metrics.registry.contentType;
        if (acceptsGzip(req.headers['accept-encoding']))
          send(res, type, metricsText.getGzipped(), 'metrics_failed', {
            'content-encoding': 'gzip',
            vary: 'accept-encoding',
          });
        else send(res, type, metricsText.get(), 'metrics_failed', { vary: 'accept-encoding' });
        return;
      }
      default:
        json(res, 404, {
          error: {
            message:
              'Unknown admin path; try /metrics, /healthz, /startupz, /readyz, /debug/backends or /debug/flow.',
            type: 'invalid_request_error',
            code: 'unknown_url',
          },
        });
    }
  });
}

/**
 * `/readyz` of a sidecar that follows several pools: ready once every pool has a configuration
 * (a request for any of its models can be routed), not while draining.
 */
function readyzOfPools(res: ServerResponse, pools: readonly AdminPool[], draining: boolean): void {
  if (draining) {
    json(res, 503, { status: 'draining' });
    return;
  }
  const waiting = pools.filter((p) => p.current === undefined).map((p) => p.name);
  const states = pools.map((p) => ({
    pool: p.name,
    snapshotVersion: p.current?.version ?? null,
  }));
  if (waiting.length > 0) {
    json(res, 503, { status: 'no configuration applied yet', waiting, pools: states });
    return;
  }
  const first = pools[0]?.current;
  json(res, 200, {
    status: 'ready',
    pool: first?.name,
    snapshotVersion: first?.version,
    pools: states,
  });
}
