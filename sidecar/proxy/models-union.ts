/**
 * `GET /v1/models` for a pool that declares no `models`: the union of what its backends list,
 * as a client of a router in front of several model servers expects, rather than one endpoint's
 * list (which, in a pool of two models, showed only the model of whichever endpoint was picked).
 *
 * Every backend that has a live endpoint is asked once, concurrently: replicas of one backend serve
 * the same model, so one endpoint each is enough. The lists are merged by `id`, the first backend
 * in pool order winning a duplicate, each entry kept as its backend sent it (vLLM adds
 * `max_model_len`, `root`, `permission`). A backend that fails or does not answer within the
 * deadline is left out; only when none answers is the client's answer an error.
 *
 * A backend that rewrites the model (`model:`) is not asked: it is called by whatever name the
 * client sends, so its own list names the provider's models (internal names a client must not
 * rely on), not the names that route to it. The names that do are the pool's `models`, and a pool
 * that declares them never gets here (docs/sidecar.md, "/v1/models").
 *
 * These requests are not balanced attempts: they are not counted per endpoint and do not feed the
 * breakers or the EWMA, as the drift probe's and the load scraper's requests do not.
 */
import type {
  IncomingHttpHeaders,
  IncomingMessage,
  OutgoingHttpHeaders,
  ServerResponse,
} from 'node:http';
import type { Logger } from 'pino';
import { MAX_TIMER_MS } from '../../lib/duration.ts';
import type { ActivePool } from '../config/active-pool.ts';
import type { BreakerState, EndpointSpec } from '../policy/index.ts';
import { applyBackendKey } from './backend-key.ts';
import { forwardedHeaders } from './client-request.ts';
import { sendError } from './errors.ts';
import { upstreamUrl } from './inference-routes.ts';
import type { SidecarMetrics } from './metrics.ts';
import {
  cachedUpstreamTarget,
  type UpstreamCall,
  type UpstreamClient,
  type UpstreamHandler,
} from './upstream.ts';

/** One entry of a `/v1/models` list: an `id`, and whatever else the backend sent with it. */
export type ModelEntry = Readonly<Record<string, unknown>> & { readonly id: string };

/** What the balancer says of an endpoint now, as far as choosing whom to ask goes. */
export interface EndpointStanding {
  readonly breaker: BreakerState;
  readonly inFlight: number;
}

/** Whom to ask for a pool's model list. */
export type ModelsPlan =
  /**
   * One endpoint per backend, in pool order; `notLive`: backends that have endpoints but none
   * live (every breaker open, or drift detection excludes them), left out.
   */
  | {
      readonly kind: 'ask';
      readonly endpoints: readonly EndpointSpec[];
      readonly notLive: readonly string[];
    }
  /** Every backend rewrites the model: no client-side name is known, the list is empty. */
  | { readonly kind: 'no-names' }
  /** Nothing to ask: no endpoint at all, or none live. */
  | { readonly kind: 'nothing-live' };

/**
 * Whom to ask: per backend that does not rewrite the model, the endpoint the balancer would most
 * readily send to (breaker closed, fewest in flight; else half-open, as such an endpoint is likely
 * back), never one whose breaker is open or that drift detection excludes. Pure.
 */
export function planModelsRequest(
  endpoints: readonly EndpointSpec[],
  standing: (endpointId: string) => EndpointStanding | undefined,
): ModelsPlan {
  // Tier is the backend's position in the pool: the order duplicates are settled in.
  const byBackend = new Map<string, EndpointSpec[]>();
  for (const e of [...endpoints].sort((a, b) => a.tier - b.tier)) {
    if (e.model !== undefined) continue;
    let group = byBackend.get(e.backend);
    if (group === undefined) byBackend.set(e.backend, (group = []));
    group.push(e);
  }
  if (byBackend.size === 0) return endpoints.length === 0 ? NOTHING_LIVE : NO_NAMES;
  const ask: EndpointSpec[] = [];
  const notLive: string[] = [];
  for (const [backend, group] of byBackend) {
    const chosen = liveEndpoint(group, standing);
    if (chosen === undefined) notLive.push(backend);
    else ask.push(chosen);
  }
  return ask.length === 0 ? NOTHING_LIVE : { kind: 'ask', endpoints: ask, notLive };
}

const NOTHING_LIVE: ModelsPlan = { kind: 'nothing-live' };
const NO_NAMES: ModelsPlan = { kind: 'no-names' };

function liveEndpoint(
  group: readonly EndpointSpec[],
  standing: (endpointId: string) => EndpointStanding | undefined,
): EndpointSpec | undefined {
  let best: EndpointSpec | undefined;
  let bestRank = Infinity;
  for (const e of group) {
    if (e.drifted === true) continue;
    const s = standing(e.id);
    if (s === undefined || s.breaker === 'open') continue;
    // Closed before half-open, then the least busy; ties keep pool order.
    const rank = (s.breaker === 'closed' ? 0 : 1e9) + s.inFlight;
    if (rank < bestRank) {
      best = e;
      bestRank = rank;
    }
  }
  return best;
}

/**
 * The union of the backends' lists, given in pool order: each id once, as the first list that
 * has it sent it. Pure.
 */
export function mergeModelLists(lists: readonly (readonly ModelEntry[])[]): ModelEntry[] {
  const seen = new Set<string>();
  const merged: ModelEntry[] = [];
  for (const list of lists) {
    for (const entry of list) {
      if (seen.has(entry.id)) continue;
      seen.add(entry.id);
      merged.push(entry);
    }
  }
  return merged;
}

/**
 * The entries of a backend's `/v1/models` answer (`{"object":"list","data":[…]}`), without those
 * that have no string `id`; undefined when the text is not such a list. Pure.
 */
export function parseModelList(text: string): ModelEntry[] | undefined {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof body !== 'object' || body === null) return undefined;
  const data = (body as { data?: unknown }).data;
  if (!Array.isArray(data)) return undefined;
  return data.filter(
    (m): m is ModelEntry =>
      typeof m === 'object' && m !== null && typeof (m as { id?: unknown }).id === 'string',
  );
}

/** What asking one endpoint came to. */
export type ModelListResult =
  | { readonly kind: 'listed'; readonly models: ModelEntry[] }
  | { readonly kind: 'failed'; readonly reason: string; readonly timeout: boolean };

export interface ModelsUnionDeps {
  readonly upstream: UpstreamClient;
  readonly metrics: SidecarMetrics;
  readonly logger: Logger;
  /** The most of a backend's answer held (the sidecar's body limit). */
  readonly maxBodyBytes: number;
}

/**
 * How long one backend may take to answer, connection included: the pool's `timeouts.connect`, or
 * `timeouts.firstByte` when that is shorter. A model list is served from memory, so a reachable
 * server answers about as fast as it accepts a connection; `firstByte` (60 s by default) is sized
 * for a long prompt's prefill under load, far too long to hold a client that only asked for names.
 */
export function modelsDeadlineMs(pool: ActivePool): number {
  return Math.min(pool.timeouts.connectMs, pool.timeouts.firstByteMs, MAX_TIMER_MS);
}

/**
 * Answers `GET /v1/models` with the union of the pool's backends' lists (see the module doc).
 * Resolves once answered; rejects only on a bug, which the caller answers with a 500.
 */
export async function serveModelsUnion(
  deps: ModelsUnionDeps,
  req: IncomingMessage,
  res: ServerResponse,
  pool: ActivePool,
): Promise<void> {
  const standing = new Map<string, EndpointStanding>();
  // gauges() advances breakers to now, so an open one whose period is over reads half-open.
  for (const g of pool.balancer.gauges()) standing.set(g.id, g);
  const plan = planModelsRequest(pool.endpoints, (id) => standing.get(id));
  if (plan.kind === 'no-names') {
    sendList(res, []);
    return;
  }
  if (plan.kind === 'nothing-live') {
    deps.metrics.shed.inc();
    sendError(
      res,
      503,
      'no_healthy_backend',
      `No backend of pool ${pool.name} has a live endpoint to ask for /v1/models (circuit breakers open, or excluded as drifted); retry after 1s.`,
      { 'retry-after': '1' },
    );
    return;
  }
  for (const backend of plan.notLive) {
    deps.logger.debug(
      { pool: pool.name, backend, reason: 'no live endpoint' },
      'backend left out of /v1/models',
    );
  }
  const headers = forwardedHeaders(req.headers);
  const deadlineMs = modelsDeadlineMs(pool);
  const calls = plan.endpoints.map(
    (endpoint) => new ModelsCall(deps, endpoint, headers, deadlineMs),
  );
  const abortAll = (): void => {
    if (!res.writableFinished) for (const call of calls) call.abort();
  };
  res.once('close', abortAll);
  const results = await Promise.all(calls.map((c) => c.result));
  res.off('close', abortAll);
  if (res.destroyed) return; // the client left; every call was aborted
  const lists: ModelEntry[][] = [];
  const failures: string[] = [];
  let timeouts = 0;
  results.forEach((result, i) => {
    const endpoint = plan.endpoints[i] as EndpointSpec;
    if (result.kind === 'listed') {
      lists.push(result.models);
      return;
    }
    if (result.timeout) timeouts++;
    failures.push(`${endpoint.id}: ${result.reason}`);
    deps.logger.debug(
      {
        pool: pool.name,
        backend: endpoint.backend,
        endpoint: endpoint.id,
        reason: result.reason,
      },
      'backend left out of /v1/models',
    );
  });
  if (lists.length > 0) {
    sendList(res, mergeModelLists(lists));
  } else if (timeouts === results.length) {
    sendError(
      res,
      504,
      'upstream_timeout',
      `No backend of pool ${pool.name} answered /v1/models within ${deadlineMs} ms: ${failures.join('; ')}.`,
    );
  } else {
    sendError(
      res,
      502,
      'upstream_unreachable',
      `No backend of pool ${pool.name} answered /v1/models: ${failures.join('; ')}.`,
    );
  }
}

/** 200 with an OpenAI model list of these entries. */
export function sendList(res: ServerResponse, data: readonly ModelEntry[]): void {
  const body = JSON.stringify({ object: 'list', data });
  res.writeHead(200, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
  });
  res.end(body);
}

/**
 * `GET <url>/models` on one endpoint, with the client's end-to-end headers and the backend's key
 * set as every upstream request sets it, through the proxy's own agents (and so its TLS settings).
 * `result` settles within the deadline whatever the endpoint does, and never rejects.
 */
class ModelsCall implements UpstreamHandler {
  readonly result: Promise<ModelListResult>;
  readonly #maxBytes: number;
  readonly #deadlineMs: number;
  #settle: (result: ModelListResult) => void = () => undefined;
  #settled = false;
  #call: UpstreamCall | undefined;
  readonly #deadline: NodeJS.Timeout;
  readonly #chunks: Buffer[] = [];
  #bytes = 0;

  constructor(
    deps: ModelsUnionDeps,
    endpoint: EndpointSpec,
    clientHeaders: IncomingHttpHeaders,
    deadlineMs: number,
  ) {
    this.#maxBytes = deps.maxBodyBytes;
    this.#deadlineMs = deadlineMs;
    this.result = new Promise((resolve) => (this.#settle = resolve));
    // As the exchange's first-byte deadline: timers run before the loop polls sockets, so after
    // a stall of our own the answer may be waiting unread; judge after one more poll.
    this.#deadline = setTimeout(
      () =>
        setImmediate(() =>
          this.#fail(`no answer within ${deadlineMs} ms`, { stop: true, timeout: true }),
        ),
      deadlineMs,
    );
    // The answer is parsed here, so it must come as it is (no Accept-Encoding means any coding).
    const headers: OutgoingHttpHeaders = { ...clientHeaders, 'accept-encoding': 'identity' };
    applyBackendKey(headers, endpoint);
    try {
      this.#call = deps.upstream.request(
        {
          target: cachedUpstreamTarget(upstreamUrl(endpoint.url, '/v1/models')),
          method: 'GET',
          headers,
          body: Buffer.alloc(0),
          connectTimeoutMs: deadlineMs,
          tls: endpoint.tls,
        },
        this,
      );
    } catch {
      // Node refused a header the client sent (an inference request gets a 500 for it).
      this.#fail('a request header Node refuses to send');
    }
  }

  /** The client left: stop asking. */
  abort(): void {
    this.#fail('the client left', { stop: true });
  }

  onResponseHead(status: number, headers: IncomingHttpHeaders): void {
    if (status < 200 || status >= 300) this.#fail(`HTTP ${status}`, { stop: true });
    else if ((headers['content-encoding'] ?? 'identity') !== 'identity')
      this.#fail('a compressed answer', { stop: true });
  }

  onData(chunk: Buffer): void {
    if (this.#settled) return;
    this.#bytes += chunk.length;
    if (this.#bytes > this.#maxBytes)
      this.#fail(`an answer over ${this.#maxBytes} bytes`, { stop: true });
    else this.#chunks.push(chunk);
  }

  onEnd(): void {
    const models = parseModelList(Buffer.concat(this.#chunks).toString('utf8'));
    if (models === undefined) this.#fail('an answer that is not a model list');
    else this.#finish({ kind: 'listed', models });
  }

  onError(code: string): void {
    if (code === 'ECONNECT_TIMEOUT')
      this.#fail(`no connection within ${this.#deadlineMs} ms`, { timeout: true });
    else this.#fail(code);
  }

  #fail(reason: string, how: { stop?: boolean; timeout?: boolean } = {}): void {
    if (this.#settled) return;
    this.#finish({ kind: 'failed', reason, timeout: how.timeout === true });
    if (how.stop === true) this.#call?.abort();
  }

  #finish(result: ModelListResult): void {
    if (this.#settled) return;
    this.#settled = true;
    clearTimeout(this.#deadline);
    this.#settle(result);
  }
}
