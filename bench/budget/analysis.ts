/**
 * The budget bench's figures from what its clients saw: tokens served and refusals per workload,
 * per calendar minute of the run and over the busiest sliding 60 s, and the targets of issue 43.
 * Pure: unit-tested in analysis.test.ts.
 */

/** One request as its client saw it; times in ms since the run started. */
export interface BudgetRecord {
  workload: string;
  sentAtMs: number;
  endedAtMs: number;
  status: number;
  /** The refusal's error code (429s), when the body said. */
  code?: string | undefined;
  /** prompt + completion tokens from the response's usage; 0 when not served. */
  tokens: number;
}

export interface WorkloadSpec {
  name: string;
  tokensPerMinute: number;
  /** Offered tokens per minute (what the clients would spend if nothing refused). */
  demandTokensPerMinute: number;
}

export interface MinuteFigures {
  minute: number;
  tokens: number;
  /** tokens / budget. */
  ofBudget: number;
  served: number;
  refused: number;
  refusals: Record<string, number>;
  otherErrors: number;
}

export interface WorkloadFigures {
  name: string;
  tokensPerMinute: number;
  demandTokensPerMinute: number;
  overBudget: boolean;
  minutes: MinuteFigures[];
  /** The most tokens served in any 60 s window (ends of requests), and its share of the budget. */
  slidingMax: { tokens: number; ofBudget: number; fromS: number };
  refusedTotal: number;
}

/**
 * Per workload: the calendar minutes [0, 60 s), [60 s, 120 s), … of the run (by when a request
 * ended: that is when its tokens are known and charged), and the sliding 60 s maximum, stepped by
 * `stepMs`.
 */
export function budgetFigures(
  records: readonly BudgetRecord[],
  workloads: readonly WorkloadSpec[],
  minutes: number,
  stepMs = 1000,
): WorkloadFigures[] {
  return workloads.map((w) => {
    const mine = records.filter((r) => r.workload === w.name);
    const table: MinuteFigures[] = Array.from({ length: minutes }, (_, minute) => ({
      minute,
      tokens: 0,
      ofBudget: 0,
      served: 0,
      refused: 0,
      refusals: {},
      otherErrors: 0,
    }));
    for (const r of mine) {
      const row = table[Math.floor(r.endedAtMs / 60_000)];
      if (row === undefined) continue;
      if (r.status >= 200 && r.status < 300) {
        row.served++;
        row.tokens += r.tokens;
      } else if (r.status === 429) {
        row.refused++;
        const code = r.code ?? 'unknown';
        row.refusals[code] = (row.refusals[code] ?? 0) + 1;
      } else row.otherErrors++;
    }
    for (const row of table) row.ofBudget = row.tokens / w.tokensPerMinute;
    const ends = mine
      .filter((r) => r.status >= 200 && r.status < 300)
      .map((r) => [r.endedAtMs, r.tokens] as const)
      .sort((a, b) => a[0] - b[0]);
    let best = { tokens: 0, fromS: 0 };
    const lastStart = Math.max(0, minutes * 60_000 - 60_000);
    let lo = 0;
    let hi = 0;
    let sum = 0;
    for (let from = 0; from <= lastStart; from += stepMs) {
      while (hi < ends.length && ends[hi]![0] < from + 60_000) sum += ends[hi++]![1];
      while (lo < hi && ends[lo]![0] < from) sum -= ends[lo++]![1];
      if (sum > best.tokens) best = { tokens: sum, fromS: from / 1000 };
    }
    return {
      name: w.name,
      tokensPerMinute: w.tokensPerMinute,
      demandTokensPerMinute: w.demandTokensPerMinute,
      overBudget: w.demandTokensPerMinute > w.tokensPerMinute,
      minutes: table,
      slidingMax: { ...best, ofBudget: best.tokens / w.tokensPerMinute },
      refusedTotal: table.reduce((s, m) => s + m.refused, 0),
    };
  });
}

export interface BudgetTarget {
  name: string;
  met: boolean;
  detail: string;
}

/**
 * Issue 43's targets: an over-budget workload within 5 % of its budget in every calendar minute
 * (never more than 5 % over, nor more than 5 % under), the under-budget workload never refused.
 * `skipMinutes` leaves the first minutes out of the "within" half (a start-up the report names);
 * the "never over" half holds for every minute.
 */
export function budgetTargets(
  figures: readonly WorkloadFigures[],
  skipMinutes = 0,
): BudgetTarget[] {
  const targets: BudgetTarget[] = [];
  for (const f of figures) {
    if (f.overBudget) {
      const over = f.minutes.filter((m) => m.ofBudget > 1.05);
      const under = f.minutes.filter((m) => m.minute >= skipMinutes && m.ofBudget < 0.95);
      const fmt = (ms: MinuteFigures[]): string =>
        ms.map((m) => `minute ${m.minute + 1}: ${(m.ofBudget * 100).toFixed(1)} %`).join(', ');
      targets.push({
        name: `${f.name}: never more than 5 % over its budget in any minute`,
        met: over.length === 0,
        detail: over.length === 0 ? 'every minute ≤ 105 %' : fmt(over),
      });
      targets.push({
        name: `${f.name}: within 5 % of its budget${skipMinutes > 0 ? ` (from minute ${skipMinutes + 1})` : ''}`,
        met: under.length === 0 && over.length === 0,
        detail:
          under.length === 0 && over.length === 0
            ? 'every minute within 95–105 %'
            : fmt([...under, ...over].sort((x, y) => x.minute - y.minute)),
      });
    } else {
      targets.push({
        name: `${f.name} (under its budget): never refused`,
        met: f.refusedTotal === 0,
        detail: `${f.refusedTotal} refusals`,
      });
    }
  }
  return targets;
}
