/**
 * `npm run bench:overhead`: what the sidecar costs on the request path, side by side with no
 * proxy, a bare http-proxy-3 passthrough (the floor our proxy library sets) and, when installed,
 * HAProxy and nginx (references). All against one zero-latency backend, all on 127.0.0.1, in
 * one run:
 *
 *   (a) closed-loop throughput at each concurrency;
 *   (b) latency added over direct at fixed offered rates (open loop, sub-ms resolution);
 *   (c) delay added to each SSE chunk of a stream;
 *   (d) RSS idle and with N held-open streams;
 *   (e) a CPU profile of the sidecar's hot path (and of the bare passthrough, for contrast).
 *
 * Writes bench/results/overhead.json and the overhead section of docs/benchmarks.md; prints the
 * same tables. `--quick` for a ~1 minute run; `--help` for the flags.
 */
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { startSwitchyard, type RunningProcess } from '../harness/processes.ts';
import {
  CHAT_BODY,
  chatBodyOfSize,
  type ClosedResult,
  type Percentiles,
  closedLoop,
  holdStreams,
  openLoop,
  percentiles,
  probe,
  sseRun,
  type Pacer,
} from './overhead-load.ts';
import {
  runWrk,
  startHaproxy,
  startNginx,
  startNodeScript,
  tempDir,
  versionOf,
  which,
  type Child,
} from './overhead-peers.ts';
import { cpuSeconds, machineCpuSeconds, rssMb } from '../harness/proc.ts';
import { summariseProfile } from './overhead-profile.ts';
import {
  added,
  label,
  renderMarkdown,
  writeDocs,
  type ClosedRun,
  type CpuShare,
  type Goal,
  type MachineInfo,
  type OpenRun,
  type Results,
  type RssReading,
} from './overhead-report.ts';

const REPO = fileURLToPath(new URL('..', import.meta.url));
const ALL_TARGETS = ['direct', 'sidecar', 'bare', 'haproxy', 'nginx'] as const;
/**
 * The memory what-if: with V8's default limits on a machine with a lot of RAM, the old space
 * grows under load and is not given back; a capped heap keeps RSS down at the same CPU cost.
 */
const DEFAULT_VARIANT = '--max-old-space-size=96 --max-semi-space-size=4';

/** Other processes used more than this share of a core during a cell: its figures are suspect. */
const NOISY_OTHER_PCT = 25;
const isNoisy = (cell: { cpu: CpuShare } | undefined): boolean =>
  cell !== undefined && cell.cpu.other > NOISY_OTHER_PCT;

const HELP = `npm run bench:overhead -- [flags]

  --quick                   ~1 minute run: 1 round, short cells, no wrk, no sidecar variant;
                            the default run takes about 5 minutes
  --rounds <n>              passes over every closed- and open-loop cell (default 3; quick 1);
                            a cell reports its median round (closed loop) or the median over
                            rounds of each percentile (open loop)
  --retries <n>             extra rounds for a cell none of whose rounds was quiet (other
                            processes under 25 % of a core), and re-runs of a noisy SSE or
                            large-prompt cell (default 2; quick 0)
  --closed-seconds <s>      closed-loop cell length per round (default 1.5; quick 1)
  --open-seconds <s>        open-loop cell length per round (default 2; quick 1.5)
  --warmup-seconds <s>      warm-up before each closed-loop cell (default 0.4; quick 0.3)
  --concurrency <list>      closed-loop concurrencies (default 1,64,256)
  --rates <list>            open-loop offered rates, req/s (default 500,1000,2000)
  --pacer <worker|timer|spin>  open-loop pacing (default worker: a sleeping thread wakes the loop
                            when each send is due; spin keeps a core busy and disturbs the proxy)
  --sse-chunks <n>          chunks per SSE stream (default 500; quick 100)
  --sse-interval-ms <ms>    SSE chunk interval (default 5)
  --sse-streams <n>         concurrent SSE streams (default 1)
  --large-body-kb <n>       also a closed loop at c=64 with an n KiB prompt for direct, sidecar and
                            bare (default 16; 0 to skip)
  --hold-streams <n>        held-open streams for the RSS test (default 1000)
  --profile-seconds <s>     CPU-profiled closed-loop pass, 0 to skip (default 8; quick 2)
  --profile-concurrency <n> its concurrency (default 64)
  --no-pin                  do not pin the profiled proxy to a core of its own (taskset)
  --targets <list>          subset of direct,sidecar,bare,haproxy,nginx (default all; absent peers skip)
  --sidecar-variant <flags> also measure memory and c=64 throughput of a sidecar started with
                            these node flags (default "--max-old-space-size=96
                            --max-semi-space-size=4"; "" to skip)
  --wait-quiet <s>          first wait up to this long for other work on the machine to stop
                            (busy CPU not ours below 10 % of a core over 2 s; default 0)
  --no-wrk                  skip the wrk cross-check even when wrk is installed
  --out <file>              results JSON (default bench/results/overhead.json)
  --no-docs                 do not rewrite the overhead section of docs/benchmarks.md
`;

interface Flags {
  quick: boolean;
  closedSeconds: number;
  openSeconds: number;
  warmupSeconds: number;
  concurrency: number[];
  rates: number[];
  pacer: Pacer;
  sseChunks: number;
  sseIntervalMs: number;
  sseStreams: number;
  holdStreams: number;
  profileSeconds: number;
  profileConcurrency: number;
  targets: string[];
  largeBodyKb: number;
  pin: boolean;
  rounds: number;
  retries: number;
  sidecarVariant: string[];
  waitQuietSeconds: number;
  wrk: boolean;
  out: string;
  docs: boolean;
}

function parseFlags(): Flags {
  const { values } = parseArgs({
    allowNegative: true,
    options: {
      help: { type: 'boolean', default: false },
      quick: { type: 'boolean', default: false },
      'closed-seconds': { type: 'string' },
      'open-seconds': { type: 'string' },
      'warmup-seconds': { type: 'string' },
      concurrency: { type: 'string', default: '1,64,256' },
      rates: { type: 'string', default: '500,1000,2000' },
      pacer: { type: 'string', default: 'worker' },
      'sse-chunks': { type: 'string' },
      'sse-interval-ms': { type: 'string', default: '5' },
      'sse-streams': { type: 'string', default: '1' },
      'hold-streams': { type: 'string', default: '1000' },
      'profile-seconds': { type: 'string' },
      'profile-concurrency': { type: 'string', default: '64' },
      targets: { type: 'string', default: ALL_TARGETS.join(',') },
      'sidecar-variant': { type: 'string' },
      'wait-quiet': { type: 'string', default: '0' },
      rounds: { type: 'string' },
      retries: { type: 'string' },
      'large-body-kb': { type: 'string', default: '16' },
      pin: { type: 'boolean', default: true },
      wrk: { type: 'boolean' },
      out: { type: 'string', default: join(REPO, 'bench/results/overhead.json') },
      docs: { type: 'boolean', default: true },
    },
  });
  if (values.help) {
    process.stdout.write(HELP);
    process.exit(0);
  }
  const quick = values.quick;
  const num = (name: string, value: string | undefined, fallback: number, min = 0): number => {
    if (value === undefined) return fallback;
    const n = Number(value);
    if (!Number.isFinite(n) || n < min) throw new Error(`--${name}: expected a number >= ${min}`);
    return n;
  };
  const list = (name: string, value: string): number[] =>
    value.split(',').map((v) => num(name, v.trim(), 0, 1));
  const pacer = values.pacer as Pacer;
  if (!['worker', 'timer', 'spin'].includes(pacer))
    throw new Error('--pacer: worker, timer or spin');
  const targets = values.targets.split(',').map((t) => t.trim());
  for (const t of targets) {
    if (!(ALL_TARGETS as readonly string[]).includes(t))
      throw new Error(`--targets: unknown target ${t} (${ALL_TARGETS.join(', ')})`);
  }
  if (!targets.includes('direct')) targets.unshift('direct'); // the baseline is always measured
  return {
    quick,
    closedSeconds: num('closed-seconds', values['closed-seconds'], quick ? 1 : 1.5, 0.1),
    openSeconds: num('open-seconds', values['open-seconds'], quick ? 1.5 : 2, 0.1),
    warmupSeconds: num('warmup-seconds', values['warmup-seconds'], quick ? 0.3 : 0.4),
    concurrency: list('concurrency', values.concurrency),
    rates: list('rates', values.rates),
    pacer,
    sseChunks: num('sse-chunks', values['sse-chunks'], quick ? 100 : 500, 2),
    sseIntervalMs: num('sse-interval-ms', values['sse-interval-ms'], 5, 1),
    sseStreams: num('sse-streams', values['sse-streams'], 1, 1),
    holdStreams: num('hold-streams', values['hold-streams'], 1000, 0),
    profileSeconds: num('profile-seconds', values['profile-seconds'], quick ? 2 : 8),
    profileConcurrency: num('profile-concurrency', values['profile-concurrency'], 64, 1),
    targets,
    pin: values.pin,
    largeBodyKb: Math.round(num('large-body-kb', values['large-body-kb'], 16)),
    rounds: Math.round(num('rounds', values.rounds, quick ? 1 : 3, 1)),
    retries: Math.round(num('retries', values.retries, quick ? 0 : 2)),
    sidecarVariant: (values['sidecar-variant'] ?? (quick ? '' : DEFAULT_VARIANT))
      .split(/\s+/)
      .filter((a) => a !== ''),
    waitQuietSeconds: num('wait-quiet', values['wait-quiet'], 0),
    wrk: values.wrk ?? !quick,
    out: values.out,
    docs: values.docs,
  };
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const log = (line: string): void => void process.stderr.write(`${line}\n`);

/** A measured peer: its base URL and the PID whose CPU and RSS we read (none for direct). */
interface Target {
  name: string;
  url: string;
  pid: number | undefined;
  stop?: () => Promise<unknown>;
}

interface CpuMark {
  client: NodeJS.CpuUsage;
  target: number | undefined;
  backend: number | undefined;
  machine: { tasks: number; irq: number } | undefined;
  at: bigint;
}

function cpuMark(target: Target, backendPid: number): CpuMark {
  return {
    client: process.cpuUsage(),
    target: target.pid === undefined ? undefined : cpuSeconds(target.pid),
    backend: cpuSeconds(backendPid),
    machine: machineCpuSeconds(),
    at: process.hrtime.bigint(),
  };
}

function cpuShare(from: CpuMark, target: Target, backendPid: number): CpuShare {
  const to = cpuMark(target, backendPid);
  const wall = Number(to.at - from.at) / 1e9;
  const pct = (s: number | undefined): number | undefined =>
    s === undefined ? undefined : Math.round((s / wall) * 1000) / 10;
  const diff = process.cpuUsage(from.client);
  const client = (diff.user + diff.system) / 1e6;
  const proxy =
    to.target !== undefined && from.target !== undefined ? to.target - from.target : undefined;
  const backend =
    to.backend !== undefined && from.backend !== undefined ? to.backend - from.backend : 0;
  const tasks =
    to.machine !== undefined && from.machine !== undefined
      ? to.machine.tasks - from.machine.tasks
      : undefined;
  const irq =
    to.machine !== undefined && from.machine !== undefined
      ? to.machine.irq - from.machine.irq
      : undefined;
  const other =
    tasks === undefined ? undefined : Math.max(0, tasks - client - (proxy ?? 0) - backend);
  return {
    client: pct(client) ?? 0,
    target: pct(proxy),
    backend: pct(backend) ?? 0,
    kernelIrq: pct(irq) ?? 0,
    other: pct(other) ?? 0,
  };
}

function machineInfo(haproxy: string | undefined, nginx: string | undefined): MachineInfo {
  const cpus = os.cpus();
  let commit = 'unknown';
  try {
    commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], {
      cwd: REPO,
      encoding: 'utf8',
    }).trim();
    const dirty = execFileSync('git', ['status', '--porcelain'], {
      cwd: REPO,
      encoding: 'utf8',
    }).trim();
    if (dirty !== '') commit += ' (with uncommitted changes)';
  } catch {
    // not a git checkout
  }
  const pkg = (name: string): string => {
    try {
      return (
        JSON.parse(readFileSync(join(REPO, 'node_modules', name, 'package.json'), 'utf8')) as {
          version: string;
        }
      ).version;
    } catch {
      return 'unknown';
    }
  };
  return {
    cpuCount: cpus.length,
    cpuModel: cpus[0]?.model.trim() ?? 'unknown',
    memoryGb: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
    os: `${os.type()} ${os.release()}`,
    node: process.version,
    httpProxy3: pkg('http-proxy-3'),
    haproxy: haproxy === undefined ? undefined : versionOf('HAProxy', haproxy, '-v'),
    nginx: nginx === undefined ? undefined : versionOf('nginx', nginx, '-v'),
    fdLimit: (() => {
      try {
        return Number(execFileSync('sh', ['-c', 'ulimit -n'], { encoding: 'utf8' }).trim());
      } catch {
        return undefined;
      }
    })(),
    commit,
    loadAvgBefore: os
      .loadavg()
      .map((x) => x.toFixed(2))
      .join(' '),
  };
}

function poolYaml(backendUrl: string): string {
  return [
    'apiVersion: switchyard.dev/v1alpha1',
    'kind: InferencePool',
    'metadata: {name: bench}',
    'spec:',
    '  mode: Balance',
    '  backends:',
    `  - {name: zero, url: ${backendUrl}/v1}`,
    '',
  ].join('\n');
}

function startSidecar(poolFile: string, nodeArgs: string[] = []): Promise<RunningProcess> {
  return startSwitchyard(
    ['sidecar', '--pool-file', poolFile, '--listen', '127.0.0.1:0', '--admin', '127.0.0.1:0'],
    { nodeArgs, timeoutMs: 20_000 },
  );
}

/** Sets the CPU affinity of every thread of `pid` (taskset); false when that is not possible. */
function pin(pid: number, cpus: string): boolean {
  try {
    execFileSync('taskset', ['-a', '-p', '-c', cpus, String(pid)], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

async function profileOne(
  name: string,
  start: (dir: string) => Promise<{ url: string; pid: number; stop: () => Promise<unknown> }>,
  flags: Flags,
  resultsDir: string,
  backendPid: number,
): Promise<Results['profile'][string]> {
  const dir = tempDir(`prof-${name}`);
  const proc = await start(dir);
  let window: { fromUs: number; toUs: number } | undefined;
  let requests: number | undefined;
  let cpuUsPerRequest: number | undefined;
  // V8 samples wall time: a proxy that waits for a core is charged to the frame it was preempted
  // in (mostly a syscall). Pinning the proxy to a core of its own keeps that out of its profile.
  const cpus = os.cpus().length;
  const all = `0-${cpus - 1}`;
  const pinned =
    flags.pin &&
    cpus >= 2 &&
    pin(proc.pid, String(cpus - 1)) &&
    pin(backendPid, '0') &&
    pin(process.pid, '0');
  try {
    await closedLoop(proc.url, flags.profileConcurrency, flags.warmupSeconds * 1000 || 500);
    const from = process.hrtime.bigint();
    const cpuBefore = cpuSeconds(proc.pid);
    const run = await closedLoop(proc.url, flags.profileConcurrency, flags.profileSeconds * 1000);
    const cpuAfter = cpuSeconds(proc.pid);
    // Only the measured pass counts: start-up, module loading and the warm-up are left out.
    window = {
      fromUs: Number(from / 1000n),
      toUs: Number(from / 1000n) + flags.profileSeconds * 1e6,
    };
    requests = run.completed;
    if (cpuBefore !== undefined && cpuAfter !== undefined && run.completed > 0)
      cpuUsPerRequest = Math.round(((cpuAfter - cpuBefore) * 1e6) / run.completed);
    log(
      `profiled ${label(name)}${pinned ? ` (pinned to CPU ${cpus - 1})` : ''}: ${run.rps} req/s, ${cpuUsPerRequest ?? '?'} µs CPU/req`,
    );
  } finally {
    if (pinned) {
      pin(process.pid, all);
      pin(backendPid, all);
    }
    await proc.stop();
  }
  const file = readdirSync(dir).find((f) => f.endsWith('.cpuprofile'));
  if (file === undefined) return { skipped: `no .cpuprofile written in ${dir}` };
  const kept = join(resultsDir, `overhead-${name}.cpuprofile`);
  copyFileSync(join(dir, file), kept);
  const summary = summariseProfile(kept, REPO, { top: 20, window, requests });
  summary.file = kept.slice(REPO.length);
  summary.cpuUsPerRequest = cpuUsPerRequest;
  summary.pinned = pinned
    ? `proxy on CPU ${cpus - 1}; bench client and backend on CPU 0`
    : 'not pinned';
  return summary;
}

async function main(): Promise<void> {
  const flags = parseFlags();
  const started = Date.now();
  const notes: string[] = [];
  const resultsDir = join(REPO, 'bench/results');
  mkdirSync(resultsDir, { recursive: true });
  const want = (name: string): boolean => flags.targets.includes(name);

  const haproxyBin = want('haproxy') ? which('haproxy') : undefined;
  const nginxBin = want('nginx') ? which('nginx') : undefined;
  const wrkBin = flags.wrk ? which('wrk') : undefined;
  // Other work on the machine competes for its cores: measure it (and wait for it to stop if asked).
  const other = await waitQuiet(flags.waitQuietSeconds);
  if (other !== undefined && other >= 10) {
    const line = `before the run, other processes used ${other.toFixed(0)} % of a core${flags.waitQuietSeconds > 0 ? ` (after waiting up to ${flags.waitQuietSeconds} s for quiet)` : ''}: expect noisier numbers`;
    log(`note: ${line}`);
    notes.push(line);
  }
  const machine = machineInfo(haproxyBin, nginxBin);
  machine.otherCpuBeforePct = other === undefined ? undefined : Math.round(other);

  const results: Results = {
    benchmark: 'overhead',
    version: 1,
    startedAt: new Date(started).toISOString(),
    durationSeconds: 0,
    settings: {
      quick: flags.quick,
      rounds: flags.rounds,
      retries: flags.retries,
      noisyOtherPct: NOISY_OTHER_PCT,
      largeBodyKb: flags.largeBodyKb,
      closedSeconds: flags.closedSeconds,
      openSeconds: flags.openSeconds,
      warmupSeconds: flags.warmupSeconds,
      concurrency: flags.concurrency,
      rates: flags.rates,
      pacer: flags.pacer,
      sseChunks: flags.sseChunks,
      sseIntervalMs: flags.sseIntervalMs,
      sseStreams: flags.sseStreams,
      holdStreams: flags.holdStreams,
      profileSeconds: flags.profileSeconds,
      profileConcurrency: flags.profileConcurrency,
      requestBytes: CHAT_BODY.length,
      client: 'node:http, keep-alive agent (maxSockets Infinity), in the bench process',
      backend: 'bench/overhead-backend.ts (node:http, fixed JSON at once; SSE stamped with hrtime)',
    },
    machine,
    targets: {},
    closedLoop: {},
    openLoop: {},
    addedLatency: {},
    sse: {},
    sseAdded: {},
    rss: {},
    profile: {},
    goals: {},
    notes,
  };

  // --- Peers --------------------------------------------------------------------------------
  const backend = await startNodeScript('backend', './overhead-backend.ts', ['--port', '0']);
  const targets: Target[] = [{ name: 'direct', url: backend.url, pid: undefined }];
  results.targets.direct = { url: backend.url, note: 'the zero-latency backend itself' };
  const poolDir = tempDir('pool');
  const poolFile = join(poolDir, 'pool.yaml');
  writeFileSync(poolFile, poolYaml(backend.url));

  const addPeer = async (
    name: string,
    start: () => Promise<Child | RunningProcess>,
    note?: string,
  ): Promise<void> => {
    try {
      const p = await start();
      targets.push({ name, url: p.url, pid: p.pid, stop: () => p.stop() });
      results.targets[name] = { url: p.url, pid: p.pid, ...(note !== undefined ? { note } : {}) };
    } catch (err) {
      const reason = firstReason((err as Error).message);
      log(`skip ${label(name)}: ${reason}`);
      results.targets[name] = { skipped: reason };
    }
  };
  if (want('sidecar'))
    await addPeer(
      'sidecar',
      () => startSidecar(poolFile),
      'switchyard sidecar, default settings, pool of one backend',
    );
  if (want('bare'))
    await addPeer(
      'bare',
      () => startNodeScript('bare', './overhead-bare-proxy.ts', ['--target', backend.url]),
      'http-proxy-3 with a keep-alive agent, no policy',
    );
  if (want('haproxy')) {
    if (haproxyBin === undefined) {
      log('skip HAProxy: not installed (no haproxy on PATH or in /usr/sbin)');
      results.targets.haproxy = { skipped: 'not installed' };
    } else
      await addPeer(
        'haproxy',
        () => startHaproxy(haproxyBin, backend.url),
        'mode http, http-reuse always, default threads',
      );
  }
  if (want('nginx')) {
    if (nginxBin === undefined) {
      log('skip nginx: not installed (no nginx on PATH or in /usr/sbin)');
      results.targets.nginx = { skipped: 'not installed' };
    } else
      await addPeer(
        'nginx',
        () => startNginx(nginxBin, backend.url),
        '1 worker, upstream keepalive, proxy_buffering off',
      );
  }
  for (const t of [...targets]) {
    try {
      await probe(t.url);
    } catch (err) {
      log(`skip ${label(t.name)}: probe failed: ${(err as Error).message}`);
      results.targets[t.name] = { skipped: `probe failed: ${(err as Error).message}` };
      targets.splice(targets.indexOf(t), 1);
      await t.stop?.();
    }
  }
  for (const [name, t] of Object.entries(results.targets))
    if (t.skipped !== undefined) notes.push(`${label(name)} skipped: ${t.skipped}`);
  const proxies = targets.filter((t) => t.name !== 'direct');
  log(`targets: ${targets.map((t) => `${t.name} ${t.url}`).join(', ')}`);
  const afterStart = new Map(
    proxies.map((t) => [t.name, t.pid === undefined ? undefined : rssMb(t.pid)]),
  );

  // Warm-up (JIT, connection pools), then the idle RSS of each proxy.
  for (const t of targets) await closedLoop(t.url, 16, Math.max(500, flags.warmupSeconds * 1000));
  await sleep(500);
  const idleAfterWarmup = new Map(
    proxies.map((t) => [t.name, t.pid === undefined ? undefined : rssMb(t.pid)]),
  );

  // --- (a) closed loop ------------------------------------------------------------------------
  // Rounds pass over every cell in turn, so a burst of other work on the machine hits one
  // round of one cell, not a whole target. A round during which other processes used more than
  // NOISY_OTHER_PCT of a core is noisy; a cell without a quiet round is re-run (--retries) at the
  // end, and reports the median of its quiet rounds (of all of them if none was quiet).
  const closedCell = async (t: Target, c: number, label_: string): Promise<ClosedRun> => {
    await closedLoop(t.url, c, Math.max(300, flags.warmupSeconds * 1000));
    const mark = cpuMark(t, backend.pid);
    const run = await closedLoop(t.url, c, flags.closedSeconds * 1000);
    const result = withCpu(run, cpuShare(mark, t, backend.pid));
    log(
      `closed c=${c} ${label(t.name)} (${label_}): ${run.rps} req/s, p50 ${run.latencyMs.p50} ms, p99 ${run.latencyMs.p99} ms` +
        (result.proxyCpuUsPerRequest !== undefined
          ? `, proxy CPU ${result.proxyCpuUsPerRequest} µs/req`
          : '') +
        (isNoisy(result) ? `, noisy (other processes ${Math.round(result.cpu.other)} %)` : '') +
        (run.errors > 0 ? `, ${run.errors} errors (${run.firstError ?? ''})` : ''),
    );
    return result;
  };
  const closedRounds = new Map<string, ClosedRun[]>();
  const closedKey = (t: Target, c: number): string => `${t.name} ${c}`;
  for (let round = 1; round <= flags.rounds; round++) {
    for (const c of flags.concurrency) {
      for (const t of targets) {
        const result = await closedCell(t, c, `round ${round}`);
        closedRounds.set(closedKey(t, c), [...(closedRounds.get(closedKey(t, c)) ?? []), result]);
      }
    }
  }
  for (let retry = 1; retry <= flags.retries; retry++) {
    for (const c of flags.concurrency) {
      for (const t of targets) {
        const rounds = closedRounds.get(closedKey(t, c)) ?? [];
        if (rounds.some((r) => !isNoisy(r))) continue;
        rounds.push(await closedCell(t, c, `retry ${retry}`));
      }
    }
  }
  for (const t of targets) {
    for (const c of flags.concurrency) {
      const rounds = closedRounds.get(closedKey(t, c)) ?? [];
      const quiet = rounds.filter((r) => !isNoisy(r));
      const chosen = quiet.length > 0 ? quiet : rounds;
      // The median round (the lower middle one for an even count).
      const sorted = [...chosen].sort((a, b) => a.rps - b.rps);
      const median = sorted[Math.floor((sorted.length - 1) / 2)];
      if (median === undefined) continue;
      (results.closedLoop[t.name] ??= {})[String(c)] = {
        ...median,
        rpsRounds: rounds.map((r) => r.rps),
        noisyRounds: rounds.length - quiet.length,
        errors: rounds.reduce((n, r) => n + r.errors, 0),
      };
    }
  }
  if (flags.largeBodyKb > 0) {
    const body = chatBodyOfSize(flags.largeBodyKb);
    results.largeBody = { bytes: body.length, concurrency: 64, runs: {} };
    for (const t of targets.filter((x) => ['direct', 'sidecar', 'bare'].includes(x.name))) {
      const measure = async (): Promise<ClosedRun> => {
        await closedLoop(t.url, 64, Math.max(300, flags.warmupSeconds * 1000), body);
        const mark = cpuMark(t, backend.pid);
        const result = await closedLoop(t.url, 64, flags.closedSeconds * 1000, body);
        return withCpu(result, cpuShare(mark, t, backend.pid));
      };
      let run = await measure();
      for (let retry = 0; retry < flags.retries && isNoisy(run); retry++) {
        log(`closed c=64 ${flags.largeBodyKb} KiB prompt ${label(t.name)}: noisy, once more`);
        run = await measure();
      }
      results.largeBody.runs[t.name] = run;
      log(
        `closed c=64 ${flags.largeBodyKb} KiB prompt ${label(t.name)}: ${run.rps} req/s` +
          (run.proxyCpuUsPerRequest !== undefined
            ? `, proxy CPU ${run.proxyCpuUsPerRequest} µs/req`
            : '') +
          (run.errors > 0 ? `, ${run.errors} errors (${run.firstError ?? ''})` : ''),
      );
    }
  }
  if (wrkBin !== undefined) {
    results.wrk = {};
    for (const t of targets) {
      try {
        const w = await runWrk(
          wrkBin,
          `${t.url}/v1/chat/completions`,
          CHAT_BODY,
          64,
          Math.max(1, Math.round(flags.closedSeconds)),
        );
        results.wrk[t.name] = w;
        log(`wrk c=64 ${label(t.name)}: ${w.rps} req/s`);
      } catch (err) {
        log(`wrk ${label(t.name)} failed: ${(err as Error).message.split('\n')[0] ?? ''}`);
      }
    }
  } else if (flags.wrk) {
    log('skip wrk cross-check: wrk not installed');
  }

  // --- (b) open loop --------------------------------------------------------------------------
  // Rounds again, noisy ones re-run as above; a cell reports the median over its quiet rounds
  // of each percentile (one stall elsewhere on the machine does not decide a p99), and the
  // pooled percentiles too.
  const openCell = async (t: Target, rate: number, label_: string): Promise<OpenRun> => {
    await openLoop(t.url, rate, flags.quick ? 200 : 300, flags.pacer);
    const mark = cpuMark(t, backend.pid);
    const run = await openLoop(t.url, rate, flags.openSeconds * 1000, flags.pacer);
    const result: OpenRun = { ...run, cpu: cpuShare(mark, t, backend.pid) };
    log(
      `open ${rate}/s ${label(t.name)} (${label_}): p50 ${run.fromIntendedMs.p50} p99 ${run.fromIntendedMs.p99} ms (from sent: ${run.fromSentMs.p50} / ${run.fromSentMs.p99})` +
        (isNoisy(result) ? `, noisy (other processes ${Math.round(result.cpu.other)} %)` : '') +
        (run.errors > 0 ? `, ${run.errors} errors (${run.firstError ?? ''})` : ''),
    );
    return result;
  };
  const openRounds = new Map<string, OpenRun[]>();
  const openKey = (t: Target, rate: number): string => `${t.name} ${rate}`;
  for (let round = 1; round <= flags.rounds; round++) {
    for (const rate of flags.rates) {
      for (const t of targets) {
        const result = await openCell(t, rate, `round ${round}`);
        openRounds.set(openKey(t, rate), [...(openRounds.get(openKey(t, rate)) ?? []), result]);
      }
    }
  }
  for (let retry = 1; retry <= flags.retries; retry++) {
    for (const rate of flags.rates) {
      for (const t of targets) {
        const rounds = openRounds.get(openKey(t, rate)) ?? [];
        if (rounds.some((r) => !isNoisy(r))) continue;
        rounds.push(await openCell(t, rate, `retry ${retry}`));
      }
    }
  }
  for (const rate of flags.rates) {
    for (const t of targets) {
      const rounds = openRounds.get(`${t.name} ${rate}`);
      if (rounds === undefined || rounds.length === 0) continue;
      const quiet = rounds.filter((r) => !isNoisy(r));
      (results.openLoop[t.name] ??= {})[String(rate)] = {
        ...poolOpen(quiet.length > 0 ? quiet : rounds),
        noisyRounds: rounds.length - quiet.length,
      };
    }
    const direct = results.openLoop.direct?.[String(rate)];
    if (direct === undefined) continue;
    for (const t of proxies) {
      const run = results.openLoop[t.name]?.[String(rate)];
      if (run === undefined) continue;
      (results.addedLatency[t.name] ??= {})[String(rate)] = {
        fromIntended: added(run.fromIntendedMs, direct.fromIntendedMs),
        fromSent: added(run.fromSentMs, direct.fromSentMs),
      };
    }
  }

  // --- (c) SSE chunk delay --------------------------------------------------------------------
  for (const t of targets) {
    await sseRun(t.url, 1, 20, 1);
    const measure = async (): Promise<Results['sse'][string]> => {
      const mark = cpuMark(t, backend.pid);
      const result = await sseRun(t.url, flags.sseStreams, flags.sseChunks, flags.sseIntervalMs);
      return { ...result, cpu: cpuShare(mark, t, backend.pid) };
    };
    let run = await measure();
    for (let retry = 0; retry < flags.retries && isNoisy(run); retry++) {
      log(`sse ${label(t.name)}: noisy, once more`);
      run = await measure();
    }
    results.sse[t.name] = run;
    log(
      `sse ${label(t.name)}: chunk delay p50 ${run.delayMs.p50} p99 ${run.delayMs.p99} ms (${run.chunks} chunks)`,
    );
  }
  for (const t of proxies) {
    const s = results.sse[t.name];
    if (s !== undefined && results.sse.direct !== undefined)
      results.sseAdded[t.name] = added(s.delayMs, results.sse.direct.delayMs);
  }

  // --- (d) RSS ------------------------------------------------------------------------------
  if (flags.holdStreams > 0) {
    for (const t of proxies) {
      if (t.pid === undefined) continue;
      const reading = await memoryWithStreams(
        t.url,
        t.pid,
        flags.holdStreams,
        {
          afterStartMb: afterStart.get(t.name),
          idleAfterWarmupMb: idleAfterWarmup.get(t.name),
        },
        flags.quick,
      );
      results.rss[t.name] = reading;
      logRss(label(t.name), reading);
      if (reading.streams.failed > 0 && /EMFILE|ENFILE/.test(reading.streams.firstError ?? ''))
        notes.push(
          `${label(t.name)}: the file-descriptor limit (${String(machine.fdLimit)}) stopped some of the ${flags.holdStreams} streams`,
        );
    }
  }
  for (const t of proxies) await t.stop?.();

  // The same sidecar under other node flags (memory and throughput), as a what-if.
  if (flags.sidecarVariant.length > 0 && results.targets.sidecar?.url !== undefined) {
    try {
      results.sidecarVariant = await measureVariant(poolFile, flags, backend.pid);
      const v = results.sidecarVariant;
      log(`variant sidecar ${v.nodeArgs.join(' ')}: c=64 ${v.closed64.rps} req/s`);
      logRss(`variant sidecar ${v.nodeArgs.join(' ')}`, v.rss);
    } catch (err) {
      log(`skip the sidecar variant: ${firstReason((err as Error).message)}`);
    }
  }

  // --- (e) profiles -------------------------------------------------------------------------
  if (flags.profileSeconds > 0) {
    if (results.targets.sidecar?.skipped === undefined && want('sidecar')) {
      results.profile.sidecar = await profileOne(
        'sidecar',
        (dir) => startSidecar(poolFile, ['--cpu-prof', `--cpu-prof-dir=${dir}`]),
        flags,
        resultsDir,
        backend.pid,
      ).catch((err: unknown) => ({ skipped: firstReason((err as Error).message) }));
    }
    if (results.targets.bare?.skipped === undefined && want('bare')) {
      results.profile.bare = await profileOne(
        'bare',
        (dir) =>
          startNodeScript('bare', './overhead-bare-proxy.ts', ['--target', backend.url], {
            nodeArgs: ['--cpu-prof', `--cpu-prof-dir=${dir}`],
          }),
        flags,
        resultsDir,
        backend.pid,
      ).catch((err: unknown) => ({ skipped: firstReason((err as Error).message) }));
    }
  }
  await backend.stop();

  // --- Goals, output ---------------------------------------------------------------------------
  machine.loadAvgAfter = os
    .loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');
  // What noise is left in the figures shown: cells with no quiet round, and the SSE and
  // large-prompt cells that stayed noisy after their re-runs.
  const noisy: string[] = [];
  let dropped = 0;
  for (const [name, runs] of Object.entries(results.closedLoop))
    for (const [c, run] of Object.entries(runs)) {
      dropped += isNoisy(run) ? 0 : (run.noisyRounds ?? 0);
      if (isNoisy(run)) noisy.push(`closed c=${c} ${name} (${Math.round(run.cpu.other)} %)`);
    }
  for (const [name, runs] of Object.entries(results.openLoop))
    for (const [rate, run] of Object.entries(runs)) {
      dropped += isNoisy(run) ? 0 : (run.noisyRounds ?? 0);
      if (isNoisy(run)) noisy.push(`open ${rate}/s ${name} (${Math.round(run.cpu.other)} %)`);
    }
  for (const [name, run] of Object.entries(results.sse))
    if (isNoisy(run)) noisy.push(`SSE ${name} (${Math.round(run.cpu.other)} %)`);
  for (const [name, run] of Object.entries(results.largeBody?.runs ?? {}))
    if (isNoisy(run)) noisy.push(`large prompt ${name} (${Math.round(run.cpu.other)} %)`);
  if (dropped > 0)
    notes.push(
      `${dropped} noisy round(s) (other processes above ${NOISY_OTHER_PCT} % of a core) were left out of cells that had quiet ones`,
    );
  if (noisy.length > 0)
    notes.push(
      `other processes used more than ${NOISY_OTHER_PCT} % of a core during every try of: ${noisy.join(', ')}; treat those cells with care`,
    );
  results.goals = goals(results, flags);
  results.durationSeconds = Math.round((Date.now() - started) / 100) / 10;
  writeFileSync(flags.out, JSON.stringify(results, null, 2) + '\n');
  const markdown = renderMarkdown(results);
  process.stdout.write(`\n${markdown}\n`);
  if (flags.docs) await writeDocs(join(REPO, 'docs/benchmarks.md'), markdown);
  log(
    `wrote ${flags.out}${flags.docs ? ' and docs/benchmarks.md' : ''} (${results.durationSeconds} s)`,
  );
}

/** RSS idle, with `count` held-open streams through the proxy, and after closing them. */
async function memoryWithStreams(
  url: string,
  pid: number,
  count: number,
  before: { afterStartMb: number | undefined; idleAfterWarmupMb: number | undefined },
  quick: boolean,
): Promise<RssReading> {
  const idleAfterLoad = rssMb(pid);
  const held = await holdStreams(url, count);
  await sleep(quick ? 500 : 1500);
  let peak: number | undefined;
  for (let i = 0; i < 3; i++) {
    const now = rssMb(pid);
    if (now !== undefined && (peak === undefined || now > peak)) peak = now;
    await sleep(quick ? 200 : 500);
  }
  held.close();
  await sleep(quick ? 1000 : 2500);
  return {
    afterStartMb: round1(before.afterStartMb),
    idleAfterWarmupMb: round1(before.idleAfterWarmupMb),
    idleAfterLoadMb: round1(idleAfterLoad),
    withStreamsMb: round1(peak),
    streams: {
      requested: held.requested,
      open: held.open,
      failed: held.failed,
      openSeconds: held.openSeconds,
      ...(held.firstError !== undefined ? { firstError: held.firstError } : {}),
    },
    afterCloseMb: round1(rssMb(pid)),
  };
}

function logRss(name: string, r: RssReading): void {
  log(
    `rss ${name}: start ${r.afterStartMb} MB, warm ${r.idleAfterWarmupMb} MB, after load ${r.idleAfterLoadMb} MB, ` +
      `${r.streams.open}/${r.streams.requested} streams ${r.withStreamsMb} MB, after close ${r.afterCloseMb} MB` +
      (r.streams.failed > 0 ? ` (${r.streams.failed} failed: ${r.streams.firstError ?? ''})` : ''),
  );
}

/**
 * A second sidecar under other node flags: start, warm-up, closed loop at c=64 and c=256 (as
 * in the main run, shorter history), then the same memory protocol.
 */
async function measureVariant(
  poolFile: string,
  flags: Flags,
  backendPid: number,
): Promise<NonNullable<Results['sidecarVariant']>> {
  const sidecar = await startSidecar(poolFile, flags.sidecarVariant);
  try {
    await probe(sidecar.url);
    const afterStartMb = rssMb(sidecar.pid);
    await closedLoop(sidecar.url, 16, Math.max(500, flags.warmupSeconds * 1000));
    await sleep(500);
    const idleAfterWarmupMb = rssMb(sidecar.pid);
    const target: Target = { name: 'sidecar', url: sidecar.url, pid: sidecar.pid };
    await closedLoop(sidecar.url, 64, Math.max(300, flags.warmupSeconds * 1000));
    const mark = cpuMark(target, backendPid);
    const run = await closedLoop(sidecar.url, 64, flags.closedSeconds * 1000);
    const closed64: ClosedRun = withCpu(run, cpuShare(mark, target, backendPid));
    await closedLoop(sidecar.url, 256, flags.closedSeconds * 1000);
    const rss = await memoryWithStreams(
      sidecar.url,
      sidecar.pid,
      flags.holdStreams,
      { afterStartMb, idleAfterWarmupMb },
      flags.quick,
    );
    return { nodeArgs: flags.sidecarVariant, closed64, rss };
  } finally {
    await sidecar.stop();
  }
}

/** The median over rounds of each percentile (the lower middle one for an even count). */
function medianPercentiles(all: Percentiles[]): Percentiles {
  const med = (pick: (p: Percentiles) => number): number => {
    const sorted = all.map(pick).sort((a, b) => a - b);
    return sorted[Math.floor((sorted.length - 1) / 2)] ?? NaN;
  };
  return {
    n: all.reduce((n, p) => n + p.n, 0),
    p50: med((p) => p.p50),
    p90: med((p) => p.p90),
    p99: med((p) => p.p99),
    max: Math.max(...all.map((p) => p.max)),
    mean: med((p) => p.mean),
  };
}

/**
 * One open-loop cell from its rounds: the median over rounds of each percentile, the pooled
 * percentiles over every sample, sums and means.
 */
function poolOpen(rounds: OpenRun[]): OpenRun {
  const all = (pick: (r: OpenRun) => number[] | undefined): number[] =>
    rounds.flatMap((r) => pick(r) ?? []);
  const mean = (pick: (r: OpenRun) => number): number =>
    Math.round((rounds.reduce((n, r) => n + pick(r), 0) / rounds.length) * 10) / 10;
  const first = rounds[0]!;
  return {
    rate: first.rate,
    seconds: rounds.reduce((n, r) => n + r.seconds, 0),
    pacer: first.pacer,
    rounds: rounds.length,
    sent: rounds.reduce((n, r) => n + r.sent, 0),
    completed: rounds.reduce((n, r) => n + r.completed, 0),
    errors: rounds.reduce((n, r) => n + r.errors, 0),
    firstError: rounds.find((r) => r.firstError !== undefined)?.firstError,
    achievedRate: Math.round(mean((r) => r.achievedRate)),
    maxInFlight: Math.max(...rounds.map((r) => r.maxInFlight)),
    fromIntendedMs: medianPercentiles(rounds.map((r) => r.fromIntendedMs)),
    fromSentMs: medianPercentiles(rounds.map((r) => r.fromSentMs)),
    sendLagMs: medianPercentiles(rounds.map((r) => r.sendLagMs)),
    pooled: {
      fromIntendedMs: percentiles(all((r) => r.samples?.fromIntended)),
      fromSentMs: percentiles(all((r) => r.samples?.fromSent)),
    },
    p99ByRound: rounds.map((r) => r.fromIntendedMs.p99),
    cpu: {
      client: mean((r) => r.cpu.client),
      target: first.cpu.target === undefined ? undefined : mean((r) => r.cpu.target ?? 0),
      backend: mean((r) => r.cpu.backend),
      kernelIrq: mean((r) => r.cpu.kernelIrq),
      other: mean((r) => r.cpu.other),
    },
  };
}

/** Adds the CPU shares and the proxy's CPU cost per request to a closed-loop result. */
function withCpu(run: ClosedResult, cpu: CpuShare): ClosedRun {
  const proxyCpuUsPerRequest =
    cpu.target === undefined || run.completed === 0
      ? undefined
      : Math.round(((cpu.target / 100) * run.seconds * 1e6) / run.completed);
  return { ...run, cpu, proxyCpuUsPerRequest };
}

/**
 * What other processes use, in % of one core, over a second; with `seconds` > 0, waits up to
 * that long until it stays under 10 % for three 2-second windows in a row (a lull between two
 * compiler runs is not quiet).
 */
async function waitQuiet(seconds: number): Promise<number | undefined> {
  const deadline = Date.now() + seconds * 1000;
  const windowMs = seconds > 0 ? 2000 : 1000;
  let other: number | undefined;
  let quietWindows = 0;
  do {
    const a = machineCpuSeconds();
    const ours = process.cpuUsage();
    await sleep(windowMs);
    const b = machineCpuSeconds();
    const d = process.cpuUsage(ours);
    if (a === undefined || b === undefined) return undefined;
    other = Math.max(0, (b.tasks - a.tasks - (d.user + d.system) / 1e6) / (windowMs / 1000)) * 100;
    if (seconds <= 0) return other;
    quietWindows = other < 10 ? quietWindows + 1 : 0;
    if (quietWindows >= 3) return other;
    if (quietWindows === 0)
      log(`waiting for a quiet machine: other processes use ${other.toFixed(0)} % of a core`);
  } while (Date.now() < deadline);
  return other;
}

/** The first line of an error, plus the line that says what went wrong when that is later. */
function firstReason(message: string): string {
  const lines = message.split('\n').map((l) => l.trim());
  const first = lines[0] ?? 'failed';
  if (!first.endsWith(':')) return first;
  const cause = lines.find((l) => /error|cannot|invalid|EADDR|refused/i.test(l) && l !== first);
  return `${first} ${cause ?? lines.find((l, i) => i > 0 && l !== '') ?? ''}`.trim();
}

function round1(x: number | undefined): number | undefined {
  return x === undefined ? undefined : Math.round(x * 10) / 10;
}

function goals(r: Results, flags: Flags): Record<string, Goal> {
  const out: Record<string, Goal> = {};
  const noisy = (...cells: ({ cpu: CpuShare } | undefined)[]): boolean => cells.some(isNoisy);
  const ms = (x: number): string => `${x >= 0 ? '+' : ''}${x.toFixed(3)} ms`;
  const lat = r.addedLatency.sidecar?.['1000'];
  out.addedP50At1000 = {
    goal: 'added p50 ≤ 1 ms at 1,000 req/s',
    measured:
      lat === undefined
        ? 'not measured'
        : `${ms(lat.fromIntended.p50)} (from sent: ${ms(lat.fromSent.p50)})`,
    met: lat === undefined ? null : lat.fromIntended.p50 <= 1,
    noisy: noisy(r.openLoop.sidecar?.['1000'], r.openLoop.direct?.['1000']),
  };
  out.addedP99At1000 = {
    goal: 'added p99 ≤ 5 ms at 1,000 req/s',
    measured:
      lat === undefined
        ? 'not measured'
        : `${ms(lat.fromIntended.p99)} (from sent: ${ms(lat.fromSent.p99)})`,
    met: lat === undefined ? null : lat.fromIntended.p99 <= 5,
    noisy: noisy(r.openLoop.sidecar?.['1000'], r.openLoop.direct?.['1000']),
  };
  const sc = r.closedLoop.sidecar?.['64'];
  const bare = r.closedLoop.bare?.['64'];
  out.throughputVsBare = {
    goal: 'closed-loop throughput ≥ 70 % of bare http-proxy-3 (c=64, same run)',
    measured:
      sc === undefined || bare === undefined
        ? 'not measured'
        : `${Math.round((sc.rps / bare.rps) * 100)} % (${sc.rps.toLocaleString('en-US')} vs ${bare.rps.toLocaleString('en-US')} req/s)`,
    met: sc === undefined || bare === undefined ? null : sc.rps >= 0.7 * bare.rps,
    noisy: noisy(sc, bare),
  };
  out.throughputAbsolute = {
    goal: 'closed-loop throughput ≥ 5,000 req/s (c=64)',
    measured: sc === undefined ? 'not measured' : `${sc.rps.toLocaleString('en-US')} req/s`,
    met: sc === undefined ? null : sc.rps >= 5000,
    noisy: noisy(sc),
  };
  const sse = r.sseAdded.sidecar;
  out.sseAddedP99 = {
    goal: 'added inter-chunk delay p99 ≤ 1 ms',
    measured: sse === undefined ? 'not measured' : `${ms(sse.p99)} (p50 ${ms(sse.p50)})`,
    met: sse === undefined ? null : sse.p99 <= 1,
    noisy: noisy(r.sse.sidecar, r.sse.direct),
  };
  const rss = r.rss.sidecar;
  out.rssIdle = {
    goal: 'RSS ≤ 80 MB idle',
    measured:
      rss?.idleAfterWarmupMb === undefined
        ? 'not measured'
        : `${rss.idleAfterWarmupMb} MB (after load: ${rss.idleAfterLoadMb ?? '–'} MB)`,
    met: rss?.idleAfterWarmupMb === undefined ? null : rss.idleAfterWarmupMb <= 80,
  };
  out.rssStreams = {
    goal: `RSS ≤ 200 MB with ${flags.holdStreams.toLocaleString('en-US')} open streams`,
    measured:
      rss?.withStreamsMb === undefined
        ? 'not measured'
        : `${rss.withStreamsMb} MB (${rss.streams.open}/${rss.streams.requested} streams open)`,
    met:
      rss?.withStreamsMb === undefined || flags.holdStreams < 1000
        ? null
        : rss.withStreamsMb <= 200 && rss.streams.open === rss.streams.requested,
  };
  return out;
}

process.once('SIGINT', () => process.exit(130));
process.once('SIGTERM', () => process.exit(143));
await main();
