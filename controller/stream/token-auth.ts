import { createHash } from 'node:crypto';
import { poolsFollowedBy, type BoundPod, type PodMetadata } from '../core/stream-access.ts';
import { KubeApiError, type KubeRaw } from '../kube/kube-raw.ts';

interface TokenReviewStatus {
  authenticated?: boolean;
  error?: string;
  audiences?: string[];
  user?: { username?: string; extra?: Record<string, string[]> };
}

/** The audience sidecar tokens must carry: a token minted for the API server is refused. */
export const SIDECAR_TOKEN_AUDIENCE = 'switchyard';

export type Identity = {
  namespace: string;
  serviceAccount: string;
  /** The pod the token is bound to (projected tokens), when the API server says so. */
  podName: string | undefined;
  podUid: string | undefined;
  /**
   * The bound pod and the pools it follows, read when the token was reviewed (so a label change
   * counts from the next review, within a minute); undefined for a token bound to no pod.
   */
  pod: BoundPod | undefined;
};

export type AuthResult = { ok: true; identity: Identity } | { ok: false; reason: string };

const SA_USER = /^system:serviceaccount:([^:]+):([^:]+)$/;

/** How long a positive or negative TokenReview answer is reused (never past the token's expiry). */
const CACHE_TTL_MS = 60_000;
const NEGATIVE_TTL_MS = 5_000;
const CACHE_MAX_ENTRIES = 10_000;

function tokenExpiryMs(token: string): number | undefined {
  const payload = token.split('.')[1];
  if (payload === undefined) return undefined;
  try {
    const claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as {
      exp?: unknown;
    };
    return typeof claims.exp === 'number' ? claims.exp * 1000 : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Authenticates sidecars by their projected ServiceAccount token with a TokenReview. Only the
 * API server decides whether a token is valid (signature, expiry, audience, bound pod still
 * existing); answers are cached by a hash of the token, never the token itself.
 */
export class TokenAuthenticator {
  private readonly raw: KubeRaw;
  private readonly cache = new Map<string, { result: AuthResult; untilMs: number }>();
  /** Reviews in progress: sidecars sharing a token that connect at once cost one TokenReview. */
  private readonly inFlight = new Map<string, Promise<AuthResult>>();

  constructor(raw: KubeRaw) {
    this.raw = raw;
  }

  async authenticate(authorization: string | undefined): Promise<AuthResult> {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '');
    if (match === null) return { ok: false, reason: 'missing bearer token' };
    const token = match[1]!;
    const key = createHash('sha256').update(token).digest('hex');
    const now = Date.now();
    const cached = this.cache.get(key);
    if (cached !== undefined && cached.untilMs > now) return cached.result;
    let pending = this.inFlight.get(key);
    if (pending === undefined) {
      pending = this.review(token).finally(() => this.inFlight.delete(key));
      this.inFlight.set(key, pending);
    }
    const result = await pending;
    const expiry = tokenExpiryMs(token) ?? now + CACHE_TTL_MS;
    const untilMs = Math.min(expiry, now + (result.ok ? CACHE_TTL_MS : NEGATIVE_TTL_MS));
    if (this.cache.size >= CACHE_MAX_ENTRIES) this.cache.clear();
    this.cache.set(key, { result, untilMs });
    return result;
  }

  private async review(token: string): Promise<AuthResult> {
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
    if (status?.authenticated !== true)
      return { ok: false, reason: status?.error ?? 'token not authenticated' };
    if (!(status.audiences ?? []).includes(SIDECAR_TOKEN_AUDIENCE))
      return { ok: false, reason: `token audience is not ${SIDECAR_TOKEN_AUDIENCE}` };
    const user = SA_USER.exec(status.user?.username ?? '');
    if (user === null) return { ok: false, reason: 'not a ServiceAccount token' };
    const extra = status.user?.extra ?? {};
    const namespace = user[1]!;
    const podName = extra['authentication.kubernetes.io/pod-name']?.[0];
    const podUid = extra['authentication.kubernetes.io/pod-uid']?.[0];
    let pod: BoundPod | undefined;
    if (podName !== undefined) {
      const found = await this.boundPod(namespace, podName, podUid);
      if (found === undefined)
        return { ok: false, reason: `the pod ${podName} the token is bound to is gone` };
      pod = found;
    }
    return {
      ok: true,
      identity: { namespace, serviceAccount: user[2]!, podName, podUid, pod },
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
    return {
      name,
      follows: poolsFollowedBy(pod),
      // `namespace/name`, as budgets name a ServiceAccount workload (the pod's namespace is the token's).
      serviceAccount: `${namespace}/${pod.spec?.serviceAccountName ?? 'default'}`,
      labels: pod.metadata?.labels,
    };
  }
}
