/**
 * Reasons and messages the reconcile core reports: condition reasons, event reasons and the
 * problems behind them. Reasons are stable CamelCase codes (the shell and tests decide on them);
 * messages are for people and may change.
 */

/** Every reason the core writes into a condition or an event. */
export const Reason = {
  // Accepted
  Accepted: 'Accepted',
  InvalidSpec: 'InvalidSpec',
  UnsupportedField: 'UnsupportedField',
  // ResolvedRefs
  BackendsResolved: 'BackendsResolved',
  ServiceNotFound: 'ServiceNotFound',
  ServiceTypeUnsupported: 'ServiceTypeUnsupported',
  ServicePortNotFound: 'ServicePortNotFound',
  SecretNotFound: 'SecretNotFound',
  SecretKeyNotFound: 'SecretKeyNotFound',
  SecretKeyInvalid: 'SecretKeyInvalid',
  InferencePoolNotFound: 'InferencePoolNotFound',
  InferencePoolNotReadable: 'InferencePoolNotReadable',
  InferencePoolUnsupported: 'InferencePoolUnsupported',
  // Ready (and ResolvedRefs when the spec was not accepted)
  EndpointsReady: 'EndpointsReady',
  NoReadyEndpoints: 'NoReadyEndpoints',
  BackendsNotResolved: 'BackendsNotResolved',
  NotAccepted: 'NotAccepted',
  // events about snapshot changes
  EndpointsChanged: 'EndpointsChanged',
  PolicyChanged: 'PolicyChanged',
  ApiKeyChanged: 'ApiKeyChanged',
  // events about models
  AliasTargetNotServed: 'AliasTargetNotServed',
} as const;

export type Reason = (typeof Reason)[keyof typeof Reason];

/** One thing that keeps a pool or a backend from working, for a condition or an event. */
export interface Problem {
  reason: Reason;
  /** For a person; never contains a Secret's value. */
  message: string;
}

/** `1 backend`, `2 backends`. */
export function plural(n: number, noun: string): string {
  return `${n} ${noun}${n === 1 ? '' : 's'}`;
}

/** The first `max` items joined with `; `, and how many more there were. */
export function joinLimited(items: readonly string[], max: number): string {
  const shown = items.slice(0, max).join('; ');
  return items.length > max ? `${shown}; and ${items.length - max} more` : shown;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/**
 * `text` cut to at most `maxBytes` bytes of UTF-8 (with "..." where it was cut), for API fields
 * with a byte limit: condition messages (32768) and event notes (1024).
 */
export function clipUtf8(text: string, maxBytes: number): string {
  const bytes = encoder.encode(text);
  if (bytes.length <= maxBytes) return text;
  // A cut inside a character decodes as U+FFFD: drop it.
  return `${decoder.decode(bytes.subarray(0, Math.max(0, maxBytes - 3))).replace(/\uFFFD+$/, '')}...`;
}
