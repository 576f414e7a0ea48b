/**
 * Model discovery (docs/models.md, "What an endpoint serves"): for every endpoint whose backend
 * declares no `models`, the sidecar asks the endpoint itself, `GET <endpoint>/v1/models`, and
 * hands the list to its pool's balancer (`reportModels`), which then sends a request for a model
 * only to endpoints that serve it. vLLM lists its base model and every LoRA adapter it has loaded,
 * the adapters with `parent` = the base model; with runtime adapter loading an adapter loaded
 * after start shows up here within a period.
 *
 * - Each endpoint is asked about once a period (`everyMs`, 5 s, each wait drawn from ±10 % of it
 *   so that the sidecars of a rollout do not ask every server in step) and at once when it is
 *   first seen (or
 *   its URL, key or certificate settings change, or `refresh` asks for it). Rounds never overlap:
 *   a round that is still running when the next is due delays it.
 * - A failed or malformed answer keeps the list the balancer has (the last good one; none: any
 *   model may go there, as before discovery), and is logged once per failure streak, not every
 *   period; the endpoint answering again is logged once too.
 * - The request goes where a proxied `/v1/models` would (the endpoint's URL + `/models`, as
 *   `upstreamUrl` in inference-routes.ts builds it), with the backend's API key
 *   (`applyBackendKey`) and certificate settings (`tlsOptions`), and its answer is read as
 *   models-union.ts reads one (`parseModelList`); `fetchImpl` can replace it.
 * - A backend that rewrites the model (`model:`) is not asked: every client name is sent there as
 *   its one model, so it takes any name, and its own list (a provider's internal names) would only
 *   turn away requests it serves today (proxy/models-union.ts leaves it out for the same reason).
 *
 * These requests are not attempts: they do not count in flight and do not feed breakers or the
 * EWMA, like the load scraper's and the drift prober's.
 */
import type { ClientRequest, OutgoingHttpHeaders, RequestOptions } from 'node:http';
import type { Logger } from 'pino';
import { http, https } from '../../lib/node-http.ts';
import type { EndpointSpec, PoolBalancer, ServedModel } from '../policy/index.ts';
import { applyBackendKey } from './backend-key.ts';
import { parseModelList } from './models-union.ts';
import { tlsOptions } from './upstream.ts';

/** What discovery needs of a pool in force (`ActivePool` is one). */
export interface ActivePoolLike {
  readonly name: string;
  readonly endpoints: readonly EndpointSpec[];
  readonly balancer: Pick<PoolBalancer, 'reportModels'>;
}

/** How one fetch of a model list ended. `reason` is for the log. */
export type ModelListOutcome = { ok: true; models: ServedModel[] } | { ok: false; reason: string };

export type FetchModels = (
  endpoint: EndpointSpec,
  options: { timeoutMs: number; signal: AbortSignal },
) => Promise<ModelListOutcome>;

export interface ModelDiscoveryOptions {
  /** The pools in force now, read every check: endpoints come and go with them. */
  pools: () => readonly ActivePoolLike[];
  /** How often each endpoint is asked. Default 5 s. */
  everyMs?: number;
  /** Per fetch. Default 2 s (at most `everyMs`). */
  timeoutMs?: number;
  /** Fetches at once. Default 16. */
  concurrency?: number;
  logger: Pick<Logger, 'warn' | 'info'>;
  /** Replaces the HTTP request (tests). */
  fetchImpl?: FetchModels;
  now?: () => number;
  /** Uniform in [0, 1), for the jitter of each wait. */
  random?: () => number;
}

export interface ModelDiscovery {
  /** Asks the endpoint again now (after the round in flight, if one is). */
  refresh(poolName: string, endpointId: string): void;
  /** Stops asking, aborts the fetches in flight and resolves once they have ended. */
  close(): Promise<void>;
}

export const DEFAULT_DISCOVERY_EVERY_MS = 5_000;
export const DEFAULT_DISCOVERY_TIMEOUT_MS = 2_000;

/** A model list larger than this is not read: OpenAI's and vLLM's are a few kilobytes. */
export const MAX_MODEL_LIST_BYTES = 2 * 1024 * 1024;

/** The most models one endpoint is taken to serve; a longer list is refused as malformed. */
export const MAX_MODELS_PER_ENDPOINT = 10_000;

/** Whether discovery asks this endpoint: nothing declared, and its backend does not rewrite. */
export function isDiscovered(endpoint: EndpointSpec): boolean {
  return endpoint.models === undefined && endpoint.model === undefined;
}

/**
 * The models of an OpenAI model list (`{"object":"list","data":[{"id":...}]}`, read by
 * `parseModelList`), with vLLM's `parent` for a LoRA adapter (null or absent, or the id itself,
 * for a base model). Empty ids are skipped; duplicates count once. Undefined: not a model list.
 */
export function servedModels(body: string): ServedModel[] | undefined {
  const entries = parseModelList(body);
  if (entries === undefined || entries.length > MAX_MODELS_PER_ENDPOINT) return undefined;
  const models: ServedModel[] = [];
  const seen = new Set<string>();
  for (const { id, parent } of entries) {
    if (id === '' || seen.has(id)) continue;
    seen.add(id);
    models.push(
      typeof parent === 'string' && parent !== '' && parent !== id ? { id, parent } : { id },
    );
  }
  return models;
}

/** Where an endpoint's model list is: as a proxied `GET /v1/models` goes (`upstreamUrl`). */
export function modelsUrl(endpointUrl: string): string {
  return `${endpointUrl}/models`;
}

/**
 * `GET <endpoint>/v1/models` over node:http(s), with the backend's key and certificate settings.
 * A fresh connection each time (`agent: false`): one request every few seconds would otherwise
 * keep a socket idle just about as long as uvicorn's keep-alive, and lose races with its close.
 * Redirects are not followed. Never rejects.
 */
export const fetchModelList: FetchModels = (endpoint, { timeoutMs, signal }) =>
  new Promise((resolve) => {
    let settled = false;
    let req: ClientRequest | undefined;
    const done = (outcome: ModelListOutcome): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      req?.destroy();
      resolve(outcome);
    };
    const timer = setTimeout(
      () => done({ ok: false, reason: `no answer within ${timeoutMs} ms` }),
      timeoutMs,
    );
    const onAbort = (): void => done({ ok: false, reason: 'stopped' });
    if (signal.aborted) return onAbort();
    signal.addEventListener('abort', onAbort, { once: true });
    const url = modelsUrl(endpoint.url);
    const secure = url.startsWith('https:');
    const headers: OutgoingHttpHeaders = { accept: 'application/json' };
    applyBackendKey(headers, endpoint);
    const options: RequestOptions & Record<string, unknown> = {
      headers,
      agent: false,
      ...(secure && endpoint.tls !== undefined ? tlsOptions(endpoint.tls) : {}),
    };
    try {
      req = (secure ? https : http).get(url, options);
    } catch (err) {
      done({ ok: false, reason: String(err).slice(0, 200) });
      return;
    }
    req.on('error', (err: NodeJS.ErrnoException) => done({ ok: false, reason: errorReason(err) }));
    req.on('response', (res) => {
      const status = res.statusCode ?? 0;
      if (status < 200 || status >= 300) {
        res.resume();
        done({ ok: false, reason: `HTTP ${status}` });
        return;
      }
      const chunks: Buffer[] = [];
      let bytes = 0;
      res.on('data', (chunk: Buffer) => {
        bytes += chunk.length;
        if (bytes > MAX_MODEL_LIST_BYTES)
          done({ ok: false, reason: `model list larger than ${MAX_MODEL_LIST_BYTES} bytes` });
        else chunks.push(chunk);
      });
      res.on('error', (err: NodeJS.ErrnoException) =>
        done({ ok: false, reason: errorReason(err) }),
      );
      res.on('end', () => {
        const models = servedModels(Buffer.concat(chunks).toString('utf8'));
        done(
          models === undefined
            ? { ok: false, reason: 'the answer is not an OpenAI model list' }
            : { ok: true, models },
        );
      });
    });
  });

function errorReason(err: NodeJS.ErrnoException): string {
  const code = err.code ?? '';
  const message = err.message.slice(0, 200);
  return code !== '' && !message.startsWith(code) ? `${code}: ${message}` : message;
}

/** One endpoint being followed. */
interface Followed {
  pool: ActivePoolLike;
  endpoint: EndpointSpec;
  /** When it is next asked (its last fetch's start plus a jittered period); undefined: now. */
  dueAtMs: number | undefined;
  /** Asked for (refresh, or its URL, key or certificates changed): due at once. */
  forced: boolean;
  /** In a failure streak: its first failure was logged. */
  failing: boolean;
}

/** How an endpoint is reached: a change makes it due at once (a new server behind the same id). */
function reachKey(e: EndpointSpec): string {
  return JSON.stringify([e.url, e.apiKey, e.apiKeyHeader, e.tls]);
}

const keyOf = (poolName: string, endpointId: string): string => `${poolName}\u0000${endpointId}`;

export function startModelDiscovery(options: ModelDiscoveryOptions): ModelDiscovery {
  return new ModelDiscoveryLoop(options);
}

class ModelDiscoveryLoop implements ModelDiscovery {
  readonly #options: ModelDiscoveryOptions;
  readonly #everyMs: number;
  readonly #timeoutMs: number;
  readonly #concurrency: number;
  readonly #now: () => number;
  readonly #random: () => number;
  readonly #fetch: FetchModels;
  readonly #stopping = new AbortController();
  readonly #followed = new Map<string, Followed>();
  /** Reach keys of the followed endpoints, to notice a change. */
  readonly #reach = new Map<string, string>();
  readonly #timer: NodeJS.Timeout;
  #soon: NodeJS.Timeout | undefined;
  #round: Promise<void> | undefined;
  /** A check was asked for while a round ran: run one when it ends. */
  #again = false;

  constructor(options: ModelDiscoveryOptions) {
    this.#options = options;
    this.#everyMs = positive('everyMs', options.everyMs ?? DEFAULT_DISCOVERY_EVERY_MS);
    this.#timeoutMs = Math.min(
      this.#everyMs,
      positive('timeoutMs', options.timeoutMs ?? DEFAULT_DISCOVERY_TIMEOUT_MS),
    );
    this.#concurrency = Math.max(1, Math.floor(options.concurrency ?? 16));
    this.#now = options.now ?? (() => performance.now());
    this.#random = options.random ?? Math.random;
    this.#fetch = options.fetchImpl ?? fetchModelList;
    // Checked more often than asked: an endpoint first seen waits at most this, not a period.
    this.#timer = setInterval(() => this.#check(), Math.min(this.#everyMs, 500));
    this.#timer.unref();
    this.#check();
  }

  refresh(poolName: string, endpointId: string): void {
    if (this.#stopping.signal.aborted) return;
    const followed = this.#followed.get(keyOf(poolName, endpointId));
    if (followed !== undefined) followed.forced = true;
    // An endpoint not followed yet is due at once anyway, when the check finds it.
    if (this.#soon !== undefined) return;
    this.#soon = setTimeout(() => {
      this.#soon = undefined;
      this.#check();
    }, 0);
    this.#soon.unref();
  }

  async close(): Promise<void> {
    this.#stopping.abort();
    clearInterval(this.#timer);
    clearTimeout(this.#soon);
    await this.#round;
  }

  /** Follows the pools in force, and starts a round for the endpoints that are due. */
  #check(): void {
    if (this.#stopping.signal.aborted) return;
    if (this.#round !== undefined) {
      this.#again = true;
      return;
    }
    const now = this.#now();
    const seen = new Set<string>();
    const due: Followed[] = [];
    for (const pool of this.#options.pools())
      for (const endpoint of pool.endpoints) {
        if (!isDiscovered(endpoint)) continue;
        const key = keyOf(pool.name, endpoint.id);
        if (seen.has(key)) continue;
        seen.add(key);
        const reach = reachKey(endpoint);
        let followed = this.#followed.get(key);
        if (followed === undefined) {
          followed = { pool, endpoint, dueAtMs: undefined, forced: false, failing: false };
          this.#followed.set(key, followed);
        } else {
          followed.pool = pool;
          followed.endpoint = endpoint;
          if (this.#reach.get(key) !== reach) followed.forced = true;
        }
        this.#reach.set(key, reach);
        const { dueAtMs } = followed;
        if (followed.forced || dueAtMs === undefined || now >= dueAtMs) due.push(followed);
      }
    // Gone endpoints are forgotten: one that comes back is new, and asked at once.
    for (const key of this.#followed.keys())
      if (!seen.has(key)) {
        this.#followed.delete(key);
        this.#reach.delete(key);
      }
    if (due.length === 0) return;
    this.#round = this.#run(due).finally(() => {
      this.#round = undefined;
      if (this.#again) {
        this.#again = false;
        this.#check();
      }
    });
  }

  /** Asks every endpoint of `due`, at most `concurrency` at once. */
  async #run(due: Followed[]): Promise<void> {
    let next = 0;
    const worker = async (): Promise<void> => {
      while (next < due.length && !this.#stopping.signal.aborted) {
        const followed = due[next++] as Followed;
        followed.dueAtMs = this.#now() + this.#everyMs * (0.9 + 0.2 * this.#random());
        followed.forced = false;
        const { endpoint } = followed;
        let outcome: ModelListOutcome;
        try {
          outcome = await this.#fetch(endpoint, {
            timeoutMs: this.#timeoutMs,
            signal: this.#stopping.signal,
          });
        } catch (err) {
          // fetchModelList never rejects; a replacement that does is a failure like any other.
          outcome = { ok: false, reason: String(err).slice(0, 200) };
        }
        this.#record(followed, outcome);
      }
    };
    await Promise.all(Array.from({ length: Math.min(this.#concurrency, due.length) }, worker));
  }

  #record(followed: Followed, outcome: ModelListOutcome): void {
    if (this.#stopping.signal.aborted) return;
    // The pools are followed between rounds only, so this is the endpoint as it was asked; one
    // removed since is told to a balancer that ignores ids it does not have.
    const { pool, endpoint } = followed;
    const { logger } = this.#options;
    if (!outcome.ok) {
      if (!followed.failing)
        logger.warn(
          {
            pool: pool.name,
            endpoint: endpoint.id,
            url: modelsUrl(endpoint.url),
            reason: outcome.reason,
          },
          "model discovery: could not read the endpoint's model list; routing keeps the last one it had (none: any model may go there)",
        );
      followed.failing = true;
      return;
    }
    if (followed.failing)
      logger.info(
        { pool: pool.name, endpoint: endpoint.id, models: outcome.models.length },
        'model discovery: the endpoint lists its models again',
      );
    followed.failing = false;
    pool.balancer.reportModels(endpoint.id, outcome.models);
  }
}

function positive(name: string, value: number): number {
  if (!(Number.isFinite(value) && value > 0))
    throw new RangeError(`model discovery: ${name} must be a finite number above 0, not ${value}`);
  return value;
}
