/**
 * Prefix-cache affinity: send requests that share a prompt prefix to the same endpoint, where
 * the inference server (vLLM, SGLang, TGI) still holds that prefix's KV cache and can skip its
 * prefill. This module reads what a request offers for the decision — its prompt's blocks
 * (`prompt-blocks.ts`) or an affinity header — and `affinity-decision.ts` decides, on every pick
 * of the balancer (`balancer.ts`), with `prefix-index.ts` and `bounded-load.ts`.
 */
import {
  DEFAULT_BLOCK_CHARS,
  DEFAULT_MAX_BLOCKS,
  promptBlocks,
  type PromptBlocks,
} from './prompt-blocks.ts';
import type { AffinityPolicy } from './types.ts';

/**
 * The defaults of `affinity.maxSlowdown` and `maxExtraInFlight`, and the fixed part of the
 * slowdown check; defined with the schema's other defaults, whose descriptions quote them.
 */
export {
  AFFINITY_MAX_EXTRA_IN_FLIGHT,
  AFFINITY_MAX_SLOWDOWN,
  AFFINITY_SLOWDOWN_MIN_MS,
  AFFINITY_SLOWDOWN_MIN_SAMPLES,
  AFFINITY_SLOW_RECHECK_AFTER_MS,
} from '../../crds/policy-defaults.ts';

/**
 * Prompts shorter than this get no affinity and are load-balanced. 64 characters is about 16
 * tokens, one KV-cache block in vLLM: a prompt that short cannot produce a cache hit worth giving
 * up load balancing for. It also keeps one-line prompts ("hi") from piling onto one endpoint.
 */
export const MIN_PREFIX_CHARS_FOR_AFFINITY = 64;

/** The parts of an HTTP request affinity looks at; `body` is the parsed JSON (anything). */
export interface AffinityRequest {
  headers: Record<string, string | string[] | undefined>;
  body: unknown;
}

/** What the balancer needs for the affinity decision of one request. */
export interface AffinityInput {
  /** `Header`: the header's value. */
  affinityKey?: string | undefined;
  /** `Prefix`: the prompt's blocks. */
  prompt?: PromptBlocks | undefined;
  /**
   * The endpoint that holds the state this request refers to (a stored response): it goes there
   * or nowhere, ahead of every other rule. Set by the shell, never from a header.
   */
  pinnedEndpointId?: string | undefined;
}

/**
 * The affinity input of a request: its prompt's blocks for `Prefix` (undefined below
 * MIN_PREFIX_CHARS_FOR_AFFINITY or for a body without a readable prompt), the header's value for
 * `Header`, nothing for `None`. Never throws.
 */
export function affinityFor(request: AffinityRequest, policy: AffinityPolicy): AffinityInput {
  if (policy.key === 'Header') return { affinityKey: affinityKeyFor(request, policy) };
  if (policy.key !== 'Prefix') return {};
  const prompt = promptBlocks(
    request.body,
    {
      blockChars: DEFAULT_BLOCK_CHARS,
      maxBlocks: DEFAULT_MAX_BLOCKS,
      homeChars: policy.prefixChars,
    },
    MIN_PREFIX_CHARS_FOR_AFFINITY,
  );
  return prompt === undefined ? {} : { prompt };
}

/**
 * The affinity header's value when `affinity.key` is `Header` (the first value when repeated),
 * or undefined: for other keys, and for an absent or empty header. Never throws.
 */
export function affinityKeyFor(
  request: AffinityRequest,
  policy: AffinityPolicy,
): string | undefined {
  if (policy.key !== 'Header') return undefined;
  try {
    return headerKey(request.headers, policy.header);
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
