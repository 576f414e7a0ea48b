/**
 * A backend's API key from a Secret: found, decoded, and fit for an `Authorization` header, or a
 * problem that names the Secret and the key but never the value.
 */
import type { Secret } from './objects.ts';
import { Reason, type Problem } from './problems.ts';

export interface SecretKeyRef {
  name: string;
  key: string;
}

export type ApiKeyResult = { ok: true; apiKey: string } | { ok: false; problem: Problem };

const utf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * Base64 (as the API serves `Secret.data`) to text, or undefined when it is not base64 or not
 * UTF-8. `atob` is the standard global, so the pure core needs no `node:buffer`.
 */
export function decodeBase64Utf8(encoded: string): string | undefined {
  let binary: string;
  try {
    binary = atob(encoded);
  } catch {
    return undefined;
  }
  const bytes = Uint8Array.from(binary, (c) => c.charCodeAt(0));
  try {
    return utf8.decode(bytes);
  } catch {
    return undefined;
  }
}

/**
 * Node refuses a header value with a character outside tab, 0x20-0x7e and 0x80-0xff
 * (`ERR_INVALID_CHAR`): such a key would fail every request, so it is refused here, once, with a
 * message that says why.
 */
export function fitsHeader(value: string): boolean {
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (c === 0x09 || (c >= 0x20 && c <= 0x7e) || (c >= 0x80 && c <= 0xff)) continue;
    return false;
  }
  return true;
}

export type SecretTextResult =
  { ok: true; text: string; what: string } | { ok: false; problem: Problem };

/**
 * The value of key `ref.key` of the Secret `ref.name` as text, or a problem naming both (never
 * the value). `what`: how messages about the value name it ("key k of Secret s").
 */
export function readSecretText(
  secrets: ReadonlyMap<string, Secret>,
  ref: SecretKeyRef,
): SecretTextResult {
  const fail = (reason: Reason, message: string): SecretTextResult => ({
    ok: false,
    problem: { reason, message },
  });
  const secret = secrets.get(ref.name);
  if (secret === undefined) return fail(Reason.SecretNotFound, `Secret ${ref.name} not found`);
  const data = secret.data ?? {};
  const encoded = Object.hasOwn(data, ref.key) ? data[ref.key] : undefined;
  if (encoded === undefined) {
    return fail(Reason.SecretKeyNotFound, `Secret ${ref.name} has no key ${ref.key}`);
  }
  const text = decodeBase64Utf8(encoded);
  const what = `key ${ref.key} of Secret ${ref.name}`;
  if (text === undefined) {
    return fail(Reason.SecretKeyInvalid, `The ${what} is not base64-encoded UTF-8 text`);
  }
  return { ok: true, text, what };
}

/**
 * The key `ref.key` of the Secret `ref.name`, trimmed: `kubectl create secret --from-file` keeps
 * the file's trailing newline, and the environment-variable path of pool files trims too.
 */
export function readApiKey(secrets: ReadonlyMap<string, Secret>, ref: SecretKeyRef): ApiKeyResult {
  const read = readSecretText(secrets, ref);
  if (!read.ok) return read;
  const invalid = (message: string): ApiKeyResult => ({
    ok: false,
    problem: { reason: Reason.SecretKeyInvalid, message },
  });
  const apiKey = read.text.trim();
  if (apiKey === '') return invalid(`The ${read.what} is empty`);
  if (!fitsHeader(apiKey)) {
    return invalid(`The ${read.what} holds characters that cannot go into an HTTP header`);
  }
  return { ok: true, apiKey };
}
