/**
 * Injected faults: what a generation request meets before it reaches the queue.
 */
import type { RandomFn } from '../../lib/rng.ts';
import type { EngineOptions } from './engine-options.ts';

/**
 * `error`: answer 500 at once; `rate-limit`: 429 at once; `stall`: admit the request, send its
 * headers, then nothing until the client leaves; `none`: serve it.
 */
export type Fault =
  | { readonly kind: 'none' }
  | { readonly kind: 'error' }
  | { readonly kind: 'rate-limit' }
  | { readonly kind: 'stall' };

const NONE: Fault = { kind: 'none' };
const ERROR: Fault = { kind: 'error' };
const RATE_LIMIT: Fault = { kind: 'rate-limit' };
const STALL: Fault = { kind: 'stall' };

/**
 * Always three draws, whatever the outcome, so that the fault sequence depends only on the seed and
 * the request order (two policies replaying one trace meet the same faults).
 */
export function pickFault(
  rng: RandomFn,
  rates: Pick<EngineOptions, 'errorRate' | 'rateLimitRate' | 'stallRate'>,
): Fault {
  const uError = rng();
  const uRateLimit = rng();
  const uStall = rng();
  if (uError < rates.errorRate) return ERROR;
  if (uRateLimit < rates.rateLimitRate) return RATE_LIMIT;
  return uStall < rates.stallRate ? STALL : NONE;
}
