/**
 * Review tickets: what one replica's TokenReview said about a sidecar's token, signed so that
 * every replica can take it without asking the API server again (issue 46).
 *
 * Why: a replica reviews each sidecar's token once per `--token-review-cache` and keeps the answer
 * to itself. When a replica dies (or a rollout replaces it), all its sidecars reconnect to the
 * others at once, and each needed a fresh TokenReview there (3,441 at once at 10,000 sidecars,
 * one per reconnecting sidecar at 5,000 too). With a ticket the survivors check an HMAC instead:
 * no review during a failover (docs/benchmarks.md, "Review tickets").
 *
 * The ticket vouches for nothing the review did not: it names the token by its SHA-256 (it is
 * useless without the token itself, and the token is never in it), carries the identity the review
 * returned, and expires when the reviewing replica's cache entry would have (the token's own `exp`
 * at the latest, `--token-review-cache` after the review at most): a ticket handed on from a
 * ticket keeps that expiry, so a chain of them never outlives the review. A pod-bound token's
 * ticket is taken only while the taking replica's pod watch holds that pod (token-auth.ts), as
 * the cache's own entries are.
 *
 * The key: derived (HKDF) from the controller's serving key, which every replica already shares
 * (the chart's Secret or `--tls-secret`), so tickets hold across replicas and restarts, rotate
 * with the certificate, and need no new secret. A controller without TLS hands out none.
 *
 * No clock and no I/O (the caller passes the time), so every rule is a unit test away; it lives
 * beside token-auth.ts rather than in core/ only because it needs `node:crypto`.
 */
import { createHmac, hkdfSync, timingSafeEqual } from 'node:crypto';

/** What a ticket says. */
export interface TicketClaims {
  /** The token's SHA-256, hex (the review cache's key). */
  tokenHash: string;
  namespace: string;
  serviceAccount: string;
  podName?: string | undefined;
  podUid?: string | undefined;
  /** The ServiceAccount's UID the review gave: a replica's account watch checks it still exists. */
  accountUid?: string | undefined;
  /** ms since the epoch after which the ticket is void. */
  expiresAtMs: number;
}

const VERSION = 't1';
/** Tickets longer than this are refused unread (a header is not a place for big input). */
const MAX_TICKET_LENGTH = 2048;

/** The HMAC key every replica derives from the same serving key. */
export function ticketKey(servingKeyPem: string): Buffer {
  return Buffer.from(
    hkdfSync(
      'sha256',
      Buffer.from(servingKeyPem, 'utf8'),
      'switchyard',
      'sidecar review tickets v1',
      32,
    ),
  );
}

export function issueTicket(key: Buffer, claims: TicketClaims): string {
  const payload = Buffer.from(
    JSON.stringify({
      h: claims.tokenHash,
      n: claims.namespace,
      s: claims.serviceAccount,
      ...(claims.podName === undefined ? {} : { p: claims.podName }),
      ...(claims.podUid === undefined ? {} : { u: claims.podUid }),
      ...(claims.accountUid === undefined ? {} : { a: claims.accountUid }),
      e: claims.expiresAtMs,
    }),
    'utf8',
  ).toString('base64url');
  return `${VERSION}.${payload}.${mac(key, payload)}`;
}

export type TicketCheck =
  | { ok: true; claims: TicketClaims }
  | { ok: false; reason: 'malformed' | 'signature' | 'other-token' | 'expired' };

/**
 * What `ticket` says, when one of `keys` signed it, it names `tokenHash` and it has not expired
 * at `nowMs`. Several keys: the current serving key's and the one before a rotation.
 */
export function checkTicket(
  keys: readonly Buffer[],
  ticket: string,
  tokenHash: string,
  nowMs: number,
): TicketCheck {
  if (ticket.length > MAX_TICKET_LENGTH) return { ok: false, reason: 'malformed' };
  const parts = ticket.split('.');
  if (parts.length !== 3 || parts[0] !== VERSION) return { ok: false, reason: 'malformed' };
  const payload = parts[1]!;
  const signature = Buffer.from(parts[2]!, 'base64url');
  const signed = keys.some((key) => {
    const expected = Buffer.from(mac(key, payload), 'base64url');
    return expected.length === signature.length && timingSafeEqual(expected, signature);
  });
  if (!signed) return { ok: false, reason: 'signature' };
  let raw: Record<string, unknown>;
  try {
    raw = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as Record<string, unknown>;
  } catch {
    return { ok: false, reason: 'malformed' };
  }
  const { h, n, s, p, u, a, e } = raw;
  if (
    typeof h !== 'string' ||
    typeof n !== 'string' ||
    typeof s !== 'string' ||
    typeof e !== 'number' ||
    (p !== undefined && typeof p !== 'string') ||
    (u !== undefined && typeof u !== 'string') ||
    (a !== undefined && typeof a !== 'string')
  )
    return { ok: false, reason: 'malformed' };
  if (h !== tokenHash) return { ok: false, reason: 'other-token' };
  if (e <= nowMs) return { ok: false, reason: 'expired' };
  return {
    ok: true,
    claims: {
      tokenHash: h,
      namespace: n,
      serviceAccount: s,
      podName: p,
      podUid: u,
      accountUid: a,
      expiresAtMs: e,
    },
  };
}

function mac(key: Buffer, payload: string): string {
  return createHmac('sha256', key).update(`${VERSION}.${payload}`).digest('base64url');
}
