import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parse } from 'yaml';
import { mulberry32, type RandomFn } from '../lib/rng.ts';
import { contentHash } from './content-hash.ts';
import { BALANCE_EXAMPLE } from './examples.ts';
import type { EndpointSpec } from './policy-types.ts';
import { resolvePool } from './resolve.ts';
import { validatePool } from './validate.ts';
import { applyEndpointsDelta, endpointsDelta } from './snapshot-delta.ts';
import { parseEndpointsDelta, parseSnapshot, type PoolSnapshot } from './snapshot.ts';

/** The Balance example's policy and timeouts, as a controller would stream them. */
const RESOLVED = (() => {
  const validated = validatePool(parse(BALANCE_EXAMPLE));
  assert.ok(validated.ok);
  const resolved = resolvePool(validated.pool, {});
  assert.ok(resolved.ok);
  return resolved;
})();
const POLICY = RESOLVED.policy;

function endpoint(backend: string, n: number, extra: Partial<EndpointSpec> = {}): EndpointSpec {
  return {
    id: `${backend}/10.0.0.${n}:8000`,
    url: `http://10.0.0.${n}:8000/v1`,
    backend,
    tier: 0,
    weight: 1,
    costPerMTok: 1,
    ...extra,
  };
}

function snapshot(version: number, endpoints: EndpointSpec[], policy = POLICY): PoolSnapshot {
  const timeouts = RESOLVED.timeouts;
  return {
    version,
    hash: contentHash({ policy, timeouts, endpoints }),
    pool: { namespace: 'ns', name: 'p' },
    policy,
    timeouts,
    endpoints,
  };
}

/** A list as the controller orders it: backends in spec order, each one's endpoints by id. */
function randomList(random: RandomFn): EndpointSpec[] {
  const out: EndpointSpec[] = [];
  for (const backend of ['a', 'b', 'c']) {
    if (random() < 0.2) continue;
    const ns = [
      ...new Set(
        Array.from({ length: Math.floor(random() * 12) }, () => 1 + Math.floor(random() * 20)),
      ),
    ];
    const list = ns.map((n) =>
      endpoint(backend, n, random() < 0.3 ? { weight: 2 } : random() < 0.1 ? { apiKey: 'k' } : {}),
    );
    out.push(...list.sort((x, y) => (x.id < y.id ? -1 : x.id > y.id ? 1 : 0)));
  }
  return out;
}

describe('endpointsDelta / applyEndpointsDelta', () => {
  test('applying the delta to its base gives exactly the new snapshot, hash included (property)', () => {
    const random = mulberry32(46);
    let deltas = 0;
    for (let i = 0; i < 2000; i++) {
      const base = snapshot(i + 1, randomList(random));
      const next = snapshot(i + 2, randomList(random));
      const delta = endpointsDelta(base, next);
      assert.ok(delta !== undefined, 'sorted lists never reorder survivors');
      deltas++;
      // Through the wire: JSON and the check a sidecar runs.
      const parsed = parseEndpointsDelta(JSON.parse(JSON.stringify(delta)));
      assert.ok(parsed.ok);
      const applied = applyEndpointsDelta(base, parsed.value);
      assert.ok(applied.ok, applied.ok ? '' : applied.reason);
      assert.deepEqual(applied.snapshot, next);
      assert.equal(
        contentHash({
          policy: applied.snapshot.policy,
          timeouts: applied.snapshot.timeouts,
          endpoints: applied.snapshot.endpoints,
        }),
        next.hash,
      );
      assert.equal(parseSnapshot(applied.snapshot).ok, true);
    }
    assert.equal(deltas, 2000);
  });

  test('lists only what changed', () => {
    const base = snapshot(3, [endpoint('a', 1), endpoint('a', 2), endpoint('a', 3)]);
    const next = snapshot(4, [endpoint('a', 2, { weight: 5 }), endpoint('a', 3), endpoint('a', 4)]);
    const delta = endpointsDelta(base, next);
    assert.deepEqual(delta?.removed, ['a/10.0.0.1:8000']);
    assert.deepEqual(delta?.changed, [endpoint('a', 2, { weight: 5 })]);
    assert.deepEqual(delta?.added, [{ at: 2, endpoint: endpoint('a', 4) }]);
    assert.equal(delta?.baseVersion, 3);
    assert.equal(delta?.version, 4);
    assert.equal(delta?.hash, next.hash);
  });

  test('no delta when the policy changed or survivors were reordered', () => {
    const list = [endpoint('a', 1), endpoint('a', 2)];
    const base = snapshot(1, list);
    const other = { ...POLICY, mode: 'Failover' } as PoolSnapshot['policy'];
    assert.equal(endpointsDelta(base, snapshot(2, list, other)), undefined);
    assert.equal(endpointsDelta(base, snapshot(2, [...list].reverse())), undefined);
  });

  test('refuses another base, unknown ids, and a list whose hash differs', () => {
    const base = snapshot(5, [endpoint('a', 1), endpoint('a', 2)]);
    const next = snapshot(6, [endpoint('a', 2), endpoint('a', 3)]);
    const delta = endpointsDelta(base, next)!;
    const refuse = (d: typeof delta, held = base): string => {
      const result = applyEndpointsDelta(held, d);
      assert.equal(result.ok, false);
      return result.ok ? '' : result.reason;
    };
    assert.match(refuse({ ...delta, baseVersion: 4 }), /from version 4, this sidecar holds 5/);
    assert.match(refuse({ ...delta, removed: ['a/9'] }), /removed endpoint a\/9 is not held/);
    assert.match(refuse({ ...delta, changed: [endpoint('b', 1)] }), /changed endpoint/);
    assert.match(refuse({ ...delta, endpointsHash: '0000000000000000' }), /hash/);
    assert.match(refuse({ ...delta, added: [{ at: 9, endpoint: endpoint('a', 3) }] }), /past/);
    assert.match(
      refuse({ ...delta, added: [{ at: 0, endpoint: endpoint('a', 2) }] }),
      /held already/,
    );
  });

  test('parseEndpointsDelta names the bad field', () => {
    const result = parseEndpointsDelta({
      version: 2,
      baseVersion: 1,
      hash: 'h',
      endpointsHash: 'e',
      added: [],
      removed: [1],
      changed: [],
    });
    assert.equal(result.ok, false);
    if (!result.ok) assert.match(result.errors[0]!.path, /^\/removed\/0/);
  });
});
