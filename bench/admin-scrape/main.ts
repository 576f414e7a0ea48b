/**
 * `npm run bench:admin-scrape`: what `/metrics` scrapes cost streaming clients at the largest
 * pool (64 backends × 64 URLs = 4,096 endpoints). Steps: start one simulator (every endpoint is
 * one of its 127.x.y.z addresses), a standalone sidecar on that pool, warm every endpoint's
 * series; then stream through the sidecar in phases without scrapes, with scrapes that each render
 * (a scrape a second after the last ended, past the 1 s cache), and with scrapes back to back,
 * each of the two without and with gzip (`ROUNDS` of each in turn, pooled, so a change in the shared machine's load weighs on all
 * alike); report the streams' chunk-gap and TTFT p99 in each and their difference from the phase
 * without, how long a scrape took, and the CPU each process used. Writes
 * bench/results/admin-scrape.json. Issue 16's target: a scrape moves streaming chunk-gap p99 by
 * less than 5 ms.
 *
 * - The sidecar's own load scrape is off (`--load-scrape-every 0`): at 4,096 endpoints it asks the
 *   simulator for /metrics 4,096 times a second, which kept both cores busy and made the streams'
 *   baseline slower than any scrape could move it (docs/benchmarks.md, "Admin scrapes at the
 *   largest pool"). A pool this size comes from the controller, and then the controller scrapes,
 *   not the sidecar.
 * - The scraper runs on a worker thread and drops what it reads: reading 8.5 MB bodies back to
 *   back on the streams' own loop (fetch, then the whole text) delayed the measurement itself.
 */
import http from 'node:http';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { cpuSeconds, machineCpuSeconds } from '../../harness/proc.ts';
import { sidecarOn } from '../../harness/pool-file.ts';
import { startSim } from '../../harness/processes.ts';
import { METRICS_TTL_MS } from '../../sidecar/admin/admin-server.ts';

const OUT = join(dirname(fileURLToPath(import.meta.url)), '../results/admin-scrape.json');
const BACKENDS = 64;
const URLS_PER_BACKEND = 64;
const CLIENTS = 16;
const PHASE_MS = Number(process.env.PHASE_MS ?? 10_000);
const ROUNDS = Number(process.env.ROUNDS ?? 5);
const SIDECAR_FLAGS = ['--load-scrape-every', '0'];

const quantile = (xs: number[], q: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? NaN;
};
const round = (x: number): number => Math.round(x * 100) / 100;
/** Not `Math.max(...xs)`: five rounds of chunk gaps are more arguments than a call can take. */
const maximum = (xs: number[]): number => xs.reduce((a, b) => Math.max(a, b), -Infinity);

/** One streaming request: its TTFT and the gaps between its chunks, in ms. */
function stream(url: string, maxTokens = 40): Promise<{ ttftMs: number; gapsMs: number[] }> {
  const body = JSON.stringify({
    model: 'm',
    stream: true,
    max_tokens: maxTokens,
    messages: [{ role: 'user', content: `hello ${Math.random()}` }],
  });
  return new Promise((resolve, reject) => {
    const started = performance.now();
    let last = started;
    let ttftMs = NaN;
    const gapsMs: number[] = [];
    const req = http.request(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
    });
    req.on('response', (res) => {
      res.on('data', () => {
        const now = performance.now();
        if (Number.isNaN(ttftMs)) ttftMs = now - started;
        else gapsMs.push(now - last);
        last = now;
      });
      res.on('end', () => resolve({ ttftMs, gapsMs }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

/**
 * Fetches `/metrics` until told to stop, `pauseMs` after each scrape ended, reading each body and
 * dropping it (as cheaply as a client can: node:http, no copy of the body), and posts each
 * scrape's duration in ms.
 */
const SCRAPER_SOURCE = `
const http = require('node:http');
const { parentPort, workerData } = require('node:worker_threads');
const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
let stop = false;
parentPort.on('message', () => (stop = true));
const headers = workerData.gzip ? { 'accept-encoding': 'gzip' } : {};
const scrape = () =>
  new Promise((resolve, reject) => {
    http
      .get(workerData.url, { agent, headers }, (res) => {
        res.on('data', () => {});
        res.on('end', resolve);
        res.on('error', reject);
      })
      .on('error', reject);
  });
(async () => {
  while (!stop) {
    const t = performance.now();
    await scrape();
    parentPort.postMessage(performance.now() - t);
    if (workerData.pauseMs > 0) await new Promise((r) => setTimeout(r, workerData.pauseMs));
  }
  agent.destroy();
  parentPort.close();
})();
`;

/**
 * Scrapes `url` on a worker thread, asking for gzip when `gzip` is set (as Prometheus does unless
 * its scrape config turns compression off); `stop` resolves with the durations.
 */
function startScraper(url: string, pauseMs: number, gzip: boolean): { stop(): Promise<number[]> } {
  const worker = new Worker(SCRAPER_SOURCE, { eval: true, workerData: { url, pauseMs, gzip } });
  const durationsMs: number[] = [];
  worker.on('message', (ms: number) => durationsMs.push(ms));
  return {
    async stop() {
      worker.postMessage('stop');
      await new Promise((resolve) => worker.once('exit', resolve));
      return durationsMs;
    },
  };
}

interface PhaseSamples {
  ttftsMs: number[];
  gapsMs: number[];
  scrapesMs: number[];
  seconds: number;
  /** CPU seconds used in the phase, by process. */
  cpu: { sidecar: number; sim: number; bench: number; other: number };
}

/** CPU seconds used so far by the sidecar, the simulator, this process and the whole machine. */
function cpuNow(pids: { sidecar: number; sim: number }) {
  return {
    sidecar: cpuSeconds(pids.sidecar) ?? NaN,
    sim: cpuSeconds(pids.sim) ?? NaN,
    bench: cpuSeconds('self') ?? NaN,
    machine: machineCpuSeconds()?.tasks ?? NaN,
  };
}

/**
 * How `/metrics` is scraped in a phase: not at all; each scrape a second after the last ended, so
 * that every scrape finds the cached text expired and renders (the most a scraper can make the
 * sidecar render); or back to back, each render then served to many scrapes.
 */
const SCRAPES = {
  none: undefined,
  eachRendering: { pauseMs: METRICS_TTL_MS + 10, gzip: false },
  backToBack: { pauseMs: 0, gzip: false },
  eachRenderingGzip: { pauseMs: METRICS_TTL_MS + 10, gzip: true },
  backToBackGzip: { pauseMs: 0, gzip: true },
} as const;
type Scrapes = keyof typeof SCRAPES;

async function phase(
  url: string,
  adminUrl: string,
  scrapes: Scrapes,
  pids: { sidecar: number; sim: number },
): Promise<PhaseSamples> {
  const ttftsMs: number[] = [];
  const gapsMs: number[] = [];
  const started = performance.now();
  const cpuBefore = cpuNow(pids);
  const until = started + PHASE_MS;
  const how = SCRAPES[scrapes];
  const scraper =
    how === undefined ? undefined : startScraper(`${adminUrl}/metrics`, how.pauseMs, how.gzip);
  await Promise.all(
    Array.from({ length: CLIENTS }, async () => {
      while (performance.now() < until) {
        const r = await stream(url);
        ttftsMs.push(r.ttftMs);
        gapsMs.push(...r.gapsMs);
      }
    }),
  );
  const scrapesMs = (await scraper?.stop()) ?? [];
  const cpuAfter = cpuNow(pids);
  const used = (k: keyof typeof cpuAfter): number => cpuAfter[k] - cpuBefore[k];
  return {
    ttftsMs,
    gapsMs,
    scrapesMs,
    seconds: (performance.now() - started) / 1000,
    cpu: {
      sidecar: used('sidecar'),
      sim: used('sim'),
      bench: used('bench'),
      other: used('machine') - used('sidecar') - used('sim') - used('bench'),
    },
  };
}

/** The phases of one kind pooled: stream figures, scrape figures, CPU in % of one core. */
function summary(phases: PhaseSamples[], scrape: boolean): Record<string, unknown> {
  const all = (k: 'ttftsMs' | 'gapsMs' | 'scrapesMs'): number[] => phases.flatMap((p) => p[k]);
  const [ttfts, gaps, scrapes] = [all('ttftsMs'), all('gapsMs'), all('scrapesMs')];
  const seconds = phases.reduce((sum, p) => sum + p.seconds, 0);
  const cpuPct = (k: keyof PhaseSamples['cpu']): number =>
    round((phases.reduce((sum, p) => sum + p.cpu[k], 0) / seconds) * 100);
  return {
    streams: ttfts.length,
    ttftP50Ms: round(quantile(ttfts, 0.5)),
    ttftP99Ms: round(quantile(ttfts, 0.99)),
    chunkGapP50Ms: round(quantile(gaps, 0.5)),
    chunkGapP99Ms: round(quantile(gaps, 0.99)),
    chunkGapMaxMs: round(maximum(gaps)),
    ...(scrape
      ? {
          scrapes: scrapes.length,
          scrapeP50Ms: round(quantile(scrapes, 0.5)),
          scrapeMaxMs: round(maximum(scrapes)),
        }
      : {}),
    cpuPctOfOneCore: {
      sidecar: cpuPct('sidecar'),
      sim: cpuPct('sim'),
      bench: cpuPct('bench'),
      other: cpuPct('other'),
    },
  };
}

async function main(): Promise<void> {
  // start
  const sim = await startSim('big', [
    '--host',
    '0.0.0.0',
    '--slots',
    '256',
    '--decode-ms-per-token',
    '5',
  ]);
  const port = new URL(sim.url).port;
  const backends = Array.from({ length: BACKENDS }, (_, b) => {
    const urls = Array.from(
      { length: URLS_PER_BACKEND },
      (_, u) => `'http://127.0.${b + 1}.${u + 1}:${port}/v1'`,
    );
    return `{name: b${b}, urls: [${urls.join(', ')}]}`;
  });
  const yaml = [
    'apiVersion: switchyard.dev/v1alpha1',
    'kind: InferencePool',
    'metadata: {name: big}',
    'spec:',
    '  backends:',
    ...backends.map((b) => `  - ${b}`),
    '',
  ].join('\n');
  const fixture = await sidecarOn(yaml, SIDECAR_FLAGS);
  const { url, adminUrl } = fixture.sidecar;
  try {
    // warm: 3 requests per endpoint (P2C spreads them: ~95% of endpoints get one), so that
    // nearly every per-endpoint series exists, as in a pool that has run for a while
    const WARM_CONCURRENCY = 64;
    for (let i = 0; i < (3 * BACKENDS * URLS_PER_BACKEND) / WARM_CONCURRENCY; i++)
      await Promise.all(Array.from({ length: WARM_CONCURRENCY }, () => stream(url, 1)));
    const first = performance.now();
    const text = await (await fetch(`${adminUrl!}/metrics`)).text();
    const firstScrapeMs = performance.now() - first;
    // measure: none, each rendering, back to back, none, …
    const pids = { sidecar: fixture.sidecar.pid, sim: sim.pid };
    const gzippedBytes = await new Promise<number>((resolve, reject) => {
      http
        .get(`${adminUrl!}/metrics`, { headers: { 'accept-encoding': 'gzip' } }, (res) => {
          let bytes = 0;
          res.on('data', (c: Buffer) => (bytes += c.length));
          res.on('end', () => resolve(bytes));
        })
        .on('error', reject);
    });
    const phases: Record<Scrapes, PhaseSamples[]> = {
      none: [],
      eachRendering: [],
      backToBack: [],
      eachRenderingGzip: [],
      backToBackGzip: [],
    };
    for (let round = 0; round < ROUNDS; round++) {
      for (const scrapes of Object.keys(SCRAPES) as Scrapes[])
        phases[scrapes].push(await phase(url, adminUrl!, scrapes, pids));
    }
    // report
    type Figures = { chunkGapP99Ms: number; ttftP99Ms: number };
    const without = summary(phases.none, false) as Figures;
    const eachRendering = summary(phases.eachRendering, true) as Figures;
    const backToBack = summary(phases.backToBack, true) as Figures;
    const eachRenderingGzip = summary(phases.eachRenderingGzip, true) as Figures;
    const backToBackGzip = summary(phases.backToBackGzip, true) as Figures;
    const effect = (phase: Figures) => ({
      chunkGapP99Ms: round(phase.chunkGapP99Ms - without.chunkGapP99Ms),
      ttftP99Ms: round(phase.ttftP99Ms - without.ttftP99Ms),
    });
    const result = {
      date: new Date().toISOString(),
      command: 'npm run bench:admin-scrape',
      endpoints: BACKENDS * URLS_PER_BACKEND,
      sidecarFlags: SIDECAR_FLAGS.join(' '),
      metricsBytes: text.length,
      metricsGzippedBytes: gzippedBytes,
      firstScrapeMs: round(firstScrapeMs),
      clients: CLIENTS,
      phaseMs: PHASE_MS,
      rounds: ROUNDS,
      withoutScrapes: without,
      withScrapesEachRendering: eachRendering,
      withScrapesBackToBack: backToBack,
      withGzipScrapesEachRendering: eachRenderingGzip,
      withGzipScrapesBackToBack: backToBackGzip,
      effectOfScrapesEachRendering: effect(eachRendering),
      effectOfScrapesBackToBack: effect(backToBack),
      effectOfGzipScrapesEachRendering: effect(eachRenderingGzip),
      effectOfGzipScrapesBackToBack: effect(backToBackGzip),
    };
    mkdirSync(dirname(OUT), { recursive: true });
    writeFileSync(OUT, JSON.stringify(result, null, 2) + '\n');
    process.stdout.write(JSON.stringify(result, null, 2) + '\n');
  } finally {
    await fixture.stop();
    await sim.stop();
  }
}

await main();
