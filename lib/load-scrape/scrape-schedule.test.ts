import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { parseLoad } from '../../crds/snapshot.ts';
import { mulberry32 } from '../rng.ts';
import {
  INTER_TOKEN_LATENCY_MAX_AGE_MS,
  MIN_TOKENS_FOR_INTER_TOKEN_LATENCY,
  PAGE_BYTES_PER_PERIOD,
  SCRAPE_SCHEDULE_DEFAULTS,
  ScrapeSchedule,
  type ScrapeOutcome,
} from './scrape-schedule.ts';

const A = 'http://10.0.0.1:8000/metrics';
const B = 'http://10.0.0.2:8000/metrics';
const LOAD: ScrapeOutcome = { kind: 'load', load: { running: 3, waiting: 1, kvCacheUsage: 0.5 } };
const NOT_FOUND: ScrapeOutcome = { kind: 'no-metrics', reason: 'HTTP 404' };
const REFUSED: ScrapeOutcome = { kind: 'failed', cause: 'error', reason: 'ECONNREFUSED' };

/** An Rng that returns `value` every time (0.5: every jitter at its middle). */
const constant =
  (value: number): (() => number) =>
  () =>
    value;

/** A schedule with one target, scraped once at `nowMs`; returns the schedule. */
function scrapedOnce(outcome: ScrapeOutcome, rng = constant(0.5)): ScrapeSchedule {
  const s = new ScrapeSchedule({ periodMs: 1000 }, rng);
  s.setTargets([A], 0);
  assert.deepEqual(s.takeDue(1000, 16), [A]);
  s.record(A, outcome, 1010);
  return s;
}

describe('ScrapeSchedule: when targets are due', () => {
  test('a new target is due at a random point of the first period', () => {
    const s = new ScrapeSchedule({ periodMs: 1000 }, constant(0.25));
    s.setTargets([A], 5000);
    assert.equal(s.nextDueAtMs(), 5250);
    assert.deepEqual(s.takeDue(5249, 16), []);
    assert.deepEqual(s.takeDue(5250, 16), [A]);
    assert.equal(s.nextDueAtMs(), undefined, 'a target being scraped is not waiting');
    assert.deepEqual(s.takeDue(9999, 16), [], 'nor handed out twice');
  });

  test('after a scrape with load it is due one period after that scrape started, ±10 %', () => {
    for (const [r, dueAt] of [
      [0, 1900],
      [0.5, 2000],
      [1, 2100],
    ] as const) {
      const s = scrapedOnce(LOAD, constant(r));
      assert.equal(s.nextDueAtMs(), dueAt, `rng ${r}`);
    }
  });

  test('a scrape that took longer than the period is followed at once', () => {
    const s = new ScrapeSchedule({ periodMs: 1000 }, constant(0.5));
    s.setTargets([A], 0);
    s.takeDue(500, 16);
    s.record(A, LOAD, 2600);
    assert.equal(s.nextDueAtMs(), 2600);
  });

  test('hands out at most `limit`, the longest overdue first', () => {
    const rng = [0.9, 0.1, 0.5];
    const s = new ScrapeSchedule({ periodMs: 1000 }, () => rng.shift() ?? 0);
    const C = 'http://10.0.0.3:8000/metrics';
    s.setTargets([A, B, C], 0);
    assert.deepEqual(s.takeDue(1000, 2), [B, C]);
    assert.deepEqual(s.takeDue(1000, 2), [A]);
    assert.deepEqual(s.takeDue(1000, 0), []);
  });

  test('keeps the phase of a target that stays and drops one that goes', () => {
    const s = new ScrapeSchedule({ periodMs: 1000 }, constant(0.5));
    s.setTargets([A], 0);
    s.setTargets([A, B], 300);
    assert.equal(s.nextDueAtMs(), 500);
    s.setTargets([B], 400);
    assert.equal(s.nextDueAtMs(), 800);
    assert.equal(s.health(A), undefined);
  });

  test('the outcome of a scrape whose target went meanwhile is ignored', () => {
    const s = new ScrapeSchedule({ periodMs: 1000 }, constant(0.5));
    s.setTargets([A], 0);
    s.takeDue(500, 16);
    s.setTargets([], 600);
    assert.equal(s.record(A, LOAD, 700), undefined);
    assert.equal(s.health(A), undefined);
    assert.deepEqual(s.poolLoad([{ id: 'a', target: A }], 700), { endpoints: [] });
  });

  test('an outcome for a target that is not being scraped is ignored', () => {
    const s = new ScrapeSchedule({ periodMs: 1000 }, constant(0.5));
    s.setTargets([A], 0);
    assert.equal(s.record(A, NOT_FOUND, 100), undefined);
    assert.deepEqual(s.health(A), { kind: 'new' });
    assert.equal(s.nextDueAtMs(), 500);
  });

  test('every target is scraped about once a period over a long run (property)', () => {
    fc.assert(
      fc.property(fc.integer(), fc.integer({ min: 1, max: 40 }), (seed, n) => {
        const s = new ScrapeSchedule({ periodMs: 1000 }, mulberry32(seed));
        const keys = Array.from({ length: n }, (_, i) => `http://10.0.${i}.1:8000/metrics`);
        s.setTargets(keys, 0);
        const scrapes = new Map<string, number>();
        for (let now = 0; now <= 60_000; now += 10) {
          for (const key of s.takeDue(now, 16)) {
            scrapes.set(key, (scrapes.get(key) ?? 0) + 1);
            s.record(key, LOAD, now + 5);
          }
        }
        for (const key of keys) {
          const count = scrapes.get(key) ?? 0;
          // 60 s at 0.9 to 1.1 s per period, plus the first partial period.
          assert.ok(count >= 54 && count <= 67, `${key}: ${count} scrapes`);
        }
      }),
      { numRuns: 50 },
    );
  });
});

describe('ScrapeSchedule: large pages', () => {
  test('a page over PAGE_BYTES_PER_PERIOD is scraped that much less often, and kept as much longer', () => {
    const s = scrapedOnce({ ...LOAD, bytes: 16 * PAGE_BYTES_PER_PERIOD });
    // Started at 1000: the next is 16 periods later (jitter at its middle), not one.
    assert.equal(s.nextDueAtMs(), 1000 + 16_000);
    const pool = (nowMs: number) => s.poolLoad([{ id: 'a', target: A }], nowMs).endpoints.length;
    // The default staleness, 5 periods, stretched 16×: the sample still counts until the next.
    assert.equal(pool(1010 + 5 * 1000 + 1), 1);
    assert.equal(pool(1010 + 16 * 5 * 1000), 1);
    assert.equal(pool(1010 + 16 * 5 * 1000 + 1), 0);
  });

  test('a page that shrinks back is scraped every period again; a small one never waits longer', () => {
    const s = scrapedOnce({ ...LOAD, bytes: 4 * PAGE_BYTES_PER_PERIOD });
    assert.deepEqual(s.takeDue(5000, 16), [A]);
    s.record(A, { ...LOAD, bytes: 1000 }, 5010);
    assert.equal(s.nextDueAtMs(), 6000);
  });
});

describe('ScrapeSchedule: servers without metrics', () => {
  test('are left alone for the no-metrics back-off (10 min ±10 %), and say so once', () => {
    const s = new ScrapeSchedule({ periodMs: 1000 }, constant(0.5));
    s.setTargets([A], 0);
    s.takeDue(1000, 16);
    assert.deepEqual(s.record(A, NOT_FOUND, 1010), {
      kind: 'no-metrics',
      reason: 'HTTP 404',
      retryInMs: SCRAPE_SCHEDULE_DEFAULTS.noMetricsBackoffMs,
    });
    assert.equal(s.nextDueAtMs(), 1000 + 600_000);
    assert.deepEqual(s.takeDue(600_999, 16), []);
    assert.deepEqual(s.takeDue(601_000, 16), [A]);
    assert.equal(s.record(A, NOT_FOUND, 601_010), undefined, 'still none: no second log line');
    assert.deepEqual(s.counts(), { new: 0, reporting: 0, 'no-metrics': 1, failing: 0 });
  });

  test('the back-off is configurable and jittered', () => {
    for (const [r, dueAt] of [
      [0, 1000 + 54_000],
      [1, 1000 + 66_000],
    ] as const) {
      const s = new ScrapeSchedule({ periodMs: 1000, noMetricsBackoffMs: 60_000 }, constant(r));
      s.setTargets([A], 0);
      s.takeDue(1000, 16);
      s.record(A, NOT_FOUND, 1010);
      assert.equal(s.nextDueAtMs(), dueAt);
    }
  });

  test('the verdict outlives the target until it is due, so a pool that comes back does not ask at once', () => {
    const s = scrapedOnce(NOT_FOUND);
    s.setTargets([], 5000);
    assert.equal(s.nextDueAtMs(), undefined, 'not wanted: not scraped');
    assert.deepEqual(s.counts(), { new: 0, reporting: 0, 'no-metrics': 0, failing: 0 });
    s.setTargets([A], 6000);
    assert.deepEqual(s.health(A), { kind: 'no-metrics' });
    assert.equal(s.nextDueAtMs(), 601_000);
  });

  test('…and is forgotten once it is due', () => {
    const s = scrapedOnce(NOT_FOUND);
    s.setTargets([], 5000);
    s.setTargets([], 601_000);
    assert.equal(s.health(A), undefined);
    s.setTargets([A], 601_000);
    assert.deepEqual(s.health(A), { kind: 'new' });
  });

  test('a server that starts reporting is back to the period, and says so', () => {
    const s = scrapedOnce(NOT_FOUND);
    s.takeDue(601_000, 16);
    assert.deepEqual(s.record(A, LOAD, 601_010), { kind: 'reporting', after: 'no-metrics' });
    assert.equal(s.nextDueAtMs(), 602_000);
  });

  test('drops the sample it had', () => {
    const s = scrapedOnce(LOAD);
    s.takeDue(2000, 16);
    s.record(A, NOT_FOUND, 2010);
    assert.deepEqual(s.poolLoad([{ id: 'a', target: A }], 2020), { endpoints: [] });
  });
});

describe('ScrapeSchedule: failed scrapes', () => {
  test('back off per target: period × 2^failures, equal jitter, capped at 30 s', () => {
    const s = new ScrapeSchedule({ periodMs: 1000 }, constant(1));
    s.setTargets([A, B], 0);
    const waits: number[] = [];
    let lastA = 0;
    let bScrapes = 0;
    for (let now = 0; now <= 200_000; now += 100) {
      for (const key of s.takeDue(now, 16)) {
        if (key === B) {
          bScrapes++;
          s.record(B, LOAD, now);
          continue;
        }
        if (lastA > 0) waits.push(now - lastA);
        lastA = now;
        s.record(A, REFUSED, now);
      }
    }
    assert.deepEqual(waits.slice(0, 7), [2000, 4000, 8000, 16_000, 30_000, 30_000, 30_000]);
    assert.deepEqual(s.health(A), { kind: 'failing', failures: waits.length + 1 });
    // B keeps reporting every 1.1 s (rng 1: the longest period), untouched by A's failures.
    assert.deepEqual(s.health(B), { kind: 'reporting' });
    assert.ok(bScrapes >= 170, `B scraped ${bScrapes} times`);
  });

  test('the wait is between half and all of the ceiling', () => {
    for (const [r, wait] of [
      [0, 1000],
      [0.5, 1500],
    ] as const) {
      const s = new ScrapeSchedule({ periodMs: 1000 }, constant(r));
      s.setTargets([A], 0);
      assert.deepEqual(s.takeDue(1000, 16), [A]);
      s.record(A, REFUSED, 1000);
      assert.equal(s.nextDueAtMs(), 1000 + wait);
    }
  });

  test('say so once per streak, and once when the server answers again', () => {
    const s = scrapedOnce(LOAD);
    const outcomes: unknown[] = [];
    for (const outcome of [REFUSED, REFUSED, REFUSED, LOAD, LOAD]) {
      const now = s.nextDueAtMs()!;
      s.takeDue(now, 16);
      outcomes.push(s.record(A, outcome, now));
    }
    assert.deepEqual(outcomes, [
      { kind: 'failing', reason: 'ECONNREFUSED' },
      undefined,
      undefined,
      { kind: 'reporting', after: 'failing' },
      undefined,
    ]);
    assert.deepEqual(s.health(A), { kind: 'reporting' });
  });

  test('keep the last sample until it is stale (5 periods), with its age', () => {
    const s = scrapedOnce(LOAD);
    s.takeDue(2000, 16);
    s.record(A, { kind: 'failed', cause: 'timeout', reason: 'timed out' }, 2500);
    assert.deepEqual(s.poolLoad([{ id: 'a', target: A }], 6010), {
      endpoints: [{ id: 'a', running: 3, waiting: 1, kvCacheUsage: 0.5, ageMs: 5000 }],
    });
    assert.deepEqual(s.poolLoad([{ id: 'a', target: A }], 6011), { endpoints: [] });
  });

  test('a failure cap below the period is raised to the period', () => {
    const s = new ScrapeSchedule({ periodMs: 1000, maxFailureBackoffMs: 10 }, constant(1));
    s.setTargets([A], 0);
    s.takeDue(0, 16);
    s.record(A, REFUSED, 0);
    assert.equal(s.nextDueAtMs(), 1000);
  });
});

describe('ScrapeSchedule: the load message', () => {
  test('lists endpoints with a fresh sample in the given order, with only the fields known', () => {
    const s = new ScrapeSchedule({ periodMs: 1000 }, constant(0));
    s.setTargets([A, B], 0);
    s.takeDue(0, 16);
    s.record(B, { kind: 'load', load: { waiting: 2 } }, 100);
    s.record(A, LOAD, 200.4);
    assert.deepEqual(
      s.poolLoad(
        [
          { id: 'gpus/b', target: B },
          { id: 'gpus/a', target: A },
          { id: 'gpus/a-again', target: A },
          { id: 'provider/x', target: 'https://api.example.com/metrics' },
        ],
        700,
      ),
      {
        endpoints: [
          { id: 'gpus/b', waiting: 2, ageMs: 600 },
          { id: 'gpus/a', running: 3, waiting: 1, kvCacheUsage: 0.5, ageMs: 500 },
          { id: 'gpus/a-again', running: 3, waiting: 1, kvCacheUsage: 0.5, ageMs: 500 },
        ],
      },
    );
  });

  test("passes on the LoRA adapters a server has in use, through the stream's check", () => {
    const s = new ScrapeSchedule({ periodMs: 1000 }, constant(0));
    s.setTargets([A, B], 0);
    s.takeDue(0, 16);
    const adapters = ['sql', 'law'];
    s.record(A, { kind: 'load', load: { running: 1, loadedAdapters: adapters } }, 100);
    s.record(B, { kind: 'load', load: { running: 0, loadedAdapters: [] } }, 100);
    const load = s.poolLoad(
      [
        { id: 'a', target: A },
        { id: 'b', target: B },
      ],
      300,
    );
    const expected = {
      endpoints: [
        { id: 'a', running: 1, loadedAdapters: ['sql', 'law'], ageMs: 200 },
        { id: 'b', running: 0, loadedAdapters: [], ageMs: 200 },
      ],
    };
    assert.deepEqual(load, expected);
    // A copy: the message never shares the sample's list.
    assert.notEqual(load.endpoints[0]!.loadedAdapters, adapters);
    // What a sidecar receives from the controller: the check lets the field through as it is.
    const received = parseLoad(JSON.parse(JSON.stringify(load)));
    assert.deepEqual(received, { ok: true, value: expected });
  });

  test("sends a server's inter-token latency: the change of its histogram between scrapes", () => {
    const s = new ScrapeSchedule({ periodMs: 1000 }, constant(0));
    s.setTargets([A], 0);
    const scrape = (atMs: number, interTokenSeconds: number, interTokens: number) => {
      assert.deepEqual(s.takeDue(atMs, 16), [A]);
      s.record(A, { kind: 'load', load: { running: 1, interTokenSeconds, interTokens } }, atMs);
      return s.poolLoad([{ id: 'a', target: A }], atMs).endpoints[0]?.interTokenLatencyMs;
    };
    // The first scrape only sets where the count starts: a lifetime's mean says nothing of now.
    assert.equal(scrape(0, 100, 10_000), undefined);
    assert.equal(scrape(1000, 100.4, 10_020), 20);
    // Too few tokens since (a request's last steps): the last measurement stands, and the
    // next one covers everything since it.
    assert.equal(scrape(2000, 100.45, 10_025), 20);
    assert.equal(scrape(3000, 101.0, 10_040), 30);
    // Counts going backwards: the server restarted, and the count starts over.
    assert.equal(scrape(4000, 0.2, 20), undefined);
    assert.equal(scrape(5000, 1.2, 120), 10);
  });

  test(`stops sending an inter-token latency ${INTER_TOKEN_LATENCY_MAX_AGE_MS / 1000} s after it was measured`, () => {
    const s = new ScrapeSchedule({ periodMs: 1000 }, constant(0));
    s.setTargets([A], 0);
    const scrape = (atMs: number, interTokens: number) => {
      s.takeDue(atMs, 16);
      s.record(
        A,
        { kind: 'load', load: { waiting: 0, interTokenSeconds: interTokens / 100, interTokens } },
        atMs,
      );
      return s.poolLoad([{ id: 'a', target: A }], atMs).endpoints[0];
    };
    scrape(0, 0);
    assert.equal(scrape(1000, MIN_TOKENS_FOR_INTER_TOKEN_LATENCY)?.interTokenLatencyMs, 10);
    // An idle server: no new tokens, the measurement ages out, the load does not.
    assert.equal(scrape(1000 + INTER_TOKEN_LATENCY_MAX_AGE_MS, 16)?.interTokenLatencyMs, 10);
    const idle = scrape(1001 + INTER_TOKEN_LATENCY_MAX_AGE_MS, 16);
    assert.equal(idle?.interTokenLatencyMs, undefined);
    assert.equal(idle?.waiting, 0);
  });

  test('forgets the inter-token count of a server that stops reporting metrics', () => {
    const s = new ScrapeSchedule({ periodMs: 1000, noMetricsBackoffMs: 1000 }, constant(0));
    s.setTargets([A], 0);
    const record = (atMs: number, outcome: ScrapeOutcome) => {
      s.takeDue(atMs, 16);
      s.record(A, outcome, atMs);
    };
    const load = (interTokens: number): ScrapeOutcome => ({
      kind: 'load',
      load: { running: 1, interTokenSeconds: interTokens / 100, interTokens },
    });
    record(0, load(0));
    record(1000, NOT_FOUND);
    record(2000, load(100));
    // Counted from the scrape after the gap, not across it.
    assert.equal(
      s.poolLoad([{ id: 'a', target: A }], 2000).endpoints[0]?.interTokenLatencyMs,
      undefined,
    );
  });

  test('counts the wanted targets by how they stand', () => {
    const C = 'http://10.0.0.3:8000/metrics';
    const s = new ScrapeSchedule({ periodMs: 1000 }, constant(0));
    s.setTargets([A, B, C, 'http://10.0.0.4:8000/metrics'], 0);
    s.takeDue(0, 3);
    s.record(A, LOAD, 10);
    s.record(B, NOT_FOUND, 10);
    s.record(C, REFUSED, 10);
    assert.deepEqual(s.counts(), { new: 1, reporting: 1, 'no-metrics': 1, failing: 1 });
  });
});

describe('ScrapeSchedule: options', () => {
  test('refuses settings that cannot work', () => {
    for (const bad of [
      { periodMs: 0 },
      { periodMs: -1 },
      { periodMs: Infinity },
      { periodMs: NaN },
      { periodMs: 1000, noMetricsBackoffMs: 0 },
      { periodMs: 1000, maxFailureBackoffMs: -5 },
      { periodMs: 1000, staleAfterMs: 0 },
    ])
      assert.throws(() => new ScrapeSchedule(bad, constant(0)), RangeError, JSON.stringify(bad));
  });

  test('the staleness limit is configurable', () => {
    const s = new ScrapeSchedule({ periodMs: 1000, staleAfterMs: 100 }, constant(0));
    s.setTargets([A], 0);
    s.takeDue(0, 16);
    s.record(A, LOAD, 0);
    assert.equal(s.poolLoad([{ id: 'a', target: A }], 100).endpoints.length, 1);
    assert.equal(s.poolLoad([{ id: 'a', target: A }], 101).endpoints.length, 0);
    assert.equal(s.periodMs, 1000);
  });
});
