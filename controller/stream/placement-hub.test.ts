import assert from 'node:assert/strict';
import type http from 'node:http';
import { describe, it } from 'node:test';
import type { PoolPlacements } from '../../crds/snapshot.ts';
import { encodeHashes } from '../../lib/placement-hashes.ts';
import type { PoolKey } from '../core/pool-index.ts';
import { ControllerMetrics } from '../metrics.ts';
import { PlacementHub } from './placement-hub.ts';

/** A subscriber's response as the hub uses it: what is unsent, and what it was written. */
function subscriber(writableLength: number): { res: http.ServerResponse; written: string[] } {
  const written: string[] = [];
  const res = {
    writableLength,
    write: (chunk: string) => written.push(chunk),
  } as unknown as http.ServerResponse;
  return { res, written };
}

const batch = (deepest: number): PoolPlacements => ({
  endpoints: ['gpus/a'],
  placements: [{ endpoint: 0, ageMs: 0, hashes: encodeHashes([deepest]) }],
});

describe('PlacementHub', () => {
  it('writes one shared event to each subscriber not backed up, and forwards only local uploads', async () => {
    const metrics = new ControllerMetrics();
    const fast = subscriber(0);
    const other = subscriber(1000);
    const stalled = subscriber(65 * 1024);
    const forwarded: Map<PoolKey, PoolPlacements>[] = [];
    const hub = new PlacementHub({
      bytesPerSecond: 8192,
      metrics,
      subscribers: () => [fast.res, other.res, stalled.res],
      forward: (b) => forwarded.push(b),
      tickMs: 20,
    });
    try {
      hub.accept('apps/chat', batch(1), true);
      hub.accept('apps/chat', batch(2), false);
      await new Promise((r) => setTimeout(r, 60));
      assert.equal(fast.written.length, 1);
      assert.equal(fast.written[0], other.written[0]);
      assert.match(fast.written[0]!, /^event: placements\ndata: \{.*\}\n\n$/);
      assert.deepEqual(stalled.written, [], 'over 64 KiB unsent: skipped');
      assert.equal(forwarded.length, 1);
      assert.equal(forwarded[0]?.get('apps/chat')?.placements.length, 1, 'only the local one');
      const text = await metrics.registry.metrics();
      assert.match(text, /switchyard_controller_placements_received_total 1\n/);
      assert.match(text, /switchyard_controller_placements_relayed_total 2\n/);
      assert.match(
        text,
        new RegExp(
          `switchyard_controller_placement_bytes_sent_total ${2 * fast.written[0]!.length}\\n`,
        ),
      );
      assert.equal(hub.maxEventBytes, 819);
    } finally {
      hub.close();
    }
  });
});
