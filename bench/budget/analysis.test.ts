import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { budgetFigures, budgetTargets, type BudgetRecord } from './analysis.ts';

const served = (workload: string, endedAtMs: number, tokens: number): BudgetRecord => ({
  workload,
  sentAtMs: endedAtMs - 10,
  endedAtMs,
  status: 200,
  tokens,
});

describe('budget figures', () => {
  const workloads = [
    { name: 'a', tokensPerMinute: 1000, demandTokensPerMinute: 500 },
    { name: 'b', tokensPerMinute: 1000, demandTokensPerMinute: 2000 },
  ];

  it('counts tokens and refusals by the calendar minute a request ended in', () => {
    const records: BudgetRecord[] = [
      served('b', 1_000, 500),
      served('b', 59_999, 500),
      served('b', 60_000, 1000),
      {
        workload: 'b',
        sentAtMs: 0,
        endedAtMs: 70_000,
        status: 429,
        code: 'over_budget',
        tokens: 0,
      },
      { workload: 'b', sentAtMs: 0, endedAtMs: 70_000, status: 502, tokens: 0 },
      served('b', 200_000, 999), // past the run: left out
    ];
    const [, b] = budgetFigures(records, workloads, 2);
    assert.deepEqual(
      b!.minutes.map((m) => [m.tokens, m.served, m.refused, m.otherErrors]),
      [
        [1000, 2, 0, 0],
        [1000, 1, 1, 1],
      ],
    );
    assert.deepEqual(b!.minutes[1]!.refusals, { over_budget: 1 });
    assert.equal(b!.refusedTotal, 1);
    assert.equal(b!.overBudget, true);
  });

  it('finds the busiest sliding 60 s across minute boundaries', () => {
    const records = [served('b', 50_000, 800), served('b', 70_000, 800), served('b', 115_000, 10)];
    const [, b] = budgetFigures(records, workloads, 2);
    assert.equal(b!.slidingMax.tokens, 1600);
    assert.equal(b!.slidingMax.ofBudget, 1.6);
    assert.ok(b!.slidingMax.fromS <= 50 && b!.slidingMax.fromS > 10);
  });

  it('checks the targets: over-budget within 5 %, under-budget never refused', () => {
    const good = budgetFigures(
      [served('a', 1, 400), served('b', 1, 1000), served('b', 61_000, 960)],
      workloads,
      2,
    );
    assert.ok(budgetTargets(good).every((t) => t.met));
    const bad = budgetFigures(
      [
        { workload: 'a', sentAtMs: 0, endedAtMs: 5, status: 429, tokens: 0 },
        served('b', 1, 1100),
        served('b', 61_000, 900),
      ],
      workloads,
      2,
    );
    const targets = budgetTargets(bad);
    assert.deepEqual(
      targets.map((t) => t.met),
      [false, false, false],
    );
    assert.match(targets[1]!.detail, /minute 1: 110\.0 %/);
    assert.match(targets[2]!.detail, /minute 1: 110\.0 %, minute 2: 90\.0 %/);
    // The first minute left out of the "within" half, not of the "never over" half.
    const skipped = budgetTargets(
      budgetFigures([served('b', 1, 500), served('b', 61_000, 1000)], workloads, 2),
      1,
    );
    assert.deepEqual(
      skipped.map((t) => t.met),
      [true, true, true],
    );
  });
});
