/**
 * Property tests of routing by model and by weight (issue 42; docs/policy.md §1 and §2): random
 * pools whose backends declare lists or not, discovered lists, adapter reports, weights, tiers,
 * drift, breakers, retries and pins, checked against a small independent model of what each
 * endpoint serves.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { Balancer } from './balancer.ts';
import { seededRng } from './rng.ts';
import { endpoint, fakeClock, testPolicy } from './testing.ts';
import type { Attempt, EndpointSpec, Mode, Outcome, ServedModel } from './types.ts';

const IDS = ['e0', 'e1', 'e2', 'e3', 'e4', 'e5'];
/** Two endpoints per backend: e0, e1 → b0; e2, e3 → b1; e4, e5 → b2. */
const backendOf = (i: number) => `b${Math.floor(i / 2)}`;
const MODELS = ['base', 'other', 'lora-a', 'lora-b', 'nowhere'];
const PARENTS: Record<string, string> = { 'lora-a': 'base', 'lora-b': 'other' };

const entryArb: fc.Arbitrary<ServedModel> = fc.oneof(
  fc.constantFrom('base', 'other').map((id) => ({ id })),
  fc.constantFrom('base', 'other').map((id) => ({ id, parent: id })),
  fc.constantFrom('lora-a', 'lora-b').map((id) => ({ id, parent: PARENTS[id] })),
  fc.constantFrom('lora-a', 'lora-b').map((id) => ({ id })),
);
const declaredArb = fc.option(fc.subarray(['base', 'other', 'lora-a', 'lora-b']), {
  nil: undefined,
});
const six = <T>(arb: fc.Arbitrary<T>) => fc.array(arb, { minLength: 6, maxLength: 6 });
const three = <T>(arb: fc.Arbitrary<T>) => fc.array(arb, { minLength: 3, maxLength: 3 });

const outcomeArb: fc.Arbitrary<Outcome> = fc.oneof(
  fc.constant({ kind: 'success' as const, streamed: true }),
  fc.constant({ kind: 'error' as const }),
  fc.constant({ kind: 'rate-limited' as const, retryAfterMs: 3_000 }),
  fc.constant({ kind: 'neutral' as const }),
);

type Op =
  | {
      op: 'pick';
      model: string | undefined;
      exclude: string[];
      key: string | undefined;
      pinned: string | undefined;
    }
  | { op: 'finish'; index: number; outcome: Outcome }
  | { op: 'advance'; ms: number }
  | { op: 'update'; present: boolean[]; drifted: boolean[]; declared: (string[] | undefined)[] }
  | { op: 'models'; index: number; entries: ServedModel[] }
  | { op: 'load'; index: number; adapters: string[] | undefined };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      op: fc.constant('pick' as const),
      model: fc.option(fc.constantFrom(...MODELS), { nil: undefined }),
      exclude: fc.subarray(IDS, { maxLength: 3 }),
      key: fc.option(fc.constantFrom('k1', 'k2', 'k3'), { nil: undefined }),
      pinned: fc.option(fc.constantFrom(...IDS, 'gone'), { nil: undefined, freq: 6 }),
    }),
  },
  {
    weight: 4,
    arbitrary: fc.record({
      op: fc.constant('finish' as const),
      index: fc.nat(),
      outcome: outcomeArb,
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      op: fc.constant('advance' as const),
      ms: fc.integer({ min: 0, max: 8_000 }),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      op: fc.constant('update' as const),
      present: six(fc.boolean()),
      drifted: six(fc.boolean()),
      declared: three(declaredArb),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      op: fc.constant('models' as const),
      index: fc.nat({ max: 6 }), // 6: an id not in the pool
      entries: fc.array(entryArb, { maxLength: 4 }),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      op: fc.constant('load' as const),
      index: fc.nat({ max: 5 }),
      adapters: fc.option(fc.subarray(['lora-a', 'lora-b']), { nil: undefined }),
    }),
  },
);

const scenarioArb = fc.record({
  mode: fc.constantFrom<Mode>('Balance', 'Failover'),
  affinity: fc.constantFrom<'Header' | 'Prefix' | 'None'>('Header', 'Prefix', 'None'),
  tiers: three(fc.integer({ min: 0, max: 1 })),
  weights: fc.option(three(fc.integer({ min: 0, max: 5 })), { nil: undefined }),
  present: six(fc.boolean()),
  drifted: six(fc.boolean()),
  declared: three(declaredArb),
  seed: fc.integer(),
  ops: fc.array(opArb, { minLength: 20, maxLength: 120, size: 'max' }),
});

interface Scenario {
  tiers: number[];
  weights: number[] | undefined;
}

function specsOf(
  s: Scenario,
  present: boolean[],
  drifted: boolean[],
  declared: (string[] | undefined)[],
): EndpointSpec[] {
  return IDS.flatMap((id, i) => {
    if (!present[i]) return [];
    const b = Math.floor(i / 2);
    const overrides: Partial<EndpointSpec> = {
      backend: backendOf(i),
      tier: s.tiers[b]!,
      drifted: drifted[i]!,
    };
    if (declared[b] !== undefined) overrides.models = declared[b];
    if (s.weights !== undefined) overrides.weight = s.weights[b]!;
    return [endpoint(id, overrides)];
  });
}

/** The independent model: an endpoint's list, declared else discovered (parents served too). */
function knownList(
  spec: EndpointSpec,
  reported: ReadonlyMap<string, ServedModel[]>,
): Set<string> | undefined {
  if (spec.models !== undefined) return new Set(spec.models);
  const entries = reported.get(spec.id);
  if (entries === undefined) return undefined;
  const list = new Set<string>();
  for (const e of entries) {
    list.add(e.id);
    if (e.parent !== undefined && e.parent !== e.id) list.add(e.parent);
  }
  return list;
}

describe('routing by model, properties', () => {
  test('a request never reaches an endpoint whose known list lacks its model', () => {
    fc.assert(
      fc.property(scenarioArb, (s) => {
        const clock = fakeClock(1_000);
        const policy = testPolicy({
          mode: s.mode,
          affinity: { key: s.affinity },
          health: { minRequests: 1, openForMs: 2_000, maxOpenForMs: 10_000 },
        });
        let specs = specsOf(s, s.present, s.drifted, s.declared);
        const balancer = new Balancer(policy, specs, { clock, rng: seededRng(s.seed) });
        const reported = new Map<string, ServedModel[]>();
        const attempts: { attempt: Attempt; generation: number; finished: boolean }[] = [];
        const cooldownUntil = new Map<string, number>();
        // An id that left and came back is a new endpoint state: its old attempts are not its.
        const generation = new Map<string, number>();
        let nextGeneration = 0;
        for (const spec of specs) generation.set(spec.id, nextGeneration++);
        const current = (a: { attempt: Attempt; generation: number }) =>
          generation.get(a.attempt.endpoint.id) === a.generation;

        for (const op of s.ops) {
          if (op.op === 'advance') clock.advance(op.ms);
          else if (op.op === 'update') {
            const next = specsOf(s, op.present, op.drifted, op.declared);
            for (const spec of specs)
              if (!next.some((n) => n.id === spec.id)) {
                reported.delete(spec.id);
                cooldownUntil.delete(spec.id);
                generation.delete(spec.id);
              }
            for (const spec of next)
              if (!generation.has(spec.id)) generation.set(spec.id, nextGeneration++);
            specs = next;
            balancer.update(policy, specs);
          } else if (op.op === 'models') {
            const id = IDS[op.index] ?? 'not-in-pool';
            balancer.reportModels(id, op.entries);
            if (specs.some((spec) => spec.id === id)) reported.set(id, op.entries);
          } else if (op.op === 'load') {
            balancer.reportLoad(IDS[op.index]!, { running: 1, loadedAdapters: op.adapters });
          } else if (op.op === 'finish' && attempts.length > 0) {
            const a = attempts[op.index % attempts.length]!;
            balancer.finish(a.attempt, op.outcome);
            const id = a.attempt.endpoint.id;
            if (!a.finished && op.outcome.kind === 'rate-limited' && current(a))
              cooldownUntil.set(id, clock.nowMs() + 3_000);
            a.finished = true;
          } else if (op.op === 'pick') {
            const now = clock.nowMs();
            const serves = (spec: EndpointSpec) =>
              op.model === undefined || (knownList(spec, reported)?.has(op.model) ?? true);
            const status = new Map(balancer.status().map((e) => [e.id, e]));
            const exclude = new Set(op.exclude);
            const live = specs.filter((spec) => {
              const e = status.get(spec.id)!;
              if (e.drifted || exclude.has(e.id) || !serves(spec)) return false;
              if ((cooldownUntil.get(e.id) ?? -Infinity) > now) return false;
              if (e.breaker === 'closed') return true;
              const probing = attempts.some(
                (a) =>
                  !a.finished &&
                  a.attempt.halfOpenProbe &&
                  current(a) &&
                  a.attempt.endpoint.id === e.id,
              );
              return e.breaker === 'half-open' && !probing;
            });
            const prompt =
              op.key === undefined
                ? undefined
                : {
                    hashes: [op.key.length * 7919 + op.key.charCodeAt(1)],
                    ends: [10],
                    homeDepth: 1,
                  };
            const result = balancer.pick({
              model: op.model,
              exclude,
              affinityKey: op.key,
              prompt,
              pinnedEndpointId: op.pinned,
            });
            const pinnedSpec = specs.find((spec) => spec.id === op.pinned);
            if (result.kind === 'shed') {
              if (result.reason === 'model-not-served') {
                assert.ok(op.model !== undefined);
                if (pinnedSpec !== undefined) assert.equal(serves(pinnedSpec), false);
                else assert.equal(specs.some(serves), false, 'some endpoint serves it');
              } else if (op.pinned === undefined) {
                const ids = live.map((spec) => spec.id).join();
                assert.equal(live.length, 0, `shed with live ${ids}`);
              }
              continue;
            }
            const chosen = specs.find((spec) => spec.id === result.attempt.endpoint.id)!;
            const list = knownList(chosen, reported);
            assert.ok(
              op.model === undefined || list === undefined || list.has(op.model),
              `${op.model} went to ${chosen.id}, which serves ${[...(list ?? [])].join()}`,
            );
            assert.ok(live.includes(chosen), `picked ${chosen.id}, not live`);
            if (op.pinned !== undefined) assert.equal(chosen.id, op.pinned);
            else if (s.mode === 'Failover')
              assert.equal(chosen.tier, Math.min(...live.map((spec) => spec.tier)));
            attempts.push({
              attempt: result.attempt,
              generation: generation.get(chosen.id)!,
              finished: false,
            });
          }

          // modelsServed() counts what the independent model says.
          const served = balancer.modelsServed();
          const counts = new Map<string, number>();
          let unknown = 0;
          for (const spec of specs) {
            if (spec.drifted === true) continue;
            const list = knownList(spec, reported);
            if (list === undefined) unknown += 1;
            else for (const m of list) counts.set(m, (counts.get(m) ?? 0) + 1);
          }
          assert.equal(served.unknownEndpoints, unknown);
          assert.deepEqual(new Map([...served.models].map(([m, v]) => [m, v.endpoints])), counts);
          for (const [m, v] of served.models)
            if (v.parent !== undefined) assert.equal(v.parent, PARENTS[m]);
        }
      }),
      { numRuns: 300 },
    );
  });
});

describe('weighted split, properties', () => {
  /** A pool of two or three backends, two endpoints each, in one tier, with these weights. */
  function weightedPool(weights: readonly number[]): EndpointSpec[] {
    return weights.flatMap((weight, b) =>
      [0, 1].map((i) => endpoint(`w${b}-${i}`, { backend: `w${b}`, weight, tier: 0 })),
    );
  }

  /**
   * The same, the backends declaring model `m`, beside a backend of weight 7 that serves only
   * `other`: requests for the two models run over different weight lines of one pool.
   */
  function twoModelPool(weights: readonly number[]): EndpointSpec[] {
    return [
      ...weightedPool(weights).map((spec) => ({ ...spec, models: ['m'] })),
      endpoint('x-0', { backend: 'x', weight: 7, tier: 0, models: ['other'] }),
    ];
  }

  test('10,000 keyless picks from 4 balancers land within 1 pp of the weights, models mixed', () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 0, max: 100 }), { minLength: 2, maxLength: 3 }),
        fc.integer(),
        fc.integer(),
        fc.boolean(),
        (weights, seed, interleaving, twoModels) => {
          fc.pre(weights.some((w) => w > 0));
          const specs = twoModels ? twoModelPool(weights) : weightedPool(weights);
          const clock = fakeClock(1_000);
          const balancers = [0, 1, 2, 3].map(
            (i) =>
              new Balancer(testPolicy({ affinity: { key: 'None' } }), specs, {
                clock,
                rng: seededRng(seed + i),
              }),
          );
          const open: { balancer: Balancer; attempt: Attempt }[] = [];
          const counts = new Map<string, number>();
          // Which sidecar takes each request: from a seed (a 10,000-long array shrinks slowly).
          const sidecarRng = seededRng(interleaving);
          const requests = 10_000;
          for (let r = 0; r < requests;) {
            clock.advance(3);
            const balancer = balancers[Math.floor(sidecarRng.next() * 4)]!;
            // With two models, a request for `other` now and then, between those counted.
            const other = twoModels && sidecarRng.next() < 0.3;
            const result = balancer.pick({
              model: twoModels ? (other ? 'other' : 'm') : undefined,
            });
            assert.equal(result.kind, 'picked');
            if (result.kind !== 'picked') return;
            const backend = result.attempt.endpoint.backend;
            if (!other) {
              counts.set(backend, (counts.get(backend) ?? 0) + 1);
              r += 1;
            } else assert.equal(backend, 'x');
            open.push({ balancer, attempt: result.attempt });
            // Some stay in flight a while: load-awareness works inside each share.
            if (open.length > 8) {
              const done = open.shift()!;
              done.balancer.finish(done.attempt, { kind: 'success', streamed: true });
            }
          }
          const total = weights.reduce((a, b) => a + b, 0);
          weights.forEach((w, b) => {
            const share = (counts.get(`w${b}`) ?? 0) / requests;
            assert.ok(
              Math.abs(share - w / total) <= 0.01,
              `w${b}: ${(share * 100).toFixed(2)} % for weight ${w} of ${total}`,
            );
          });
        },
      ),
      { numRuns: 15 },
    );
  });

  test('a key always lands on the same backend while the weights are unchanged', () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 0, max: 100 }), { minLength: 2, maxLength: 3 }),
        fc.constantFrom<'Header' | 'Prefix'>('Header', 'Prefix'),
        fc.integer(),
        fc.array(fc.record({ sidecar: fc.nat({ max: 3 }), key: fc.nat({ max: 40 }) }), {
          minLength: 50,
          maxLength: 400,
        }),
        (weights, key, seed, requests) => {
          fc.pre(weights.some((w) => w > 0));
          const specs = weightedPool(weights);
          const clock = fakeClock(1_000);
          const balancers = [0, 1, 2, 3].map(
            (i) =>
              new Balancer(testPolicy({ affinity: { key } }), specs, {
                clock,
                rng: seededRng(seed + i),
              }),
          );
          const backendOfKey = new Map<number, string>();
          for (const r of requests) {
            clock.advance(5);
            const result = balancers[r.sidecar]!.pick({
              affinityKey: `conversation-${r.key}`,
              prompt: { hashes: [r.key * 104_729 + 1], ends: [100], homeDepth: 1 },
            });
            assert.equal(result.kind, 'picked');
            if (result.kind !== 'picked') return;
            const backend = result.attempt.endpoint.backend;
            const before = backendOfKey.get(r.key);
            if (before !== undefined) assert.equal(backend, before, `key ${r.key} moved`);
            backendOfKey.set(r.key, backend);
            assert.ok(weights[Number(backend.slice(1))]! > 0, 'a weight-0 backend got a key');
            // Half stay in flight: loads differ between sidecars and endpoints.
            if (r.key % 2 === 0)
              balancers[r.sidecar]!.finish(result.attempt, { kind: 'success', streamed: true });
          }
        },
      ),
      { numRuns: 100 },
    );
  });
});
