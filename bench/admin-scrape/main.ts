/**
 * `npm run bench:admin-scrape`: what `/metrics` scrapes cost streaming clients at the largest
 * pool (64 backends × 64 URLs = 4,096 endpoints). Steps: start one simulator (every endpoint is
 * one of its 127.x.y.z addresses), a standalone sidecar on that pool, warm every endpoint's
 * series; then stream through the sidecar with and without scrapes running back to back, and
 * report the streams' p99 gap between chunks (and TTFT) in each phase, and how long a scrape took.
 * Writes bench/results/admin-scrape.json. Issue 16's target: scrapes move streaming p99 < 5 ms.
 */
import http from 'node:http';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sidecarOn } from '../../harness/pool-file.ts';
import { startSim } from '../../harness/processes.ts';

const OUT = join(dirname(fileURLToPath(import.meta.url)), '../results/admin-scrape.json');
const BACKENDS = 64;
const URLS_PER_BACKEND = 64;
const CLIENTS = 16;
const PHASE_MS = Number(process.env.PHASE_MS ?? 10_000);

const quantile = (xs: number[], q: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? NaN;
};
const round = (x: number): number => Math.round(x * 100) / 100;

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

async function phase(
  url: string,
  adminUrl: string,
  scrape: boolean,
): Promise<Record<string, number>> {
  const ttfts: number[] = [];
  const gaps: number[] = [];
  const scrapesMs: number[] = [];
  const until = performance.now() + PHASE_MS;
  const clients = Array.from({ length: CLIENTS }, async () => {
    while (performance.now() < until) {
      const r = await stream(url);
      ttfts.push(r.ttftMs);
      gaps.push(...r.gapsMs);
    }
  });
  const scraper = (async () => {
    while (scrape && performance.now() < until) {
      const t = performance.now();
      await (await fetch(`${adminUrl}/metrics`)).text();
      scrapesMs.push(performance.now() - t);
    }
  })();
  await Promise.all([...clients, scraper]);
  return {
    streams: ttfts.length,
    ttftP50Ms: round(quantile(ttfts, 0.5)),
    ttftP99Ms: round(quantile(ttfts, 0.99)),
    chunkGapP50Ms: round(quantile(gaps, 0.5)),
    chunkGapP99Ms: round(quantile(gaps, 0.99)),
    chunkGapMaxMs: round(Math.max(...gaps)),
    ...(scrape
      ? {
          scrapes: scrapesMs.length,
          scrapeP50Ms: round(quantile(scrapesMs, 0.5)),
          scrapeMaxMs: round(Math.max(...scrapesMs)),
        }
      : {}),
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
  const fixture = await sidecarOn(yaml);
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
    // measure
    const without = await phase(url, adminUrl!, false);
    const withScrapes = await phase(url, adminUrl!, true);
    // report
    const result = {
      date: new Date().toISOString(),
      command: 'npm run bench:admin-scrape',
      endpoints: BACKENDS * URLS_PER_BACKEND,
      metricsBytes: text.length,
      firstScrapeMs: round(firstScrapeMs),
      clients: CLIENTS,
      phaseMs: PHASE_MS,
      withoutScrapes: without,
      withScrapesBackToBack: withScrapes,
      chunkGapP99EffectMs: round(withScrapes.chunkGapP99Ms! - without.chunkGapP99Ms!),
      ttftP99EffectMs: round(withScrapes.ttftP99Ms! - without.ttftP99Ms!),
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
