/**
 * The overhead bench's first steps: find the peers installed here, note how busy the machine is,
 * start the zero-latency backend and every target in front of it, and warm them up. What they
 * set up is the `OverheadRun` the measuring steps share.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { startOtlpReceiver, type OtlpReceiver } from '../../harness/otlp-receiver.ts';
import { rssMb } from '../../harness/proc.ts';
import { startSwitchyard, type RunningProcess } from '../../harness/processes.ts';
import { stderrLog } from '../common/log.ts';
import { startNodeScript, tempDir, versionOf, which, type Child } from '../common/peers.ts';
import { otherCpuPct, waitQuiet } from '../common/quiet.ts';
import { gitCommit, REPO } from '../common/repo.ts';
import { NOISY_OTHER_PCT, type Target } from './cpu.ts';
import type { Flags } from './flags.ts';
import { CHAT_BODY, closedLoop, probe } from './load.ts';
import { startHaproxy, startNginx } from './peers.ts';
import { label, type MachineInfo, type Results } from './report.ts';

export const log = stderrLog();

export const BACKEND_SCRIPT = fileURLToPath(new URL('./backend.ts', import.meta.url));
export const BARE_PROXY_SCRIPT = fileURLToPath(new URL('./bare-proxy.ts', import.meta.url));

/** The peers' binaries on this machine (undefined: not installed, or not asked for). */
export interface Binaries {
  haproxy: string | undefined;
  nginx: string | undefined;
  wrk: string | undefined;
}

/** What the measuring steps share. */
export interface OverheadRun {
  flags: Flags;
  binaries: Binaries;
  /** Filled in step by step; written at the end. */
  results: Results;
  backend: Child;
  /** The sidecar's pool file: one backend, the zero-latency one. */
  poolFile: string;
  /** `direct` first, then every proxy that started and answered. */
  targets: Target[];
  proxies: Target[];
  /** Where the traced sidecars export their spans: a receiver that only counts them. */
  traceSink: OtlpReceiver;
  /** Each proxy's RSS right after start, and after the warm-up. */
  rssAfterStart: Map<string, number | undefined>;
  rssAfterWarmUp: Map<string, number | undefined>;
}

export const wants = (flags: Flags, name: string): boolean => flags.targets.includes(name);

export function findBinaries(flags: Flags): Binaries {
  return {
    haproxy: wants(flags, 'haproxy') ? which('haproxy') : undefined,
    nginx: wants(flags, 'nginx') ? which('nginx') : undefined,
    wrk: flags.wrk ? which('wrk') : undefined,
  };
}

/**
 * The results so far: settings and machine, after measuring (and with --wait-quiet, waiting
 * for) other work on the machine, which competes for its cores.
 */
export async function newResults(
  flags: Flags,
  binaries: Binaries,
  startedAt: number,
): Promise<Results> {
  const notes: string[] = [];
  const other =
    flags.waitQuietSeconds > 0
      ? await waitQuiet(flags.waitQuietSeconds, { belowPct: 10, windows: 3, log })
      : await otherCpuPct(1000);
  if (other !== undefined && other >= 10) {
    const line = `before the run, other processes used ${other.toFixed(0)} % of a core${flags.waitQuietSeconds > 0 ? ` (after waiting up to ${flags.waitQuietSeconds} s for quiet)` : ''}: expect noisier numbers`;
    log(`note: ${line}`);
    notes.push(line);
  }
  const machine = machineInfo(binaries);
  machine.otherCpuBeforePct = other === undefined ? undefined : Math.round(other);
  return {
    benchmark: 'overhead',
    version: 1,
    startedAt: new Date(startedAt).toISOString(),
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
      backend: 'bench/overhead/backend.ts (node:http, fixed JSON at once; SSE stamped with hrtime)',
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
}

function machineInfo(binaries: Binaries): MachineInfo {
  const cpus = os.cpus();
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
    haproxy:
      binaries.haproxy === undefined ? undefined : versionOf('HAProxy', binaries.haproxy, '-v'),
    nginx: binaries.nginx === undefined ? undefined : versionOf('nginx', binaries.nginx, '-v'),
    fdLimit: (() => {
      try {
        return Number(execFileSync('sh', ['-c', 'ulimit -n'], { encoding: 'utf8' }).trim());
      } catch {
        return undefined;
      }
    })(),
    commit: gitCommit(),
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

export function startSidecar(
  poolFile: string,
  nodeArgs: string[] = [],
  env: Record<string, string> = {},
): Promise<RunningProcess> {
  return startSwitchyard(
    ['sidecar', '--pool-file', poolFile, '--listen', '127.0.0.1:0', '--admin', '127.0.0.1:0'],
    { nodeArgs, env, timeoutMs: 20_000 },
  );
}

/**
 * A sidecar tracing `ratio` of its requests (the bench's requests carry no traceparent, so the
 * ratio decides) to `sink`, with the SDK's default batching: what a deployment would run.
 */
function tracingEnv(sink: OtlpReceiver, ratio: number): Record<string, string> {
  return {
    OTEL_EXPORTER_OTLP_ENDPOINT: sink.url,
    OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
    OTEL_TRACES_SAMPLER_ARG: String(ratio),
  };
}

/** The first line of an error, plus the line that says what went wrong when that is later. */
export function firstReason(message: string): string {
  const lines = message.split('\n').map((l) => l.trim());
  const first = lines[0] ?? 'failed';
  if (!first.endsWith(':')) return first;
  const cause = lines.find((l) => /error|cannot|invalid|EADDR|refused/i.test(l) && l !== first);
  return `${first} ${cause ?? lines.find((l, i) => i > 0 && l !== '') ?? ''}`.trim();
}

/**
 * The zero-latency backend, then each target in front of it (the sidecar, the bare
 * passthrough, HAProxy, nginx); a target that does not start or answer is skipped with the
 * reason.
 */
export async function startTargets(
  flags: Flags,
  binaries: Binaries,
  results: Results,
): Promise<OverheadRun> {
  const backend = await startNodeScript('backend', BACKEND_SCRIPT, ['--port', '0']);
  const targets: Target[] = [{ name: 'direct', url: backend.url, pid: undefined }];
  results.targets.direct = { url: backend.url, note: 'the zero-latency backend itself' };
  const poolDir = tempDir('pool');
  const poolFile = join(poolDir, 'pool.yaml');
  writeFileSync(poolFile, poolYaml(backend.url));
  const traceSink = await startOtlpReceiver({ keepSpans: false });

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
  if (wants(flags, 'sidecar'))
    await addPeer(
      'sidecar',
      () => startSidecar(poolFile),
      'switchyard sidecar, default settings, pool of one backend',
    );
  if (wants(flags, 'sidecar-traced'))
    await addPeer(
      'sidecar-traced',
      () => startSidecar(poolFile, [], tracingEnv(traceSink, 1)),
      'the sidecar exporting a server and an attempt span of every request (OTLP/HTTP to a local sink)',
    );
  if (wants(flags, 'sidecar-traced-1pct'))
    await addPeer(
      'sidecar-traced-1pct',
      () => startSidecar(poolFile, [], tracingEnv(traceSink, 0.01)),
      'the sidecar exporting the spans of 1 % of requests (trace-id ratio) to a local sink',
    );
  if (wants(flags, 'bare'))
    await addPeer(
      'bare',
      () => startNodeScript('bare', BARE_PROXY_SCRIPT, ['--target', backend.url]),
      'http-proxy-3 with a keep-alive agent, no policy',
    );
  if (wants(flags, 'haproxy')) {
    const haproxy = binaries.haproxy;
    if (haproxy === undefined) {
      log('skip HAProxy: not installed (no haproxy on PATH or in /usr/sbin)');
      results.targets.haproxy = { skipped: 'not installed' };
    } else
      await addPeer(
        'haproxy',
        () => startHaproxy(haproxy, backend.url),
        'mode http, http-reuse always, default threads',
      );
  }
  if (wants(flags, 'nginx')) {
    const nginx = binaries.nginx;
    if (nginx === undefined) {
      log('skip nginx: not installed (no nginx on PATH or in /usr/sbin)');
      results.targets.nginx = { skipped: 'not installed' };
    } else
      await addPeer(
        'nginx',
        () => startNginx(nginx, backend.url),
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
    if (t.skipped !== undefined) results.notes.push(`${label(name)} skipped: ${t.skipped}`);
  const proxies = targets.filter((t) => t.name !== 'direct');
  log(`targets: ${targets.map((t) => `${t.name} ${t.url}`).join(', ')}`);
  return {
    flags,
    binaries,
    results,
    backend,
    poolFile,
    targets,
    proxies,
    traceSink,
    rssAfterStart: new Map(
      proxies.map((t) => [t.name, t.pid === undefined ? undefined : rssMb(t.pid)]),
    ),
    rssAfterWarmUp: new Map(),
  };
}

/** JIT and connection pools warm, then the idle RSS of each proxy. */
export async function warmUp(run: OverheadRun): Promise<void> {
  for (const t of run.targets)
    await closedLoop(t.url, 16, Math.max(500, run.flags.warmupSeconds * 1000));
  await sleep(500);
  for (const t of run.proxies)
    run.rssAfterWarmUp.set(t.name, t.pid === undefined ? undefined : rssMb(t.pid));
}

/** The proxies are done with once memory is measured (the variant and profiles start their own). */
export async function stopProxies(run: OverheadRun): Promise<void> {
  for (const t of run.proxies) await t.stop?.();
  // After the stops: a stopping sidecar exports its last spans.
  const sink = run.traceSink.stats();
  if (sink.requests > 0)
    run.results.notes.push(
      `The traced sidecars sent ${sink.requests.toLocaleString('en-US')} OTLP export requests (${(sink.bytes / 1e6).toFixed(1)} MB) to the local sink.`,
    );
  await run.traceSink.close();
}
