/**
 * One pool's placements waiting to be uploaded to the controller (issue 45, the fleet-wide view;
 * docs/snapshot-protocol.md, "Placements"): every prompt this sidecar places is added, and every
 * ~100 ms the uploader takes a batch of what is queued, up to the upload's byte limit.
 *
 * What a placement carries is its digest (lib/placement-hashes.ts): the hashes of a few depths of
 * the prompt's block chain, never its text. The same (deepest hash, endpoint) is not queued twice
 * within `dedupMs`: the next turn of a busy conversation, or a retried request, tells the fleet
 * nothing new, and the controller would drop it as a duplicate anyway.
 *
 * Memory is bounded: at most `maxQueued` placements wait (past it the oldest is dropped and
 * counted: an uploader that cannot keep up, or a controller that is away, loses the oldest news
 * first), and the dedup memory forgets entries past `dedupMs` and holds at most `maxRemembered`.
 *
 * Pure: times come from the caller (the balancer's clock), no I/O.
 */
import { encodeHashes, placementDigest } from '../../lib/placement-hashes.ts';

/** A batch of placements, as the `PoolPlacements` the upload carries (crds/snapshot.ts). */
export interface PlacementBatch {
  endpoints: string[];
  placements: { endpoint: number; ageMs: number; hashes: string }[];
}

export interface PlacementOutboxOptions {
  /** Default 10 s (the contract's dedup window). */
  dedupMs?: number | undefined;
  /** Default 4,096 placements (~0.5 MB at worst: 11 hashes and an id each). */
  maxQueued?: number | undefined;
  /** Default 65,536 (dedup keys; an entry forgotten early only means one upload more). */
  maxRemembered?: number | undefined;
}

export const DEFAULT_PLACEMENT_DEDUP_MS = 10_000;
export const DEFAULT_MAX_QUEUED_PLACEMENTS = 4096;

/** Bytes of `{"endpoints":[],"placements":[]}`, the batch around its items. */
const BATCH_FRAME_BYTES = 32;

interface Queued {
  endpointId: string;
  hashes: string;
  atMs: number;
}

export class PlacementOutbox {
  readonly #dedupMs: number;
  readonly #maxQueued: number;
  readonly #maxRemembered: number;
  /** The queue, oldest first from `#head` (a moving start: no O(n) shift per placement). */
  #queue: Queued[] = [];
  #head = 0;
  /** `deepest hash|endpoint` → when last queued; insertion order is time order. */
  readonly #recent = new Map<string, number>();
  #dropped = 0;

  constructor(options: PlacementOutboxOptions = {}) {
    this.#dedupMs = options.dedupMs ?? DEFAULT_PLACEMENT_DEDUP_MS;
    this.#maxQueued = Math.max(1, options.maxQueued ?? DEFAULT_MAX_QUEUED_PLACEMENTS);
    this.#maxRemembered = Math.max(1, options.maxRemembered ?? 65_536);
  }

  /** Placements waiting. */
  get size(): number {
    return this.#queue.length - this.#head;
  }

  /** Placements dropped unsent because the queue was full, since the start. */
  get dropped(): number {
    return this.#dropped;
  }

  /**
   * A request whose prompt has block hashes `chain` (its home key `homeDepth` blocks) was sent to
   * `endpointId` at `nowMs`. Queued unless the same deepest block went to the same endpoint within
   * `dedupMs`.
   */
  add(endpointId: string, chain: readonly number[], homeDepth: number, nowMs: number): void {
    if (chain.length === 0) return;
    this.#forget(nowMs);
    const key = `${chain[chain.length - 1]}|${endpointId}`;
    const last = this.#recent.get(key);
    if (last !== undefined && nowMs - last < this.#dedupMs) return;
    // Delete first: re-inserted at the end, the map stays in time order for `#forget`.
    this.#recent.delete(key);
    this.#recent.set(key, nowMs);
    if (this.#recent.size > this.#maxRemembered) {
      const oldest = this.#recent.keys().next().value;
      if (oldest !== undefined) this.#recent.delete(oldest);
    }
    const hashes = encodeHashes(placementDigest(chain, homeDepth));
    this.#queue.push({ endpointId, hashes, atMs: nowMs });
    if (this.size > this.#maxQueued) {
      this.#head += 1;
      this.#dropped += 1;
    }
    this.#compact();
  }

  /**
   * The oldest waiting placements as one batch of at most `maxBytes` of JSON (its ages counted at
   * `nowMs`), removed from the queue; undefined when none waits. A placement too large for
   * `maxBytes` alone (it cannot be, at 64 KiB) is dropped rather than block the queue.
   */
  take(nowMs: number, maxBytes: number): PlacementBatch | undefined {
    if (this.size === 0) return undefined;
    const batch: PlacementBatch = { endpoints: [], placements: [] };
    const indexOf = new Map<string, number>();
    let bytes = BATCH_FRAME_BYTES;
    while (this.#head < this.#queue.length) {
      const q = this.#queue[this.#head]!;
      let index = indexOf.get(q.endpointId);
      const newEndpoint = index === undefined;
      index ??= batch.endpoints.length;
      const ageMs = Math.max(0, Math.round(nowMs - q.atMs));
      // `{"endpoint":N,"ageMs":M,"hashes":"…"}`, a comma before all but the first of each list.
      const itemBytes =
        34 +
        String(index).length +
        String(ageMs).length +
        q.hashes.length +
        (batch.placements.length > 0 ? 1 : 0) +
        (newEndpoint
          ? Buffer.byteLength(JSON.stringify(q.endpointId)) + (batch.endpoints.length > 0 ? 1 : 0)
          : 0);
      if (bytes + itemBytes > maxBytes) {
        if (batch.placements.length > 0) break;
        this.#head += 1; // alone too large: never sendable
        this.#dropped += 1;
        continue;
      }
      bytes += itemBytes;
      if (newEndpoint) {
        indexOf.set(q.endpointId, index);
        batch.endpoints.push(q.endpointId);
      }
      batch.placements.push({ endpoint: index, ageMs, hashes: q.hashes });
      this.#head += 1;
    }
    this.#compact();
    return batch.placements.length === 0 ? undefined : batch;
  }

  /** Forgets everything waiting (uploads stopped: what waits would be stale by the next start). */
  clear(): void {
    this.#queue = [];
    this.#head = 0;
  }

  #forget(nowMs: number): void {
    for (const [key, at] of this.#recent) {
      if (nowMs - at < this.#dedupMs) break;
      this.#recent.delete(key);
    }
  }

  /** Drops the consumed front of the queue once it is at least half of the array. */
  #compact(): void {
    if (this.#head > 0 && this.#head * 2 >= this.#queue.length) {
      this.#queue = this.#queue.slice(this.#head);
      this.#head = 0;
    }
  }
}
