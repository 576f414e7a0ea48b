import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { RETRY_BUDGET_WINDOW_MS, RetryBudget, retryAllowance } from './retry-budget.ts';
import { fakeClock } from './testing.ts';
import type { RetryPolicy } from './types.ts';

const policy = (overrides: Partial<RetryPolicy> = {}): RetryPolicy => ({
  budgetPercent: 20,
  minPerSecond: 10,
  maxAttempts: 3,
  ...overrides,
});

function grantsNow(budget: RetryBudget): number {
  let granted = 0;
  while (budget.tryWithdraw()) granted += 1;
  return granted;
}

describe('retryAllowance', () => {
  test('is budgetPercent of first attempts plus minPerSecond × 10 s', () => {
    assert.equal(RETRY_BUDGET_WINDOW_MS, 10_000);
    assert.equal(retryAllowance(policy(), 100), 20 + 100);
    assert.equal(retryAllowance(policy(), 0), 100);
    assert.equal(retryAllowance(policy({ minPerSecond: 0 }), 50), 10);
  });

  test('counts negative or NaN parameters as zero and Infinity as unlimited', () => {
    assert.equal(retryAllowance(policy({ budgetPercent: -5, minPerSecond: Number.NaN }), 100), 0);
    assert.equal(retryAllowance(policy({ budgetPercent: Infinity }), 0), 100);
    assert.equal(retryAllowance(policy({ budgetPercent: Infinity }), 1), Infinity);
  });
});

describe('RetryBudget', () => {
  test('grants exactly the allowance at one instant, then refuses', () => {
    const budget = new RetryBudget(policy(), fakeClock());
    for (let i = 0; i < 100; i++) budget.recordRequest();
    assert.equal(grantsNow(budget), 120);
    assert.deepEqual(budget.snapshot(), { firstAttempts: 100, retries: 120, allowance: 120 });
  });

  test('grants only the per-second reserve to a quiet pool', () => {
    const budget = new RetryBudget(policy({ minPerSecond: 0.5 }), fakeClock());
    budget.recordRequest();
    // 0.2 × 1 + 0.5 × 10 = 5.2: retries 0..5 are each below it, so 6 are granted.
    assert.equal(grantsNow(budget), 6);
  });

  test('grants nothing with no percentage and no reserve', () => {
    const budget = new RetryBudget(policy({ budgetPercent: 0, minPerSecond: 0 }), fakeClock());
    for (let i = 0; i < 1000; i++) budget.recordRequest();
    assert.equal(budget.tryWithdraw(), false);
  });

  test('refills as old retries leave the 10 s window', () => {
    const clock = fakeClock();
    const budget = new RetryBudget(policy({ minPerSecond: 1 }), clock);
    assert.equal(grantsNow(budget), 10);
    clock.advance(9_999);
    assert.equal(budget.tryWithdraw(), false);
    clock.advance(1);
    assert.equal(grantsNow(budget), 10);
  });

  test('keeps its counts when the policy changes', () => {
    const clock = fakeClock();
    const budget = new RetryBudget(policy({ minPerSecond: 1 }), clock);
    for (let i = 0; i < 50; i++) budget.recordRequest();
    assert.equal(grantsNow(budget), 20);
    budget.setPolicy(policy({ minPerSecond: 1, budgetPercent: 40 }));
    assert.equal(grantsNow(budget), 10);
  });

  test('property: retries granted never exceed the budget formula', () => {
    // The bucketed window at time t holds at least everything in [t − 9 s, t] and at most what
    // is in (t − 10 s, t]. So every grant must satisfy, with exact timestamps:
    //   retries in [t − 9 s, t] before this one < pct · firstAttempts in (t − 10 s, t] + reserve.
    const op = fc.oneof(
      fc.record({ kind: fc.constant('request' as const), n: fc.integer({ min: 1, max: 30 }) }),
      fc.record({ kind: fc.constant('retry' as const), n: fc.integer({ min: 1, max: 30 }) }),
      fc.record({ kind: fc.constant('wait' as const), n: fc.integer({ min: 1, max: 4_000 }) }),
    );
    const params = fc.record({
      budgetPercent: fc.integer({ min: 0, max: 100 }),
      minPerSecond: fc.double({ min: 0, max: 5, noNaN: true }),
    });
    fc.assert(
      fc.property(
        params,
        fc.array(op, { maxLength: 60, size: 'max' }),
        ({ budgetPercent, minPerSecond }, ops) => {
          const clock = fakeClock();
          const p = policy({ budgetPercent, minPerSecond });
          const budget = new RetryBudget(p, clock);
          const firsts: number[] = [];
          const retries: number[] = [];
          for (const { kind, n } of ops) {
            const t = clock.nowMs();
            if (kind === 'wait') clock.advance(n);
            for (let i = 0; i < n && kind === 'request'; i++) {
              budget.recordRequest();
              firsts.push(t);
            }
            for (let i = 0; i < n && kind === 'retry'; i++) {
              if (!budget.tryWithdraw()) continue;
              retries.push(t);
              const recent = retries.filter((r) => r >= t - 9_000).length;
              const earned = firsts.filter((f) => f > t - 10_000).length;
              const bound = (budgetPercent / 100) * earned + minPerSecond * 10;
              assert.ok(recent - 1 < bound, `${recent - 1} earlier retries vs bound ${bound}`);
            }
          }
        },
      ),
    );
  });
});
