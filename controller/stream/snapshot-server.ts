import type { Logger } from 'pino';
import type { EndpointSpec } from '../../crds/policy-types.ts';
import { DualHttpServer, type AnyRequest, type AnyResponse } from '../../lib/dual-http-server.ts';
import { endpointsDelta } from '../../crds/snapshot-delta.ts';
import {
  DELTAS_HEADER,
  DELTAS_QUERY,
  ENDPOINTS_EVENT,
  LOAD_EVENT,
  metricsUrl,
  parsePlacements,
  parseReport,
  PLACEMENTS_HEADER,
  REVIEW_TICKET_HEADER,
  SHARES_EVENT,
  SNAPSHOT_EVENT,
  SNAPSHOT_PROTOCOL_VERSION,
  type PoolLoad,
  type PoolPlacements,
  type BudgetShare,
  type PoolShares,
  type PoolSnapshot,
  type SidecarReport,
} from '../../crds/snapshot.ts';
import {
  sharesChanged,
  splitPool,
  type BudgetUnit,
  type ReplicaDemand,
} from '../core/budget-shares.ts';
import type { PoolKey } from '../core/pool-index.ts';
import { sumDemand, summariseServers, type ReplicaSignals } from '../core/pool-signals.ts';
import {
  holdsApiKeys,
  streamAccess,
  withoutApiKeys,
  workloadOf,
  type BoundPod,
} from '../core/stream-access.ts';
import type { SidecarView } from '../core/status.ts';
import type { ControllerMetrics } from '../metrics.ts';
import { PlacementHub } from './placement-hub.ts';
import type { AuthResult } from './token-auth.ts';

export interface Authenticator {
  /** `ticket`: the request's review ticket (`x-switchyard-review-ticket`), if it sent one. */
  authenticate(authorization: string | undefined, ticket?: string): Promise<AuthResult>;
}

interface Subscriber {
  sidecar: string;
  res: AnyResponse;
  /** False for a token bound to no pod: it is sent `keylessEvent` (core/stream-access.ts). */
  withKeys: boolean;
  /** The pod its token is bound to: its workload, when the pool names workloads per sidecar. */
  pod: BoundPod | undefined;
  /** The last `shares` event sent on this stream (issue 43), to send only changes. */
  sent: PoolShares | undefined;
  /** It subscribed with `?deltas=1`: it applies `endpoints` events (issue 46). */
  deltas: boolean;
}

/** One sidecar as this replica's stream server knows it: its connections and its last report. */
export interface SidecarConnection {
  report: SidecarReport | undefined;
  lastSeenMs: number;
  /** Open snapshot streams of this sidecar on this replica. */
  streams: number;
}

interface PoolChannel {
  snapshot: PoolSnapshot | undefined;
  /** The serialised SSE event of `snapshot`, built once per change, written to every subscriber. */
  event: string | undefined;
  /** The same without API keys, for tokens bound to no pod; `event` when it holds no key. */
  keylessEvent: string | undefined;
  /**
   * The `endpoints` event from the previously published snapshot to `snapshot` (issue 46), and its
   * keyless twin; undefined when the change is no delta or the delta is not worth it (not under
   * half the full event's bytes). Only the publish that built them sends them.
   */
  deltaEvent: string | undefined;
  keylessDeltaEvent: string | undefined;
  subscribers: Set<Subscriber>;
  sidecars: Map<string, SidecarConnection>;
  /** A re-split of the pool's budgets is due (coalesced), and when the last one ran. */
  splitTimer: NodeJS.Timeout | undefined;
  lastSplitMs: number;
  /** What this replica's sidecars want of each budget and unit (`demandKey`), for the summary. */
  demand: Map<string, ReplicaDemand>;
  /**
   * The last `load` of the pool's servers this replica scraped, while it has subscribers (the
   * autoscaling gauges, issue 44); cleared when the last one leaves, as the scraping stops.
   */
  load: PoolLoad | undefined;
}

/**
 * Re-splits of one pool's budgets are at most this often (reports of a thousand sidecars a second
 * cost one re-split per period); longer when a re-split costs more than a tenth of it.
 */
const SPLIT_EVERY_MS = 250;

const MAX_REPORT_BYTES = 1024 * 1024;
/**
 * Set on the stream of a token bound to no pod: its snapshots carry no API keys, and the sidecar
 * says so in its log (a provider would answer its requests 401).
 */
export const API_KEYS_HEADER = 'x-switchyard-api-keys';
/**
 * A subscriber with more than this waiting in its socket's buffer (a stalled or half-open
 * connection) is not sent `load` events: each one replaces the last, so skipping loses nothing,
 * while buffering them would grow without bound until TCP gives up. Snapshots are always written.
 */
const MAX_LOAD_BACKLOG_BYTES = 64 * 1024;
const ROUTE = /^\/v1\/namespaces\/([^/]+)\/pools\/([^/]+)\/(snapshots|reports|placements)$/;
/** A sidecar's upload of placements: the contract's bound. */
const MAX_PLACEMENTS_BYTES = 64 * 1024;
/**
 * Where a replica sends its peers what its sidecars uploaded (issue 45; docs/controller.md,
 * "Placements across replicas"): `{pools: {"<ns>/<name>": PoolPlacements}}`. Each pool's batch is
 * at most one event's bytes, so a body is bounded by the pools times that; 4 MiB is far above.
 */
export const PEER_PLACEMENTS_PATH = '/v1/internal/placements';
const MAX_PEER_PLACEMENTS_BYTES = 4 * 1024 * 1024;

/**
 * The `endpoints` event from `previous` to `next` (issue 46), when there is one and it is worth
 * it: under half the bytes of the full event `full` (a change of most endpoints goes whole).
 */
function deltaEvent(previous: PoolSnapshot, next: PoolSnapshot, full: string): string | undefined {
  const delta = endpointsDelta(previous, next);
  if (delta === undefined) return undefined;
  const event = `event: ${ENDPOINTS_EVENT}\nid: ${delta.version}\ndata: ${JSON.stringify(delta)}\n\n`;
  return event.length * 2 < full.length ? event : undefined;
}

function sendJson(
  res: AnyResponse,
  status: number,
  code: string,
  message: string,
  headers: Record<string, string> = {},
): void {
  const body = JSON.stringify({ error: { message, type: 'switchyard_error', code } });
  res.writeHead(status, {
    ...headers,
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
  });
  res.end(body);
}

/**
 * The snapshot stream (docs/snapshot-protocol.md): the per-pool fan-out of snapshots to the
 * sidecars subscribed on this replica, and the reports they send back.
 */
export class SnapshotServer {
  /** HTTP/2 (one connection per sidecar for all its pools) and HTTP/1.1, on one port. */
  readonly listener: DualHttpServer;
  private readonly channels = new Map<PoolKey, PoolChannel>();
  private readonly heartbeat: NodeJS.Timeout;
  private readonly options: SnapshotServerOptions;
  /** The placement relay (issue 45); undefined when `options.placements` is not given or 0. */
  private readonly placements: PlacementHub | undefined;

  constructor(options: SnapshotServerOptions) {
    this.options = options;
    const bytesPerSecond = options.placements?.bytesPerSecond ?? 0;
    this.placements =
      bytesPerSecond > 0
        ? new PlacementHub({
            bytesPerSecond,
            metrics: options.metrics,
            subscribers: (key) =>
              [...(this.channels.get(key)?.subscribers ?? [])].map((s) => s.res),
            forward: (batches) => options.placementPeers?.forward(batches),
          })
        : undefined;
    const handler = (req: AnyRequest, res: AnyResponse): void => {
      this.handle(req, res).catch((err: unknown) => {
        options.logger.error({ err: (err as Error).message }, 'snapshot server request failed');
        if (!res.headersSent) sendJson(res, 500, 'internal', 'internal error');
        else res.destroy();
      });
    };
    this.listener = new DualHttpServer(
      { tls: options.tls, idleTimeoutMs: 65_000, headersTimeoutMs: 30_000 },
      handler,
    );
    this.heartbeat = setInterval(() => {
      for (const channel of this.channels.values()) {
        for (const s of channel.subscribers) s.res.write(': heartbeat\n\n');
      }
    }, options.heartbeatMs);
    this.heartbeat.unref();
  }

  /** The pool's channel, made on first use. */
  private channel(key: PoolKey): PoolChannel {
    let channel = this.channels.get(key);
    if (channel === undefined) {
      channel = {
        snapshot: undefined,
        event: undefined,
        keylessEvent: undefined,
        deltaEvent: undefined,
        keylessDeltaEvent: undefined,
        subscribers: new Set(),
        sidecars: new Map(),
        splitTimer: undefined,
        lastSplitMs: -Infinity,
        demand: new Map(),
        load: undefined,
      };
      this.channels.set(key, channel);
    }
    return channel;
  }

  /** Sends a new snapshot of `key` to every subscriber; `sinceMs` is when the change was seen. */
  publish(key: PoolKey, snapshot: PoolSnapshot, sinceMs: number): void {
    const channel = this.channel(key);
    const previous = channel.snapshot;
    channel.snapshot = snapshot;
    const event = (s: PoolSnapshot): string =>
      `event: ${SNAPSHOT_EVENT}\nid: ${s.version}\ndata: ${JSON.stringify(s)}\n\n`;
    channel.event = event(snapshot);
    const keys = holdsApiKeys(snapshot) || (previous !== undefined && holdsApiKeys(previous));
    channel.keylessEvent = holdsApiKeys(snapshot) ? event(withoutApiKeys(snapshot)) : channel.event;
    // Built only while someone would get them: once per change, shared by every subscriber here.
    const wanted = [...channel.subscribers].some((s) => s.deltas);
    channel.deltaEvent =
      wanted && previous !== undefined ? deltaEvent(previous, snapshot, channel.event) : undefined;
    channel.keylessDeltaEvent =
      !keys || channel.deltaEvent === undefined || previous === undefined
        ? channel.deltaEvent
        : deltaEvent(withoutApiKeys(previous), withoutApiKeys(snapshot), channel.keylessEvent);
    for (const s of channel.subscribers) {
      const delta = s.deltas
        ? s.withKeys
          ? channel.deltaEvent
          : channel.keylessDeltaEvent
        : undefined;
      s.res.write(delta ?? (s.withKeys ? channel.event : channel.keylessEvent));
    }
    if (channel.subscribers.size > 0)
      this.options.metrics.pushLatency.observe((performance.now() - sinceMs) / 1000);
    this.scheduleSplit(key);
  }

  /**
   * Re-splits the pool's budgets soon: at most every SPLIT_EVERY_MS (or ten times the last
   * re-split's cost, for huge pools), so a burst of reports costs one.
   */
  scheduleSplit(key: PoolKey): void {
    const channel = this.channels.get(key);
    if (channel === undefined || channel.splitTimer !== undefined) return;
    const flow = channel.snapshot?.policy.flowControl;
    if ((flow === undefined || flow.budgets.length === 0) && channel.demand.size === 0) return;
    const waitMs = Math.max(0, channel.lastSplitMs + this.splitEveryMs(key) - performance.now());
    channel.splitTimer = setTimeout(() => {
      channel.splitTimer = undefined;
      if (this.channels.get(key) === channel) this.split(key, channel);
    }, waitMs);
    channel.splitTimer.unref();
  }

  private readonly splitCostMs = new Map<PoolKey, number>();

  private splitEveryMs(key: PoolKey): number {
    return Math.max(SPLIT_EVERY_MS, 10 * (this.splitCostMs.get(key) ?? 0));
  }

  /** Re-splits every pool with budgets (another replica's demand changed). */
  scheduleAllSplits(): void {
    for (const key of this.channels.keys()) this.scheduleSplit(key);
  }

  /**
   * The pool's budgets split over the sidecars subscribed here (and, before that, over the
   * replicas: `remoteDemand`); each subscriber whose shares moved by more than 2 %, or whose
   * workload changed, is sent its own `shares` event.
   */
  private split(key: PoolKey, channel: PoolChannel): void {
    const started = performance.now();
    channel.lastSplitMs = started;
    const flow = channel.snapshot?.policy.flowControl;
    const budgets = flow?.budgets ?? [];
    const kind = flow?.workload?.kind;
    const perSidecarWorkload = kind === 'ServiceAccount' || kind === 'PodLabel';
    const workloadOfSubscriber = (s: Subscriber): string | undefined =>
      perSidecarWorkload && flow?.workload !== undefined
        ? workloadOf(s.pod, flow.workload)
        : undefined;
    // One entry per sidecar (a sidecar may hold two streams for a moment while it reconnects).
    const sidecars = new Map<
      string,
      { id: string; workload?: string; budgets?: SidecarReport['budgets'] }
    >();
    for (const s of channel.subscribers) {
      if (sidecars.has(s.sidecar)) continue;
      const workload = workloadOfSubscriber(s);
      sidecars.set(s.sidecar, {
        id: s.sidecar,
        ...(workload === undefined ? {} : { workload }),
        budgets: channel.sidecars.get(s.sidecar)?.report?.budgets,
      });
    }
    const result = splitPool({
      budgets,
      perSidecarWorkload,
      sidecars: [...sidecars.values()],
      remote: (budget: string, unit: BudgetUnit) =>
        this.options.remoteDemand?.(key, budget, unit) ?? [],
    });
    channel.demand = budgets.length === 0 ? new Map<string, ReplicaDemand>() : result.demand;
    for (const s of channel.subscribers) {
      if (budgets.length === 0 && s.sent === undefined) continue;
      const workload = workloadOfSubscriber(s);
      const shares: BudgetShare[] = result.shares.get(s.sidecar) ?? [];
      if (
        s.sent !== undefined &&
        s.sent.workload === workload &&
        !sharesChanged(s.sent.budgets, shares)
      )
        continue;
      const event: PoolShares = {
        ...(workload === undefined ? {} : { workload }),
        budgets: shares,
      };
      s.sent = event;
      s.res.write(`event: ${SHARES_EVENT}\ndata: ${JSON.stringify(event)}\n\n`);
    }
    this.splitCostMs.set(key, performance.now() - started);
  }

  /** What this replica's sidecars want of each pool's budgets, for the replica summary. */
  budgetDemandByPool(): Map<PoolKey, Map<string, ReplicaDemand>> {
    const out = new Map<PoolKey, Map<string, ReplicaDemand>>();
    for (const [key, channel] of this.channels)
      if (channel.demand.size > 0) out.set(key, channel.demand);
    return out;
  }

  /**
   * Sends the load of `key`'s endpoints to every subscriber. No `id:` line: the stream's last
   * event id stays the snapshot version, and nothing about the snapshot changes.
   */
  publishLoad(key: PoolKey, load: PoolLoad): void {
    const channel = this.channels.get(key);
    if (channel === undefined || channel.subscribers.size === 0) return;
    channel.load = load;
    const event = `event: ${LOAD_EVENT}\ndata: ${JSON.stringify(load)}\n\n`;
    for (const s of channel.subscribers)
      if (s.res.writableLength <= MAX_LOAD_BACKLOG_BYTES) s.res.write(event);
  }

  /**
   * What this replica knows of each pool it has subscribers of, for the autoscaling gauges (issue
   * 44): its sidecars' demand summed (one entry per sidecar, from its last report; a sidecar that
   * disconnected no longer counts), and its servers' load from the last scrape.
   */
  localSignals(): Map<PoolKey, ReplicaSignals> {
    const out = new Map<PoolKey, ReplicaSignals>();
    for (const [key, channel] of this.channels) {
      if (channel.subscribers.size === 0) continue;
      const subscribed = new Set([...channel.subscribers].map((s) => s.sidecar));
      const demand = sumDemand(
        [...subscribed].map((id) => channel.sidecars.get(id)?.report?.demand),
      );
      const urls = new Map(channel.snapshot?.endpoints.map((e) => [e.id, e.url]));
      const server = summariseServers(
        (channel.load?.endpoints ?? []).map((e) => {
          const url = urls.get(e.id);
          return { ...e, server: (url === undefined ? undefined : metricsUrl(url)) ?? e.id };
        }),
      );
      out.set(key, { demand, ...(server === undefined ? {} : { server }) });
    }
    return out;
  }

  /**
   * Each pool with a snapshot and its ready endpoints: those of the snapshot (ready pods and URLs)
   * that drift detection does not exclude, as the status' `endpoints.ready` counts them.
   */
  readyEndpoints(): [PoolKey, number][] {
    const out: [PoolKey, number][] = [];
    for (const [key, channel] of this.channels) {
      const endpoints = channel.snapshot?.endpoints;
      if (endpoints !== undefined)
        out.push([key, endpoints.filter((e) => e.drifted !== true).length]);
    }
    return out;
  }

  /** The endpoints of each pool that has subscribers on this replica and a snapshot to serve. */
  subscribedEndpoints(): Map<PoolKey, readonly EndpointSpec[]> {
    const pools = new Map<PoolKey, readonly EndpointSpec[]>();
    for (const [key, channel] of this.channels)
      if (channel.subscribers.size > 0 && channel.snapshot !== undefined)
        pools.set(key, channel.snapshot.endpoints);
    return pools;
  }

  /** The pool is gone: its subscribers' streams end (they reconnect and get 404 until it returns). */
  remove(key: PoolKey): void {
    const channel = this.channels.get(key);
    if (channel === undefined) return;
    for (const s of channel.subscribers) s.res.end();
    clearTimeout(channel.splitTimer);
    this.placements?.remove(key);
    this.splitCostMs.delete(key);
    this.channels.delete(key);
  }

  /** This replica's sidecars of one pool, as the status core sees them. */
  sidecarViews(key: PoolKey): Map<string, SidecarView> {
    const views = new Map<string, SidecarView>();
    for (const [id, sc] of this.channels.get(key)?.sidecars ?? []) {
      views.set(id, {
        streaming: sc.streams > 0,
        lastSeenMs: sc.lastSeenMs,
        appliedVersion: sc.report?.appliedVersion,
        appliedHash: sc.report?.appliedHash,
        endpoints: sc.report?.endpoints,
        budgets: sc.report?.budgets,
      });
    }
    return views;
  }

  /** `sidecarViews` of every pool with known sidecars on this replica, by pool key. */
  sidecarViewsByPool(): Map<PoolKey, Map<string, SidecarView>> {
    return new Map([...this.channels.keys()].map((key) => [key, this.sidecarViews(key)]));
  }

  connectedCount(): number {
    let n = 0;
    for (const c of this.channels.values()) n += c.subscribers.size;
    return n;
  }

  /** Serves a new certificate from the next TLS handshake on (open connections keep theirs). */
  setTls(tls: { cert: string; key: string }): void {
    this.listener.setSecureContext(tls);
  }

  close(): void {
    clearInterval(this.heartbeat);
    this.placements?.close();
    for (const c of this.channels.values()) {
      clearTimeout(c.splitTimer);
      for (const s of c.subscribers) s.res.end();
    }
    this.listener.closeAllConnections();
    this.listener.close();
  }

  private async handle(req: AnyRequest, res: AnyResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://controller');
    if (url.pathname === '/healthz') {
      sendJson(res, 200, 'ok', 'ok');
      return;
    }
    const extra = this.options.routes?.[url.pathname];
    if (extra !== undefined) {
      await extra(req, res);
      return;
    }
    if (url.pathname === PEER_PLACEMENTS_PATH) {
      await this.acceptPeerPlacements(req, res);
      return;
    }
    const route = ROUTE.exec(url.pathname);
    if (route === null) {
      sendJson(
        res,
        404,
        'unknown_url',
        'Unknown path; sidecars use /v1/namespaces/{ns}/pools/{name}/snapshots.',
      );
      return;
    }
    const namespace = decodeURIComponent(route[1]!);
    const name = decodeURIComponent(route[2]!);
    const kind = route[3]!;
    if (kind === 'placements' && this.placements === undefined) {
      sendJson(
        res,
        404,
        'placements_off',
        'This controller does not relay placements (--placement-bytes-per-second 0); upload only to a stream that sends x-switchyard-placements.',
      );
      return;
    }
    if ((kind === 'snapshots') !== (req.method === 'GET')) {
      sendJson(
        res,
        405,
        'method_not_allowed',
        `${kind} accepts ${kind === 'snapshots' ? 'GET' : 'POST'} only.`,
      );
      return;
    }
    let auth: AuthResult;
    try {
      const ticket = req.headers[REVIEW_TICKET_HEADER];
      auth = await this.options.authenticator.authenticate(
        req.headers.authorization,
        typeof ticket === 'string' ? ticket : undefined,
      );
    } catch (err) {
      this.options.logger.warn(
        { err: (err as Error).message },
        'cannot verify a sidecar token (API server unreachable?)',
      );
      sendJson(res, 503, 'auth_unavailable', 'Cannot verify the token right now; retry.', {
        'retry-after': '2',
      });
      return;
    }
    if (!auth.ok) {
      this.options.metrics.authFailures.inc({ reason: 'unauthenticated' });
      sendJson(
        res,
        401,
        'unauthenticated',
        `A ServiceAccount token with audience "switchyard" is required (${auth.reason}).`,
      );
      return;
    }
    if (auth.identity.namespace !== namespace) {
      this.options.metrics.authFailures.inc({ reason: 'forbidden' });
      sendJson(
        res,
        403,
        'forbidden',
        `A token of namespace ${auth.identity.namespace} may only read pools in that namespace.`,
      );
      return;
    }
    // Every answer to the sidecar from here on carries the ticket: its next connection, to this
    // replica or another, is authenticated without a TokenReview (review-ticket.ts).
    if (auth.ticket !== undefined) res.setHeader(REVIEW_TICKET_HEADER, auth.ticket);
    const access = streamAccess(auth.identity.pod, name);
    if (access.kind === 'refused') {
      this.options.metrics.authFailures.inc({ reason: 'forbidden' });
      sendJson(res, 403, 'forbidden', access.message);
      return;
    }
    const key = `${namespace}/${name}`;
    if (!this.options.poolExists(key)) {
      sendJson(res, 404, 'pool_not_found', `InferencePool ${key} does not exist.`);
      return;
    }
    const sidecar =
      auth.identity.podName ??
      url.searchParams.get('sidecar') ??
      `${auth.identity.serviceAccount}@${req.socket.remoteAddress ?? '?'}`;
    if (kind === 'snapshots')
      this.subscribe(
        key,
        sidecar,
        access.kind === 'with-keys',
        auth.identity.pod,
        url.searchParams.get(DELTAS_QUERY) === '1',
        req,
        res,
      );
    else if (kind === 'placements') await this.acceptPlacements(key, req, res);
    else await this.acceptReport(key, auth.identity.podName, req, res);
  }

  private subscribe(
    key: PoolKey,
    sidecar: string,
    withKeys: boolean,
    pod: BoundPod | undefined,
    deltas: boolean,
    req: AnyRequest,
    res: AnyResponse,
  ): void {
    const channel = this.channel(key);
    res.writeHead(200, {
      'content-type': 'text/event-stream',
      'cache-control': 'no-store',
      'x-switchyard-protocol': String(SNAPSHOT_PROTOCOL_VERSION),
      ...(deltas ? { [DELTAS_HEADER]: '1' } : {}),
      ...(withKeys ? {} : { [API_KEYS_HEADER]: 'withheld' }),
      ...(this.placements === undefined
        ? {}
        : { [PLACEMENTS_HEADER]: String(this.options.placements?.bytesPerSecond) }),
    });
    res.write(': connected\n\n');
    const current = withKeys ? channel.event : channel.keylessEvent;
    if (current !== undefined) res.write(current);
    // It gets the full current snapshot first: every later delta's base is what it holds.
    const subscriber: Subscriber = { sidecar, res, withKeys, pod, sent: undefined, deltas };
    channel.subscribers.add(subscriber);
    const state = channel.sidecars.get(sidecar) ?? {
      report: undefined,
      lastSeenMs: performance.now(),
      streams: 0,
    };
    state.streams++;
    state.lastSeenMs = performance.now();
    channel.sidecars.set(sidecar, state);
    this.options.logger.info({ pool: key, sidecar, apiKeys: withKeys }, 'sidecar subscribed');
    this.options.onSidecarChange(key);
    // Its shares within one re-split period, not at its first report.
    this.scheduleSplit(key);
    req.socket.setTimeout(0);
    res.once('close', () => {
      channel.subscribers.delete(subscriber);
      // Not scraped here any more (subscribedEndpoints): the last reading would only grow stale.
      if (channel.subscribers.size === 0) channel.load = undefined;
      state.streams--;
      state.lastSeenMs = performance.now();
      this.options.logger.info({ pool: key, sidecar }, 'sidecar disconnected');
      this.options.onSidecarChange(key);
      this.scheduleSplit(key);
    });
  }

  /** The body as JSON; undefined when it answered 413 or 400 itself. */
  private async readJson(
    req: AnyRequest,
    res: AnyResponse,
    maxBytes: number,
    what: string,
  ): Promise<{ value: unknown } | undefined> {
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of req as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > maxBytes) {
        sendJson(res, 413, 'body_too_large', `${what} is over ${maxBytes} bytes.`, {
          connection: 'close',
        });
        return undefined;
      }
      chunks.push(chunk);
    }
    try {
      return { value: JSON.parse(Buffer.concat(chunks).toString('utf8')) as unknown };
    } catch {
      sendJson(res, 400, 'invalid_json', `${what} is not valid JSON.`);
      return undefined;
    }
  }

  /** A sidecar's placements (issue 45): checked, then relayed with the pool's next event. */
  private async acceptPlacements(key: PoolKey, req: AnyRequest, res: AnyResponse): Promise<void> {
    const body = await this.readJson(req, res, MAX_PLACEMENTS_BYTES, 'The placements upload');
    if (body === undefined) return;
    const parsed = parsePlacements(body.value);
    if (!parsed.ok) {
      this.options.metrics.placementsDropped.inc({ reason: 'invalid' });
      sendJson(
        res,
        400,
        'invalid_placements',
        parsed.errors.map((e) => `${e.path}: ${e.message}`).join('; '),
      );
      return;
    }
    this.placements?.accept(key, parsed.value, true);
    res.writeHead(204);
    res.end();
  }

  /**
   * Placements another replica's sidecars uploaded (docs/controller.md): only from a replica of
   * this controller (its ServiceAccount), relayed to the subscribers here, never forwarded again.
   */
  private async acceptPeerPlacements(req: AnyRequest, res: AnyResponse): Promise<void> {
    const peers = this.options.placementPeers;
    if (this.placements === undefined || peers === undefined) {
      sendJson(res, 404, 'placements_off', 'This replica does not relay placements.');
      return;
    }
    if (req.method !== 'POST') {
      sendJson(res, 405, 'method_not_allowed', `${PEER_PLACEMENTS_PATH} accepts POST only.`);
      return;
    }
    let allowed: boolean;
    try {
      allowed = await peers.authenticate(req.headers.authorization);
    } catch (err) {
      this.options.logger.debug({ err: (err as Error).message }, 'cannot verify a peer token');
      sendJson(res, 503, 'auth_unavailable', 'Cannot verify the token right now; retry.');
      return;
    }
    if (!allowed) {
      this.options.metrics.authFailures.inc({ reason: 'forbidden' });
      sendJson(
        res,
        403,
        'forbidden',
        "Only the controller's own ServiceAccount may relay placements between replicas.",
      );
      return;
    }
    const body = await this.readJson(req, res, MAX_PEER_PLACEMENTS_BYTES, 'The relayed placements');
    if (body === undefined) return;
    const pools = (body.value as { pools?: unknown } | null)?.pools;
    if (typeof pools !== 'object' || pools === null) {
      sendJson(res, 400, 'invalid_placements', '/pools: expected an object of pool batches');
      return;
    }
    for (const [key, batch] of Object.entries(pools)) {
      // Only pools with subscribers here: the others' placements would reach nobody.
      if ((this.channels.get(key)?.subscribers.size ?? 0) === 0) continue;
      const parsed = parsePlacements(batch);
      if (parsed.ok) this.placements.accept(key, parsed.value, false);
      else this.options.metrics.placementsDropped.inc({ reason: 'invalid' });
    }
    res.writeHead(204);
    res.end();
  }

  /** `podName`: from a pod-bound token; otherwise the report's own `sidecar` names it. */
  private async acceptReport(
    key: PoolKey,
    podName: string | undefined,
    req: AnyRequest,
    res: AnyResponse,
  ): Promise<void> {
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of req as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > MAX_REPORT_BYTES) {
        sendJson(res, 413, 'body_too_large', 'Report too large.', { connection: 'close' });
        return;
      }
      chunks.push(chunk);
    }
    let body: unknown;
    try {
      body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch {
      sendJson(res, 400, 'invalid_json', 'The report is not valid JSON.');
      return;
    }
    const parsed = parseReport(body);
    if (!parsed.ok) {
      sendJson(
        res,
        400,
        'invalid_report',
        parsed.errors.map((e) => `${e.path}: ${e.message}`).join('; '),
      );
      return;
    }
    const sidecar = podName ?? parsed.value.sidecar;
    const channel = this.channel(key);
    const state = channel.sidecars.get(sidecar) ?? { report: undefined, lastSeenMs: 0, streams: 0 };
    state.report = { ...parsed.value, sidecar };
    state.lastSeenMs = performance.now();
    channel.sidecars.set(sidecar, state);
    res.writeHead(204);
    res.end();
    this.options.onSidecarChange(key);
    if (parsed.value.budgets !== undefined) this.scheduleSplit(key);
  }
}

export interface SnapshotServerOptions {
  authenticator: Authenticator;
  logger: Logger;
  metrics: ControllerMetrics;
  heartbeatMs: number;
  /** PEM; without it the server speaks plain HTTP (tests and port-forwarding only). */
  tls: { cert: string; key: string } | undefined;
  poolExists: (key: PoolKey) => boolean;
  /** A sidecar connected, disconnected or reported: the pool's status may need a write. */
  onSidecarChange: (key: PoolKey) => void;
  /**
   * What the sidecars of the pool on the other live replicas want of a budget and unit: one entry
   * per replica with sidecars of the pool, undefined where its demand is not known (issue 43).
   */
  remoteDemand?: (key: PoolKey, budget: string, unit: BudgetUnit) => (ReplicaDemand | undefined)[];
  /**
   * Relay sidecars' placements (issue 45): each subscriber is sent at most this many bytes a
   * second of `placements` events, one about every 100 ms per pool. Absent or 0: off (no header,
   * uploads answered 404 `placements_off`).
   */
  placements?: { bytesPerSecond: number };
  /** The other replicas, for the placements relay (stream/placement-peers.ts). */
  placementPeers?: PlacementPeerLink;
  /** Other handlers on this server by exact path (the injection webhook shares its certificate). */
  routes?: Record<string, (req: AnyRequest, res: AnyResponse) => Promise<void>>;
}

/** How the placement relay reaches the other replicas and knows them (placement-peers.ts). */
export interface PlacementPeerLink {
  /** Whether a request's bearer token is the controller's own ServiceAccount's. */
  authenticate(authorization: string | undefined): Promise<boolean>;
  /** Sends the other replicas what this one's sidecars uploaded, per pool (fire and forget). */
  forward(batches: Map<PoolKey, PoolPlacements>): void;
}
