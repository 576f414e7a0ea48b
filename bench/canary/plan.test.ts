import assert from 'node:assert/strict';
import { test } from 'node:test';
import { analyse, planRequests, type Outcome } from './plan.ts';

void test('the plan: the keyed share as conversations in order, turns through changing sidecars', () => {
  const plan = planRequests({ total: 1000, keyedShare: 0.5, turns: 5, sidecars: 4, seed: 7 });
  assert.equal(plan.length, 1000);
  const keyed = plan.filter((r) => r.conversation !== undefined);
  assert.equal(keyed.length, 500);
  const byConversation = new Map<number, number[]>();
  for (const r of keyed)
    byConversation.set(r.conversation!, [...(byConversation.get(r.conversation!) ?? []), r.turn]);
  assert.equal(byConversation.size, 100);
  for (const turns of byConversation.values()) assert.deepEqual(turns, [1, 2, 3, 4, 5]);
  for (let i = 1; i < keyed.length; i++) assert.ok(keyed[i]!.sidecar >= 0 && keyed[i]!.sidecar < 4);
  const sidecarsOf0 = keyed.filter((r) => r.conversation === 0).map((r) => r.sidecar);
  assert.equal(new Set(sidecarsOf0).size, 4, 'a conversation goes through every sidecar');
  assert.deepEqual(
    planRequests({ total: 1000, keyedShare: 0.5, turns: 5, sidecars: 4, seed: 7 }),
    plan,
  );
});

void test('the analysis: shares, their error in points, and flipped conversations', () => {
  const outcomes: Outcome[] = [
    { request: { sidecar: 0, conversation: undefined, turn: 1 }, side: 'stable', status: 200 },
    { request: { sidecar: 1, conversation: undefined, turn: 1 }, side: 'canary', status: 200 },
    { request: { sidecar: 0, conversation: 1, turn: 1 }, side: 'stable', status: 200 },
    { request: { sidecar: 1, conversation: 1, turn: 2 }, side: 'stable', status: 200 },
    { request: { sidecar: 0, conversation: 2, turn: 1 }, side: 'canary', status: 200 },
    { request: { sidecar: 1, conversation: 2, turn: 2 }, side: 'stable', status: 200 },
    { request: { sidecar: 1, conversation: 3, turn: 1 }, side: undefined, status: 502 },
  ];
  const a = analyse(outcomes, { stable: 3, canary: 1 }, 2);
  assert.equal(a.requests, 7);
  assert.equal(a.errors, 1);
  assert.deepEqual(a.overall, { stable: 4 / 6, canary: 2 / 6 });
  assert.deepEqual(a.keyless, { stable: 0.5, canary: 0.5 });
  assert.ok(Math.abs(a.errorPp['canary']! - (100 / 3 - 25)) < 1e-9);
  assert.equal(a.conversations.count, 3);
  assert.equal(a.conversations.flipped, 1);
  assert.deepEqual(a.conversations.flippedExamples, [2]);
  assert.deepEqual(
    a.bySidecar.map((s) => s.requests),
    [3, 4],
  );
});
