import assert from 'node:assert/strict';
import { describe, it, type TestContext } from 'node:test';
import type { Logger } from 'pino';
import type { PoolLoad } from '../../crds/snapshot.ts';
import type { ServerLoadReport } from '../../sidecar/policy/index.ts';
import { LoadMonitor, type LoadMonitorOptions, type ScrapeResult } from './monitor.ts';
import type { ScrapeOutcome } from './scrape-schedule.ts';

const LOAD: ScrapeOutcome = { kind: 'load', load: { running: 2, waiting: 1, kvCacheUsage: 0.25 } };

/**
 * A monitor on mocked timers with a scripted scrape: `answers` maps a URL to its outcome (a
 * missing one never answers). Time moves only through `advance`.
 */
function harness(
  t: TestContext,
  pools: Map<string, { id: string; url: string }[]>,
  answers: Map<string, ScrapeOutcome>,
  extra: Partial<LoadMonitorOptions<string>> = {},
) {
  t.mock.timers.enable({ apis: ['setTimeout', 'setInterval'] });
  let clock = 0;
  const scrapes: string[] = [];
  const published: [string, PoolLoad][] = [];
  const results: ScrapeResult[] = [];
  const logs: { msg: string; fields: Record<string, unknown> }[] = [];
  let pending = 0;
  let maxPending = 0;
  const logger = {
    debug: (fields: Record<string, unknown>, msg: string) => logs.push({ msg, fields }),
  } as unknown as Logger;
  const monitor = new LoadMonitor({
    periodMs: 1000,
    logger,
    pools: () => pools,
    publish: (key, load) => published.push([key, load]),
    onScrape: (result) => results.push(result),
    scrape: (url) => {
      scrapes.push(url);
      const answer = answers.get(url);
      if (answer === undefined) {
        pending++;
        maxPending = Math.max(maxPending, pending);
        return new Promise<ScrapeOutcome>(() => undefined);
      }
      return Promise.resolve(answer);
    },
    random: () => 0.5,
    now: () => clock,
    ...extra,
  });
  const advance = async (ms: number): Promise<void> => {
    for (let step = 0; step < ms; step += 10) {
      clock += 10;
      t.mock.timers.tick(10);
      await new Promise((resolve) => setImmediate(resolve));
    }
  };
  return {
    monitor,
    scrapes,
    published,
    results,
    logs,
    advance,
    maxPending: () => maxPending,
  };
}

const url = (host: string) => `http://${host}:8000/v1`;
const metrics = (host: string) => `http://${host}:8000/metrics`;

describe('LoadMonitor', () => {
  it("hands on the LoRA adapters a server has in use, as a balancer's load report", async (t) => {
    const pools = new Map([['pool', [{ id: 'gpus/10.0.0.1:8000', url: url('10.0.0.1') }]]]);
    const answers = new Map([
      [
        metrics('10.0.0.1'),
        { kind: 'load', load: { running: 1, loadedAdapters: ['sql', 'law'] } } as const,
      ],
    ]);
    // What a standalone sidecar's pool-file source does with each message.
    const reports: [string, ServerLoadReport][] = [];
    const h = harness(t, pools, answers, {
      publish: (_key, load) => {
        for (const e of load.endpoints) reports.push([e.id, e]);
      },
    });
    h.monitor.start();
    await h.advance(2_000);
    h.monitor.stop();
    const [id, report] = reports.at(-1) ?? [];
    assert.equal(id, 'gpus/10.0.0.1:8000');
    assert.deepEqual(report?.loadedAdapters, ['sql', 'law']);
    assert.equal(report?.running, 1);
  });

  it('scrapes each server once a period, shares it between pools, and sends each pool its ids', async (t) => {
    const pools = new Map([
      [
        'apps/chat',
        [
          { id: 'gpus/10.0.0.1:8000', url: url('10.0.0.1') },
          { id: 'gpus/10.0.0.2:8000', url: url('10.0.0.2') },
        ],
      ],
      ['apps/batch', [{ id: 'shared/10.0.0.1:8000', url: url('10.0.0.1') }]],
    ]);
    const answers = new Map([
      [metrics('10.0.0.1'), LOAD],
      [metrics('10.0.0.2'), { kind: 'load', load: { waiting: 7 } } as const],
    ]);
    const h = harness(t, pools, answers);
    h.monitor.start();
    await h.advance(10_000);
    h.monitor.stop();
    const count = (target: string) => h.scrapes.filter((s) => s === target).length;
    assert.ok(count(metrics('10.0.0.1')) >= 9 && count(metrics('10.0.0.1')) <= 11);
    assert.ok(count(metrics('10.0.0.2')) >= 9 && count(metrics('10.0.0.2')) <= 11);
    const last = (key: string) => h.published.filter(([k]) => k === key).at(-1)?.[1];
    assert.deepEqual(
      last('apps/chat')?.endpoints.map(({ ageMs: _, ...rest }) => rest),
      [
        { id: 'gpus/10.0.0.1:8000', running: 2, waiting: 1, kvCacheUsage: 0.25 },
        { id: 'gpus/10.0.0.2:8000', waiting: 7 },
      ],
    );
    assert.deepEqual(
      last('apps/batch')?.endpoints.map((e) => e.id),
      ['shared/10.0.0.1:8000'],
    );
    for (const e of last('apps/chat')?.endpoints ?? [])
      assert.ok(e.ageMs >= 0 && e.ageMs <= 1100, `age ${e.ageMs}`);
    assert.ok(h.results.every((r) => r === 'ok'));
    assert.deepEqual(h.logs, [], 'nothing to say while every server reports');
  });

  it('leaves a server without metrics alone, says so in one debug line, and sends no empty messages', async (t) => {
    const pools = new Map([
      ['apps/chat', [{ id: 'provider/api.example.com:443', url: 'https://api.example.com/v1' }]],
    ]);
    const answers = new Map([
      ['https://api.example.com/metrics', { kind: 'no-metrics', reason: 'HTTP 404' } as const],
    ]);
    const h = harness(t, pools, answers);
    h.monitor.start();
    await h.advance(60_000);
    h.monitor.stop();
    assert.deepEqual(h.scrapes, ['https://api.example.com/metrics']);
    assert.deepEqual(h.results, ['no_metrics']);
    assert.deepEqual(h.published, []);
    assert.equal(h.logs.length, 1);
    assert.match(h.logs[0]!.msg, /no load metrics/);
    assert.deepEqual(h.logs[0]!.fields, {
      target: 'https://api.example.com/metrics',
      reason: 'HTTP 404',
      retryInMs: 600_000,
    });
    assert.deepEqual(h.monitor.counts(), { new: 0, reporting: 0, 'no-metrics': 1, failing: 0 });
  });

  it('backs off a failing server quietly, and clears its load once it is stale', async (t) => {
    const pools = new Map([['apps/chat', [{ id: 'gpus/a', url: url('10.0.0.1') }]]]);
    const answers = new Map<string, ScrapeOutcome>([[metrics('10.0.0.1'), LOAD]]);
    const h = harness(t, pools, answers);
    h.monitor.start();
    await h.advance(3_000);
    answers.set(metrics('10.0.0.1'), { kind: 'failed', cause: 'error', reason: 'ECONNREFUSED' });
    const before = h.scrapes.length;
    await h.advance(60_000);
    h.monitor.stop();
    // 1.5 s, 3 s, 6 s, 12 s, then 22.5 s apart (rng 0.5: three quarters of each ceiling).
    assert.ok(h.scrapes.length - before <= 7, `${h.scrapes.length - before} scrapes in 60 s`);
    assert.deepEqual(
      h.logs.map((l) => l.msg),
      ['load scrape failed; backing off'],
    );
    const chat = h.published.map(([, load]) => load.endpoints.length);
    assert.equal(chat.at(-1), 0, 'an empty message clears the stale load');
    assert.equal(chat.filter((n) => n === 0).length, 1, '…once');
  });

  it('runs at most `concurrency` scrapes at once', async (t) => {
    const endpoints = Array.from({ length: 40 }, (_, i) => ({
      id: `gpus/${i}`,
      url: url(`10.0.1.${i}`),
    }));
    const h = harness(t, new Map([['apps/chat', endpoints]]), new Map(), { concurrency: 4 });
    h.monitor.start();
    await h.advance(5_000);
    h.monitor.stop();
    assert.equal(h.maxPending(), 4);
    assert.equal(h.scrapes.length, 4);
  });

  it('stops scraping the servers of a pool without subscribers, and everything at stop', async (t) => {
    const pools = new Map([['apps/chat', [{ id: 'gpus/a', url: url('10.0.0.1') }]]]);
    const h = harness(t, pools, new Map([[metrics('10.0.0.1'), LOAD]]));
    h.monitor.start();
    await h.advance(3_000);
    pools.delete('apps/chat');
    await h.advance(1_000);
    const scraped = h.scrapes.length;
    await h.advance(5_000);
    assert.equal(h.scrapes.length, scraped);
    pools.set('apps/chat', [{ id: 'gpus/a', url: url('10.0.0.1') }]);
    await h.advance(3_000);
    assert.ok(h.scrapes.length > scraped);
    h.monitor.stop();
    const stopped = h.scrapes.length;
    await h.advance(5_000);
    assert.equal(h.scrapes.length, stopped);
  });

  it('frees the slot of a scrape that rejects, and counts it as an error', async (t) => {
    const pools = new Map([['apps/chat', [{ id: 'gpus/a', url: url('10.0.0.1') }]]]);
    const h = harness(t, pools, new Map(), {
      concurrency: 1,
      scrape: () => Promise.reject(new Error('boom')),
    });
    h.monitor.start();
    await h.advance(5_000);
    h.monitor.stop();
    assert.ok(h.results.length >= 2, `${h.results.length} scrapes`);
    assert.ok(h.results.every((r) => r === 'error'));
    assert.deepEqual(h.monitor.counts(), { new: 0, reporting: 0, 'no-metrics': 0, failing: 1 });
  });

  it('skips endpoints whose URL has no metrics URL', async (t) => {
    const pools = new Map([['apps/chat', [{ id: 'odd', url: 'not a url' }]]]);
    const h = harness(t, pools, new Map());
    h.monitor.start();
    await h.advance(2_000);
    h.monitor.stop();
    assert.deepEqual(h.scrapes, []);
  });
});
