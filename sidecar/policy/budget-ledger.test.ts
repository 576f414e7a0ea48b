import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { BURST_MS, BudgetLedger, DEFAULT_COMPLETION_TOKENS } from './budget-ledger.ts';
import type { BudgetAdmission, BudgetPolicy, BudgetTicket } from './flow-types.ts';

const pool = (limits: Omit<BudgetPolicy, 'id' | 'workload'>): BudgetPolicy => ({
  id: 'pool',
  ...limits,
});
const own = (workload: string, limits: Omit<BudgetPolicy, 'id' | 'workload'>): BudgetPolicy => ({
  id: `workload:${workload}`,
  workload,
  ...limits,
});

function admitted(result: BudgetAdmission): BudgetTicket {
  assert.equal(result.kind, 'admitted', JSON.stringify(result));
  return (result as { ticket: BudgetTicket }).ticket;
}

function wholeLedger(budgets: BudgetPolicy[], nowMs = 0): BudgetLedger {
  const ledger = new BudgetLedger();
  ledger.configure(budgets, 'whole', nowMs);
  return ledger;
}

describe('BudgetLedger buckets', () => {
  test('holds BURST_MS of the share: a burst, then the share rate', () => {
    assert.equal(BURST_MS, 2000);
    // 60 000 tokens a minute: 1 per ms, 2000 held.
    const ledger = wholeLedger([pool({ tokensPerMinute: 60_000 })]);
    admitted(ledger.tryAdmit(undefined, 1500, 0));
    admitted(ledger.tryAdmit(undefined, 500, 0));
    assert.deepEqual(ledger.tryAdmit(undefined, 100, 0), {
      kind: 'over',
      budgetId: 'pool',
      waitMs: 100,
    });
    admitted(ledger.tryAdmit(undefined, 100, 100));
    // Refills no further than its capacity.
    admitted(ledger.tryAdmit(undefined, 2000, 1_000_000));
    assert.equal(ledger.tryAdmit(undefined, 1, 1_000_000).kind, 'over');
  });

  test('a small request budget admits one request per 60 s / share', () => {
    // 10 a minute: capacity a third of a request, one request every 6 s.
    const ledger = wholeLedger([pool({ requestsPerMinute: 10 })]);
    admitted(ledger.tryAdmit(undefined, 0, 0));
    assert.deepEqual(ledger.tryAdmit(undefined, 0, 0), {
      kind: 'over',
      budgetId: 'pool',
      waitMs: 6000,
    });
    assert.equal(ledger.tryAdmit(undefined, 0, 5999).kind, 'over');
    admitted(ledger.tryAdmit(undefined, 0, 6000));
  });

  test('an estimate above the capacity waits for a full bucket, not forever', () => {
    const ledger = wholeLedger([pool({ tokensPerMinute: 6000 })]); // 0.1/ms, 200 held
    admitted(ledger.tryAdmit(undefined, 1000, 0));
    // 800 in debt: 1000 tokens (10 s) until it holds 200 again.
    assert.deepEqual(ledger.tryAdmit(undefined, 1000, 0), {
      kind: 'over',
      budgetId: 'pool',
      waitMs: 10_000,
    });
    admitted(ledger.tryAdmit(undefined, 1000, 10_000));
  });

  test('a request is subject to the pool budget and to its own workload only', () => {
    const ledger = wholeLedger([
      pool({ requestsPerMinute: 60_000 }), // 2000 held
      own('a', { requestsPerMinute: 60 }), // 2 held
      own('b', { tokensPerMinute: 600 }), // 20 held
    ]);
    assert.equal(ledger.applies(undefined), true);
    assert.deepEqual(admitted(ledger.tryAdmit('a', 5, 0)).budgetIds, ['pool', 'workload:a']);
    admitted(ledger.tryAdmit('a', 5, 0));
    assert.deepEqual(ledger.tryAdmit('a', 5, 0), {
      kind: 'over',
      budgetId: 'workload:a',
      waitMs: 1000,
    });
    // Other workloads are not held back by a's budget.
    assert.deepEqual(admitted(ledger.tryAdmit('c', 5, 0)).budgetIds, ['pool']);
    assert.deepEqual(admitted(ledger.tryAdmit(undefined, 5, 0)).budgetIds, ['pool']);
    admitted(ledger.tryAdmit('b', 20, 0));
    assert.equal(ledger.tryAdmit('b', 20, 0).kind, 'over');
  });

  test('over names the budget that takes longest to have room', () => {
    const ledger = wholeLedger([
      pool({ requestsPerMinute: 60, tokensPerMinute: 60_000 }),
      own('a', { tokensPerMinute: 600 }),
    ]);
    admitted(ledger.tryAdmit('a', 20, 0));
    admitted(ledger.tryAdmit('a', 0, 0));
    // pool requests: 1 s; a's tokens: 20 tokens at 10/s = 2 s.
    assert.deepEqual(ledger.tryAdmit('a', 20, 0), {
      kind: 'over',
      budgetId: 'workload:a',
      waitMs: 2000,
    });
  });

  test('no budget: nothing applies and everything is admitted', () => {
    const ledger = new BudgetLedger();
    assert.equal(ledger.applies('a'), false);
    assert.deepEqual(admitted(ledger.tryAdmit('a', 10, 0)), { budgetIds: [], reservedTokens: 10 });
    const other = wholeLedger([own('a', { requestsPerMinute: 1 })]);
    assert.equal(other.applies('b'), false);
    assert.equal(other.applies(undefined), false);
    assert.equal(other.applies('a'), true);
  });

  test('a budget with no units admits everything', () => {
    const ledger = wholeLedger([pool({})]);
    for (let i = 0; i < 100; i++) admitted(ledger.tryAdmit(undefined, 1e9, 0));
    assert.deepEqual(ledger.demand(0), [{ id: 'pool' }]);
  });

  test('nonsense estimates reserve nothing', () => {
    const ledger = wholeLedger([pool({ tokensPerMinute: 600 })]);
    assert.equal(admitted(ledger.tryAdmit(undefined, Number.NaN, 0)).reservedTokens, 0);
    assert.equal(admitted(ledger.tryAdmit(undefined, -4, 0)).reservedTokens, 0);
    admitted(ledger.tryAdmit(undefined, 20, 0));
  });

  test('time that goes back refills nothing', () => {
    const ledger = wholeLedger([pool({ tokensPerMinute: 600 })], 1000);
    admitted(ledger.tryAdmit(undefined, 20, 1000));
    assert.equal(ledger.tryAdmit(undefined, 20, 0).kind, 'over');
    assert.equal(ledger.tryAdmit(undefined, 20, 1000).kind, 'over');
    admitted(ledger.tryAdmit(undefined, 20, 3000));
  });
});

describe('BudgetLedger shares', () => {
  test('a shared budget waits for its first share, which starts full', () => {
    const ledger = new BudgetLedger();
    ledger.configure([pool({ requestsPerMinute: 600, tokensPerMinute: 6000 })], 'shared', 0);
    assert.deepEqual(ledger.tryAdmit(undefined, 1, 0), {
      kind: 'over',
      budgetId: 'pool',
      waitMs: Infinity,
    });
    ledger.applyShares([{ id: 'pool', requestsPerMinute: 60, tokensPerMinute: 600 }], 10);
    admitted(ledger.tryAdmit(undefined, 20, 10));
    // Tokens: 1 at 600 a minute.
    assert.deepEqual(ledger.tryAdmit(undefined, 1, 10), {
      kind: 'over',
      budgetId: 'pool',
      waitMs: 100,
    });
    assert.deepEqual(ledger.status(10)[0]?.share, { requestsPerMinute: 60, tokensPerMinute: 600 });
    assert.deepEqual(ledger.status(10)[0]?.limit, {
      requestsPerMinute: 600,
      tokensPerMinute: 6000,
    });
  });

  test('a new share keeps the balance, clamped to the new capacity, at the new rate', () => {
    const ledger = new BudgetLedger();
    ledger.configure([pool({ tokensPerMinute: 60_000 })], 'shared', 0);
    ledger.applyShares([{ id: 'pool', tokensPerMinute: 60_000 }], 0); // 2000 held
    admitted(ledger.tryAdmit(undefined, 1900, 0)); // 100 left
    ledger.applyShares([{ id: 'pool', tokensPerMinute: 6000 }], 0); // cap 200, 0.1/ms
    admitted(ledger.tryAdmit(undefined, 100, 0));
    assert.deepEqual(ledger.tryAdmit(undefined, 50, 0), {
      kind: 'over',
      budgetId: 'pool',
      waitMs: 500,
    });
    admitted(ledger.tryAdmit(undefined, 200, 5000));
    // Shrinking clamps what it holds.
    ledger.applyShares([{ id: 'pool', tokensPerMinute: 60_000 }], 1_000_000);
    ledger.applyShares([{ id: 'pool', tokensPerMinute: 600 }], 1_000_000); // cap 20
    assert.equal(ledger.tryAdmit(undefined, 21, 1_000_000).kind, 'admitted');
    assert.equal(ledger.tryAdmit(undefined, 1, 1_000_000).kind, 'over');
  });

  test('a share of 0 waits forever; unknown ids and left-out units change nothing', () => {
    const ledger = new BudgetLedger();
    ledger.configure([pool({ requestsPerMinute: 60, tokensPerMinute: 600 })], 'shared', 0);
    ledger.applyShares(
      [
        { id: 'pool', requestsPerMinute: 0, tokensPerMinute: 600 },
        { id: 'workload:x', requestsPerMinute: 5 },
      ],
      0,
    );
    assert.deepEqual(ledger.tryAdmit(undefined, 1, 0), {
      kind: 'over',
      budgetId: 'pool',
      waitMs: Infinity,
    });
    ledger.applyShares([{ id: 'pool', requestsPerMinute: 60 }], 0);
    assert.deepEqual(ledger.status(0)[0]?.share, { requestsPerMinute: 60, tokensPerMinute: 600 });
    // The balance of the 0 share (nothing) is kept and refills at the new rate.
    assert.equal(ledger.tryAdmit(undefined, 1, 0).kind, 'over');
    admitted(ledger.tryAdmit(undefined, 1, 1000));
  });

  test('shares mean nothing to a ledger that enforces budgets whole', () => {
    const ledger = wholeLedger([pool({ requestsPerMinute: 60 })]);
    ledger.applyShares([{ id: 'pool', requestsPerMinute: 0 }], 0);
    admitted(ledger.tryAdmit(undefined, 1, 0));
  });
});

describe('BudgetLedger configure', () => {
  test('keeps state by id, drops removed budgets and units, adds new ones full', () => {
    const ledger = wholeLedger([
      pool({ tokensPerMinute: 600 }),
      own('a', { requestsPerMinute: 60 }),
    ]);
    ledger.noteArrival('a', 20, 0);
    admitted(ledger.tryAdmit('a', 20, 0));
    // Same pool budget, a raised limit: the balance (0) is kept, the rate is new.
    ledger.configure([pool({ tokensPerMinute: 6000, requestsPerMinute: 60 })], 'whole', 0);
    assert.deepEqual(
      ledger.status(0).map((s) => s.id),
      ['pool'],
    );
    assert.deepEqual(ledger.tryAdmit('a', 20, 0), { kind: 'over', budgetId: 'pool', waitMs: 200 });
    ledger.noteArrival('a', 20, 200);
    admitted(ledger.tryAdmit('a', 20, 200));
    // A removed unit no longer limits.
    ledger.configure([pool({ requestsPerMinute: 60 })], 'whole', 200);
    // The report's want is what arrived over the last 2 s as a rate per minute: 2 requests × 30.
    assert.deepEqual(ledger.demand(200), [{ id: 'pool', requests: { used: 2, wanted: 60 } }]);
  });

  test('switching to shared forgets the whole share; back to whole restores it', () => {
    const ledger = wholeLedger([pool({ requestsPerMinute: 60 })]);
    ledger.configure([pool({ requestsPerMinute: 60 })], 'shared', 0);
    assert.deepEqual(ledger.tryAdmit(undefined, 0, 0), {
      kind: 'over',
      budgetId: 'pool',
      waitMs: Infinity,
    });
    assert.deepEqual(ledger.status(0)[0]?.share, {
      requestsPerMinute: undefined,
      tokensPerMinute: undefined,
    });
    ledger.configure([pool({ requestsPerMinute: 60 })], 'whole', 0);
    admitted(ledger.tryAdmit(undefined, 0, 0));
  });
});

describe('BudgetLedger settle and estimates', () => {
  test('settling corrects the tokens, into debt or back up to the capacity', () => {
    const ledger = wholeLedger([pool({ tokensPerMinute: 6000 })]); // 200 held, 0.1/ms
    const first = admitted(ledger.tryAdmit(undefined, 100, 0));
    ledger.settle(first, 300, 0); // 200 more than reserved: -100
    assert.deepEqual(ledger.tryAdmit(undefined, 10, 0), {
      kind: 'over',
      budgetId: 'pool',
      waitMs: 1100,
    });
    ledger.settle(first, 0, 0); // settled once only
    assert.equal(ledger.tryAdmit(undefined, 10, 0).kind, 'over');
    const second = admitted(ledger.tryAdmit(undefined, 200, 3000)); // 200 → 0
    ledger.settle(second, 0, 3000); // gives back 200, capped at 200
    admitted(ledger.tryAdmit(undefined, 200, 3000));
    assert.equal(ledger.tryAdmit(undefined, 1, 3000).kind, 'over');
  });

  test('an unknown actual count leaves the estimate standing', () => {
    const ledger = wholeLedger([pool({ tokensPerMinute: 6000 })]);
    ledger.noteArrival('w', 150, 0);
    const ticket = admitted(ledger.tryAdmit('w', 150, 0));
    ledger.settle(ticket, undefined, 0);
    assert.equal(ledger.tryAdmit(undefined, 60, 0).kind, 'over');
    assert.deepEqual(ledger.demand(0), [{ id: 'pool', tokens: { used: 150, wanted: 150 * 30 } }]);
    // Nothing learned.
    assert.equal(ledger.estimateTokens('w', 400), 100 + DEFAULT_COMPLETION_TOKENS);
  });

  test('settling after the budget went away only learns', () => {
    const ledger = wholeLedger([pool({ tokensPerMinute: 6000 }), own('w', {})]);
    const ticket = admitted(ledger.tryAdmit('w', 10, 0));
    ledger.configure([], 'whole', 0);
    ledger.settle(ticket, 40, 0);
    assert.equal(ledger.estimateTokens('w', 0), 40);
  });

  test('estimates from the prompt until settled requests teach a mean per workload', () => {
    const ledger = wholeLedger([pool({ tokensPerMinute: 1e9 })]);
    assert.equal(ledger.estimateTokens('a', 4001), 1001 + DEFAULT_COMPLETION_TOKENS);
    assert.equal(ledger.estimateTokens('a', 400, 10), 110);
    assert.equal(ledger.estimateTokens('a', -5, -1), DEFAULT_COMPLETION_TOKENS);
    assert.equal(ledger.estimateTokens(undefined, Number.NaN, Number.NaN), 256);
    ledger.settle(admitted(ledger.tryAdmit('a', 1, 0)), 1000, 0);
    assert.equal(ledger.estimateTokens('a', 4, 1), 1000);
    ledger.settle(admitted(ledger.tryAdmit('a', 1, 0)), 0, 0);
    assert.equal(ledger.estimateTokens('a', 4, 1), 800);
    ledger.settle(admitted(ledger.tryAdmit('a', 1, 0)), Number.NaN, 0);
    assert.equal(ledger.estimateTokens('a', 4, 1), 800);
    assert.equal(ledger.estimateTokens('b', 4, 1), 2);
    ledger.settle(admitted(ledger.tryAdmit(undefined, 1, 0)), 7, 0);
    assert.equal(ledger.estimateTokens(undefined, 4, 1), 7);
  });
});

describe('BudgetLedger demand and status', () => {
  test('a request held waiting for budget is wanted in every report until released', () => {
    const ledger = wholeLedger([pool({ requestsPerMinute: 60, tokensPerMinute: 6000 })]);
    const one = ledger.holdWant(undefined, 100, 0);
    const two = ledger.holdWant(undefined, Number.NaN, 0);
    // Long after any event: the two waiting requests are still wanted (× 30 per minute).
    assert.deepEqual(ledger.demand(30_000), [
      { id: 'pool', requests: { used: 0, wanted: 60 }, tokens: { used: 0, wanted: 3000 } },
    ]);
    ledger.releaseWant(one);
    ledger.releaseWant(two);
    ledger.releaseWant(two); // twice: harmless
    assert.deepEqual(ledger.demand(30_000), [
      { id: 'pool', requests: { used: 0, wanted: 0 }, tokens: { used: 0, wanted: 0 } },
    ]);
  });

  test('a request that arrived within the window and waits counts once', () => {
    const ledger = wholeLedger([pool({ tokensPerMinute: 6000 })]);
    ledger.noteArrival(undefined, 100, 29_500);
    ledger.holdWant(undefined, 100, 29_500);
    assert.deepEqual(ledger.demand(30_000), [{ id: 'pool', tokens: { used: 0, wanted: 3000 } }]);
    // Still waiting once it has left the window: counted as held, still once.
    assert.deepEqual(ledger.demand(40_000), [{ id: 'pool', tokens: { used: 0, wanted: 3000 } }]);
  });

  test('a sidecar that drains its queue and gets no new request wants nothing', () => {
    // The demand moved to another sidecar: ten requests queued here long ago are admitted one
    // by one. Admissions are not demand: once the last has left, nothing is wanted (the first
    // build counted them, and the sidecar kept a share it could not spend for 2 s more).
    const ledger = wholeLedger([pool({ tokensPerMinute: 600_000 })]);
    const holds = Array.from({ length: 10 }, (_, i) => {
      ledger.noteArrival(undefined, 100, i * 100);
      return ledger.holdWant(undefined, 100, i * 100);
    });
    for (const [i, hold] of holds.entries()) {
      ledger.releaseWant(hold);
      ledger.settle(admitted(ledger.tryAdmit(undefined, 100, 5_000 + i * 50)), 100, 5_000);
    }
    assert.deepEqual(ledger.demand(5_500), [{ id: 'pool', tokens: { used: 1000, wanted: 0 } }]);
  });

  test('used over the last minute, wanted over the last 2 s, per budget and unit', () => {
    const ledger = wholeLedger([
      pool({ requestsPerMinute: 60, tokensPerMinute: 6000 }),
      own('a', { tokensPerMinute: 600 }),
    ]);
    ledger.noteArrival('a', 20, 0);
    ledger.settle(admitted(ledger.tryAdmit('a', 20, 0)), 30, 1000);
    ledger.noteArrival(undefined, 50, 0);
    ledger.settle(admitted(ledger.tryAdmit(undefined, 50, 0)), 50, 1000);
    for (const tokens of [40, Number.NaN]) {
      ledger.noteArrival('a', tokens, 1000);
      ledger.noteWanted('a', tokens, 1000);
    }
    // `used` over the minute; `wanted`: what arrived over the last 2 s (estimates), as a rate
    // per minute (× 30).
    assert.deepEqual(ledger.demand(1000), [
      { id: 'pool', requests: { used: 2, wanted: 120 }, tokens: { used: 80, wanted: 3300 } },
      { id: 'workload:a', tokens: { used: 30, wanted: 1800 } },
    ]);
    // 10 s later the want has gone, the use of the minute stays.
    assert.deepEqual(ledger.demand(10_000), [
      { id: 'pool', requests: { used: 2, wanted: 0 }, tokens: { used: 80, wanted: 0 } },
      { id: 'workload:a', tokens: { used: 30, wanted: 0 } },
    ]);
    assert.deepEqual(ledger.status(2000), [
      {
        id: 'pool',
        workload: undefined,
        limit: { requestsPerMinute: 60, tokensPerMinute: 6000 },
        share: { requestsPerMinute: 60, tokensPerMinute: 6000 },
        used: { requests: 2, tokens: 80 },
        wanted: { requests: 4, tokens: 120 },
      },
      {
        id: 'workload:a',
        workload: 'a',
        limit: { requestsPerMinute: undefined, tokensPerMinute: 600 },
        share: { requestsPerMinute: undefined, tokensPerMinute: 600 },
        used: { requests: 1, tokens: 30 },
        wanted: { requests: 3, tokens: 70 },
      },
    ]);
    // A minute later it is forgotten.
    assert.deepEqual(ledger.demand(62_000), [
      { id: 'pool', requests: { used: 0, wanted: 0 }, tokens: { used: 0, wanted: 0 } },
      { id: 'workload:a', tokens: { used: 0, wanted: 0 } },
    ]);
  });
});

interface Arrival {
  gapMs: number;
  workload: 'a' | 'b';
  estimate: number;
}

describe('BudgetLedger properties', () => {
  test('tokens admitted over any 60 s stay within share + capacity (or one estimate)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 600, max: 600_000 }),
        fc.array(
          fc.record({
            // Mostly dense, now and then idle long enough to fill up.
            gapMs: fc.oneof(
              { weight: 300, arbitrary: fc.integer({ min: 0, max: 1000 }) },
              { weight: 1, arbitrary: fc.integer({ min: 0, max: 100_000 }) },
            ),
            workload: fc.constantFrom<'a' | 'b'>('a', 'b'),
            // In hundredths of the capacity: mostly within it, sometimes above.
            estimate: fc.integer({ min: 0, max: 150 }),
          }),
          { minLength: 100, maxLength: 600, size: 'max' },
        ),
        fc.boolean(),
        (share, arrivals: Arrival[], shared) => {
          const ledger = new BudgetLedger();
          ledger.configure(
            [pool({ tokensPerMinute: shared ? 10 * share : share })],
            shared ? 'shared' : 'whole',
            0,
          );
          if (shared) ledger.applyShares([{ id: 'pool', tokensPerMinute: share }], 0);
          const capacity = (share * BURST_MS) / 60_000;
          const admittedAt: { t: number; tokens: number }[] = [];
          let now = 0;
          let largest = 0;
          for (const arrival of arrivals) {
            now += arrival.gapMs;
            const estimate = Math.round((arrival.estimate * capacity) / 100);
            const result = ledger.tryAdmit(arrival.workload, estimate, now);
            if (result.kind === 'admitted') {
              ledger.settle(result.ticket, estimate, now);
              admittedAt.push({ t: now, tokens: estimate });
              largest = Math.max(largest, estimate);
            } else {
              assert.ok(result.waitMs > 0 && Number.isFinite(result.waitMs));
            }
          }
          const bound = share + Math.max(capacity, largest);
          // Every window of 60 s that starts at an admission (the worst ones do).
          let end = 0;
          let total = 0;
          for (const start of admittedAt) {
            while (end < admittedAt.length && (admittedAt[end]?.t as number) <= start.t + 60_000) {
              total += admittedAt[end]?.tokens as number;
              end += 1;
            }
            assert.ok(total <= bound + 1e-3, `${total} > ${bound}`);
            total -= start.tokens;
          }
        },
      ),
      { numRuns: 200 },
    );
  });

  test('arrivals spaced below the share are never refused', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 10_000 }),
        fc.integer({ min: 100, max: 1_000_000 }),
        fc.array(
          fc.record({ slackMs: fc.integer({ min: 0, max: 3000 }), estimate: fc.nat(50_000) }),
          { maxLength: 200, size: 'max' },
        ),
        (requestsPerMinute, tokensPerMinute, arrivals) => {
          const ledger = wholeLedger([
            pool({ requestsPerMinute, tokensPerMinute }),
            own('a', { tokensPerMinute }),
          ]);
          let now = 0;
          for (const arrival of arrivals) {
            const result = ledger.tryAdmit('a', arrival.estimate, now);
            assert.equal(result.kind, 'admitted', JSON.stringify({ result, now }));
            // The next comes after this one's request and tokens are refilled (1 ms of margin
            // for rounding), plus any slack.
            const spacing = Math.max(
              60_000 / requestsPerMinute,
              (arrival.estimate * 60_000) / tokensPerMinute,
            );
            now += Math.ceil(spacing) + 1 + arrival.slackMs;
          }
        },
      ),
      { numRuns: 200 },
    );
  });
});
