/**
 * How many queue positions a known cached prefix is worth, learned from the pool's own traffic.
 *
 * A request sent where its prompt's prefix is cached skips that prefix's prefill; sent to a server
 * whose batch is full it waits for a running request to finish first. On the routing benchmark a
 * queue position costs more than the prefill of an ordinary shared prefix saves, so
 * a full home is given up (docs/policy.md §3) — but the requests that carry most of the cacheable
 * tokens are the long ones (a conversation's late turns, a shared document): a 40k-token prefix
 * saves seconds of prefill, several positions' worth. The exchange rate between the two is not a
 * constant of switchyard's; it depends on the model, the hardware and the traffic, so both sides
 * are measured here:
 *
 * - **prefill per byte**: TTFT ÷ request size, over requests of at least MIN_SAMPLE_BYTES that
 *   were sent to a server with a free slot (no queue in their TTFT). Some of them hit a cache this
 *   sidecar did not know about and make the rate look lower: the error is on the side of keeping
 *   the home less often.
 * - **a queue position**: how long a request holds its slot (start to end, same requests), over
 *   the server's batch: with every slot busy, one frees that often.
 *
 * Both are pool-wide EWMAs (the endpoints of a pool serve one model on like hardware); until each
 * has a sample the answer is 0 positions, which is the rule without this module.
 */
import type { PrefillExchangeReading } from './types.ts';

/** Smaller requests' TTFT is mostly fixed cost (connection, scheduling, first decode step). */
export const MIN_SAMPLE_BYTES = 16_384;

/** Weight of the newest sample; slow on purpose: this is a property of the fleet, not of a moment. */
export const EXCHANGE_SAMPLE_WEIGHT = 0.05;

/** No prefix buys more than this many positions: a queue that long is a backlog, not a wait. */
export const MAX_QUEUE_POSITIONS = 8;

export class PrefillExchange {
  #msPerByte: number | undefined;
  #holdMs: number | undefined;

  /**
   * One finished, streamed, successful attempt that started with a free slot: its TTFT, how long
   * it held the slot (start to end) and its request's size. Unusable numbers are ignored.
   */
  observe(ttftMs: number, holdMs: number, requestBytes: number): void {
    if (!(requestBytes >= MIN_SAMPLE_BYTES) || !Number.isFinite(requestBytes)) return;
    if (!(ttftMs >= 0) || !(holdMs >= ttftMs) || !Number.isFinite(holdMs)) return;
    this.#msPerByte = blend(this.#msPerByte, ttftMs / requestBytes);
    this.#holdMs = blend(this.#holdMs, holdMs);
  }

  /**
   * How many queue positions sending `cachedChars` of prefix to a server of `batch` slots is
   * worth: the prefill it saves over the time one position takes, rounded down, capped at
   * MAX_QUEUE_POSITIONS; 0 until both rates are known or for a batch that is not positive.
   */
  positionsWorth(cachedChars: number, batch: number): number {
    const msPerByte = this.#msPerByte;
    const holdMs = this.#holdMs;
    if (msPerByte === undefined || holdMs === undefined || !(batch >= 1) || !(holdMs > 0)) return 0;
    if (!(cachedChars > 0)) return 0;
    const positions = Math.floor((cachedChars * msPerByte * batch) / holdMs);
    return Math.min(MAX_QUEUE_POSITIONS, positions);
  }

  /**
   * A request's own prefill in units of a typical request's slot time (start to end): its size
   * times the prefill per byte, over the hold. What its first token costs next to the requests
   * ahead of it (server-speed.ts). Undefined until both rates are known or for an unknown size.
   */
  prefillInHolds(requestBytes: number | undefined): number | undefined {
    const msPerByte = this.#msPerByte;
    const holdMs = this.#holdMs;
    if (msPerByte === undefined || holdMs === undefined || !(holdMs > 0)) return undefined;
    if (requestBytes === undefined || !(requestBytes >= 0) || !Number.isFinite(requestBytes))
      return undefined;
    return (requestBytes * msPerByte) / holdMs;
  }

  /** The learned rates, for metrics: undefined until sampled. */
  snapshot(): PrefillExchangeReading {
    return {
      prefillMsPerKiB: this.#msPerByte === undefined ? undefined : this.#msPerByte * 1024,
      holdMs: this.#holdMs,
    };
  }
}

function blend(previous: number | undefined, sample: number): number {
  return previous === undefined
    ? sample
    : (1 - EXCHANGE_SAMPLE_WEIGHT) * previous + EXCHANGE_SAMPLE_WEIGHT * sample;
}
