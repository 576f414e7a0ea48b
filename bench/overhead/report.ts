/**
 * The overhead benchmark's report: the result types, the markdown tables (printed to the
 * console and written into docs/benchmarks.md between the overhead markers) and the targets.
 */
import type { ProfileSummary } from '../common/cpu-profile.ts';
import { datedHeadings, table } from '../common/markdown.ts';
import type { ClosedResult, OpenResult, Percentiles, SseResult } from './load.ts';

/** CPU used during one measurement, in % of one core (the machine has `cpus` × 100 %). */
export interface CpuShare {
  client: number;
  target: number | undefined;
  backend: number;
  /** The kernel's interrupt/softirq work (loopback TCP), charged to no process. */
  kernelIrq: number;
  /** Other processes on the machine. */
  other: number;
}

export interface ClosedRun extends ClosedResult {
  cpu: CpuShare;
  /** The proxy process's CPU time per completed request, µs. */
  proxyCpuUsPerRequest?: number | undefined;
  /** req/s of every round (the cell reports its median quiet round). */
  rpsRounds?: number[] | undefined;
  /** Rounds during which other processes used more than 25 % of a core (left out when possible). */
  noisyRounds?: number | undefined;
}
export interface OpenRun extends OpenResult {
  cpu: CpuShare;
  /** How many rounds were pooled into this cell. */
  rounds?: number | undefined;
  /** Rounds during which other processes used more than 25 % of a core (left out when possible). */
  noisyRounds?: number | undefined;
  /** p99 (from the intended send time) of each round, ms. */
  p99ByRound?: number[] | undefined;
  /** Percentiles over the samples of all rounds together (the cell shows medians over rounds). */
  pooled?: { fromIntendedMs: Percentiles; fromSentMs: Percentiles } | undefined;
}

export interface RssReading {
  /** Right after start and one request. */
  afterStartMb?: number | undefined;
  /** After start and a warm-up, before any measurement. */
  idleAfterWarmupMb: number | undefined;
  /** After every throughput and latency measurement, just before the streams. */
  idleAfterLoadMb: number | undefined;
  withStreamsMb: number | undefined;
  streams: {
    requested: number;
    open: number;
    failed: number;
    openSeconds: number;
    firstError?: string | undefined;
  };
  /** A few seconds after the client closed every stream. */
  afterCloseMb: number | undefined;
}

export interface MachineInfo {
  cpuCount: number;
  cpuModel: string;
  memoryGb: number;
  os: string;
  node: string;
  httpProxy3: string;
  haproxy?: string | undefined;
  nginx?: string | undefined;
  fdLimit?: number | undefined;
  commit: string;
  /** 1, 5 and 15 minute load averages: other work on the machine skews a 2-core benchmark. */
  loadAvgBefore: string;
  /** % of one core other processes used just before the run. */
  otherCpuBeforePct?: number | undefined;
  loadAvgAfter?: string;
}

export interface Goal {
  goal: string;
  measured: string;
  met: boolean | null;
  /** Other processes used more than 25 % of a core during a cell this figure comes from. */
  noisy?: boolean | undefined;
}

export interface Results {
  benchmark: 'overhead';
  version: 1;
  startedAt: string;
  durationSeconds: number;
  settings: Record<string, unknown>;
  machine: MachineInfo;
  /** Peers in this run; a skipped one carries the reason. */
  targets: Record<string, { url?: string; pid?: number; skipped?: string; note?: string }>;
  closedLoop: Record<string, Record<string, ClosedRun>>;
  /** Closed loop at c=64 with a prompt of `bytes` (direct, sidecar, bare). */
  largeBody?: { bytes: number; concurrency: number; runs: Record<string, ClosedRun> };
  wrk?: Record<string, { concurrency: number; rps: number; p50Ms?: number; p99Ms?: number }>;
  openLoop: Record<string, Record<string, OpenRun>>;
  /** proxy percentile − direct percentile, same run, same rate. */
  addedLatency: Record<string, Record<string, { fromIntended: AddedPct; fromSent: AddedPct }>>;
  sse: Record<string, SseResult & { cpu: CpuShare }>;
  sseAdded: Record<string, AddedPct>;
  rss: Record<string, RssReading>;
  profile: Record<string, ProfileSummary | { skipped: string }>;
  /** The sidecar again under other node flags (a what-if for memory). */
  sidecarVariant?: { nodeArgs: string[]; closed64: ClosedRun; rss: RssReading };
  goals: Record<string, Goal>;
  notes: string[];
}

export interface AddedPct {
  p50: number;
  p90: number;
  p99: number;
}

export function added(proxy: Percentiles, direct: Percentiles): AddedPct {
  const d = (a: number, b: number): number => Math.round((a - b) * 1000) / 1000;
  return {
    p50: d(proxy.p50, direct.p50),
    p90: d(proxy.p90, direct.p90),
    p99: d(proxy.p99, direct.p99),
  };
}

const f3 = (x: number | undefined): string =>
  x === undefined || Number.isNaN(x) ? '–' : x.toFixed(3);
const f1 = (x: number | undefined): string =>
  x === undefined || Number.isNaN(x) ? '–' : x.toFixed(1);
const int = (x: number | undefined): string =>
  x === undefined || Number.isNaN(x) ? '–' : Math.round(x).toLocaleString('en-US');
const signed = (x: number | undefined): string =>
  x === undefined || Number.isNaN(x) ? '–' : `${x >= 0 ? '+' : ''}${x.toFixed(3)}`;

const LABEL: Record<string, string> = {
  direct: 'direct (no proxy)',
  sidecar: 'switchyard sidecar',
  'sidecar-traced': 'sidecar, tracing 100 %',
  'sidecar-traced-1pct': 'sidecar, tracing 1 %',
  bare: 'bare http-proxy-3',
  haproxy: 'HAProxy',
  nginx: 'nginx',
};
export const label = (name: string): string => LABEL[name] ?? name;

export function goalsTable(r: Results): string {
  return table(
    ['goal (2-core machine)', 'measured', 'met'],
    Object.values(r.goals).map((g) => [
      g.goal,
      g.measured,
      (g.met === null ? 'n/a' : g.met ? 'yes' : 'NO') + (g.noisy === true ? ' (noisy run)' : ''),
    ]),
    ['l', 'l', 'l'],
  );
}

export function closedTable(r: Results): string {
  const conc = (r.settings.concurrency as number[]).map(String);
  const bare = r.closedLoop.bare;
  const rows = Object.entries(r.closedLoop).map(([name, runs]) => [
    label(name),
    ...conc.map((c) => int(runs[c]?.rps)),
    ...conc.map((c) =>
      bare?.[c] !== undefined && runs[c] !== undefined && name !== 'direct'
        ? `${Math.round((runs[c].rps / bare[c].rps) * 100)} %`
        : '',
    ),
    f3(runs['64']?.latencyMs.p50 ?? Object.values(runs)[0]?.latencyMs.p50),
    f3(runs['64']?.latencyMs.p99 ?? Object.values(runs)[0]?.latencyMs.p99),
    runs['64'] !== undefined ? cpuCell(runs['64'].cpu) : '',
    int(runs['64']?.proxyCpuUsPerRequest),
    int(Object.values(runs).reduce((n, run) => n + run.errors, 0)),
  ]);
  return table(
    [
      'target',
      ...conc.map((c) => `req/s c=${c}`),
      ...conc.map((c) => `vs bare c=${c}`),
      'p50 ms c=64',
      'p99 ms c=64',
      'CPU % c=64 (client/proxy/backend/softirq/other)',
      'proxy CPU µs/req c=64',
      'errors',
    ],
    rows,
  );
}

function cpuCell(cpu: CpuShare): string {
  return `${Math.round(cpu.client)}/${cpu.target === undefined ? '–' : Math.round(cpu.target)}/${Math.round(cpu.backend)}/${Math.round(cpu.kernelIrq)}/${Math.round(cpu.other)}`;
}

export function largeBodyTable(r: Results): string | undefined {
  const lb = r.largeBody;
  if (lb === undefined || Object.keys(lb.runs).length === 0) return undefined;
  const small = (name: string): ClosedRun | undefined => r.closedLoop[name]?.['64'];
  const rows = Object.entries(lb.runs).map(([name, run]) => [
    label(name),
    int(run.rps),
    lb.runs.bare !== undefined && name !== 'direct'
      ? `${Math.round((run.rps / lb.runs.bare.rps) * 100)} %`
      : '',
    f3(run.latencyMs.p50),
    f3(run.latencyMs.p99),
    int(run.proxyCpuUsPerRequest),
    int(small(name)?.proxyCpuUsPerRequest),
    int(run.errors),
  ]);
  return table(
    [
      'target',
      'req/s',
      'vs bare',
      'p50 ms',
      'p99 ms',
      'proxy CPU µs/req',
      'same, small body',
      'errors',
    ],
    rows,
  );
}

export function wrkTable(r: Results): string | undefined {
  if (r.wrk === undefined || Object.keys(r.wrk).length === 0) return undefined;
  const rows = Object.entries(r.wrk).map(([name, w]) => [
    label(name),
    int(w.rps),
    f3(w.p50Ms),
    f3(w.p99Ms),
  ]);
  const c = Object.values(r.wrk)[0]!.concurrency;
  return table(['target', `wrk req/s c=${c}`, 'p50 ms', 'p99 ms'], rows);
}

export function openTable(r: Results): string {
  const rows: string[][] = [];
  for (const rate of (r.settings.rates as number[]).map(String)) {
    for (const [name, runs] of Object.entries(r.openLoop)) {
      const run = runs[rate];
      if (run === undefined) continue;
      const add = r.addedLatency[name]?.[rate];
      rows.push([
        rate,
        label(name),
        f3(run.fromIntendedMs.p50),
        f3(run.fromIntendedMs.p90),
        f3(run.fromIntendedMs.p99),
        name === 'direct' ? '' : signed(add?.fromIntended.p50),
        name === 'direct' ? '' : signed(add?.fromIntended.p99),
        f3(run.fromSentMs.p50),
        f3(run.fromSentMs.p99),
        name === 'direct' ? '' : signed(add?.fromSent.p50),
        name === 'direct' ? '' : signed(add?.fromSent.p99),
        int(run.achievedRate),
        int(run.errors),
      ]);
    }
  }
  return table(
    [
      'req/s',
      'target',
      'p50 ms',
      'p90 ms',
      'p99 ms',
      'added p50',
      'added p99',
      'p50 ms (sent)',
      'p99 ms (sent)',
      'added p50 (sent)',
      'added p99 (sent)',
      'achieved req/s',
      'errors',
    ],
    rows,
    ['r', 'l'],
  );
}

export function sseTable(r: Results): string {
  const rows = Object.entries(r.sse).map(([name, s]) => [
    label(name),
    int(s.chunks),
    f3(s.delayMs.p50),
    f3(s.delayMs.p90),
    f3(s.delayMs.p99),
    f3(s.delayMs.max),
    name === 'direct' ? '' : signed(r.sseAdded[name]?.p50),
    name === 'direct' ? '' : signed(r.sseAdded[name]?.p99),
    f3(s.firstChunkDelayMs.p50),
    s.errors > 0 ? `${s.errors} (${s.firstError ?? ''})` : '0',
  ]);
  return table(
    [
      'target',
      'chunks',
      'p50 ms',
      'p90 ms',
      'p99 ms',
      'max ms',
      'added p50',
      'added p99',
      'first chunk ms',
      'errors',
    ],
    rows,
  );
}

export function rssTable(r: Results): string {
  const row = (name: string, m: RssReading): string[] => [
    name,
    f1(m.afterStartMb),
    f1(m.idleAfterWarmupMb),
    f1(m.idleAfterLoadMb),
    `${f1(m.withStreamsMb)} (${m.streams.open}/${m.streams.requested} open)`,
    f1(m.afterCloseMb),
  ];
  const rows = Object.entries(r.rss).map(([name, m]) => row(label(name), m));
  const v = r.sidecarVariant;
  if (v !== undefined)
    rows.push(row(`${label('sidecar')} with \`${v.nodeArgs.join(' ')}\`*`, v.rss));
  return table(
    [
      'proxy',
      'after start MB',
      'idle after warm-up MB',
      'idle after load MB',
      'with held streams MB',
      'after closing MB',
    ],
    rows,
  );
}

export function profileTables(r: Results): string {
  const parts: string[] = [];
  const summaries = Object.entries(r.profile).filter(
    (e): e is [string, ProfileSummary] => !('skipped' in e[1]),
  );
  for (const [name, p] of Object.entries(r.profile)) {
    if ('skipped' in p) parts.push(`${label(name)}: profile skipped (${p.skipped}).`);
  }
  if (summaries.length === 0) return parts.join('\n\n');
  // Areas side by side, in CPU µs per request, so the sidecar's extra cost shows per area.
  const names = summaries.map(([n]) => n);
  const areas = [...new Set(summaries.flatMap(([, p]) => p.areas.map((a) => a.area)))];
  const us = (p: ProfileSummary, area: string): number =>
    p.areas.find((a) => a.area === area)?.usPerRequest ?? 0;
  const first = summaries[0]![1];
  areas.sort((a, b) => us(first, b) - us(first, a));
  const diff = summaries.length === 2;
  parts.push(
    `Time per request by area while profiled: closed loop, c=${String(r.settings.profileConcurrency)}, ${String(r.settings.profileSeconds)} s after a warm-up, ${summaries[0]![1].pinned ?? 'not pinned'}; start-up and warm-up are left out. V8 samples wall time, so a frame's time includes any wait for a core, and the profiler adds its own cost; "CPU" is the process's CPU time from /proc over the same window. ` +
      summaries
        .map(
          ([n, p]) =>
            `${label(n)}: ${int(p.requests)} requests, ${f1(p.busyUsPerRequest)} µs busy in the profile and ${int(p.cpuUsPerRequest)} µs CPU per request`,
        )
        .join('; ') +
      '.\n\n' +
      table(
        [
          'area',
          ...names.map((n) => `${label(n)} µs/req`),
          ...(diff ? [`${label(names[0]!)} − ${label(names[1]!)}`] : []),
        ],
        [
          ...areas
            .filter((a) => summaries.some(([, p]) => us(p, a) >= 0.5))
            .map((a) => [
              a,
              ...summaries.map(([, p]) => f1(us(p, a))),
              ...(diff ? [signed1(us(summaries[0]![1], a) - us(summaries[1]![1], a))] : []),
            ]),
          [
            '**total busy**',
            ...summaries.map(([, p]) => f1(p.busyUsPerRequest)),
            ...(diff
              ? [
                  signed1(
                    (summaries[0]![1].busyUsPerRequest ?? 0) -
                      (summaries[1]![1].busyUsPerRequest ?? 0),
                  ),
                ]
              : []),
          ],
        ],
      ),
  );
  for (const [name, p] of summaries) {
    parts.push(
      `Top ${p.topSelf.length} functions by self time, ${label(name)}:\n\n` +
        table(
          ['function (file:line)', 'area', 'self ms', '% of busy', 'µs/req'],
          p.topSelf.map((t) => [
            `\`${t.function}\``,
            t.area,
            int(t.ms),
            f1(t.pct),
            p.requests ? f1((t.ms * 1000) / p.requests) : '–',
          ]),
          ['l', 'l', 'r', 'r', 'r'],
        ),
    );
    if (p.topInclusive.length > 0) {
      parts.push(
        `Inclusive time (self + everything it calls) of switchyard and dependency functions, ${label(name)}:\n\n` +
          table(
            ['function (file:line)', 'area', 'incl. ms', '% of busy', 'µs/req'],
            p.topInclusive
              .slice(0, 15)
              .map((t) => [
                `\`${t.function}\``,
                t.area,
                int(t.ms),
                f1(t.pct),
                p.requests ? f1((t.ms * 1000) / p.requests) : '–',
              ]),
            ['l', 'l', 'r', 'r', 'r'],
          ),
      );
    }
  }
  return parts.join('\n\n');
}

const signed1 = (x: number): string => `${x >= 0 ? '+' : ''}${x.toFixed(1)}`;

export function machineLine(r: Results): string {
  const m = r.machine;
  const peers = [m.haproxy, m.nginx].filter((v) => v !== undefined).map((v) => `, ${v}`);
  return `${m.cpuCount} × ${m.cpuModel}, ${m.os}, Node ${m.node}, http-proxy-3 ${m.httpProxy3}${peers.join('')}; load average before/after ${m.loadAvgBefore} / ${m.loadAvgAfter ?? '?'}`;
}

/** Everything, as markdown (the docs section and the console print). */
export function renderMarkdown(r: Results): string {
  const s = r.settings;
  const sections = [
    `Run ${r.startedAt} (${Math.round(r.durationSeconds)} s, \`npm run bench:overhead${s.quick === true ? ' -- --quick' : ''}\`), commit ${r.machine.commit}. ${machineLine(r)}.`,
    `### Goals\n\n${goalsTable(r)}`,
    `### Closed-loop throughput\n\n${String(s.rounds)} round(s) of ${String(s.closedSeconds)} s per cell, each after a ${String(s.warmupSeconds)} s warm-up; a cell shows its median round. A round during which other processes used more than ${String(s.noisyOtherPct)} % of a core is noisy: it is left out when the cell has a quiet one, and a cell with none gets up to ${String(s.retries)} more rounds at the end (every round is in the JSON). node:http keep-alive client in the bench process. "vs bare" is the share of the bare http-proxy-3 passthrough's throughput in the same run. CPU is % of one core during the c=64 run (the machine has ${r.machine.cpuCount} × 100 %): the bench client, the proxy, the backend, the kernel's softirq work (loopback TCP, charged to no process) and other processes; "proxy CPU µs/req" is the proxy process's CPU time per request, the most noise-resistant cost figure here.\n\n${closedTable(r)}`,
    ...(largeBodyTable(r) !== undefined
      ? [
          `With a realistic prompt (${int(r.largeBody!.bytes)}-byte request body, c=${r.largeBody!.concurrency}, 1 round): the sidecar reads and parses every body, the bare passthrough streams it.\n\n${largeBodyTable(r)!}`,
        ]
      : []),
    ...(wrkTable(r) !== undefined
      ? [
          `Cross-check with \`wrk\` (a C client, far cheaper per request than node:http):\n\n${wrkTable(r)!}`,
        ]
      : []),
    `### Latency added at fixed offered rates (open loop)\n\n${String(s.rounds)} round(s) of ${String(s.openSeconds)} s per cell, each percentile is the median over the cell's quiet rounds (noisy ones left out and re-run as above), so one stall elsewhere on the machine does not decide a p99; the pooled percentiles are in the JSON; sends paced by the \`${String(s.pacer)}\` pacer. The first columns count from when each request was due (coordinated omission included: a request the client sent late still counts its wait); "(sent)" counts from when node:http got it. "added" = this proxy's percentile − direct's percentile at the same rate in the same run.\n\n${openTable(r)}`,
    `### Delay added to SSE chunks\n\n${String(s.sseStreams)} stream(s) × ${String(s.sseChunks)} chunks every ${String(s.sseIntervalMs)} ms; delay = client \`hrtime\` at arrival − backend \`hrtime\` just before the write (one monotonic clock). Each stream's first chunk is reported apart (it waits for the response head).\n\n${sseTable(r)}`,
    `### Memory (VmRSS)\n\nVmRSS from /proc: right after start, after a warm-up, after every measurement above, with ${String(s.holdStreams)} held-open SSE streams (a chunk per second each), and 2.5 s after the client closed them.${r.sidecarVariant !== undefined ? ` \\* The variant row is a second sidecar started with other node flags and a shorter load history (warm-up, c=64 and c=256 closed loops); its c=64 throughput was ${int(r.sidecarVariant.closed64.rps)} req/s (${int(r.sidecarVariant.closed64.proxyCpuUsPerRequest)} µs CPU/req) against ${int(r.closedLoop.sidecar?.['64']?.rps)} req/s with default flags.` : ''}\n\n${rssTable(r)}`,
    `### Where the time goes (CPU profile of the hot path)\n\n${profileTables(r)}`,
    ...(r.notes.length > 0 ? [`### Notes\n\n${r.notes.map((n) => `- ${n}`).join('\n')}`] : []),
  ];
  return datedHeadings(sections.join('\n\n'), r.startedAt, r.machine.commit) + '\n';
}
