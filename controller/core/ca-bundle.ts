/**
 * A backend's CA bundle from a Secret (`tls.caSecretRef`): found, decoded, and PEM certificates,
 * or a problem that names the Secret and the key. The same check as an inline `caBundle`
 * (`checkPemCertificates`), so a bundle means the same wherever it comes from.
 */
import { checkPemCertificates } from '../../crds/semantic.ts';
import { readSecretText, type SecretKeyRef } from './api-key.ts';
import type { Secret } from './objects.ts';
import { Reason, type Problem } from './problems.ts';

export type CaBundleResult = { ok: true; caBundle: string } | { ok: false; problem: Problem };

export function readCaBundle(
  secrets: ReadonlyMap<string, Secret>,
  ref: SecretKeyRef,
): CaBundleResult {
  const read = readSecretText(secrets, ref);
  if (!read.ok) return read;
  const why = checkPemCertificates(read.text);
  if (why !== undefined) {
    return {
      ok: false,
      problem: { reason: Reason.SecretKeyInvalid, message: `The ${read.what} ${why}` },
    };
  }
  return { ok: true, caBundle: read.text };
}
