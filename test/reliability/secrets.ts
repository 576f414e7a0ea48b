/**
 * Secret-leak scanning: everything a run produced that an operator or a client can see (logs,
 * metrics, status, Events, admin JSON, error bodies and headers) searched for the API keys the
 * run configured, raw and in the encodings a leak would likely take.
 */

/** The forms a secret may take in text: as is, base64 (a Secret's data), JSON- and URL-escaped. */
export function secretForms(secret: string): string[] {
  return [
    secret,
    Buffer.from(secret).toString('base64'),
    Buffer.from(secret).toString('base64url'),
    JSON.stringify(secret).slice(1, -1),
    encodeURIComponent(secret),
  ];
}

/** Every place (by name) where any form of any secret appears, as `where: form`. */
export function findSecrets(sources: Record<string, string>, secrets: readonly string[]): string[] {
  const found: string[] = [];
  for (const [where, text] of Object.entries(sources)) {
    for (const secret of secrets) {
      for (const form of new Set(secretForms(secret))) {
        if (text.includes(form)) found.push(`${where}: ${form}`);
      }
    }
  }
  return found;
}
