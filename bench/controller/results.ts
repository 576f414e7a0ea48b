/**
 * The controller bench's last steps: the CPU profile summarised per phase, every figure put
 * together into the results, and the results stored (a what-if run adds a row to the earlier
 * ones) and written into docs/benchmarks.md.
 */
import { copyFileSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { summariseProfile } from '../common/cpu-profile.ts';
import { writeDocsSection } from '../common/markdown.ts';
import { gitCommit, REPO } from '../common/repo.ts';
import type { Flags } from './flags.ts';
import {
  distribution,
  histogramDelta,
  labelled,
  METHOD,
  renderMarkdown,
  type Results,
  type Target,
  type WhatIfRow,
  type WindowProfile,
} from './report.ts';
import { loadAverage, moduleBaselines, type WindowStats } from './resources.ts';
import { log, type ApiServer, type Pools, type RunningController, type Tokens } from './setup.ts';
import type { IdleWindow, InitialSync, SubscriberStats } from './subscribe.ts';
import { latencyFigures, type Writes } from './writes.ts';

const TARGET_P99_MS = 1000;
const TARGET_RSS_MB = 300;
const PUSH = 'switchyard_controller_push_latency_seconds';
const RECONCILE = 'switchyard_controller_reconcile_duration_seconds';

/** Everything a run measured, step by step. */
export interface CompletedRun {
  flags: Flags;
  /** `performance.now()` when the bench started. */
  startedMs: number;
  loadBefore: string;
  server: ApiServer;
  pools: Pools;
  tokens: Tokens;
  controller: RunningController;
  initial: InitialSync;
  quiet: IdleWindow;
  writes: Writes;
  subscriberStats: SubscriberStats;
  sliceWatchRestarts: number;
  profiles: WindowProfile[];
}

/**
 * With --profile, the controller's CPU profile over the initial sync, the idle window and the
 * measured writes (kept as bench/results/controller.cpuprofile, not committed).
 */
export function summariseProfiles(
  flags: Flags,
  controller: RunningController,
  initial: InitialSync,
  quiet: IdleWindow,
  writes: Writes,
): WindowProfile[] {
  if (!flags.profile) return [];
  const file = readdirSync(controller.profileDir).find((f) => f.endsWith('.cpuprofile'));
  if (file === undefined) {
    log('no CPU profile was written');
    return [];
  }
  const kept = join(dirname(flags.out), 'controller.cpuprofile');
  mkdirSync(dirname(kept), { recursive: true });
  copyFileSync(join(controller.profileDir, file), kept);
  // performance.now() and V8's profile clock (process.hrtime's, in µs) both run on the
  // monotonic clock, a constant offset apart.
  const offsetUs = Number(process.hrtime.bigint() / 1000n) - performance.now() * 1000;
  const us = (ms: number): number => Math.round(ms * 1000 + offsetUs);
  const phase = (fromMs: number, toMs: number, label: string): WindowProfile => {
    const s = summariseProfile(kept, REPO, { window: { fromUs: us(fromMs), toUs: us(toMs) } });
    return {
      file: s.file,
      window: s.window === 'whole profile' ? 'whole profile' : label,
      totalMs: s.totalMs,
      busyMs: s.busyMs,
      areas: s.areas.map(({ area, ms, pct }) => ({ area, ms, pct })),
      topSelf: s.topSelf,
      topInclusive: s.topInclusive,
    };
  };
  return [
    phase(
      controller.spawnAt,
      initial.syncedAt,
      `start → initial sync (${flags.subscribers} subscribers connecting)`,
    ),
    phase(quiet.fromMs, quiet.toMs, 'idle (streams open, reports only)'),
    phase(
      writes.sequential.fromMs,
      writes.bursts.toMs,
      'the measured writes (one at a time and bursts)',
    ),
  ];
}

/** How this run was started, quoted for a shell. */
function commandLine(args: readonly string[]): string {
  const quoted = args.map((a) => (/[\s"'$`\\]/.test(a) ? `'${a.replace(/'/g, `'\\''`)}'` : a));
  return `npm run bench:controller${quoted.length > 0 ? ` -- ${quoted.join(' ')}` : ''}`;
}

function whatIfRow(label: string, r: Results): WhatIfRow {
  const m = r.measurements;
  const last = m.resources.memory.at(-1);
  return {
    label,
    command: commandLine(
      process.argv
        .slice(2)
        .filter((a, i, all) => !a.startsWith('--what-if') && all[i - 1] !== '--what-if'),
    ),
    generatedAt: r.generatedAt,
    commit: r.commit,
    initialSyncMs: m.initialSync.allFirstSnapshotMs,
    sequentialMs: m.sequential.lastSubscriberMs,
    burstSize: r.settings.burstSize,
    burstMs: m.burst.lastSubscriberMs,
    idleRssMb: m.resources.idle.rssMb?.mean ?? null,
    peakRssMb: m.resources.peakRssMb,
    newSpaceMb: last?.heapSpacesMb['new total'] ?? null,
    idleCpuPct: m.resources.idle.cpu?.controller ?? null,
    cpuMsPerWrite: m.resources.cpuMsPerWriteSequential,
    otherCpuPct: Math.max(
      ...[m.resources.sync, m.resources.idle, m.resources.sequential, m.resources.burst].map(
        (w) => w.cpu?.other ?? 0,
      ),
    ),
    apiConnectionsAtSync: m.apiServerConnections?.initialSync.opened,
    ...(m.profiles.length > 0 ? { profiles: m.profiles } : {}),
  };
}

export function assembleResults(run: CompletedRun): Results {
  const { flags, loadBefore, profiles, subscriberStats, sliceWatchRestarts } = run;
  const started = run.startedMs;
  const { sampler, cluster: cl, startMs: clusterMs } = run.server;
  const { all: pools, createMs: objectsMs } = run.pools;
  const tokensMs = run.tokens.mintMs;
  const { spawnAt, listeningMs, nodeFlags, memory, probe } = run.controller;
  const controllerFlags = run.controller.flags;
  const { subscribers, syncedAt, refusals: refusalsAtSync } = run.initial;
  const cachesSynced = run.initial.cachesSyncedMs;
  const { fromMs: idleFrom, toMs: idleTo, connectionsAtSync: syncConnections } = run.quiet;
  const { subscribersOf, burstSize, endMemory } = run.writes;
  const { writes: sequential, fromMs: seqFrom, toMs: seqTo } = run.writes.sequential;
  const {
    writes: burstWrites,
    completeMs: burstComplete,
    fromMs: burstFrom,
    toMs: burstTo,
  } = run.writes.bursts;
  const { before, afterSequential: afterSeq, after } = run.writes.metrics;
  const win = (from: number, to: number): WindowStats => sampler.window(from, to);
  const sync = win(spawnAt, syncedAt);
  const idle = win(idleFrom, idleTo);
  const seqWin = win(seqFrom, seqTo);
  const burstWin = win(burstFrom, burstTo);
  const seq = latencyFigures(sequential);
  const bursts = { ...latencyFigures(burstWrites), burstCompleteMs: distribution(burstComplete) };
  const gauge = (name: string): number | null => after.get(name) ?? null;
  const lag = gauge('switchyard_controller_process_nodejs_eventloop_lag_p99_seconds');
  const heap = gauge('switchyard_controller_process_nodejs_heap_size_used_bytes');
  const published = labelled('switchyard_controller_snapshots_published_total', after);

  const peakRss = endMemory?.hwm ?? null;
  const targets: Target[] = [
    {
      goal: `p99 EndpointSlice write → every subscriber of the pool, one at a time ≤ ${TARGET_P99_MS} ms`,
      limit: TARGET_P99_MS,
      unit: 'ms',
      measured: seq.lastSubscriberMs.p99,
      met: seq.timeouts === 0 && (seq.lastSubscriberMs.p99 ?? Infinity) <= TARGET_P99_MS,
      detail: `${seq.lastSubscriberMs.p99 ?? '∞'} ms (p50 ${seq.lastSubscriberMs.p50} ms, max ${seq.lastSubscriberMs.max ?? '∞'} ms, ${seq.writes} writes)`,
    },
    ...(flags.bursts > 0
      ? [
          {
            goal: `p99 EndpointSlice write → every subscriber, ${flags.burstSize} writes at once ≤ ${TARGET_P99_MS} ms`,
            limit: TARGET_P99_MS,
            unit: 'ms',
            measured: bursts.lastSubscriberMs.p99,
            met:
              bursts.timeouts === 0 && (bursts.lastSubscriberMs.p99 ?? Infinity) <= TARGET_P99_MS,
            detail: `${bursts.lastSubscriberMs.p99 ?? '∞'} ms (p50 ${bursts.lastSubscriberMs.p50} ms, max ${bursts.lastSubscriberMs.max ?? '∞'} ms, ${bursts.writes} writes)`,
          },
        ]
      : []),
    {
      goal: `controller RSS ≤ ${TARGET_RSS_MB} MB (peak, VmHWM)`,
      limit: TARGET_RSS_MB,
      unit: 'MB',
      measured: peakRss === null ? null : Math.round(peakRss * 10) / 10,
      met: peakRss !== null && peakRss <= TARGET_RSS_MB,
      detail: `${peakRss === null ? '–' : peakRss.toFixed(1)} MB peak (idle ${idle.rssMb?.mean.toFixed(1) ?? '–'} MB, ${flags.subscribers} streams)`,
    },
  ];

  const baselines = moduleBaselines(REPO);
  const notes: string[] = [];
  const firstPoint = memory[0];
  const lastPoint = memory.at(-1);
  if (firstPoint !== undefined && lastPoint !== undefined) {
    const listed = Object.entries(baselines)
      .map(([k, v]) => `${k} ${v ?? '–'} MB`)
      .join(', ');
    notes.push(
      `Before any subscriber the controller holds ${firstPoint.rssMb} MB: loading code alone costs that much (fresh processes that only load modules: ${listed}).`,
      `At the end the V8 heap has ${lastPoint.heapTotalMb} MB reserved, ${lastPoint.heapUsedMb} MB used; the young generation ("new space") alone has ${lastPoint.heapSpacesMb['new total'] ?? '–'} MB reserved (${lastPoint.heapSpacesMb['new used'] ?? '–'} MB used). Anonymous memory outside the V8 heap: ${lastPoint.anonMb !== null && lastPoint.heapTotalMb !== null ? Math.round(lastPoint.anonMb - lastPoint.heapTotalMb) : '–'} MB (TLS connections, buffers, the allocator).`,
    );
  }
  for (const [name, wstats] of [
    ['initial sync', sync],
    ['idle', idle],
    ['writes one at a time', seqWin],
    ['bursts', burstWin],
  ] as const) {
    if ((wstats.cpu?.other ?? 0) > 25)
      notes.push(
        `Other processes used ${wstats.cpu!.other} % of a core during "${name}"; treat that phase's figures with care.`,
      );
  }
  if (seq.timeouts + bursts.timeouts > 0)
    notes.push(
      `${seq.timeouts + bursts.timeouts} writes did not reach every subscriber within ${flags.timeoutMs / 1000} s.`,
    );
  if (subscriberStats.drops > 0)
    notes.push(
      `${subscriberStats.drops} subscriber streams dropped during the run (they reconnected).`,
    );
  if (sliceWatchRestarts > 0)
    notes.push(`The bench's EndpointSlice watch restarted ${sliceWatchRestarts} times.`);

  const results: Results = {
    generatedAt: new Date().toISOString(),
    durationSeconds: Math.round((performance.now() - started) / 100) / 10,
    command: commandLine(process.argv.slice(2)),
    commit: gitCommit(),
    settings: {
      pools: flags.pools,
      endpointsPerPool: flags.endpoints,
      subscribers: flags.subscribers,
      namespaces: flags.namespaces,
      subscribersPerPool: {
        min: Math.min(...pools.map((p) => subscribersOf.get(p.index) ?? 0)),
        max: Math.max(...pools.map((p) => subscribersOf.get(p.index) ?? 0)),
        spread: 'round-robin: subscriber i follows pool i mod pools',
      },
      tokens: flags.tokens,
      primeTokens: flags.primeTokens,
      controllerNodeFlags: nodeFlags,
      rounds: flags.rounds,
      warmupRounds: flags.warmup,
      gapMs: flags.gapMs,
      bursts: flags.bursts,
      burstSize,
      idleSeconds: flags.idleSeconds,
      reportEveryMs: flags.reportEveryMs,
      timeoutMs: flags.timeoutMs,
      controllerFlags: [
        ...Object.entries(flags.controllerEnv).map(([k, v]) => `${k}=${v}`),
        ...(flags.nodeArgs.length > 0
          ? ['node', ...flags.nodeArgs, 'bin/switchyard.js']
          : ['switchyard']),
        'controller',
        ...controllerFlags,
        '--tls-cert-file …',
        '--tls-key-file …',
      ],
      profile: flags.profile,
    },
    machine: {
      cpus: os.cpus().length,
      cpuModel: (os.cpus()[0]?.model ?? 'unknown').replace(/\s+/g, ' ').trim(),
      memoryGiB: Math.round(os.totalmem() / 2 ** 30),
      kernel: os.release(),
      node: process.version,
      kubernetes: cl.version,
      loadBefore,
      loadAfter: loadAverage(),
    },
    measurements: {
      setupMs: {
        cluster: Math.round(clusterMs),
        objects: Math.round(objectsMs),
        tokens: Math.round(tokensMs),
      },
      initialSync: {
        listeningMs: Math.round(listeningMs),
        cachesSyncedMs: cachesSynced ?? null,
        allConnectedMs: Math.round(
          Math.max(...subscribers.map((s) => s.connectedAt ?? Infinity)) - spawnAt,
        ),
        allFirstSnapshotMs: Math.round(syncedAt - spawnAt),
        firstSnapshotMs: distribution(subscribers.map((s) => s.firstSnapshotAt! - spawnAt)),
        refusals: refusalsAtSync,
      },
      sequential: seq,
      burst: bursts,
      resources: {
        sync,
        idle,
        sequential: seqWin,
        burst: burstWin,
        memory,
        peakRssMb: peakRss === null ? null : Math.round(peakRss * 10) / 10,
        rssAtEndMb: endMemory === undefined ? null : Math.round(endMemory.rss * 10) / 10,
        cpuMsPerWriteSequential:
          seqWin.cpu === undefined
            ? null
            : Math.round((seqWin.cpu.controllerSeconds / flags.rounds) * 10000) / 10,
        cpuMsPerWriteBurst:
          burstWin.cpu === undefined || burstWrites.length === 0
            ? null
            : Math.round((burstWin.cpu.controllerSeconds / burstWrites.length) * 10000) / 10,
        timeline: sampler.timeline(spawnAt),
      },
      controllerMetrics: {
        pushLatency: {
          sequential: histogramDelta(PUSH, afterSeq, before),
          burst: histogramDelta(PUSH, after, afterSeq),
          wholeRun: histogramDelta(PUSH, after),
        },
        reconcileDuration: {
          sequential: histogramDelta(RECONCILE, afterSeq, before),
          burst: histogramDelta(RECONCILE, after, afterSeq),
          wholeRun: histogramDelta(RECONCILE, after),
        },
        reconciles: labelled('switchyard_controller_reconciles_total', after),
        statusWrites: labelled('switchyard_controller_status_writes_total', after),
        snapshotsPublished: published['total'] ?? 0,
        informerRestarts: labelled('switchyard_controller_informer_restarts_total', after),
        authFailures: labelled('switchyard_controller_stream_auth_failures_total', after),
        connectedSidecars: gauge('switchyard_controller_connected_sidecars'),
        eventLoopLagP99Ms: lag === null ? null : Math.round(lag * 10000) / 10,
        heapUsedMb: heap === null ? null : Math.round((heap / 2 ** 20) * 10) / 10,
      },
      subscribers: subscriberStats,
      sliceWatchRestarts,
      profiles,
      moduleBaselinesMb: baselines,
      apiServerConnections: {
        initialSync: syncConnections,
        wholeRun: { opened: probe.seen.size, maxOpen: probe.maxOpen },
      },
    },
    targets,
    notes,
  };
  return results;
}

/**
 * Writes the results JSON and the Controller section of docs/benchmarks.md, and prints the
 * tables. A what-if run adds one summary row to the stored results; a main run replaces the
 * main measurements and keeps the what-if rows (each names its own date and commit).
 */
export async function storeResults(flags: Flags, results: Results): Promise<void> {
  mkdirSync(dirname(flags.out), { recursive: true });
  let previous: Results | undefined;
  try {
    previous = JSON.parse(readFileSync(flags.out, 'utf8')) as Results;
  } catch {
    // no earlier results
  }
  let stored: Results;
  if (flags.whatIf !== undefined) {
    const row = whatIfRow(flags.whatIf, results);
    stored =
      previous === undefined
        ? { ...results, whatIfs: [row] }
        : {
            ...previous,
            whatIfs: [...(previous.whatIfs ?? []).filter((w) => w.label !== row.label), row],
          };
    process.stdout.write(`${renderMarkdown(results)}\n`);
  } else {
    stored = { ...results, whatIfs: flags.clearWhatIfs ? [] : (previous?.whatIfs ?? []) };
    process.stdout.write(`${renderMarkdown(stored)}\n`);
  }
  writeFileSync(flags.out, `${JSON.stringify(stored, null, 2)}\n`);
  if (flags.docs && (flags.whatIf === undefined || previous !== undefined))
    await writeDocsSection(
      join(REPO, 'docs/benchmarks.md'),
      'controller',
      `## Controller\n\n${METHOD}\n\nThe tables below come from the last run; \`bench/results/controller.json\` has every figure.\n\n${renderMarkdown(stored)}`,
    );
  log(`wrote ${flags.out}${flags.docs ? ' and the Controller section of docs/benchmarks.md' : ''}`);
}
