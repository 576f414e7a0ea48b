/**
 * The fleet-wide view (issue 45) through two balancers standing for two sidecars of one pool:
 * what one places reaches the other's prefix index through the outbox and `applyPlacements`, and
 * the other then sends a prompt that shares the prefix where the first sent it.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { encodeHashes } from '../../lib/placement-hashes.ts';
import { Balancer } from './balancer.ts';
import { PlacementOutbox } from './placement-outbox.ts';
import type { PromptBlocks } from './prompt-blocks.ts';
import { seededRng } from './rng.ts';
import { endpoint, fakeClock, OK, picked, testPolicy } from './testing.ts';
import type { EndpointSpec, ReceivedPlacements } from './types.ts';

const PREFIX = testPolicy({ affinity: { key: 'Prefix' } });
const specs = (n: number): EndpointSpec[] => Array.from({ length: n }, (_, i) => endpoint(`e${i}`));

/** A prompt of `blocks` blocks whose home key is its first two. */
const prompt = (seed: number, blocks: number): PromptBlocks => ({
  hashes: Array.from({ length: blocks }, (_, i) => seed * 1000 + i),
  ends: Array.from({ length: blocks }, (_, i) => 256 * (i + 1)),
  homeDepth: Math.min(2, blocks),
});
const nextTurn = (p: PromptBlocks, more: number): PromptBlocks => ({
  hashes: [...p.hashes, ...Array.from({ length: more }, (_, i) => p.hashes[0]! + 500 + i)],
  ends: [...p.ends, ...Array.from({ length: more }, (_, i) => p.ends.at(-1)! + 256 * (i + 1))],
  homeDepth: p.homeDepth,
});

/** A sidecar: its balancer, and the outbox its placements go to. */
function sidecar(endpoints: EndpointSpec[], seed: number) {
  const clock = fakeClock(1_000_000);
  const outbox = new PlacementOutbox();
  const balancer = new Balancer(PREFIX, endpoints, {
    clock,
    rng: seededRng(seed),
    onPlacement: (id, p, now) => outbox.add(id, p.hashes, p.homeDepth, now),
  });
  return { clock, outbox, balancer };
}

/** Picks only `id` (every other endpoint excluded): where the sidecar happened to send it. */
function placeOn(balancer: Balancer, endpoints: EndpointSpec[], id: string, p: PromptBlocks): void {
  const exclude = new Set(endpoints.map((s) => s.id).filter((x) => x !== id));
  const result = picked(balancer.pick({ prompt: p, exclude }));
  assert.equal(result.attempt.endpoint.id, id);
  balancer.finish(result.attempt, OK);
}

describe('placements between sidecars', () => {
  test("a prompt another sidecar placed goes where it went, not to this sidecar's home", () => {
    const endpoints = specs(8);
    const a = sidecar(endpoints, 1);
    const b = sidecar(endpoints, 2);
    const conversation = prompt(7, 20);
    // Where b would send the next turn knowing nothing: its rendezvous home.
    const fresh = sidecar(endpoints, 3);
    const home = picked(fresh.balancer.pick({ prompt: nextTurn(conversation, 3) })).attempt.endpoint
      .id;
    const elsewhere = endpoints.find((s) => s.id !== home)!.id;
    placeOn(a.balancer, endpoints, elsewhere, conversation);
    a.clock.advance(50);
    const batch = a.outbox.take(a.clock.nowMs(), 65_536);
    assert.ok(batch !== undefined);
    assert.equal(b.balancer.applyPlacements(batch), 1);
    const turn = picked(b.balancer.pick({ prompt: nextTurn(conversation, 3) }));
    assert.equal(turn.attempt.endpoint.id, elsewhere);
    assert.equal(turn.affinity, 'hit');
  });

  test('unknown endpoints, undecodable digests and placements past the index age are skipped', () => {
    const ONE = encodeHashes([1]);
    const endpoints = specs(3);
    const b = sidecar(endpoints, 2);
    const batch: ReceivedPlacements = {
      endpoints: ['gone', 'e1'],
      placements: [
        { endpoint: 0, ageMs: 0, hashes: ONE },
        { endpoint: 1, ageMs: 0, hashes: 'not base64!' },
        { endpoint: 1, ageMs: 600_000, hashes: ONE },
        { endpoint: 1, ageMs: 10, hashes: ONE },
      ],
    };
    assert.equal(b.balancer.applyPlacements(batch), 1);
  });

  test("this sidecar's own placements echoed back change nothing", () => {
    const endpoints = specs(8);
    const a = sidecar(endpoints, 1);
    const conversation = prompt(9, 12);
    placeOn(a.balancer, endpoints, 'e5', conversation);
    const echo = a.outbox.take(a.clock.nowMs(), 65_536)!;
    a.clock.advance(1_000);
    a.balancer.applyPlacements({
      ...echo,
      placements: echo.placements.map((p) => ({ ...p, ageMs: 900 })),
    });
    const turn = picked(a.balancer.pick({ prompt: nextTurn(conversation, 2) }));
    assert.equal(turn.attempt.endpoint.id, 'e5');
  });

  test('property: whatever endpoint one sidecar chose, the other follows for the next turn', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 2, max: 16 }),
        fc.integer({ min: 1, max: 10_000 }),
        fc.integer({ min: 3, max: 200 }),
        fc.nat(),
        fc.integer({ min: 0, max: 5_000 }),
        (n, seed, blocks, pick, delayMs) => {
          const endpoints = specs(n);
          const a = sidecar(endpoints, seed);
          const b = sidecar(endpoints, seed + 1);
          const conversation = prompt(seed, blocks);
          const chosen = endpoints[pick % n]!.id;
          placeOn(a.balancer, endpoints, chosen, conversation);
          a.clock.advance(delayMs);
          b.balancer.applyPlacements(a.outbox.take(a.clock.nowMs(), 65_536)!);
          const turn = picked(b.balancer.pick({ prompt: nextTurn(conversation, 1) }));
          assert.equal(turn.attempt.endpoint.id, chosen);
        },
      ),
      { numRuns: 200 },
    );
  });
});
