/**
 * `npm run bench:hostile-scrape`: what a model server's large `/metrics` page costs the requests
 * a standalone sidecar proxies (issue 40, item 4: a valid page just under the 4 MiB cap, scraped
 * every 100 ms, made 100 serial requests take 28.0 s instead of 1.72 s, event-loop lag p99 227 ms
 * against 14). One run, side by side, `ROUNDS` rounds of each in turn: a sidecar on one server
 * serving a normal page (about 60 KiB), and one on a server serving a 4 MiB page (backend.ts,
 * its own process); `REQUESTS` serial streams through each after a warm-up of scrapes, and the
 * sidecar's own event-loop delay (loop-lag.ts, preloaded). Added latency: a request through the
 * sidecar minus one sent to the server directly, at p50 and p99. Writes
 * bench/results/hostile-scrape.json. Target: the 4 MiB page within 2× of the normal page's.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ask, completeStream } from '../../harness/ask.ts';
import { sidecarOn } from '../../harness/pool-file.ts';
import { startNodeScript } from '../../harness/processes.ts';

const HERE = dirname(fileURLToPath(import.meta.url));
const OUT = join(HERE, '../results/hostile-scrape.json');
const REQUESTS = Number(process.env.REQUESTS ?? 300);
const ROUNDS = Number(process.env.ROUNDS ?? 2);
const WARMUP_MS = 3_000;
const KINDS = ['normal', 'huge'] as const;
type Kind = (typeof KINDS)[number];

const quantile = (xs: number[], q: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? NaN;
};
const round = (x: number): number => Math.round(x * 100) / 100;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function serialLatencies(url: string): Promise<number[]> {
  const ms: number[] = [];
  for (let i = 0; i < REQUESTS; i++) {
    const answer = await ask(url);
    if (!completeStream(answer)) throw new Error(`request ${i} failed: ${answer.status}`);
    ms.push(answer.ms);
  }
  return ms;
}

interface Round {
  directMs: number[];
  proxiedMs: number[];
  lag: { p50Ms: number; p99Ms: number; maxMs: number; samples: number };
  totalMs: number;
}

async function oneRound(kind: Kind, round: number): Promise<Round> {
  const backend = await startNodeScript(join(HERE, 'backend.ts'), [kind]);
  const lagFile = join(tmpdir(), `switchyard-loop-lag-${process.pid}-${kind}-${round}.json`);
  const yaml = [
    'apiVersion: switchyard.dev/v1alpha1',
    'kind: InferencePool',
    'metadata: {name: hostile-scrape}',
    'spec:',
    '  backends:',
    `  - {name: server, url: '${backend.url}/v1'}`,
    '',
  ].join('\n');
  const pool = await sidecarOn(yaml, ['--load-scrape-every', '100ms', '--log-level', 'warn'], {
    NODE_OPTIONS: `--import=${join(HERE, 'loop-lag.ts')}`,
    SWITCHYARD_LOOP_LAG_FILE: lagFile,
  });
  try {
    await sleep(WARMUP_MS);
    process.kill(pool.sidecar.pid, 'SIGUSR2'); // the lag counts from here
    const directMs = await serialLatencies(backend.url);
    const started = performance.now();
    const proxiedMs = await serialLatencies(pool.sidecar.url);
    const totalMs = performance.now() - started;
    await sleep(600); // the next write of the lag file
    const lag = JSON.parse(readFileSync(lagFile, 'utf8')) as Round['lag'];
    return { directMs, proxiedMs, lag, totalMs };
  } finally {
    await pool.stop();
    await backend.stop();
  }
}

const rounds: Record<Kind, Round[]> = { normal: [], huge: [] };
for (let r = 0; r < ROUNDS; r++) {
  for (const kind of KINDS) {
    rounds[kind].push(await oneRound(kind, r));
    console.error(`round ${r + 1}/${ROUNDS} ${kind} done`);
  }
}

/** p50 and p99 of `xs`, ms. */
const spread = (xs: number[]) => ({
  p50Ms: round(quantile(xs, 0.5)),
  p99Ms: round(quantile(xs, 0.99)),
});
const median = (xs: number[]): number => quantile(xs, 0.5);

const summary = (kind: Kind) => {
  const all = rounds[kind];
  const direct = all.flatMap((r) => r.directMs);
  const proxied = all.flatMap((r) => r.proxiedMs);
  return {
    requests: proxied.length,
    proxied: spread(proxied),
    direct: spread(direct),
    // What the sidecar adds: through it minus straight to the server, at the median.
    addedP50Ms: round(median(proxied) - median(direct)),
    serialMsPer100: round((all.reduce((a, r) => a + r.totalMs, 0) / proxied.length) * 100),
    // The sidecar's event-loop delay (10 ms resolution: 10 is no lag), each round's p99 and max.
    loopLagP99MsByRound: all.map((r) => round(r.lag.p99Ms)),
    loopLagMaxMsByRound: all.map((r) => round(r.lag.maxMs)),
  };
};
const normal = summary('normal');
const huge = summary('huge');
const result = {
  date: new Date().toISOString(),
  requestsPerRound: REQUESTS,
  rounds: ROUNDS,
  scrapeEveryMs: 100,
  normalPage: normal,
  hugePage: huge,
  // Huge over normal; the loop lag by the median of the rounds' p99s (one round is noisy here).
  ratio: {
    addedP50: round(huge.addedP50Ms / normal.addedP50Ms),
    proxiedP99: round(huge.proxied.p99Ms / normal.proxied.p99Ms),
    serial: round(huge.serialMsPer100 / normal.serialMsPer100),
    loopLagP99: round(median(huge.loopLagP99MsByRound) / median(normal.loopLagP99MsByRound)),
  },
  target: 'the 4 MiB page within 2× of the normal page (added latency, event-loop lag)',
};
mkdirSync(dirname(OUT), { recursive: true });
writeFileSync(OUT, `${JSON.stringify(result, null, 2)}\n`);
console.log(JSON.stringify(result, null, 2));
