/**
 * Prefix-cache affinity: send requests that share a prompt prefix to the same endpoint, where
 * the inference server (vLLM, SGLang, TGI) still holds that prefix's KV cache and can skip its
 * prefill. Two parts: deriving a key from a request, and mapping a key to an endpoint.
 */
import { fmix32, fnv1a64, toHex64 } from './hash.ts';
import type { AffinityPolicy } from './types.ts';

/** The defaults of `affinity.maxSlowdown` and `maxExtraInFlight`; defined with the schema's other defaults. */
export { AFFINITY_MAX_EXTRA_IN_FLIGHT, AFFINITY_MAX_SLOWDOWN } from '../../crds/policy-defaults.ts';

/**
 * Prompts whose stable prefix is shorter than this get no affinity key and are load-balanced.
 * 64 characters is about 16 tokens, less than one KV-cache block (16 tokens in vLLM): a prefix
 * that short cannot produce a cache hit worth giving up load balancing for. It also keeps
 * one-line prompts ("hi") from piling onto one endpoint per identical string.
 */
export const MIN_PREFIX_CHARS_FOR_AFFINITY = 64;

/** The parts of an HTTP request affinity looks at; `body` is the parsed JSON (anything). */
export interface AffinityRequest {
  headers: Record<string, string | string[] | undefined>;
  body: unknown;
}

/** Separates role from content, and message from message, in the serialised prefix. */
const FIELD_SEP = '\u001f';
const RECORD_SEP = '\u001e';

/**
 * The affinity key of a request, or undefined for "no affinity, just balance".
 *
 * - `Header`: the header's value (the first one when repeated); undefined when absent or empty.
 * - `Prefix`: FNV-1a 64 (hex) of the first `prefixChars` characters of the stable prompt prefix
 *   (see `stablePromptText`); undefined below MIN_PREFIX_CHARS_FOR_AFFINITY. The key is a hash,
 *   so prompt text never leaves this function (it ends up in debug output and traces).
 * - `None`: undefined.
 *
 * Never throws: a request it cannot read simply has no key.
 */
export function affinityKeyFor(
  request: AffinityRequest,
  policy: AffinityPolicy,
): string | undefined {
  try {
    if (policy.key === 'Header') return headerKey(request.headers, policy.header);
    if (policy.key === 'Prefix') return prefixKey(request.body, policy.prefixChars);
    return undefined;
  } catch {
    // A getter or proxy that throws: the key is an optimisation, the request must go on.
    return undefined;
  }
}

function headerKey(headers: AffinityRequest['headers'], name: string): string | undefined {
  if (typeof headers !== 'object' || headers === null || typeof name !== 'string') return undefined;
  const raw = headers[name.toLowerCase()];
  const value = Array.isArray(raw) ? (raw[0] as unknown) : raw;
  return typeof value === 'string' && value !== '' ? value : undefined;
}

function prefixKey(body: unknown, prefixChars: number): string | undefined {
  if (!(prefixChars >= 1)) return undefined;
  const limit = Number.isFinite(prefixChars) ? Math.floor(prefixChars) : Infinity;
  const text = stablePromptText(body, limit);
  if (text === undefined) return undefined;
  const prefix = text.slice(0, limit);
  if (prefix.length < MIN_PREFIX_CHARS_FOR_AFFINITY) return undefined;
  return toHex64(fnv1a64(prefix));
}

/**
 * The part of a prompt that the next request of the same conversation will repeat verbatim.
 *
 * - Chat bodies `{messages: [{role, content}]}`: role and text of every message except the last
 *   when there are two or more (the last one is the new turn), or of the only message. Content is
 *   a string, or an array of parts of which the `{type: 'text', text}` ones count; null content
 *   (an assistant turn with tool calls) counts as empty.
 * - Completion bodies `{prompt: string | string[]}`: the prompt (array items joined).
 *
 * Stops reading once `limit` characters are collected, so a huge conversation costs only
 * `limit`; messages beyond that point are not validated. Undefined for any other shape
 * (including token-id prompts, which have no characters to count).
 */
export function stablePromptText(body: unknown, limit = Infinity): string | undefined {
  if (!isRecord(body)) return undefined;
  if ('messages' in body) {
    const messages = body['messages'];
    if (!Array.isArray(messages) || messages.length === 0) return undefined;
    const stableCount = messages.length >= 2 ? messages.length - 1 : 1;
    let out = '';
    for (let i = 0; i < stableCount && out.length < limit; i++) {
      const serialised = serialiseMessage(messages[i]);
      if (serialised === undefined) return undefined;
      out += serialised;
    }
    return out;
  }
  const prompt = body['prompt'];
  if (typeof prompt === 'string') return prompt;
  if (Array.isArray(prompt) && prompt.every((p) => typeof p === 'string')) {
    return prompt.join(RECORD_SEP);
  }
  return undefined;
}

function serialiseMessage(message: unknown): string | undefined {
  if (!isRecord(message) || typeof message['role'] !== 'string') return undefined;
  const text = contentText(message['content']);
  return text === undefined ? undefined : message['role'] + FIELD_SEP + text + RECORD_SEP;
}

function contentText(content: unknown): string | undefined {
  if (typeof content === 'string') return content;
  if (content === null || content === undefined) return '';
  if (!Array.isArray(content)) return undefined;
  const texts: string[] = [];
  for (const part of content) {
    if (!isRecord(part)) return undefined;
    if (part['type'] !== 'text') continue; // images, audio: not text, not counted
    if (typeof part['text'] !== 'string') return undefined;
    texts.push(part['text']);
  }
  return texts.join('\n');
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * Rendezvous (highest-random-weight) hashing: each candidate gets the weight hash(key, id) and
 * the heaviest wins. When an endpoint joins or leaves, only the keys it wins (or won) move,
 * about 1/n of them, and every sidecar computes the same winner without coordination, so the
 * whole fleet sends a prefix to the same cache. A ring would need virtual nodes to be as even.
 *
 * Ties (probability 2^-53 per pair) go to the smaller id so the result never depends on the
 * order of `candidates`. Undefined when there are no candidates.
 */
export function rendezvousPick<T extends { readonly id: string }>(
  key: string,
  candidates: readonly T[],
): T | undefined {
  const keyState = fnv1a64(key + FIELD_SEP);
  let best: T | undefined;
  let bestWeight = -1;
  for (const candidate of candidates) {
    const h = fnv1a64(candidate.id, keyState);
    const wHi = fmix32(h.hi ^ fmix32(h.lo));
    const wLo = fmix32(h.lo ^ wHi);
    // 32 + 21 bits: the most a double holds exactly.
    const weight = wHi * 0x200000 + (wLo >>> 11);
    if (weight > bestWeight || (weight === bestWeight && candidate.id < (best as T).id)) {
      best = candidate;
      bestWeight = weight;
    }
  }
  return best;
}
