/**
 * `npm run bench:soak`: a bounded soak of one real sidecar in front of simulated backends, at a
 * steady open-loop rate with a share of the requests abandoned by the client at random points.
 * Every few seconds it samples the sidecar's RSS and heap (for their slope: a leak shows as a
 * steady climb, in MB per minute by least squares) and its event-loop delay (from its own
 * /metrics: prom-client's monitorEventLoopDelay histogram, which resets at every scrape, so each
 * sample is the distribution over that interval). At the end the sidecar must be back to no
 * request in flight and no connection held. Writes bench/results/soak.json.
 *
 * Not in `npm test`: it runs 10 minutes by default (`--duration 1h` for longer, `30s` to try it).
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { ask, completeStream, type Answer } from '../harness/ask.ts';
import { parseDuration } from '../lib/duration.ts';
import { balancePool, sidecarOn, type SidecarOnPool } from '../harness/pool-file.ts';
import { establishedWith, cpuSeconds, machineCpuSeconds, rssMb } from '../harness/proc.ts';
import { stopAll, type RunningProcess, startSim } from '../harness/processes.ts';
import { seededRng } from '../sidecar/policy/rng.ts';
import { percentile } from './routing/metrics.ts';

const REPO = fileURLToPath(new URL('..', import.meta.url));

const HELP = `npm run bench:soak -- [flags]

  --duration <d>         how long the load is held (default 10m; e.g. 30s, 2h)
  --rate <n>             requests offered per second, open loop (default 200)
  --abort-fraction <f>   share of requests the client abandons at a random point (default 0.2)
  --sims <n>             simulated backends (default 3)
  --sample-every <d>     sampling interval of RSS, heap and event-loop delay (default 5s)
  --warmup <d>           samples before this are left out of the "after warm-up" slopes
                         (default 2m, or a fifth of the duration when shorter)
  --health <mapping>     the pool's spec.health, as YAML, e.g. '{maxTtftSlowdown: 1000}'
                         (default: none, the defaults of docs/configuration.md)
  --seed <n>             seeds the workload (default 6)
  --out <file>           results JSON (default bench/results/soak.json)
`;

interface Flags {
  durationMs: number;
  rate: number;
  abortFraction: number;
  sims: number;
  sampleEveryMs: number;
  warmupMs: number;
  seed: number;
  health: string | undefined;
  out: string;
}

function parseDurationMs(value: string): number {
  const ms = parseDuration(value);
  if (ms === undefined) throw new Error(`expected a duration like 500ms, 30s or 2m, got ${value}`);
  return ms;
}

function parseFlags(): Flags {
  const { values } = parseArgs({
    options: {
      duration: { type: 'string', default: '10m' },
      rate: { type: 'string', default: '200' },
      'abort-fraction': { type: 'string', default: '0.2' },
      sims: { type: 'string', default: '3' },
      'sample-every': { type: 'string', default: '5s' },
      warmup: { type: 'string' },
      seed: { type: 'string', default: '6' },
      health: { type: 'string' },
      out: { type: 'string', default: join(REPO, 'bench/results/soak.json') },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) {
    process.stdout.write(HELP);
    process.exit(0);
  }
  const durationMs = parseDurationMs(values.duration);
  return {
    durationMs,
    rate: Number(values.rate),
    abortFraction: Number(values['abort-fraction']),
    sims: Number(values.sims),
    sampleEveryMs: parseDurationMs(values['sample-every']),
    warmupMs:
      values.warmup === undefined
        ? Math.min(120_000, durationMs / 5)
        : parseDurationMs(values.warmup),
    seed: Number(values.seed),
    health: values.health,
    out: values.out,
  };
}

/** Least-squares slope of y over x. */
function slope(points: readonly { x: number; y: number }[]): number {
  const n = points.length;
  if (n < 2) return NaN;
  const mx = points.reduce((s, p) => s + p.x, 0) / n;
  const my = points.reduce((s, p) => s + p.y, 0) / n;
  const sxy = points.reduce((s, p) => s + (p.x - mx) * (p.y - my), 0);
  const sxx = points.reduce((s, p) => s + (p.x - mx) ** 2, 0);
  return sxx === 0 ? NaN : sxy / sxx;
}

/** Nearest-rank quantile (q from 0 to 1) of unsorted values; NaN for none. */
const quantile = (values: readonly number[], q: number): number =>
  percentile(
    [...values].sort((a, b) => a - b),
    q * 100,
  );

const round = (x: number, digits = 2): number => Math.round(x * 10 ** digits) / 10 ** digits;

/** One gauge (summed over its series) from Prometheus text. */
function gauge(text: string, name: string): number {
  let sum = 0;
  let found = false;
  for (const m of text.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'gm'))) {
    sum += Number(m[1]);
    found = true;
  }
  return found ? sum : NaN;
}

interface Sample {
  /** Minutes since the load started. */
  minute: number;
  rssMb: number;
  heapUsedMb: number;
  /** prom-client's readings (ms): the delay histogram includes its 10 ms sampling interval. */
  loopP50Ms: number;
  loopP99Ms: number;
  loopMaxMs: number;
  inFlight: number;
  clientInFlight: number;
  fds: number;
  sidecarCpuPct: number;
  /** The simulators and this load generator. */
  harnessCpuPct: number;
  /** Everything else on the machine (other work disturbs the delay figures). */
  otherCpuPct: number;
}

/** prom-client samples the loop every 10 ms and records the whole interval: subtract it. */
const LOOP_RESOLUTION_MS = 10;

async function main(): Promise<void> {
  const flags = parseFlags();
  const rng = seededRng(flags.seed);
  const sims: RunningProcess[] = [];
  let fixture: SidecarOnPool | undefined;
  try {
    for (let i = 0; i < flags.sims; i++)
      sims.push(await startSim(`s${i}`, ['--slots', '512', '--seed', String(i)]));
    fixture = await sidecarOn(
      balancePool(
        sims.map((s) => s.url),
        flags.health === undefined ? '' : `  health: ${flags.health}`,
      ),
      ['--log-level', 'warn'],
    );
    const { sidecar } = fixture;
    const { pid } = sidecar;
    const adminUrl = sidecar.adminUrl!;
    const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });
    const prefixes = Array.from({ length: 8 }, (_, i) =>
      `You are assistant number ${i}. Answer briefly and precisely. `.repeat(3),
    );

    const counts = { offered: 0, completed: 0, aborted: 0, failed: 0 };
    const failures: string[] = [];
    const e2eMs: number[] = [];
    let clientInFlight = 0;
    const pending = new Set<Promise<void>>();
    const one = async (): Promise<void> => {
      const streamed = rng.next() < 0.8;
      const abort = rng.next() < flags.abortFraction;
      const body = {
        model: 'm',
        stream: streamed,
        max_tokens: 16 + Math.floor(rng.next() * 240),
        messages: [
          { role: 'system', content: prefixes[Math.floor(rng.next() * prefixes.length)]! },
          { role: 'user', content: `question ${Math.floor(rng.next() * 1e6)}` },
        ],
      };
      const abortAfterBytes = abort ? Math.floor(rng.next() * 3000) : undefined;
      counts.offered++;
      clientInFlight++;
      let a: Answer;
      try {
        a = await ask(sidecar.url, body, {
          abortAfterBytes,
          agent: abort ? false : agent,
          timeoutMs: 60_000,
        });
      } finally {
        clientInFlight--;
      }
      if (abort && a.ended === 'aborted') {
        counts.aborted++;
        return;
      }
      const ok = streamed ? completeStream(a) : a.status === 200 && a.ended === 'end';
      if (ok) {
        counts.completed++;
        if (streamed && counts.completed % 10 === 0) e2eMs.push(a.ms);
      } else {
        counts.failed++;
        if (failures.length < 20)
          failures.push(`${a.status} ${a.ended} ${a.error ?? ''} ${a.body.slice(0, 120)}`);
      }
    };

    const samples: Sample[] = [];
    const harnessCpu = (): number =>
      sims.reduce((n, sim) => n + (cpuSeconds(sim.pid) ?? 0), 0) +
      (process.cpuUsage().user + process.cpuUsage().system) / 1e6;
    const readCpu = () => {
      const machine = machineCpuSeconds();
      return {
        at: performance.now(),
        sidecar: cpuSeconds(pid) ?? 0,
        harness: harnessCpu(),
        // With irq: loopback TCP is processed in softirq, which /proc/stat counts apart from
        // tasks while the processes' own stime includes much of it.
        machine: (machine?.tasks ?? 0) + (machine?.irq ?? 0),
      };
    };
    let lastCpu = readCpu();
    const loadStarted = performance.now();
    const sample = async (): Promise<void> => {
      const text = await (await fetch(`${adminUrl}/metrics`)).text();
      const cpu = readCpu();
      const now = cpu.at;
      const wall = (cpu.at - lastCpu.at) / 1000;
      const before = lastCpu;
      const share = (key: 'sidecar' | 'harness' | 'machine'): number =>
        (cpu[key] - before[key]) / wall;
      lastCpu = cpu;
      samples.push({
        minute: (now - loadStarted) / 60_000,
        rssMb: rssMb(pid) ?? NaN,
        heapUsedMb: gauge(text, 'switchyard_process_nodejs_heap_size_used_bytes') / 2 ** 20,
        loopP50Ms: gauge(text, 'switchyard_process_nodejs_eventloop_lag_p50_seconds') * 1000,
        loopP99Ms: gauge(text, 'switchyard_process_nodejs_eventloop_lag_p99_seconds') * 1000,
        loopMaxMs: gauge(text, 'switchyard_process_nodejs_eventloop_lag_max_seconds') * 1000,
        inFlight: gauge(text, 'switchyard_inflight'),
        clientInFlight,
        fds: readdirSync(`/proc/${pid}/fd`).length,
        sidecarCpuPct: round(share('sidecar') * 100, 1),
        harnessCpuPct: round(share('harness') * 100, 1),
        otherCpuPct: round((share('machine') - share('sidecar') - share('harness')) * 100, 1),
      });
    };

    process.stderr.write(
      `soak: ${flags.rate} req/s for ${flags.durationMs / 1000} s, ${flags.abortFraction * 100} % aborted, ${flags.sims} sims\n`,
    );
    await sample(); // resets the loop histogram: the first interval starts with the load
    samples.length = 0;
    const sampler = setInterval(() => {
      void sample().then(() => {
        const s = samples.at(-1)!;
        process.stderr.write(
          `  ${s.minute.toFixed(1)} min: rss ${s.rssMb.toFixed(0)} MB, heap ${s.heapUsedMb.toFixed(0)} MB, loop p99 ${s.loopP99Ms.toFixed(1)} ms, in flight ${s.inFlight}, ${counts.completed} ok, ${counts.aborted} aborted, ${counts.failed} failed\n`,
        );
      });
    }, flags.sampleEveryMs);
    const intervalMs = 1000 / flags.rate;
    let next = performance.now();
    while (performance.now() - loadStarted < flags.durationMs) {
      const p = one().catch((err: unknown) => {
        counts.failed++;
        if (failures.length < 20) failures.push(String(err));
      });
      pending.add(p);
      void p.finally(() => pending.delete(p));
      next += intervalMs;
      const wait = next - performance.now();
      if (wait > 1) await new Promise((r) => setTimeout(r, wait));
      else if (wait < -1000) next = performance.now(); // far behind: do not burst to catch up
    }
    clearInterval(sampler);
    const loadMs = performance.now() - loadStarted;
    await Promise.all([...pending]);
    agent.destroy();

    // Back to idle: nothing in flight, no client connection left.
    let settled = false;
    const settleStarted = performance.now();
    let afterText = '';
    while (performance.now() - settleStarted < 15_000) {
      afterText = await (
        await fetch(`${adminUrl}/metrics`, { headers: { connection: 'close' } })
      ).text();
      if (gauge(afterText, 'switchyard_inflight') === 0) {
        settled = true;
        break;
      }
      await new Promise((r) => setTimeout(r, 200));
    }
    // Breaker transitions from the sidecar's log (warn level shows the openings).
    const breakers: Record<string, number> = {};
    const firstOpenings: unknown[] = [];
    for (const line of sidecar.output().split('\n')) {
      if (!line.includes('"msg":"circuit breaker open"')) continue;
      const event = JSON.parse(line) as { endpoint: string; reason: string; openForMs: number };
      breakers[event.reason] = (breakers[event.reason] ?? 0) + 1;
      if (firstOpenings.length < 10)
        firstOpenings.push({
          endpoint: event.endpoint,
          reason: event.reason,
          openForMs: event.openForMs,
        });
    }
    const after = {
      settled,
      settleMs: Math.round(performance.now() - settleStarted),
      inFlight: gauge(afterText, 'switchyard_inflight'),
      fds: readdirSync(`/proc/${pid}/fd`).length,
      clientConnections: establishedWith(pid, Number(new URL(sidecar.url).port)),
      rssMb: round(rssMb(pid) ?? NaN, 1),
    };

    const warm = samples.filter((s) => s.minute * 60_000 >= flags.warmupMs);
    const series = (list: Sample[], key: 'rssMb' | 'heapUsedMb') =>
      round(slope(list.map((s) => ({ x: s.minute, y: s[key] }))), 3);
    const lag = (key: 'loopP50Ms' | 'loopP99Ms') =>
      samples.map((s) => Math.max(0, s[key] - LOOP_RESOLUTION_MS));
    let commit = 'unknown';
    try {
      commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], {
        cwd: REPO,
        encoding: 'utf8',
      }).trim();
      const dirty = execFileSync('git', ['status', '--porcelain'], { cwd: REPO, encoding: 'utf8' });
      if (dirty.trim() !== '') commit += ' (with uncommitted changes)';
    } catch {
      // not a checkout
    }
    const results = {
      generatedAt: new Date().toISOString(),
      command: `npm run bench:soak -- ${process.argv.slice(2).join(' ')}`.trim(),
      commit,
      machine: { cpus: os.cpus().length, model: os.cpus()[0]?.model, node: process.version },
      settings: { ...flags, out: undefined },
      durationSeconds: round(loadMs / 1000, 1),
      requests: {
        ...counts,
        achievedRate: round(counts.offered / (loadMs / 1000), 1),
        failures,
      },
      rss: {
        startMb: round(samples[0]?.rssMb ?? NaN, 1),
        endMb: round(samples.at(-1)?.rssMb ?? NaN, 1),
        maxMb: round(Math.max(...samples.map((s) => s.rssMb)), 1),
        slopeMbPerMin: series(samples, 'rssMb'),
        slopeAfterWarmupMbPerMin: series(warm, 'rssMb'),
      },
      heapUsed: {
        startMb: round(samples[0]?.heapUsedMb ?? NaN, 1),
        endMb: round(samples.at(-1)?.heapUsedMb ?? NaN, 1),
        slopeMbPerMin: series(samples, 'heapUsedMb'),
        slopeAfterWarmupMbPerMin: series(warm, 'heapUsedMb'),
      },
      eventLoopDelayMs: {
        note: `per sampling interval, above prom-client's ${LOOP_RESOLUTION_MS} ms resolution`,
        p50: round(quantile(lag('loopP50Ms'), 0.5), 3),
        p99: round(quantile(lag('loopP99Ms'), 0.5), 3),
        worstIntervalP99: round(Math.max(...lag('loopP99Ms')), 3),
        max: round(Math.max(...samples.map((s) => s.loopMaxMs - LOOP_RESOLUTION_MS)), 3),
      },
      clientE2eMs: {
        p50: round(quantile(e2eMs, 0.5), 1),
        p99: round(quantile(e2eMs, 0.99), 1),
        note: 'whole streams (one in ten sampled), the simulator decoding 2 ms per token',
      },
      cpu: {
        note: 'percent of one core, median over the samples',
        sidecar: quantile(
          samples.map((s) => s.sidecarCpuPct),
          0.5,
        ),
        simulatorsAndLoad: quantile(
          samples.map((s) => s.harnessCpuPct),
          0.5,
        ),
        otherWorkOnTheMachine: quantile(
          samples.map((s) => s.otherCpuPct),
          0.5,
        ),
      },
      breakerOpenings: { byReason: breakers, first: firstOpenings },
      after,
      samples: samples.map((s) => ({
        ...s,
        minute: round(s.minute, 3),
        rssMb: round(s.rssMb, 1),
        heapUsedMb: round(s.heapUsedMb, 1),
        loopP50Ms: round(s.loopP50Ms, 3),
        loopP99Ms: round(s.loopP99Ms, 3),
        loopMaxMs: round(s.loopMaxMs, 3),
      })),
    };
    mkdirSync(dirname(flags.out), { recursive: true });
    writeFileSync(flags.out, `${JSON.stringify(results, null, 2)}\n`);
    process.stdout.write(
      [
        `soak: ${results.durationSeconds} s at ${results.requests.achievedRate} req/s offered`,
        `  requests: ${counts.completed} completed, ${counts.aborted} aborted by the client, ${counts.failed} failed`,
        `  RSS: ${results.rss.startMb} → ${results.rss.endMb} MB (max ${results.rss.maxMb}); slope ${results.rss.slopeMbPerMin} MB/min, after warm-up ${results.rss.slopeAfterWarmupMbPerMin} MB/min`,
        `  heap used: ${results.heapUsed.startMb} → ${results.heapUsed.endMb} MB; slope ${results.heapUsed.slopeMbPerMin} MB/min, after warm-up ${results.heapUsed.slopeAfterWarmupMbPerMin} MB/min`,
        `  event-loop delay: p50 ${results.eventLoopDelayMs.p50} ms, p99 ${results.eventLoopDelayMs.p99} ms (worst interval ${results.eventLoopDelayMs.worstIntervalP99} ms, max ${results.eventLoopDelayMs.max} ms)`,
        `  after: ${settled ? 'nothing in flight' : `${after.inFlight} still in flight`} after ${after.settleMs} ms, ${after.clientConnections} client connections, ${after.fds} file handles`,
        `  breaker openings: ${JSON.stringify(breakers)}`,
        `  CPU (% of a core): sidecar ${results.cpu.sidecar}, simulators and load ${results.cpu.simulatorsAndLoad}, other work ${results.cpu.otherWorkOnTheMachine}`,
        `  written to ${flags.out}`,
        '',
      ].join('\n'),
    );
    if (counts.failed > 0 || !settled || after.clientConnections > 0) process.exitCode = 1;
  } finally {
    await fixture?.stop();
    await stopAll(sims);
  }
}

await main();
