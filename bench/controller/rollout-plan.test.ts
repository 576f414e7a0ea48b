import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  applyStep,
  initialSlices,
  MAX_PER_SLICE,
  readyIps,
  rolloutSteps,
  waveSize,
} from './rollout-plan.ts';

const ips = (prefix: string, n: number): string[] =>
  Array.from({ length: n }, (_, i) => `${prefix}${i}`);

void test('a 500-pod rolling restart keeps the Deployment defaults and the slice size', () => {
  const old = ips('o', 500);
  const fresh = ips('n', 500);
  const slices = initialSlices('svc', old);
  assert.deepEqual(
    slices.map((s) => [s.name, s.pods.length]),
    [1, 2, 3, 4, 5].map((i) => [`svc-${i}`, 100]),
  );
  assert.equal(waveSize(500), 125);
  const steps = rolloutSteps(old, fresh, 25);
  // Per wave: create, terminate, ready, remove, 125 pods each in steps of 25.
  assert.equal(steps.length, 4 * 4 * 5);
  let changes = 0;
  let minReady = Infinity;
  let maxPods = 0;
  for (const step of steps) {
    assert.ok(step.length <= 25);
    const before = readyIps(slices).join(',');
    const writes = applyStep('svc', slices, step);
    assert.ok(writes.length > 0, 'every step is at least one write');
    // Deletes come after creates and updates.
    const firstDelete = writes.findIndex((w) => w.op === 'delete');
    if (firstDelete !== -1) assert.ok(writes.slice(firstDelete).every((w) => w.op === 'delete'));
    if (readyIps(slices).join(',') !== before) changes++;
    for (const s of slices) assert.ok(s.pods.length > 0 && s.pods.length <= MAX_PER_SLICE);
    minReady = Math.min(minReady, readyIps(slices).length);
    maxPods = Math.max(
      maxPods,
      slices.reduce((n, s) => n + s.pods.length, 0),
    );
  }
  assert.equal(minReady, 500 - 125, 'maxUnavailable 25 %');
  assert.equal(maxPods, 500 + 125, 'maxSurge 25 %: terminating pods still in the slices');
  assert.equal(
    changes,
    40,
    'ready and terminate steps change the ready set; create and remove not',
  );
  assert.deepEqual(readyIps(slices).sort(), [...fresh].sort());
  assert.ok(slices.every((s) => s.pods.every((p) => p.ready && !p.terminating)));
});

void test('a terminating pod is not ready, a created one waits for readiness', () => {
  const slices = initialSlices('svc', ['a', 'b']);
  const steps = rolloutSteps(['a', 'b'], ['c', 'd'], 1);
  assert.deepEqual(
    steps.map((s) => s.map((c) => `${c.kind} ${c.ip}`)),
    [
      ['create c'],
      ['terminate a'],
      ['ready c'],
      ['remove a'],
      ['create d'],
      ['terminate b'],
    ].concat([['ready d'], ['remove b']]),
  );
  applyStep('svc', slices, steps[0]!);
  applyStep('svc', slices, steps[1]!);
  assert.deepEqual(slices[0]!.pods, [
    { ip: 'a', ready: false, terminating: true },
    { ip: 'b', ready: true, terminating: false },
    { ip: 'c', ready: false, terminating: false },
  ]);
});

void test('a new slice when every slice is full; an emptied slice is deleted', () => {
  const slices = initialSlices('svc', ips('o', 100));
  const created = applyStep('svc', slices, [{ kind: 'create', ip: 'n0' }]);
  assert.deepEqual(
    created.map((w) => [w.op, w.slice.name]),
    [['create', 'svc-2']],
  );
  const removed = applyStep(
    'svc',
    slices,
    ips('o', 100).map((ip) => ({ kind: 'remove', ip })),
  );
  assert.deepEqual(
    removed.map((w) => [w.op, w.slice.name]),
    [['delete', 'svc-1']],
  );
  assert.deepEqual(
    slices.map((s) => s.name),
    ['svc-2'],
  );
});
