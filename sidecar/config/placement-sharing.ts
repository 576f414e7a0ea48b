/**
 * One pool's side of the fleet-wide view (issue 45; docs/fleet-view.md): the balancer's
 * placements queue in a `PlacementOutbox` while the controller client uploads them, and the
 * placements the controller relays are recorded by the pool's balancer. The wiring between the
 * pure pieces (policy/) and the controller client; the client decides when uploads go.
 */
import type { PoolPlacements } from '../../crds/snapshot.ts';
import { PlacementOutbox } from '../policy/index.ts';
import type { ActivePoolState } from './active-pool.ts';
import type { PlacementHooks } from './controller/controller-client.ts';

/** What the pool's metrics count (switchyard_placements_*_total{pool}). */
export interface PlacementCounters {
  uploaded(count: number): void;
  received(count: number, bytes: number): void;
  uploadFailed(): void;
  /** Placements dropped unsent: the outbox was full. */
  dropped(count: number): void;
}

export interface PlacementSharing {
  hooks: PlacementHooks;
  /** Starts queueing the balancer's placements while `uploading()` says so. */
  attach(uploading: () => boolean): void;
  /** Stops queueing (the source closes). */
  detach(): void;
}

export function placementSharing(
  active: ActivePoolState,
  counters: PlacementCounters | undefined,
): PlacementSharing {
  const outbox = new PlacementOutbox();
  let droppedBefore = 0;
  const hooks: PlacementHooks = {
    take: (maxBytes) => {
      const batch = outbox.take(active.nowMs(), maxBytes);
      if (outbox.dropped > droppedBefore) {
        counters?.dropped(outbox.dropped - droppedBefore);
        droppedBefore = outbox.dropped;
      }
      return batch;
    },
    received: (batch: PoolPlacements, bytes) => {
      // Counted as received whether or not this pool has the endpoints named (bytes on the wire).
      counters?.received(batch.placements.length, bytes);
      active.current()?.balancer.applyPlacements(batch);
    },
    uploaded: (count) => counters?.uploaded(count),
    uploadFailed: () => counters?.uploadFailed(),
  };
  return {
    hooks,
    attach: (uploading) => {
      active.onPlacement = (endpointId, prompt, nowMs) => {
        // Nothing queues while no upload can go (no stream, or a controller that relays none):
        // a placement held until the next stream would be stale news by then.
        if (uploading()) outbox.add(endpointId, prompt.hashes, prompt.homeDepth, nowMs);
        else if (outbox.size > 0) outbox.clear();
      };
    },
    detach: () => {
      active.onPlacement = undefined;
      outbox.clear();
    },
  };
}
