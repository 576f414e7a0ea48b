/**
 * Hostile model servers through a real sidecar (issue 40): a server whose `/metrics` lies about
 * its speed, pages near and over the size cap, pages that never end or drip, and garbage load
 * reports. Whatever the servers say, the sidecar stays up with bounded memory, no server captures
 * the pool by what it says, and bystanders are served. Rows in docs/reliability.md, "Servers:
 * lying, huge, slow and garbage load reports".
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { ask, completeStream, STREAM_BODY } from '../../harness/ask.ts';
import { sidecarOn } from '../../harness/pool-file.ts';
import { memoryMb } from '../../harness/proc.ts';
import { MAX_REPORT_CHARS } from '../../lib/model-server-load.ts';
import { metricsPage } from '../../bench/hostile-scrape/page.ts';
import { eventually } from '../helpers.ts';
import { recordFigure } from './figures.ts';
import { endpointOf, poolYaml } from './fixtures.ts';
import {
  servePage,
  startHostileBackend,
  vllmPage,
  type HostileBackend,
  type HostileBackendOptions,
} from '../../harness/hostile-backend.ts';

const SCRAPE = ['--load-scrape-every', '100ms'];
/** Issue 40's lying server: 300 ms late, claiming 0.01 ms per token. Honest ones: 8 ms, 20 ms. */
const LIAR_DELAY_MS = 300;
const LIAR_ITL_SECONDS = 0.00001;
const HONEST_DELAY_MS = 8;
const HONEST_ITL_SECONDS = 0.02;

const backendsYaml = (backends: { name: string; server: HostileBackend }[]): string[] =>
  backends.map((b) => `{name: ${b.name}, url: '${b.server.url}/v1'}`);

describe('hostile servers through a real sidecar', () => {
  test('a valid 4 MiB page is read to its end, scraped less often, and requests keep being served', async (t) => {
    // The load gauges sit after 4 MiB of buckets the sidecar does not want: reading them proves
    // the page is parsed across its chunks, not refused.
    const page = metricsPage(MAX_REPORT_CHARS - 4096);
    const huge = await startHostileBackend({
      answerDelayMs: 0,
      metrics: servePage(() => page),
    });
    const normal = await startHostileBackend({
      answerDelayMs: 0,
      metrics: servePage(() => metricsPage(60 * 1024)),
    });
    const pool = await sidecarOn(
      poolYaml(
        backendsYaml([
          { name: 'huge', server: huge },
          { name: 'normal', server: normal },
        ]),
      ),
      SCRAPE,
    );
    try {
      await eventually(
        async () => (await endpointOf(pool.sidecar, 'huge'))?.reported?.kvCacheUsage === 0.25,
        10_000,
        "the 4 MiB page's gauges, read from past its buckets",
      );
      // Serial requests for a window of 4 s (a window to count scrapes in, not a time limit).
      let requests = 0;
      let lost = 0;
      const hugeBefore = huge.scrapes;
      const normalBefore = normal.scrapes;
      for (const until = Date.now() + 4000; Date.now() < until; requests++)
        if (!completeStream(await ask(pool.sidecar.url))) lost++;
      const hugeScrapes = huge.scrapes - hugeBefore;
      const normalScrapes = normal.scrapes - normalBefore;
      const rss = memoryMb(pool.sidecar.pid)?.hwm ?? 0;
      recordFigure(t, {
        fault: 'server: valid /metrics page just under the 4 MiB cap, every scrape',
        load: `${requests} serial streams in 4 s`,
        lost,
        requests,
        hugeScrapes,
        normalScrapes,
        sidecarPeakRssMb: Math.round(rss),
      });
      assert.equal(lost, 0);
      // 4 MiB is 32 × PAGE_BYTES_PER_PERIOD: scraped a 32nd as often (jitter and the
      // scrapes in progress at either end allow some slack). Before: as often as the other.
      assert.ok(
        hugeScrapes * 6 <= normalScrapes + 6,
        `the 4 MiB page was scraped ${hugeScrapes} times, the normal one ${normalScrapes}`,
      );
      assert.ok(rss < 300, `sidecar peak RSS ${rss} MB`);
    } finally {
      await pool.stop();
      await Promise.all([huge.stop(), normal.stop()]);
    }
  });

  for (const honestCount of [1, 2]) {
    test(`a server lying about its speed does not capture a pool of ${honestCount + 1}`, async (t) => {
      const liar = await startHostileBackend({
        answerDelayMs: LIAR_DELAY_MS,
        metrics: servePage((n) => vllmPage(n, LIAR_ITL_SECONDS)),
      });
      const honest = await Promise.all(
        Array.from({ length: honestCount }, () =>
          startHostileBackend({
            answerDelayMs: HONEST_DELAY_MS,
            metrics: servePage((n) => vllmPage(n, HONEST_ITL_SECONDS)),
          }),
        ),
      );
      const pool = await sidecarOn(
        poolYaml(
          backendsYaml([
            { name: 'liar', server: liar },
            ...honest.map((server, i) => ({ name: `honest${i}`, server })),
          ]),
        ),
        SCRAPE,
      );
      try {
        // Let the scrapes measure every server's claimed speed before the first request.
        while (liar.scrapes < 3 || honest.some((h) => h.scrapes < 3)) await sleepMs(50);
        const requests = 100;
        let lost = 0;
        for (let i = 0; i < requests; i++) {
          if (!completeStream(await ask(pool.sidecar.url))) lost++;
        }
        recordFigure(t, {
          fault: `server: lies 0.01 ms/token, answers ${LIAR_DELAY_MS} ms late (${honestCount + 1} servers)`,
          load: `${requests} serial streams`,
          lost,
          requests,
          liarShare: liar.answered / requests,
        });
        assert.equal(lost, 0);
        // Before the fix it got 100 of 100 with one honest peer and with two (the issue: 45 %
        // with two, at another load).
        assert.ok(
          liar.answered <= requests / 4,
          `the liar got ${liar.answered} of ${requests} serial requests`,
        );
      } finally {
        await pool.stop();
        await Promise.all([liar, ...honest].map((b) => b.stop()));
      }
    });
  }
});

const sleepMs = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** What one server of the probe does with its `/metrics` page and its load header. */
type PageBehaviour =
  | { kind: 'garbage'; text: string }
  | { kind: 'near-cap' }
  | { kind: 'over-cap' }
  | { kind: 'never-ending' }
  | { kind: 'drip' }
  | { kind: 'lying'; value: number; itlSeconds: number };

const absurd = fc.constantFrom(Number.NaN, -1, -1e308, 1e308, Infinity, 0, 1e-12, 2 ** 53);
const behaviourArb: fc.Arbitrary<PageBehaviour> = fc.oneof(
  {
    arbitrary: fc.constant({ kind: 'lying' as const, value: 1, itlSeconds: LIAR_ITL_SECONDS }),
    weight: 2,
  },
  fc.record({ kind: fc.constant('garbage' as const), text: fc.string({ maxLength: 2000 }) }),
  fc.constant({ kind: 'near-cap' as const }),
  fc.constant({ kind: 'over-cap' as const }),
  fc.constant({ kind: 'never-ending' as const }),
  fc.constant({ kind: 'drip' as const }),
  fc.record({
    kind: fc.constant('lying' as const),
    value: absurd,
    // Absurd, or plausible and false: 0.01 ms a token from a server as slow as its peers.
    itlSeconds: fc.oneof(absurd, fc.constant(LIAR_ITL_SECONDS)),
  }),
);
const headerArb = fc.option(
  fc.oneof(
    fc.string({ maxLength: 200 }),
    absurd.map((v) => `TEXT named_metrics.num_requests_waiting=${v}, kv_cache_usage_perc=${v}`),
    absurd.map((v) => `JSON {"named_metrics": {"num_requests_running": ${JSON.stringify(v)}}}`),
  ),
  { nil: undefined },
);
/** Printable ASCII only: a header value with control characters is not sendable at all. */
const sendable = (h: string | undefined): string | undefined =>
  h === undefined ? undefined : h.replace(/[^\x20-\x7e]/g, '?');

const NEAR_CAP_PAGE = metricsPage(MAX_REPORT_CHARS - 4096);

function metricsFor(b: PageBehaviour): HostileBackendOptions['metrics'] {
  switch (b.kind) {
    case 'garbage':
      return servePage(() => b.text);
    case 'near-cap':
      return servePage(() => NEAR_CAP_PAGE);
    case 'over-cap':
      return servePage(() => Buffer.concat([NEAR_CAP_PAGE, Buffer.alloc(8192, 0x23)]));
    case 'lying':
      return servePage(
        (n) =>
          `vllm:num_requests_running ${b.value}\nvllm:num_requests_waiting{m="x" ${b.value}\n` +
          `vllm:kv_cache_usage_perc ${b.value}\n` +
          `vllm:inter_token_latency_seconds_sum ${n * 100 * b.itlSeconds}\n` +
          `vllm:inter_token_latency_seconds_count ${n * 100}\n`,
      );
    case 'never-ending':
    case 'drip':
      return (_req, res) => {
        res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' });
        const piece = b.kind === 'drip' ? 'v' : `${'vllm:x_bucket{le="1"} 1\n'.repeat(2600)}`;
        const timer = setInterval(() => res.write(piece), b.kind === 'drip' ? 50 : 5);
        res.on('close', () => clearInterval(timer));
      };
  }
}

describe('hostile-server probe (property-based)', () => {
  const RUNS = 5;
  const SERVERS = 3;
  const REQUESTS = 50;
  const CONCURRENCY = 1;
  /** Every server answers this late: equally fast, so none has a reason of its own to win. */
  const ANSWER_MS = 40;

  test(`${RUNS} random pools of ${SERVERS} hostile servers: alive, bounded, none captures the pool, all served`, async (t) => {
    const scenarios = fc.sample(
      fc.array(fc.record({ page: behaviourArb, header: headerArb }), {
        minLength: SERVERS - 1,
        maxLength: SERVERS - 1,
      }),
      { numRuns: RUNS, seed: Number(process.env['HOSTILE_SEED'] ?? 40) },
    );
    let worstShare = 0;
    let worstHwm = 0;
    let lost = 0;
    for (const [run, servers] of scenarios.entries()) {
      // The first server is honest, its page and header true: the one a liar would take from.
      const backends = await Promise.all([
        startHostileBackend({
          answerDelayMs: ANSWER_MS,
          metrics: servePage((n) => vllmPage(n, HONEST_ITL_SECONDS)),
        }),
        ...servers.map((s) =>
          startHostileBackend({
            answerDelayMs: ANSWER_MS,
            metrics: metricsFor(s.page),
            loadHeader: s.header === undefined ? undefined : () => sendable(s.header) as string,
          }),
        ),
      ]);
      const pool = await sidecarOn(
        poolYaml(backendsYaml(backends.map((server, i) => ({ name: `s${i}`, server })))),
        SCRAPE,
      );
      const what = JSON.stringify(servers).slice(0, 600);
      let exited = false;
      void pool.sidecar.exited.then(() => (exited = true));
      try {
        await sleepMs(1500); // scrapes of every kind, before and during the traffic
        let next = 0;
        let failed = 0;
        await Promise.all(
          Array.from({ length: CONCURRENCY }, async () => {
            while (next < REQUESTS) {
              next++;
              // A prompt of its own each: one shared prompt would go to its home every time
              // (prefix affinity), and that server would have the pool for a reason of its own.
              const body = {
                ...STREAM_BODY,
                messages: [
                  { role: 'user', content: `question ${run}.${next}: ${'x'.repeat(next)}` },
                ],
              };
              const answer = await ask(pool.sidecar.url, body, {
                headers: { 'endpoint-load-metrics-format': 'TEXT' },
              });
              if (!completeStream(answer)) failed++;
            }
          }),
        );
        lost += failed;
        assert.equal(failed, 0, `run ${run}: ${failed} of ${REQUESTS} not served; ${what}`);
        assert.equal(exited, false, `run ${run}: the sidecar exited; ${what}`);
        // Only the hostile servers: the honest one may take all when the others say they are full.
        const share = Math.max(...backends.slice(1).map((b) => b.answered)) / REQUESTS;
        worstShare = Math.max(worstShare, share);
        // Equally fast servers taking serial requests split them by P2C on their TTFT EWMAs,
        // which can favour one of them for a while (up to 72 % seen on a busy machine, with a
        // hostile server whose reports were dropped); a pool captured by a report is 100 %.
        assert.ok(
          share <= 0.85,
          `run ${run}: a hostile server got ${share} of the requests; ${what}`,
        );
        const hwm = memoryMb(pool.sidecar.pid)?.hwm ?? 0;
        worstHwm = Math.max(worstHwm, hwm);
        assert.ok(hwm < 300, `run ${run}: sidecar peak RSS ${hwm} MB; ${what}`);
      } finally {
        await pool.stop();
        await Promise.all(backends.map((b) => b.stop()));
      }
    }
    recordFigure(t, {
      fault: 'server: random, huge, never-ending, dripping, lying /metrics and load headers',
      load: `${RUNS} pools of ${SERVERS}, ${REQUESTS} streams each, ${CONCURRENCY} at a time`,
      lost,
      requests: RUNS * REQUESTS,
      worstServerShare: worstShare,
      sidecarPeakRssMb: Math.round(worstHwm),
    });
  });
});
