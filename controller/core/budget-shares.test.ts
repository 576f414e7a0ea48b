import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import {
  budgetStatus,
  demandKey,
  sharesChanged,
  splitBudget,
  splitPool,
  type BudgetWant,
  type ReplicaDemand,
} from './budget-shares.ts';

const sum = (m: Map<string, number>): number => [...m.values()].reduce((a, b) => a + b, 0);
/** Float slack for sums of many shares. */
const EPS = 1e-6;

const wantsArb = fc
  .array(fc.option(fc.double({ min: 0, max: 1e7, noNaN: true }), { nil: undefined }), {
    minLength: 1,
    maxLength: 60,
  })
  .map((ws): BudgetWant[] => ws.map((wanted, i) => ({ id: `s${i}`, wanted })));
const limitArb = fc.double({ min: 0, max: 1e7, noNaN: true });

describe('splitBudget', () => {
  it('never hands out more than the limit', () => {
    fc.assert(
      fc.property(limitArb, wantsArb, (limit, wants) => {
        assert.ok(sum(splitBudget(limit, wants)) <= limit + EPS);
      }),
    );
  });

  it('stays within the limit for wants so small they underflow', () => {
    assert.ok(sum(splitBudget(0.5000000000000001, [{ id: 's0', wanted: 1e-323 }])) <= 0.5 + EPS);
  });

  it('gives nobody less than min(wanted, limit / n)', () => {
    fc.assert(
      fc.property(limitArb, wantsArb, (limit, wants) => {
        const shares = splitBudget(limit, wants);
        const n = wants.length;
        for (const w of wants) {
          const floor = Math.min(w.wanted ?? limit / n, limit / n);
          assert.ok(shares.get(w.id)! >= floor - 2e-3 - EPS, `${w.id}`);
        }
      }),
    );
  });

  it('gives everyone what it wants when the wants fit', () => {
    fc.assert(
      fc.property(limitArb, wantsArb, (limit, wants) => {
        const known = wants.map((w) => ({ ...w, wanted: w.wanted ?? 0 }));
        if (known.reduce((a, w) => a + w.wanted, 0) > limit) return;
        const shares = splitBudget(limit, known);
        for (const w of known) assert.ok(shares.get(w.id)! >= w.wanted - 2e-3);
      }),
    );
  });

  it('splits the spare half equally, half by the wants, when the wants fit', () => {
    const shares = splitBudget(100, [
      { id: 'busy', wanted: 40 },
      { id: 'idle', wanted: 0 },
    ]);
    // Spare 60: 30 in equal parts (15 each), 30 by the wants (all to busy).
    assert.equal(shares.get('busy'), 85);
    assert.equal(shares.get('idle'), 15);
    // Nobody wants anything: all of it in equal parts.
    const none = splitBudget(100, [
      { id: 'a', wanted: 0 },
      { id: 'b', wanted: 0 },
    ]);
    assert.equal(none.get('a'), 50);
  });

  it('water-fills when the wants do not fit', () => {
    const shares = splitBudget(100, [
      { id: 'a', wanted: 10 },
      { id: 'b', wanted: 200 },
      { id: 'c', wanted: 500 },
    ]);
    assert.equal(shares.get('a'), 10);
    assert.equal(shares.get('b'), 45);
    assert.equal(shares.get('c'), 45);
  });

  it('counts an unknown want as an equal part', () => {
    const shares = splitBudget(90, [
      { id: 'new', wanted: undefined },
      { id: 'busy', wanted: 1000 },
      { id: 'idle', wanted: 0 },
    ]);
    assert.equal(shares.get('new'), 30);
    assert.equal(shares.get('idle'), 0);
    assert.equal(shares.get('busy'), 60);
  });

  it('hands out nothing of a limit that is not a positive number, and nothing to nobody', () => {
    assert.equal(splitBudget(100, []).size, 0);
    assert.equal(splitBudget(Number.NaN, [{ id: 'a', wanted: 5 }]).get('a'), 0);
    assert.equal(splitBudget(-1, [{ id: 'a', wanted: -5 }]).get('a'), 0);
  });
});

describe('splitPool', () => {
  const budgets = [
    { id: 'pool', requestsPerMinute: 100, tokensPerMinute: 1000 },
    { id: 'workload:a', workload: 'a', requestsPerMinute: 10 },
  ];
  const sidecars = [
    {
      id: 'busy',
      workload: 'a',
      budgets: [{ id: 'pool', requests: { used: 60, wanted: 90 }, tokens: { used: 0, wanted: 0 } }],
    },
    { id: 'idle', workload: 'b', budgets: [] },
    { id: 'new', workload: 'a' },
  ];

  it('splits each budget and unit over the sidecars that spend it, alone', () => {
    const split = splitPool({ budgets, perSidecarWorkload: true, sidecars, remote: () => [] });
    // pool/requests: busy 90, idle 0, new unknown = 100/3 → 123.3 > 100: water-fill.
    const busy = split.shares.get('busy')!;
    assert.equal(busy.length, 2);
    assert.equal(split.shares.get('idle')!.length, 1);
    assert.equal(split.shares.get('idle')![0]!.requestsPerMinute, 0);
    const total = [...split.shares.values()]
      .flat()
      .filter((s) => s.id === 'pool')
      .reduce((a, s) => a + s.requestsPerMinute!, 0);
    assert.ok(total <= 100 + 1e-9);
    assert.deepEqual(split.demand.get(demandKey('pool', 'requests')), {
      wanted: 90,
      used: 60,
      sidecars: 3,
      unknown: 1,
    });
    assert.equal(split.replicaLimits.get(demandKey('pool', 'requests')), 100);
    // workload:a: spent by busy and new only; busy has not reported it: wants 0.
    const wa = split.shares.get('new')!.find((s) => s.id === 'workload:a')!;
    // 5 (an equal part of 10, unknown) + a quarter of the spare 5 + its half by the wants.
    assert.equal(wa.requestsPerMinute, 8.75);
    assert.equal(wa.tokensPerMinute, undefined);
  });

  it('every sidecar spends every budget when workloads are per request', () => {
    const split = splitPool({ budgets, perSidecarWorkload: false, sidecars, remote: () => [] });
    assert.equal(split.shares.get('idle')!.length, 2);
  });

  it('takes only its part of the limit beside other replicas', () => {
    const remote = (budget: string): (ReplicaDemand | undefined)[] =>
      budget === 'pool' ? [{ wanted: 270, sidecars: 3, unknown: 0 }, undefined] : [];
    const split = splitPool({ budgets, perSidecarWorkload: true, sidecars, remote });
    const part = split.replicaLimits.get(demandKey('pool', 'requests'))!;
    assert.ok(part > 0 && part < 100, String(part));
    const total = [...split.shares.values()]
      .flat()
      .filter((s) => s.id === 'pool')
      .reduce((a, s) => a + s.requestsPerMinute!, 0);
    assert.ok(total <= part + 1e-9);
  });

  it('splits a tokens-only budget in tokens only', () => {
    const split = splitPool({
      budgets: [{ id: 'pool', tokensPerMinute: 1000 }],
      perSidecarWorkload: false,
      sidecars: [{ id: 'a' }, { id: 'b' }],
      remote: () => [],
    });
    assert.deepEqual(split.shares.get('a'), [{ id: 'pool', tokensPerMinute: 500 }]);
  });

  it('hands nothing out with no sidecars', () => {
    const split = splitPool({ budgets, perSidecarWorkload: true, sidecars: [], remote: () => [] });
    assert.equal(split.shares.size, 0);
    assert.equal(split.demand.get(demandKey('pool', 'tokens'))!.sidecars, 0);
  });
});

describe('sharesChanged', () => {
  const a = [{ id: 'pool', requestsPerMinute: 100, tokensPerMinute: 1000 }];
  it('ignores moves within 2 %', () => {
    assert.equal(
      sharesChanged(a, [{ id: 'pool', requestsPerMinute: 101, tokensPerMinute: 1000 }]),
      false,
    );
  });
  it('sees a larger move, a new budget, a unit added or gone, a first share', () => {
    assert.equal(sharesChanged(undefined, a), true);
    assert.equal(sharesChanged(a, []), true);
    assert.equal(
      sharesChanged(a, [{ id: 'other', requestsPerMinute: 100, tokensPerMinute: 1000 }]),
      true,
    );
    assert.equal(
      sharesChanged(a, [{ id: 'pool', requestsPerMinute: 90, tokensPerMinute: 1000 }]),
      true,
    );
    assert.equal(sharesChanged(a, [{ id: 'pool', requestsPerMinute: 100 }]), true);
    assert.equal(sharesChanged([{ id: 'pool' }], [{ id: 'pool' }]), false);
  });
});

describe('budgetStatus', () => {
  it('sums the fleet use and demand over this replica and the others', () => {
    const budgets = [
      { id: 'pool', requestsPerMinute: 100, tokensPerMinute: 1000 },
      { id: 'workload:a', workload: 'a', requestsPerMinute: 10 },
    ];
    const local = new Map([
      [demandKey('pool', 'requests'), { wanted: 50, used: 40.04, sidecars: 2, unknown: 0 }],
      [demandKey('pool', 'tokens'), { wanted: 5, sidecars: 2, unknown: 0 }],
    ]);
    const rows = budgetStatus(budgets, local, (budget, unit) =>
      budget === 'pool' && unit === 'requests'
        ? [{ wanted: 30, used: 20, sidecars: 3, unknown: 1 }, undefined]
        : [],
    );
    assert.deepEqual(rows, [
      {
        id: 'pool',
        sidecars: 5,
        requestsPerMinute: { limit: 100, used: 60, wanted: 80 },
        tokensPerMinute: { limit: 1000, used: 0, wanted: 5 },
      },
      {
        id: 'workload:a',
        workload: 'a',
        sidecars: 0,
        requestsPerMinute: { limit: 10, used: 0, wanted: 0 },
      },
    ]);
  });
});
