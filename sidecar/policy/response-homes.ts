/**
 * Which endpoint created which stored response (the Responses API's `resp_…` ids). A server keeps
 * a response only where it made it (vLLM with `VLLM_ENABLE_RESPONSES_API_STORE=1`, OpenAI per
 * account), so a request with `previous_response_id`, and `GET/DELETE /v1/responses/{id}` or
 * `POST …/cancel`, must go back to that endpoint: anywhere else it is a 404.
 *
 * The map is bounded two ways, like a cache: at most `maxEntries` ids (the least recently used go
 * first; a conversation's every turn touches its id) and at most `maxAgeMs` since the id was last
 * used (servers expire stored responses too, and an id this sidecar has not seen for that long is
 * better routed normally than pinned to an endpoint that may have restarted since). An id this
 * sidecar never saw (made before it started, or through another sidecar) is simply unknown.
 */
import type { Clock } from './types.ts';

export interface ResponseHomesOptions {
  maxEntries: number;
  maxAgeMs: number;
}

/**
 * 100,000 ids of ~40 bytes plus an endpoint id string shared by reference: a few MB at most, and
 * only once a sidecar has relayed that many stored responses.
 */
export const DEFAULT_RESPONSE_HOMES_MAX_ENTRIES = 100_000;

/** Six hours: longer than an agent's session, far shorter than a server keeps anything in memory. */
export const DEFAULT_RESPONSE_HOMES_MAX_AGE_MS = 6 * 60 * 60 * 1000;

interface Home {
  readonly endpointId: string;
  usedAtMs: number;
}

export class ResponseHomes {
  /** Map order is the LRU order: oldest use first. */
  readonly #homes = new Map<string, Home>();
  readonly #options: ResponseHomesOptions;
  readonly #clock: Clock;

  constructor(options: ResponseHomesOptions, clock: Clock) {
    this.#options = options;
    this.#clock = clock;
  }

  get size(): number {
    return this.#homes.size;
  }

  /** `responseId` was made by `endpointId` (seen in its answer). */
  remember(responseId: string, endpointId: string): void {
    if (responseId === '' || this.#options.maxEntries <= 0) return;
    this.#homes.delete(responseId);
    this.#homes.set(responseId, { endpointId, usedAtMs: this.#clock.nowMs() });
    while (this.#homes.size > this.#options.maxEntries) {
      const oldest = this.#homes.keys().next().value as string;
      this.#homes.delete(oldest);
    }
  }

  /** The endpoint that made `responseId`, or undefined when unknown or expired. Counts as a use. */
  homeOf(responseId: string): string | undefined {
    const home = this.#homes.get(responseId);
    if (home === undefined) return undefined;
    const now = this.#clock.nowMs();
    if (!(now - home.usedAtMs < this.#options.maxAgeMs)) {
      this.#homes.delete(responseId);
      return undefined;
    }
    home.usedAtMs = now;
    this.#homes.delete(responseId);
    this.#homes.set(responseId, home);
    return home.endpointId;
  }

  /** The response was deleted on its server. */
  forget(responseId: string): void {
    this.#homes.delete(responseId);
  }
}
