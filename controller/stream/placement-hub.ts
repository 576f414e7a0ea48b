/**
 * The I/O shell of the placement relay (issue 45): one `PlacementRelay` per pool, a 100 ms tick
 * that writes each pool's event to its subscribers (encoded once, shared), and the hand-off of
 * what was uploaded here to the other replicas (`forward`).
 */
import type { AnyResponse } from '../../lib/dual-http-server.ts';
import { PLACEMENTS_EVENT, type PoolPlacements } from '../../crds/snapshot.ts';
import { PlacementRelay, type AcceptResult } from '../core/placement-relay.ts';
import type { PoolKey } from '../core/pool-index.ts';
import type { ControllerMetrics } from '../metrics.ts';

/** At most one event per pool this often (the contract: about every 100 ms). */
export const PLACEMENT_TICK_MS = 100;
/** As for `load`: a subscriber this far behind is skipped; the next event replaces this one. */
const MAX_BACKLOG_BYTES = 64 * 1024;

export interface PlacementHubOptions {
  /** What each subscriber may be sent per second (the header's value). */
  bytesPerSecond: number;
  metrics: ControllerMetrics;
  /** The open streams of the pool on this replica. */
  subscribers: (key: PoolKey) => Iterable<AnyResponse>;
  /** What was uploaded here and sent in this tick's events, for the other replicas; per pool. */
  forward?: (batches: Map<PoolKey, PoolPlacements>) => void;
  tickMs?: number;
}

export class PlacementHub {
  private readonly relays = new Map<PoolKey, PlacementRelay>();
  private readonly timer: NodeJS.Timeout;
  private readonly options: PlacementHubOptions;

  constructor(options: PlacementHubOptions) {
    this.options = options;
    this.timer = setInterval(() => this.tick(), options.tickMs ?? PLACEMENT_TICK_MS);
    this.timer.unref();
  }

  /** The most bytes of JSON one event carries: a tenth of a second's worth. */
  get maxEventBytes(): number {
    return Math.floor((this.options.bytesPerSecond * PLACEMENT_TICK_MS) / 1000);
  }

  /** An upload of a sidecar (`local`), or a batch a peer relayed (sent here, never forwarded). */
  accept(key: PoolKey, batch: PoolPlacements, local: boolean): AcceptResult {
    let relay = this.relays.get(key);
    if (relay === undefined) {
      relay = new PlacementRelay();
      this.relays.set(key, relay);
    }
    const result = relay.accept(batch, performance.now(), local);
    const m = this.options.metrics;
    if (local) m.placementsReceived.inc(batch.placements.length);
    m.placementsDropped.inc({ reason: 'duplicate' }, result.duplicate);
    m.placementsDropped.inc({ reason: 'invalid' }, result.invalid);
    m.placementsDropped.inc({ reason: 'over_budget' }, result.overBudget);
    return result;
  }

  /** The pool is gone. */
  remove(key: PoolKey): void {
    this.relays.delete(key);
  }

  close(): void {
    clearInterval(this.timer);
  }

  private tick(): void {
    const now = performance.now();
    const m = this.options.metrics;
    const forward = new Map<PoolKey, PoolPlacements>();
    for (const [key, relay] of this.relays) {
      if (relay.waiting === 0) {
        // Idle: the window forgets what is past it; once empty, the pool's relay goes too.
        relay.tick(now, 0);
        if (relay.remembered === 0) this.relays.delete(key);
        continue;
      }
      const tick = relay.tick(now, this.maxEventBytes);
      m.placementsDropped.inc({ reason: 'over_budget' }, tick.overBudget);
      if (tick.json === undefined) continue;
      m.placementsRelayed.inc(tick.sent);
      if (tick.forward !== undefined) forward.set(key, tick.forward);
      const event = `event: ${PLACEMENTS_EVENT}\ndata: ${tick.json}\n\n`;
      const bytes = Buffer.byteLength(event);
      for (const res of this.options.subscribers(key)) {
        if (res.writableLength > MAX_BACKLOG_BYTES) continue;
        res.write(event);
        m.placementBytesSent.inc(bytes);
      }
    }
    if (forward.size > 0) this.options.forward?.(forward);
  }
}
