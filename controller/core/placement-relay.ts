/**
 * The controller's relay of one pool's placements (issue 45, the fleet-wide view): sidecars upload
 * where they sent which prompt prefixes; every ~100 ms the relay makes one `placements` event of
 * what arrived since, for every subscriber of the pool.
 *
 * - Duplicates: a (deepest hash, endpoint) seen in the last 10 s is dropped, whoever uploaded it
 *   (the next turn of a conversation, or two sidecars sending alike prompts to one endpoint, say
 *   nothing new).
 * - Budget: an event is at most `maxBytes` of JSON. When more arrived, the newest placements go
 *   first and the rest are dropped and counted: a placement older than about a second is worth
 *   little (the sidecars' own recent traffic says more), and holding it back would only make the
 *   next event late too.
 * - Memory: what waits for the next tick and the duplicate window are both capped.
 *
 * Pure: no I/O; the caller passes the clock.
 */
import type { Placement, PoolPlacements } from '../../crds/snapshot.ts';
import { decodeHashes } from '../../lib/placement-hashes.ts';

/** A placement is a duplicate of one with the same deepest hash and endpoint this recent. */
export const DUPLICATE_WINDOW_MS = 10_000;
/**
 * At most this many placements wait for a tick (an event of 8 KiB/s ÷ 10 holds about 8): more in
 * 100 ms could not be sent anyway, so they are dropped as over budget when they arrive.
 */
export const MAX_PENDING = 1024;
/**
 * At most this many (deepest hash, endpoint) pairs are remembered for the duplicate window, about
 * 8 MB: past it the oldest are forgotten early (a duplicate may then go out twice, nothing worse).
 */
export const MAX_REMEMBERED = 65_536;

/** One placement waiting for a tick: what it names, how old it was, and since when it waits. */
interface Pending {
  endpoint: string;
  hashes: string;
  ageMs: number;
  receivedMs: number;
  /** Uploaded by a sidecar to this replica (not relayed by a peer): forwarded to the peers. */
  local: boolean;
}

export interface AcceptResult {
  accepted: number;
  duplicate: number;
  invalid: number;
  /** Dropped at once: MAX_PENDING placements already wait. */
  overBudget: number;
}

export interface TickResult {
  /** The event for every subscriber; undefined when nothing is to be sent. */
  event: PoolPlacements | undefined;
  /** The event's JSON, built once (its length is at most `maxBytes`). */
  json: string | undefined;
  /** Of `event`, the placements uploaded to this replica: what its peers should relay. */
  forward: PoolPlacements | undefined;
  sent: number;
  /** Placements that waited but did not fit: dropped, as over budget. */
  overBudget: number;
}

/** `{"endpoints":[],"placements":[]}`: the size of an empty batch. */
const EMPTY_BYTES = Buffer.byteLength(JSON.stringify({ endpoints: [], placements: [] }));

export class PlacementRelay {
  private pending: Pending[] = [];
  /** `${endpoint}\u0000${deepest hash}` → when it was accepted; in acceptance order. */
  private readonly seen = new Map<string, number>();

  /**
   * Takes an upload (or a peer's relay, `local` false). Its placements' endpoints are indexes into
   * its own list: the relay keeps endpoint ids and re-indexes them per event.
   */
  accept(batch: PoolPlacements, nowMs: number, local = true): AcceptResult {
    const result: AcceptResult = { accepted: 0, duplicate: 0, invalid: 0, overBudget: 0 };
    this.forget(nowMs);
    for (const p of batch.placements) {
      const endpoint = batch.endpoints[p.endpoint];
      const deepest = deepestHash(p.hashes);
      if (endpoint === undefined || deepest === undefined) {
        result.invalid++;
        continue;
      }
      const key = `${endpoint}\u0000${deepest}`;
      const at = this.seen.get(key);
      if (at !== undefined && nowMs - at < DUPLICATE_WINDOW_MS) {
        result.duplicate++;
        continue;
      }
      if (this.pending.length >= MAX_PENDING) {
        result.overBudget++;
        continue;
      }
      this.seen.delete(key); // re-inserted last: the map stays in acceptance order
      this.seen.set(key, nowMs);
      if (this.seen.size > MAX_REMEMBERED) this.seen.delete(this.seen.keys().next().value!);
      this.pending.push({
        endpoint,
        hashes: p.hashes,
        ageMs: p.ageMs,
        receivedMs: nowMs,
        local,
      });
      result.accepted++;
    }
    return result;
  }

  /** Placements waiting for the next tick. */
  get waiting(): number {
    return this.pending.length;
  }

  /** (deepest hash, endpoint) pairs remembered for the duplicate window. */
  get remembered(): number {
    return this.seen.size;
  }

  /**
   * The event of everything accepted since the last tick, at most `maxBytes` of JSON: the newest
   * placements (by when they were made: received − age) first; what does not fit is dropped.
   * Each one's `ageMs` grows by the time the relay held it.
   */
  tick(nowMs: number, maxBytes: number): TickResult {
    const pending = this.pending;
    this.pending = [];
    this.forget(nowMs);
    const empty: TickResult = {
      event: undefined,
      json: undefined,
      forward: undefined,
      sent: 0,
      overBudget: pending.length,
    };
    if (pending.length === 0 || maxBytes < EMPTY_BYTES) return empty;
    const ageOf = (p: Pending): number => Math.max(0, Math.round(p.ageMs + nowMs - p.receivedMs));
    pending.sort((a, b) => ageOf(a) - ageOf(b));
    const endpoints: string[] = [];
    const index = new Map<string, number>();
    const placements: Placement[] = [];
    const local: boolean[] = [];
    let bytes = EMPTY_BYTES;
    for (const p of pending) {
      const known = index.get(p.endpoint);
      const endpointBytes =
        known === undefined
          ? Buffer.byteLength(JSON.stringify(p.endpoint)) + (endpoints.length > 0 ? 1 : 0)
          : 0;
      const placement: Placement = {
        endpoint: known ?? endpoints.length,
        ageMs: ageOf(p),
        hashes: p.hashes,
      };
      const placementBytes =
        Buffer.byteLength(JSON.stringify(placement)) + (placements.length > 0 ? 1 : 0);
      // Smaller ones further down may still fit: keep looking rather than stop at the first miss.
      if (bytes + endpointBytes + placementBytes > maxBytes) continue;
      bytes += endpointBytes + placementBytes;
      if (known === undefined) {
        index.set(p.endpoint, endpoints.length);
        endpoints.push(p.endpoint);
      }
      placements.push(placement);
      local.push(p.local);
    }
    if (placements.length === 0) return empty;
    const event: PoolPlacements = { endpoints, placements };
    return {
      event,
      json: JSON.stringify(event),
      forward: reindex(
        endpoints,
        placements.filter((_, i) => local[i]),
      ),
      sent: placements.length,
      overBudget: pending.length - placements.length,
    };
  }

  /** Forgets pairs older than the window (the map is in acceptance order: stop at a recent one). */
  private forget(nowMs: number): void {
    for (const [key, at] of this.seen) {
      if (nowMs - at < DUPLICATE_WINDOW_MS) break;
      this.seen.delete(key);
    }
  }
}

/** `placements` (indexes into `endpoints`) with only the endpoints they use; undefined if none. */
function reindex(
  endpoints: readonly string[],
  placements: Placement[],
): PoolPlacements | undefined {
  if (placements.length === 0) return undefined;
  const used: string[] = [];
  const index = new Map<number, number>();
  const out = placements.map((p) => {
    let i = index.get(p.endpoint);
    if (i === undefined) {
      i = used.length;
      index.set(p.endpoint, i);
      used.push(endpoints[p.endpoint]!);
    }
    return { ...p, endpoint: i };
  });
  return { endpoints: used, placements: out };
}

/** The last (deepest) hash of an encoded digest, or undefined when it does not decode. */
function deepestHash(hashes: string): number | undefined {
  const decoded = decodeHashes(hashes);
  return decoded === undefined || decoded.length === 0 ? undefined : decoded.at(-1);
}
