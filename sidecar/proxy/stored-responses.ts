/**
 * Stateful Responses stay home: the shell around `ResponseHomes` (policy/response-homes.ts).
 * It learns which endpoint made which response from the answers that pass through (a tap on
 * `POST /v1/responses`), and tells the proxy where a request that refers to a stored response
 * must go (`previous_response_id`, `/v1/responses/{id}…`), or that it cannot go anywhere.
 */
import type { ActivePool } from '../config/active-pool.ts';
import {
  DEFAULT_RESPONSE_HOMES_MAX_AGE_MS,
  DEFAULT_RESPONSE_HOMES_MAX_ENTRIES,
  ResponseHomes,
} from '../policy/index.ts';
import type { ResponseTap } from './exchange.ts';
import { ownCopy, RESPONSE_ID_MAX_CHARS, ResponseIdScanner } from './response-id-scanner.ts';

export type StoredResponseRouting =
  /** Unknown id (made before this sidecar started, or elsewhere): balanced like any request. */
  | { kind: 'anywhere' }
  | { kind: 'pinned'; endpointId: string }
  /** Its endpoint left the pool or is excluded as drifted: nowhere else has the response. */
  | { kind: 'gone'; endpointId: string; message: string };

export class StoredResponses {
  readonly #homes: ResponseHomes;

  constructor(nowMs: () => number) {
    this.#homes = new ResponseHomes(
      {
        maxEntries: DEFAULT_RESPONSE_HOMES_MAX_ENTRIES,
        maxAgeMs: DEFAULT_RESPONSE_HOMES_MAX_AGE_MS,
      },
      { nowMs },
    );
  }

  /** Where a request that refers to `responseId` must go. */
  routing(pool: ActivePool, responseId: string): StoredResponseRouting {
    // Longer ids are never remembered (and copying a megabyte-long one would cost for nothing).
    if (responseId.length > RESPONSE_ID_MAX_CHARS) return { kind: 'anywhere' };
    // A use re-keys the id under this string (it moves to the front of the LRU): a path's id is
    // a slice of the request's URL (a query string may add 16 KiB to it), so keep a copy.
    const endpointId = this.#homes.homeOf(ownCopy(responseId));
    if (endpointId === undefined) return { kind: 'anywhere' };
    const endpoint = pool.endpoints.find((e) => e.id === endpointId);
    if (endpoint !== undefined && endpoint.drifted !== true) return { kind: 'pinned', endpointId };
    const why =
      endpoint === undefined
        ? `has left pool ${pool.name}`
        : `is excluded from pool ${pool.name} by drift detection`;
    return {
      kind: 'gone',
      endpointId,
      message: `Response ${JSON.stringify(responseId)} is stored on endpoint ${endpointId}, which ${why}; no other endpoint has it. Start again without previous_response_id.`,
    };
  }

  /** A tap that remembers the id of each response an endpoint makes. */
  readonly rememberCreated: ResponseTap = (endpoint) => {
    const scanner = new ResponseIdScanner((id) => this.#homes.remember(id, endpoint.id));
    return (chunk) => scanner.feed(chunk);
  };

  /** A tap for a successful `DELETE /v1/responses/{id}`: the response is gone from its server. */
  forgetOnSuccess(responseId: string): ResponseTap {
    return () => {
      this.#homes.forget(responseId);
      return undefined;
    };
  }
}
