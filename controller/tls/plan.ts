/**
 * What the controller does with its self-managed TLS Secret (docs/controller.md#tls): keep it,
 * issue a new serving certificate under the same CA, or start over with a new CA. The shell parses
 * the Secret's certificates into facts; this decides from the facts and the time it is given.
 */

/** The CA lives ten years and is replaced one year before it ends. */
export const CA_VALIDITY_MS = 10 * 365 * 24 * 3600_000;
export const CA_RENEW_BEFORE_MS = 365 * 24 * 3600_000;
/** A serving certificate lives a year and is renewed once two thirds of that have passed. */
export const SERVING_VALIDITY_MS = 365 * 24 * 3600_000;
export const SERVING_RENEW_AT_FRACTION = 2 / 3;
/** Certificates start this far in the past, so a node whose clock is a little behind accepts them. */
export const BACKDATE_MS = 5 * 60_000;

export interface CertificateFacts {
  notBeforeMs: number;
  notAfterMs: number;
}

export interface CaFacts extends CertificateFacts {
  /** basicConstraints CA:TRUE. */
  isCa: boolean;
  /** The Secret's ca.key is the private key of ca.crt. */
  keyMatches: boolean;
}

export interface ServingFacts extends CertificateFacts {
  /** subjectAltName entries, as `DNS:name` / `IP:address`. */
  subjectAltNames: string[];
  /** Signed by the CA of the same Secret. */
  signedByCa: boolean;
  /** tls.key is the private key of tls.crt. */
  keyMatches: boolean;
}

/** The parsed Secret; a part is undefined when missing or unparseable. */
export interface TlsSecretFacts {
  ca: CaFacts | undefined;
  serving: ServingFacts | undefined;
}

export type TlsPlan =
  /** Nothing to do until `recheckAtMs` (when the serving certificate is due for renewal). */
  | { kind: 'keep'; recheckAtMs: number }
  /** Keep the CA (sidecars trust it), issue a new serving certificate. */
  | { kind: 'issue-serving'; reason: string }
  /** A new CA and serving certificate; sidecars injected before must be restarted to trust it. */
  | { kind: 'create-ca'; reason: string };

/** `DNS:x` for names, `IP:x` for IPv4/IPv6 literals: the form subjectAltName facts use. */
export function subjectAltName(name: string): string {
  return /^[0-9.]+$/.test(name) || name.includes(':') ? `IP:${name}` : `DNS:${name}`;
}

/**
 * The plan for a Secret (`undefined`: it does not exist) that must serve `wantedNames` at `nowMs`.
 */
export function planTls(
  facts: TlsSecretFacts | undefined,
  wantedNames: readonly string[],
  nowMs: number,
): TlsPlan {
  if (facts === undefined) return { kind: 'create-ca', reason: 'the Secret does not exist' };
  const { ca, serving } = facts;
  if (ca === undefined) return { kind: 'create-ca', reason: 'ca.crt or ca.key is missing' };
  if (!ca.isCa) return { kind: 'create-ca', reason: 'ca.crt is not a CA certificate' };
  if (!ca.keyMatches) return { kind: 'create-ca', reason: 'ca.key does not belong to ca.crt' };
  if (ca.notBeforeMs > nowMs) return { kind: 'create-ca', reason: 'ca.crt is not valid yet' };
  if (ca.notAfterMs - CA_RENEW_BEFORE_MS <= nowMs)
    return { kind: 'create-ca', reason: 'ca.crt expires within a year' };

  if (serving === undefined)
    return { kind: 'issue-serving', reason: 'tls.crt or tls.key is missing' };
  if (!serving.signedByCa)
    return { kind: 'issue-serving', reason: 'tls.crt is not signed by ca.crt' };
  if (!serving.keyMatches)
    return { kind: 'issue-serving', reason: 'tls.key does not belong to tls.crt' };
  const have = new Set(serving.subjectAltNames);
  const missing = wantedNames.map(subjectAltName).filter((n) => !have.has(n));
  if (missing.length > 0)
    return { kind: 'issue-serving', reason: `tls.crt does not cover ${missing.join(', ')}` };
  if (serving.notBeforeMs > nowMs)
    return { kind: 'issue-serving', reason: 'tls.crt is not valid yet' };
  const renewAtMs =
    serving.notBeforeMs + (serving.notAfterMs - serving.notBeforeMs) * SERVING_RENEW_AT_FRACTION;
  if (renewAtMs <= nowMs) return { kind: 'issue-serving', reason: 'tls.crt is due for renewal' };
  return { kind: 'keep', recheckAtMs: renewAtMs };
}

/** Validity of a new serving certificate: a year, never past the CA's end. */
export function servingValidity(
  caNotAfterMs: number,
  nowMs: number,
): { notBeforeMs: number; notAfterMs: number } {
  return {
    notBeforeMs: nowMs - BACKDATE_MS,
    notAfterMs: Math.min(nowMs + SERVING_VALIDITY_MS, caNotAfterMs),
  };
}
