/**
 * How long a TokenReview's answer is reused (the policy; token-auth.ts does the I/O). Pure: the
 * clock and the pod cache are passed in, so every rule is a unit test away (review-cache.test.ts).
 *
 * Why reuse at all: a sidecar reports every 10 s and every report is authenticated; a review per
 * report is a JWT check in kube-apiserver per sidecar every 10 s. Why it is safe to reuse one
 * longer than a minute: the review already said the token is valid (signature, audience, not
 * expired, bound object alive); what can change afterwards is (1) the token expires, which its
 * own `exp` says, (2) its ServiceAccount, Secret or bound pod is deleted. (1) bounds every entry;
 * for (2) a pod-bound token is reused past `unwatchedMs` only while the controller's pod watch
 * holds its pod (same UID), so a deleted pod's token stops working once the watch sees the
 * deletion (seconds); an answer is reused past `unwatchedAccountMs` only while the controller's
 * ServiceAccount watch holds its account (same UID), so a deleted ServiceAccount's tokens stop
 * within seconds too (the API server's own token cache adds up to 10 s), and within
 * `unwatchedAccountMs` without that watch.
 */

/** The bound pod as the controller's pod watch holds it (the fields the identity reads). */
export interface WatchedPod {
  metadata?: {
    uid?: string | undefined;
    labels?: Record<string, string> | undefined;
    annotations?: Record<string, string> | undefined;
  };
  spec?: { serviceAccountName?: string | undefined };
}

/** The controller's ServiceAccount watch: the accounts that exist now, by UID. */
export interface AccountWatch {
  /** False until the watch's first list is in: then a missing account means nothing. */
  readonly hasSynced: boolean;
  uid(namespace: string, name: string): string | undefined;
}

/** A token's ServiceAccount as its review named it (the UID is the account's, not the token's). */
export interface ReviewedAccount {
  namespace: string;
  name: string;
  uid?: string | undefined;
}

/** The controller's pod cache (the injection auditor's watch), when it has one. */
export interface PodWatch {
  /** False until the watch's first list is in: then a missing pod means nothing. */
  readonly hasSynced: boolean;
  get(namespace: string, name: string): WatchedPod | undefined;
}

export interface ReviewCacheOptions {
  now: () => number;
  /** The longest a positive answer is reused (`--token-review-cache`). */
  maxMs: number;
  /**
   * The longest for a positive answer nothing else vouches for: a token without `exp`, or bound
   * to a pod the pod watch does not hold (no watch, not synced yet, or a pod without the pool
   * label). The 60 s the controller always used.
   */
  unwatchedMs: number;
  /** A refusal is reused this long: a misconfigured sidecar costs a review per few seconds. */
  negativeMs: number;
  /** At most this many entries; the oldest goes first. */
  maxEntries: number;
  pods?: PodWatch | undefined;
  accounts?: AccountWatch | undefined;
  /**
   * The longest for a positive answer whose ServiceAccount `accounts` does not hold with the
   * review's UID (no watch, not synced yet, a UID the review did not give): how late a deleted
   * ServiceAccount may be noticed then. Default: `maxMs` (no rule of its own).
   */
  unwatchedAccountMs?: number | undefined;
  /**
   * The longest for a positive answer whose account the synced watch does not hold: created a
   * moment ago (the watch a little behind), or deleted a moment ago, which the API server's own
   * token cache (10 s in kube-apiserver) may still call valid. No renewal window either. Default:
   * `unwatchedAccountMs`.
   */
  unseenAccountMs?: number | undefined;
  /**
   * The renewal window: a positive answer that ran out is still served this long (`stale`) while
   * the caller reviews the token again in the background, never past the token's own `exp` nor
   * while its bound pod is not watched. 0 (the default): none.
   */
  renewMs?: number | undefined;
  /**
   * A positive answer is kept between `1 − lifetimeJitter` and 1 times its lifetime, drawn from
   * `random` (0 ≤ r < 1) per answer. Why: the sidecars of a fleet connect within minutes of each
   * other (an install, a controller rollout), so without it their answers (and the review tickets
   * that expire with them) run out together one cache lifetime later, and every renewal hits the
   * API server in the same minutes. Shortening only: every bound above stays an upper bound.
   * 0 (the default), or no `random`: no jitter.
   */
  lifetimeJitter?: number | undefined;
  random?: (() => number) | undefined;
}

/** What a review said about a token, as the cache needs it. */
export type ReviewAnswer<T> =
  | {
      ok: true;
      value: T;
      pod?: { namespace: string; name: string; uid?: string | undefined };
      account?: ReviewedAccount | undefined;
    }
  | { ok: false; value: T };

interface Entry<T> {
  value: T;
  untilMs: number;
  /** Served as `stale` until then (the renewal window); equal to `untilMs` when there is none. */
  staleUntilMs: number;
  /** Set when the entry lives only while the pod watch holds this pod. */
  pod?: { namespace: string; name: string; uid?: string | undefined; seen: WatchedPod };
  /**
   * The account its review named (with a UID): once the account watch has held it (`seen`), the
   * entry lives only while the watch still does. An account the watch had not seen yet when it
   * was reviewed (created a moment before its first token) counts from when the watch sees it.
   */
  account?: ReviewedAccount & { seen: boolean };
}

export type CacheHit<T> =
  | { kind: 'hit'; value: T; untilMs: number }
  /** The pod watch holds a newer version of the bound pod: the caller refreshes what it read. */
  | { kind: 'pod-changed'; value: T; untilMs: number; pod: WatchedPod }
  /** Ran out, within the renewal window: serve it, and review the token again meanwhile. */
  | { kind: 'stale'; value: T; untilMs: number }
  | { kind: 'miss' };

/**
 * 30 min: with the pod and ServiceAccount watches, a longer reuse notices nothing later (a deleted
 * pod or account ends its answers within seconds); it only costs fewer TokenReviews (at 10,000
 * sidecars ~6 a second instead of ~33 with 5 min). A kubelet replaces a 1 h token after ~48 min.
 */
export const DEFAULT_TOKEN_REVIEW_CACHE_MS = 30 * 60_000;
export const UNWATCHED_TTL_MS = 60_000;
export const NEGATIVE_TTL_MS = 5_000;
export const MAX_ENTRIES = 20_000;

/** The token's `exp` in ms, read without verifying it (the API server did); undefined if none. */
export function tokenExpiryMs(token: string): number | undefined {
  const payload = token.split('.')[1];
  if (payload === undefined) return undefined;
  try {
    const claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as {
      exp?: unknown;
    };
    return typeof claims.exp === 'number' && Number.isFinite(claims.exp)
      ? claims.exp * 1000
      : undefined;
  } catch {
    return undefined;
  }
}

export class ReviewCache<T> {
  readonly #options: ReviewCacheOptions;
  readonly #entries = new Map<string, Entry<T>>();

  constructor(options: ReviewCacheOptions) {
    this.#options = options;
  }

  get size(): number {
    return this.#entries.size;
  }

  get(key: string): CacheHit<T> {
    const entry = this.#entries.get(key);
    if (entry === undefined) return { kind: 'miss' };
    const nowMs = this.#options.now();
    if (entry.staleUntilMs <= nowMs) {
      this.#entries.delete(key);
      return { kind: 'miss' };
    }
    const { untilMs } = entry;
    const stale = untilMs <= nowMs;
    const served: CacheHit<T> = { kind: stale ? 'stale' : 'hit', value: entry.value, untilMs };
    // Its ServiceAccount deleted (or recreated: another UID): review again, which refuses it.
    if (entry.account !== undefined) {
      const held = this.holdsAccount(entry.account);
      if (entry.account.seen && !held) {
        this.#entries.delete(key);
        return { kind: 'miss' };
      }
      entry.account.seen = held;
    }
    if (entry.pod === undefined) return served;
    const pods = this.#options.pods;
    const pod = pods?.get(entry.pod.namespace, entry.pod.name);
    // Gone from the watch (deleted, relabelled, or the watch restarting): review again, which
    // asks the API server itself.
    if (
      pods === undefined ||
      !pods.hasSynced ||
      pod === undefined ||
      !sameUid(pod, entry.pod.uid)
    ) {
      this.#entries.delete(key);
      return { kind: 'miss' };
    }
    if (pod === entry.pod.seen) return served;
    // A relabelled pod's answer that also ran out: review it now rather than serve old labels.
    if (stale) {
      this.#entries.delete(key);
      return { kind: 'miss' };
    }
    return { kind: 'pod-changed', value: entry.value, untilMs, pod };
  }

  /**
   * Keeps what a review said about `token` (the caller has reviewed it just now). Returns until
   * when a positive answer is kept (undefined: not kept, or a refusal).
   */
  set(key: string, token: string, answer: ReviewAnswer<T>): number | undefined {
    const { now, maxMs, unwatchedMs, negativeMs, pods } = this.#options;
    const nowMs = now();
    const expiry = tokenExpiryMs(token);
    let ttl: number;
    let watched: Entry<T>['pod'];
    if (!answer.ok) ttl = negativeMs;
    else if (expiry === undefined) ttl = Math.min(maxMs, unwatchedMs);
    else if (answer.pod === undefined) ttl = maxMs;
    else {
      const seen =
        pods?.hasSynced === true ? pods.get(answer.pod.namespace, answer.pod.name) : undefined;
      if (seen !== undefined && sameUid(seen, answer.pod.uid)) {
        ttl = maxMs;
        watched = { ...answer.pod, seen };
      } else ttl = Math.min(maxMs, unwatchedMs);
    }
    const account = answer.ok ? this.#accountOf(answer.account) : undefined;
    const unseen = account?.seen === false && this.#options.accounts?.hasSynced === true;
    const { unwatchedAccountMs = maxMs, unseenAccountMs = unwatchedAccountMs } = this.#options;
    if (answer.ok && account?.seen !== true)
      ttl = Math.min(ttl, unseen ? unseenAccountMs : unwatchedAccountMs);
    if (answer.ok) ttl *= 1 - this.#jitter();
    // A positive answer never outlives the token's own expiry: the review vouched for it until
    // then at most. A refusal stays one (an expired token does not become valid).
    const untilMs = Math.min(nowMs + ttl, answer.ok ? (expiry ?? Infinity) : Infinity);
    // A pod-bound token the watch does not hold gets no window: its 60 s bound how late a
    // deleted pod is noticed.
    const renewable = answer.ok && (answer.pod === undefined || watched !== undefined) && !unseen;
    const staleUntilMs = renewable
      ? Math.max(untilMs, Math.min(untilMs + (this.#options.renewMs ?? 0), expiry ?? Infinity))
      : untilMs;
    this.#store(key, {
      value: answer.value,
      untilMs,
      staleUntilMs,
      ...(watched && { pod: watched }),
      ...(account && { account }),
    });
    return answer.ok && untilMs > nowMs ? untilMs : undefined;
  }

  /**
   * Keeps a positive answer another replica's review gave (a review ticket, review-ticket.ts)
   * until `untilMs`, `maxMs` from now at most; a pod-bound one only while the pod watch holds
   * `pod` as `seen` (the caller checked it does, with the ticket's UID); `unwatchedAccountMs`
   * at most unless the account watch holds `account`, and then only while it does.
   */
  admit(
    key: string,
    value: T,
    untilMs: number,
    pod?: { namespace: string; name: string; uid?: string | undefined; seen: WatchedPod },
    account?: ReviewedAccount,
  ): void {
    const { now, maxMs, unwatchedAccountMs } = this.#options;
    const held = this.#accountOf(account);
    const longest = held?.seen === true ? maxMs : (unwatchedAccountMs ?? maxMs);
    // No renewal window: this replica never reviewed the token, so it has no `exp` to bound one.
    const kept = Math.min(untilMs, now() + longest);
    this.#store(key, {
      value,
      untilMs: kept,
      staleUntilMs: kept,
      ...(pod && { pod }),
      ...(held && { account: held }),
    });
  }

  /** What an entry keeps of `account`: nothing without a UID (nothing to check it by). */
  #accountOf(account: ReviewedAccount | undefined): Entry<T>['account'] {
    if (account?.uid === undefined) return undefined;
    return { ...account, seen: this.holdsAccount(account) };
  }

  /** Whether the account watch holds `account` with its UID now (false without a UID). */
  holdsAccount(account: ReviewedAccount | undefined): account is ReviewedAccount {
    const accounts = this.#options.accounts;
    if (account?.uid === undefined || accounts?.hasSynced !== true) return false;
    return accounts.uid(account.namespace, account.name) === account.uid;
  }

  /** This answer's share of `lifetimeJitter` (0 ≤ j < lifetimeJitter). */
  #jitter(): number {
    const { lifetimeJitter = 0, random } = this.#options;
    if (!(lifetimeJitter > 0) || random === undefined) return 0;
    return Math.min(1, lifetimeJitter) * Math.min(Math.max(random(), 0), 1);
  }

  #store(key: string, entry: Entry<T>): void {
    this.#entries.delete(key);
    if (entry.untilMs <= this.#options.now()) return;
    while (this.#entries.size >= this.#options.maxEntries) {
      const oldest = this.#entries.keys().next();
      if (oldest.done === true) break;
      this.#entries.delete(oldest.value);
    }
    this.#entries.set(key, entry);
  }

  /** After a `pod-changed` hit: the value read from the newer pod, kept until the same expiry. */
  refresh(key: string, value: T, pod: WatchedPod): void {
    const entry = this.#entries.get(key);
    if (entry?.pod === undefined) return;
    entry.value = value;
    entry.pod.seen = pod;
  }
}

function sameUid(pod: WatchedPod, uid: string | undefined): boolean {
  return uid === undefined || pod.metadata?.uid === uid;
}
