/**
 * Placements across the controller's replicas (issue 45; docs/controller.md, "Placements across
 * replicas"). The sidecars of one pool are spread over the replicas by the Service, so what one
 * replica's sidecars upload must reach the subscribers of the others within a tick or two. Each
 * replica puts its stream URL (pod IP and port) in its summary Lease (replica-summary.ts); every
 * tick, a replica POSTs to each live peer, in one request, what its own sidecars uploaded and it
 * sent in its events. A peer relays that to its own subscribers and never forwards it again, so a
 * placement crosses at most one hop.
 *
 * The request carries this replica's own ServiceAccount token (the mounted one, re-read as the
 * kubelet rotates it); a peer accepts it only when a TokenReview says it is a token of the same
 * ServiceAccount as its own. Over HTTPS the peer's certificate must be signed by the controller's
 * CA; its name is not checked (a pod IP is in no certificate, and only replicas hold the key).
 */
import { createHash } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import type { Logger } from 'pino';
import type { PoolPlacements } from '../../crds/snapshot.ts';
import type { PoolKey } from '../core/pool-index.ts';
import type { KubeRaw } from '../kube/kube-raw.ts';
import { serviceAccountOf } from '../kube/owners.ts';
import { PEER_PLACEMENTS_PATH, type PlacementPeerLink } from './snapshot-server.ts';

export interface PlacementPeersOptions {
  raw: KubeRaw;
  /** The token this replica sends, and whose ServiceAccount peers must have (re-read). */
  readToken: () => string | undefined;
  /** The stream URLs of the other live replicas. */
  peers: () => readonly string[];
  /** The CA the peers' serving certificates are signed by (HTTPS); undefined over plain HTTP. */
  ca: () => string | undefined;
  logger: Logger;
}

/** A request to a peer that takes longer is abandoned: the placements in it are stale by then. */
const PEER_TIMEOUT_MS = 1_000;
/** The own token is re-read this often (the kubelet rotates it well before it expires). */
const TOKEN_REREAD_MS = 10_000;
const REVIEW_TTL_MS = 60_000;
const NEGATIVE_TTL_MS = 5_000;
const MAX_REVIEWS = 1_000;
/** A peer that keeps failing is logged at most this often. */
const WARN_EVERY_MS = 60_000;

export class PlacementPeers implements PlacementPeerLink {
  private readonly options: PlacementPeersOptions;
  private token: { value: string | undefined; readAtMs: number } = {
    value: undefined,
    readAtMs: -Infinity,
  };
  private readonly reviews = new Map<string, { ok: boolean; untilMs: number }>();
  /** Peers with a request in flight: a slow peer gets no second one (its ticks are dropped). */
  private readonly busy = new Set<string>();
  private readonly warnedAtMs = new Map<string, number>();
  private agent: { ca: string | undefined; http: http.Agent; https: https.Agent } | undefined;

  constructor(options: PlacementPeersOptions) {
    this.options = options;
  }

  /** `system:serviceaccount:<ns>:<name>` of this replica's own token; undefined without one. */
  private ownUser(): string | undefined {
    const sa = serviceAccountOf(this.ownToken());
    return sa === undefined ? undefined : `system:serviceaccount:${sa.namespace}:${sa.name}`;
  }

  private ownToken(): string | undefined {
    const now = performance.now();
    if (now - this.token.readAtMs > TOKEN_REREAD_MS)
      this.token = { value: this.options.readToken()?.trim(), readAtMs: now };
    return this.token.value;
  }

  async authenticate(authorization: string | undefined): Promise<boolean> {
    const token = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '')?.[1];
    const own = this.ownUser();
    if (token === undefined || own === undefined) return false;
    const key = createHash('sha256').update(token).digest('hex');
    const now = performance.now();
    const cached = this.reviews.get(key);
    if (cached !== undefined && cached.untilMs > now) return cached.ok;
    // No audiences: the API server's own, which the mounted token carries.
    const review = await this.options.raw.request<{
      status?: { authenticated?: boolean; user?: { username?: string } };
    }>('POST', '/apis/authentication.k8s.io/v1/tokenreviews', {
      apiVersion: 'authentication.k8s.io/v1',
      kind: 'TokenReview',
      spec: { token },
    });
    const ok = review.status?.authenticated === true && review.status.user?.username === own;
    if (this.reviews.size >= MAX_REVIEWS) this.reviews.clear();
    this.reviews.set(key, { ok, untilMs: now + (ok ? REVIEW_TTL_MS : NEGATIVE_TTL_MS) });
    return ok;
  }

  forward(batches: Map<PoolKey, PoolPlacements>): void {
    const peers = this.options.peers();
    if (peers.length === 0) return;
    const token = this.ownToken();
    if (token === undefined) {
      this.warn('token', 'no ServiceAccount token to relay placements to the other replicas with');
      return;
    }
    const body = JSON.stringify({ pools: Object.fromEntries(batches) });
    for (const peer of peers) if (!this.busy.has(peer)) this.send(peer, token, body);
  }

  private send(peer: string, token: string, body: string): void {
    const url = new URL(PEER_PLACEMENTS_PATH, peer);
    const secure = url.protocol === 'https:';
    const agents = this.agents();
    this.busy.add(peer);
    const done = (problem?: string): void => {
      this.busy.delete(peer);
      if (problem !== undefined) this.warn(peer, `cannot relay placements to ${peer}: ${problem}`);
    };
    const req = (secure ? https : http).request(
      url,
      {
        method: 'POST',
        agent: secure ? agents.https : agents.http,
        timeout: PEER_TIMEOUT_MS,
        headers: {
          authorization: `Bearer ${token}`,
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
        },
      },
      (res) => {
        res.resume();
        res.on('end', () => done(res.statusCode === 204 ? undefined : `HTTP ${res.statusCode}`));
        res.on('error', (err) => done(err.message));
      },
    );
    req.on('timeout', () => req.destroy(new Error(`no answer within ${PEER_TIMEOUT_MS} ms`)));
    req.on('error', (err) => done(err.message));
    req.end(body);
  }

  /** Kept-alive agents; rebuilt when the CA changes (a renewal). */
  private agents(): { http: http.Agent; https: https.Agent } {
    const ca = this.options.ca();
    if (this.agent === undefined || this.agent.ca !== ca) {
      this.agent?.http.destroy();
      this.agent?.https.destroy();
      this.agent = {
        ca,
        http: new http.Agent({ keepAlive: true, maxSockets: 1 }),
        https: new https.Agent({
          keepAlive: true,
          maxSockets: 1,
          ...(ca === undefined ? {} : { ca }),
          // The chain is checked against the CA; a pod IP is in no certificate's names.
          checkServerIdentity: () => undefined,
        }),
      };
    }
    return this.agent;
  }

  private warn(key: string, message: string): void {
    const now = performance.now();
    if (now - (this.warnedAtMs.get(key) ?? -Infinity) < WARN_EVERY_MS) {
      this.options.logger.debug(message);
      return;
    }
    this.warnedAtMs.set(key, now);
    this.options.logger.warn(message);
  }

  close(): void {
    this.agent?.http.destroy();
    this.agent?.https.destroy();
  }
}
