import { createHash } from 'node:crypto';
import { poolsFollowedBy, type BoundPod, type PodMetadata } from '../core/stream-access.ts';
import { ReviewLanes, type ReviewLane } from './review-lanes.ts';
import { checkTicket, issueTicket } from './review-ticket.ts';
import { KubeApiError, type KubeRaw } from '../kube/kube-raw.ts';
import {
  DEFAULT_TOKEN_REVIEW_CACHE_MS,
  MAX_ENTRIES,
  NEGATIVE_TTL_MS,
  ReviewCache,
  UNWATCHED_TTL_MS,
  type AccountWatch,
  type PodWatch,
  type ReviewAnswer,
  type WatchedPod,
} from './review-cache.ts';

interface TokenReviewStatus {
  authenticated?: boolean;
  error?: string;
  audiences?: string[];
  user?: { username?: string; uid?: string; extra?: Record<string, string[]> };
}

/** The audience sidecar tokens must carry: a token minted for the API server is refused. */
export const SIDECAR_TOKEN_AUDIENCE = 'switchyard';

export type Identity = {
  namespace: string;
  serviceAccount: string;
  /** The ServiceAccount's UID, as the review gave it: the account watch checks it still exists. */
  serviceAccountUid?: string | undefined;
  /** The pod the token is bound to (projected tokens), when the API server says so. */
  podName: string | undefined;
  podUid: string | undefined;
  /**
   * The bound pod and the pools it follows, read when the token was reviewed and, while the
   * controller's pod watch holds the pod, as the watch last saw it (so a label change counts at
   * once; without the watch from the next review, within a minute); undefined for a token bound
   * to no pod.
   */
  pod: BoundPod | undefined;
};

export type AuthResult =
  | {
      ok: true;
      identity: Identity;
      /**
       * A review ticket for this token (review-ticket.ts), for the response's
       * `x-switchyard-review-ticket`; undefined when the controller hands out none (no TLS).
       */
      ticket?: string | undefined;
    }
  | { ok: false; reason: string };

type Authenticated = Extract<AuthResult, { ok: true }>;

/** How a request was authenticated, for the metrics. */
export type AuthVia = 'cache' | 'ticket' | 'review';

const SA_USER = /^system:serviceaccount:([^:]+):([^:]+)$/;
/**
 * A connected sidecar's answer is served this long after it ran out while it is reviewed again:
 * a deleted ServiceAccount is noticed within `--token-review-cache` + 1 min at most.
 */
export const RENEW_MS = 60_000;
/**
 * Answers are kept 80–100 % of their lifetime, drawn per answer (review-cache.ts): a fleet that
 * connected in the same minutes does not renew, nor lose its tickets, in the same minutes.
 */
const LIFETIME_JITTER = 0.2;
/**
 * The longest an answer is reused while the controller's ServiceAccount watch does not hold the
 * token's account (not synced yet, or just created): the bound on noticing a deleted account then,
 * as `--token-review-cache` was before the account watch.
 */
export const UNWATCHED_ACCOUNT_MS = 5 * 60_000;
/**
 * The longest an answer is reused when the synced account watch does not hold its account: just
 * created, or just deleted while kube-apiserver's own token cache (10 s) still calls it valid.
 */
export const UNSEEN_ACCOUNT_MS = 5_000;
/** The raw client's connections to the API server (kube-raw.ts): one review on each at most. */
const MAX_CONCURRENT_REVIEWS = 8;

export interface TokenAuthenticatorOptions {
  /** The longest a positive review is reused (`--token-review-cache`; review-cache.ts). */
  cacheMs?: number | undefined;
  /** The controller's pod watch, when it has one: pod-bound tokens are reused while it holds their pod. */
  pods?: PodWatch | undefined;
  /**
   * The controller's ServiceAccount watch: answers are reused past 5 min only while it holds the
   * token's account, and end when it sees the account go.
   */
  accounts?: AccountWatch | undefined;
  now?: (() => number) | undefined;
  /** Draws in [0, 1) for the answers' lifetime jitter; Math.random unless a test fixes it. */
  random?: (() => number) | undefined;
  maxEntries?: number | undefined;
  /**
   * The keys review tickets are signed with, the first signing new ones (review-ticket.ts; the
   * current serving key's and the previous one's); none: no tickets given or taken.
   */
  ticketKeys?: (() => readonly Buffer[]) | undefined;
  /**
   * How long a connected sidecar's answer is still served after it ran out, while it is reviewed
   * again in the background (review-cache.ts); 0: reviewed on the request's path, as before.
   */
  renewMs?: number | undefined;
  /** TokenReviews in flight at once; newcomers' first (review-lanes.ts). */
  maxConcurrentReviews?: number | undefined;
  /**
   * After each request let in: how, and after a review how long the request waited for it (the
   * API server's queue included).
   */
  onAuthenticated?: ((via: AuthVia, reviewMs?: number) => void) | undefined;
}

/**
 * Authenticates sidecars by their projected ServiceAccount token with a TokenReview. Only the
 * API server decides whether a token is valid (signature, expiry, audience, bound pod still
 * existing); answers are cached by a hash of the token, never the token itself, for as long as
 * review-cache.ts says is safe.
 */
export class TokenAuthenticator {
  private readonly raw: Pick<KubeRaw, 'request'>;
  private readonly pods: PodWatch | undefined;
  private readonly accounts: AccountWatch | undefined;
  private readonly cache: ReviewCache<AuthResult>;
  /** Reviews in progress: sidecars sharing a token that connect at once cost one TokenReview. */
  private readonly inFlight = new Map<
    string,
    Promise<{ answer: ReviewAnswer<AuthResult>; untilMs: number | undefined }>
  >();
  /** The ticket issued for a cached answer (the cache's value object), gone with the entry. */
  private readonly signed = new WeakMap<
    AuthResult,
    { untilMs: number; key: Buffer; ticket: string }
  >();
  private readonly lanes: ReviewLanes;
  private readonly now: () => number;
  private readonly ticketKeys: () => readonly Buffer[];
  private readonly onAuthenticated: (via: AuthVia, reviewMs?: number) => void;

  constructor(raw: Pick<KubeRaw, 'request'>, options: TokenAuthenticatorOptions = {}) {
    this.raw = raw;
    this.pods = options.pods;
    this.accounts = options.accounts;
    this.now = options.now ?? Date.now;
    this.ticketKeys = options.ticketKeys ?? (() => []);
    this.onAuthenticated = options.onAuthenticated ?? (() => undefined);
    this.cache = new ReviewCache<AuthResult>({
      now: this.now,
      maxMs: options.cacheMs ?? DEFAULT_TOKEN_REVIEW_CACHE_MS,
      unwatchedMs: UNWATCHED_TTL_MS,
      negativeMs: NEGATIVE_TTL_MS,
      maxEntries: options.maxEntries ?? MAX_ENTRIES,
      pods: options.pods,
      accounts: options.accounts,
      unwatchedAccountMs: UNWATCHED_ACCOUNT_MS,
      unseenAccountMs: UNSEEN_ACCOUNT_MS,
      renewMs: options.renewMs ?? RENEW_MS,
      lifetimeJitter: LIFETIME_JITTER,
      random: options.random ?? Math.random,
    });
    this.lanes = new ReviewLanes(options.maxConcurrentReviews ?? MAX_CONCURRENT_REVIEWS);
  }

  /** TokenReviews waiting for a slot, by lane. */
  get reviewsWaiting(): { first: number; renewal: number } {
    return this.lanes.waiting;
  }

  /**
   * Who holds the bearer token in `authorization`: from the cache, else from a review ticket
   * (`ticket`, another replica's review), else from a TokenReview.
   */
  async authenticate(authorization: string | undefined, ticket?: string): Promise<AuthResult> {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '');
    if (match === null) return { ok: false, reason: 'missing bearer token' };
    const token = match[1]!;
    const key = createHash('sha256').update(token).digest('hex');
    const cached = this.cache.get(key);
    if (cached.kind === 'hit') {
      if (cached.value.ok) this.onAuthenticated('cache');
      return this.withTicket(key, cached.value, cached.untilMs);
    }
    if (cached.kind === 'pod-changed' && cached.value.ok) {
      // The pod's labels may have changed which pools it follows: read them from the watch.
      const { identity } = cached.value;
      const pod = boundPodOf(identity.namespace, identity.podName ?? '', cached.pod);
      const result: AuthResult = { ok: true, identity: { ...identity, pod } };
      this.cache.refresh(key, result, cached.pod);
      this.onAuthenticated('cache');
      return this.withTicket(key, result, cached.untilMs);
    }
    if (cached.kind === 'stale' && cached.value.ok) {
      // A connected sidecar whose answer just ran out: let it in on that answer and review the
      // token again behind the newcomers (no ticket: the answer behind one has ended).
      void this.reviewOnce(key, token, 'renewal').catch(() => undefined);
      this.onAuthenticated('cache');
      return cached.value;
    }
    if (ticket !== undefined) {
      const admitted = this.admitTicket(key, ticket);
      if (admitted !== undefined) {
        this.onAuthenticated('ticket');
        return { ...admitted, ticket };
      }
    }
    const waitFromMs = performance.now();
    const { answer, untilMs } = await this.reviewOnce(key, token, 'first');
    // Each request that waited for the review, with its own wait (one review may serve several).
    if (answer.ok) this.onAuthenticated('review', performance.now() - waitFromMs);
    return this.withTicket(key, answer.value, untilMs);
  }

  /**
   * One TokenReview of `token` at a time, whoever asks (sidecars sharing a token, a renewal and a
   * request); a request that finds a renewal still waiting moves it to the newcomers' lane.
   */
  private reviewOnce(
    key: string,
    token: string,
    lane: ReviewLane,
  ): Promise<{ answer: ReviewAnswer<AuthResult>; untilMs: number | undefined }> {
    let pending = this.inFlight.get(key);
    if (pending !== undefined) {
      if (lane === 'first') this.lanes.promote(key);
      return pending;
    }
    pending = this.lanes
      .run(key, lane, () => this.review(token))
      .then((answer) => ({ answer, untilMs: this.cache.set(key, token, answer) }))
      .finally(() => this.inFlight.delete(key));
    this.inFlight.set(key, pending);
    return pending;
  }

  /**
   * `result` with a ticket that expires when the cache entry behind it does. Signed once per
   * entry (and key): a sidecar's every report is a cache hit, and an HMAC per report was ~10 % of
   * a replica's CPU at 10,000 sidecars (a V8 profile of the fleet bench).
   */
  private withTicket(key: string, result: AuthResult, untilMs: number | undefined): AuthResult {
    const signingKey = this.ticketKeys()[0];
    if (!result.ok || untilMs === undefined || signingKey === undefined) return result;
    const signed = this.signed.get(result);
    if (signed?.untilMs === untilMs && signed.key === signingKey)
      return { ...result, ticket: signed.ticket };
    const { identity } = result;
    const ticket = issueTicket(signingKey, {
      tokenHash: key,
      namespace: identity.namespace,
      serviceAccount: identity.serviceAccount,
      accountUid: identity.serviceAccountUid,
      podName: identity.podName,
      podUid: identity.podUid,
      expiresAtMs: untilMs,
    });
    this.signed.set(result, { untilMs, key: signingKey, ticket });
    return { ...result, ticket };
  }

  /**
   * The identity a valid ticket for this token vouches for, kept in the cache until it expires;
   * undefined when there is none (any reason: the caller reviews the token instead). A pod-bound
   * token's ticket counts only while the pod watch holds the pod with the ticket's UID: the pod's
   * labels (which pools it follows) are read from there, and its deletion ends the entry.
   */
  private admitTicket(key: string, ticket: string): Authenticated | undefined {
    const keys = this.ticketKeys();
    if (keys.length === 0) return undefined;
    const check = checkTicket(keys, ticket, key, this.now());
    if (!check.ok) return undefined;
    const { namespace, serviceAccount, podName, podUid, accountUid, expiresAtMs } = check.claims;
    // A ticket for an account this replica's watch no longer holds (deleted, or recreated with
    // another UID): review the token, which refuses it then.
    if (this.accounts?.hasSynced === true) {
      const held = this.accounts.uid(namespace, serviceAccount);
      if (held === undefined || (accountUid !== undefined && held !== accountUid)) return undefined;
    }
    let watched: { namespace: string; name: string; uid: string; seen: WatchedPod } | undefined;
    if (podName !== undefined) {
      const seen = this.pods?.hasSynced === true ? this.pods.get(namespace, podName) : undefined;
      if (seen === undefined || podUid === undefined || seen.metadata?.uid !== podUid)
        return undefined;
      watched = { namespace, name: podName, uid: podUid, seen };
    }
    const pod = watched && boundPodOf(namespace, watched.name, watched.seen);
    const result: Authenticated = {
      ok: true,
      identity: { namespace, serviceAccount, serviceAccountUid: accountUid, podName, podUid, pod },
    };
    const account = { namespace, name: serviceAccount, uid: accountUid };
    this.cache.admit(key, result, expiresAtMs, watched, account);
    return result;
  }

  private async review(token: string): Promise<ReviewAnswer<AuthResult>> {
    let review: { status?: TokenReviewStatus };
    try {
      // Through the raw client's kept-alive connections: the generated client builds a new
      // connection for every call, which a fleet of sidecars reconnecting at once turns into
      // hundreds of TLS handshakes with the API server.
      review = await this.raw.request('POST', '/apis/authentication.k8s.io/v1/tokenreviews', {
        apiVersion: 'authentication.k8s.io/v1',
        kind: 'TokenReview',
        spec: { token, audiences: [SIDECAR_TOKEN_AUDIENCE] },
      });
    } catch (err) {
      // The API server is unreachable: fail closed, but do not cache it.
      throw new Error(`TokenReview failed: ${(err as Error).message}`, { cause: err });
    }
    const status = review.status;
    if (status?.authenticated !== true) return refused(status?.error ?? 'token not authenticated');
    if (!(status.audiences ?? []).includes(SIDECAR_TOKEN_AUDIENCE))
      return refused(`token audience is not ${SIDECAR_TOKEN_AUDIENCE}`);
    const user = SA_USER.exec(status.user?.username ?? '');
    if (user === null) return refused('not a ServiceAccount token');
    const extra = status.user?.extra ?? {};
    const namespace = user[1]!;
    const podName = extra['authentication.kubernetes.io/pod-name']?.[0];
    const podUid = extra['authentication.kubernetes.io/pod-uid']?.[0];
    // A ServiceAccount token's user UID is its account's UID (not the token's).
    const accountUid = status.user?.uid;
    let pod: BoundPod | undefined;
    if (podName !== undefined) {
      const found = await this.boundPod(namespace, podName, podUid);
      if (found === undefined) return refused(`the pod ${podName} the token is bound to is gone`);
      pod = found;
    }
    return {
      ok: true,
      value: {
        ok: true,
        identity: {
          namespace,
          serviceAccount: user[2]!,
          serviceAccountUid: accountUid,
          podName,
          podUid,
          pod,
        },
      },
      ...(podName === undefined ? {} : { pod: { namespace, name: podName, uid: podUid } }),
      account: { namespace, name: user[2]!, uid: accountUid },
    };
  }

  /**
   * The pod a token is bound to, with the pools it follows; undefined when it is gone or is
   * another pod of the same name. The TokenReview checked it exists; its labels say which
   * pools' keys it may read.
   */
  private async boundPod(
    namespace: string,
    name: string,
    uid: string | undefined,
  ): Promise<BoundPod | undefined> {
    // The watch has it (the review just said it exists): no GET needed.
    const watched = this.pods?.hasSynced === true ? this.pods.get(namespace, name) : undefined;
    if (watched !== undefined && (uid === undefined || watched.metadata?.uid === uid))
      return boundPodOf(namespace, name, watched);
    let pod: PodMetadata & {
      metadata?: { uid?: string; labels?: Record<string, string> };
      spec?: { serviceAccountName?: string };
    };
    try {
      pod = await this.raw.request(
        'GET',
        `/api/v1/namespaces/${encodeURIComponent(namespace)}/pods/${encodeURIComponent(name)}`,
      );
    } catch (err) {
      if (err instanceof KubeApiError && err.status === 404) return undefined;
      throw new Error(`reading the token's pod failed: ${(err as Error).message}`, { cause: err });
    }
    if (uid !== undefined && pod.metadata?.uid !== uid) return undefined;
    return boundPodOf(namespace, name, pod);
  }
}

function refused(reason: string): ReviewAnswer<AuthResult> {
  return { ok: false, value: { ok: false, reason } };
}

/** The identity's view of the token's pod, from the API server's answer or the pod watch. */
function boundPodOf(namespace: string, name: string, pod: WatchedPod): BoundPod {
  return {
    name,
    follows: poolsFollowedBy(pod),
    // `namespace/name`, as budgets name a ServiceAccount workload (the pod's namespace is the token's).
    serviceAccount: `${namespace}/${pod.spec?.serviceAccountName ?? 'default'}`,
    labels: pod.metadata?.labels,
  };
}
