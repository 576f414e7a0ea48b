/**
 * Figures and report of `npm run bench:controller`: percentiles, the controller's Prometheus
 * histograms (parsed from its /metrics), the results JSON types, and the "Controller" section
 * at the end of docs/benchmarks.md (between its own markers; the rest of the file is left as is).
 */
import type { FunctionTime } from '../common/cpu-profile.ts';
import { datedHeadings, table as markdownTable, type Align } from '../common/markdown.ts';
import type { CpuShare, WindowStats } from './resources.ts';

/** The controller's CPU profile over one phase of the run (bench/common/cpu-profile.ts). */
export interface WindowProfile {
  file: string;
  /** The phase. */
  window: string;
  totalMs: number;
  busyMs: number;
  areas: { area: string; ms: number; pct: number }[];
  topSelf: FunctionTime[];
  topInclusive: FunctionTime[];
}

// ---- percentiles --------------------------------------------------------------------------

export interface Distribution {
  n: number;
  p50: number | null;
  p90: number | null;
  p99: number | null;
  max: number | null;
  mean: number | null;
}

const r1 = (v: number): number => Math.round(v * 10) / 10;
const r3 = (v: number): number => Math.round(v * 1000) / 1000;

/** Nearest-rank percentiles in ms (timeouts count as +∞: they push the top percentiles up). */
export function distribution(values: readonly number[]): Distribution {
  const sorted = [...values].sort((a, b) => a - b);
  const n = sorted.length;
  const at = (p: number): number | null => {
    if (n === 0) return null;
    const v = sorted[Math.min(n - 1, Math.max(0, Math.ceil((p / 100) * n) - 1))]!;
    return Number.isFinite(v) ? r1(v) : null;
  };
  const finite = sorted.filter((v) => Number.isFinite(v));
  return {
    n,
    p50: at(50),
    p90: at(90),
    p99: at(99),
    max: at(100),
    mean: finite.length === 0 ? null : r1(finite.reduce((a, b) => a + b, 0) / finite.length),
  };
}

// ---- Prometheus text ----------------------------------------------------------------------

/** Every sample of a Prometheus text exposition, by `name{labels}` as written. */
export function parseMetrics(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const space = line.lastIndexOf(' ');
    out.set(line.slice(0, space), Number(line.slice(space + 1)));
  }
  return out;
}

export interface HistogramFigures {
  count: number;
  /** Seconds → ms. */
  meanMs: number | null;
  /** Estimated from the buckets (linear within a bucket, as Prometheus' histogram_quantile). */
  p50Ms: number | null;
  p90Ms: number | null;
  p99Ms: number | null;
  /** Cumulative counts per upper bound (ms). */
  buckets: { leMs: number | 'inf'; count: number }[];
}

/** An unlabelled histogram's change between two scrapes (`before` undefined: since start). */
export function histogramDelta(
  name: string,
  after: Map<string, number>,
  before?: Map<string, number>,
): HistogramFigures {
  const d = (key: string): number => (after.get(key) ?? 0) - (before?.get(key) ?? 0);
  const buckets: { le: number; count: number }[] = [];
  for (const key of after.keys()) {
    const m = new RegExp(`^${name}_bucket\\{le="([^"]+)"\\}$`).exec(key);
    if (m === null) continue;
    buckets.push({ le: m[1] === '+Inf' ? Infinity : Number(m[1]), count: d(key) });
  }
  buckets.sort((a, b) => a.le - b.le);
  const count = d(`${name}_count`);
  const sum = d(`${name}_sum`);
  const quantile = (q: number): number | null => {
    if (count === 0) return null;
    const rank = q * count;
    let prevLe = 0;
    let prevCount = 0;
    for (const b of buckets) {
      if (b.count >= rank) {
        if (!Number.isFinite(b.le)) return r3(prevLe * 1000); // above the last bound
        const inBucket = b.count - prevCount;
        const frac = inBucket === 0 ? 0 : (rank - prevCount) / inBucket;
        return r3((prevLe + (b.le - prevLe) * frac) * 1000);
      }
      prevLe = b.le;
      prevCount = b.count;
    }
    return null;
  };
  return {
    count,
    meanMs: count === 0 ? null : r3((sum / count) * 1000),
    p50Ms: quantile(0.5),
    p90Ms: quantile(0.9),
    p99Ms: quantile(0.99),
    buckets: buckets.map((b) => ({
      leMs: Number.isFinite(b.le) ? r3(b.le * 1000) : 'inf',
      count: b.count,
    })),
  };
}

/** Samples of `name` by their label set (`{result="changed"}` → value), change since `before`. */
export function labelled(
  name: string,
  after: Map<string, number>,
  before?: Map<string, number>,
): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [key, value] of after) {
    if (key !== name && !key.startsWith(`${name}{`)) continue;
    const labels = key.slice(name.length).replace(/^\{|\}$/g, '') || 'total';
    out[labels] = value - (before?.get(key) ?? 0);
  }
  return out;
}

// ---- results ------------------------------------------------------------------------------

export interface LatencyFigures {
  /** Writes measured (timeouts included). */
  writes: number;
  timeouts: number;
  /** PUT sent → API server answered. */
  writeAckMs: Distribution;
  /** PUT sent → a watcher in the bench process got the event (the API server's share). */
  watchDeliveredMs: Distribution;
  /** PUT sent → the last subscriber of the pool holds a snapshot with the change: THE figure. */
  lastSubscriberMs: Distribution;
  /** PUT sent → each subscriber of the pool holds it (one value per subscriber per write). */
  perSubscriberMs: Distribution;
  /** Last subscriber − watch delivery: the controller's share (informer, queue, reconcile, push). */
  controllerShareMs: Distribution;
  /** Last subscriber − first subscriber of the same write: fan-out spread. */
  fanoutSpreadMs: Distribution;
  byChange: Record<string, Distribution>;
}

/** The controller's memory at one point of the run. */
export interface MemoryPoint {
  at: string;
  /** Since the controller was spawned. */
  tSeconds: number;
  rssMb: number | null;
  /** Anonymous (heap, buffers, OpenSSL, wasm) and file-backed (the node binary, libraries) RSS. */
  anonMb: number | null;
  fileMb: number | null;
  /** V8 heap reserved / used, and memory V8 knows about outside it (Buffers, wasm...). */
  heapTotalMb: number | null;
  heapUsedMb: number | null;
  externalMb: number | null;
  streams: number | null;
  /** V8 heap spaces, `"<space> total|used"` → MiB. */
  heapSpacesMb: Record<string, number>;
}

export interface Target {
  goal: string;
  limit: number;
  unit: string;
  measured: number | null;
  met: boolean;
  detail: string;
}

/** One variant run (`--what-if`), in short. */
export interface WhatIfRow {
  label: string;
  command: string;
  generatedAt: string;
  commit: string;
  initialSyncMs: number | null;
  sequentialMs: Distribution;
  burstSize: number;
  burstMs: Distribution;
  idleRssMb: number | null;
  peakRssMb: number | null;
  /** V8 young generation reserved at the end. */
  newSpaceMb: number | null;
  idleCpuPct: number | null;
  cpuMsPerWrite: number | null;
  /** The most CPU other processes used in any phase (% of a core). */
  otherCpuPct: number;
  /** Connections the controller opened to the API server until 2 s after the initial sync. */
  apiConnectionsAtSync?: number | undefined;
  /** With --profile. */
  profiles?: WindowProfile[] | undefined;
}

export interface Results {
  generatedAt: string;
  durationSeconds: number;
  command: string;
  commit: string;
  settings: {
    pools: number;
    endpointsPerPool: number;
    subscribers: number;
    namespaces: number;
    subscribersPerPool: { min: number; max: number; spread: string };
    tokens: 'per-subscriber' | 'per-namespace';
    /** One subscriber per distinct token connected first (the token cache warm for the rest). */
    primeTokens?: boolean;
    rounds: number;
    warmupRounds: number;
    gapMs: number;
    bursts: number;
    burstSize: number;
    idleSeconds: number;
    reportEveryMs: number;
    timeoutMs: number;
    controllerFlags: string[];
    /** Node flags in effect in the controller process (from /proc/<pid>/cmdline). */
    controllerNodeFlags?: string[];
    profile: boolean;
  };
  machine: {
    cpus: number;
    cpuModel: string;
    memoryGiB: number;
    kernel: string;
    node: string;
    kubernetes: string;
    loadBefore: string;
    loadAfter: string;
  };
  measurements: {
    setupMs: { cluster: number; objects: number; tokens: number };
    initialSync: {
      /** Controller spawned → "controller listening". */
      listeningMs: number;
      /** Controller spawned → its "caches synced" log line. */
      cachesSyncedMs: number | null;
      /** Controller spawned → every subscriber got a 200. */
      allConnectedMs: number | null;
      /** Controller spawned → every subscriber holds its pool's first snapshot. */
      allFirstSnapshotMs: number | null;
      /** Per subscriber: controller spawned → its first snapshot. */
      firstSnapshotMs: Distribution;
      /** Answers other than 200 while connecting (e.g. 404 before the pool cache synced). */
      refusals: Record<string, number>;
    };
    sequential: LatencyFigures;
    burst: LatencyFigures & {
      /** First PUT of a burst sent → the last subscriber of any pool of the burst updated. */
      burstCompleteMs: Distribution;
    };
    resources: {
      sync: WindowStats;
      idle: WindowStats;
      sequential: WindowStats;
      burst: WindowStats;
      memory: MemoryPoint[];
      /** VmHWM of the controller at the end: its peak RSS over the whole run. */
      peakRssMb: number | null;
      rssAtEndMb: number | null;
      /** Controller CPU ms per EndpointSlice write, one write at a time (all its work: reports too). */
      cpuMsPerWriteSequential: number | null;
      cpuMsPerWriteBurst: number | null;
      /** From spawning the controller, one point a second. */
      timeline: { t: number; rssMb: number | null; controllerCpuPct: number | null }[];
    };
    controllerMetrics: {
      /** From the controller's /metrics: over the measured writes of each kind, and the whole run. */
      pushLatency: {
        sequential: HistogramFigures;
        burst: HistogramFigures;
        wholeRun: HistogramFigures;
      };
      reconcileDuration: {
        sequential: HistogramFigures;
        burst: HistogramFigures;
        wholeRun: HistogramFigures;
      };
      reconciles: Record<string, number>;
      statusWrites: Record<string, number>;
      snapshotsPublished: number;
      informerRestarts: Record<string, number>;
      authFailures: Record<string, number>;
      connectedSidecars: number | null;
      eventLoopLagP99Ms: number | null;
      heapUsedMb: number | null;
    };
    subscribers: {
      connects: number;
      drops: number;
      snapshots: number;
      reports: { sent: number; ok: number; failed: number };
      refusals: Record<string, number>;
    };
    sliceWatchRestarts: number;
    /**
     * TCP connections from the controller to the API server, sampled (every 100 ms until 2 s
     * after the initial sync, then every second): how many distinct ones were seen, and the most
     * open at once. Connections shorter than a sampling interval are missed.
     */
    apiServerConnections?: {
      initialSync: { opened: number; maxOpen: number };
      wholeRun: { opened: number; maxOpen: number };
    };
    /** RSS of fresh node processes that only load code (what the controller starts from). */
    moduleBaselinesMb: Record<string, number | null>;
    /** With --profile: the controller's CPU profile over the sync, idle and writes windows. */
    profiles: WindowProfile[];
  };
  targets: Target[];
  notes: string[];
  /** Variant runs recorded with --what-if. */
  whatIfs?: WhatIfRow[];
}

// ---- markdown -----------------------------------------------------------------------------

const fmt = (v: number | null | undefined, digits = 1): string =>
  v === null || v === undefined
    ? '–'
    : v.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });

/** A table and the blank line after it (the sections are joined line by line). */
const table = (head: string[], align: Align[], rows: string[][]): string =>
  `${markdownTable(head, rows, align)}\n`;

function distRow(label: string, d: Distribution): string[] {
  return [label, String(d.n), fmt(d.p50), fmt(d.p90), fmt(d.p99), fmt(d.max), fmt(d.mean)];
}

function cpuCells(c: CpuShare | undefined): string[] {
  if (c === undefined) return ['–', '–', '–', '–', '–', '–'];
  return [c.controller, c.apiServer, c.etcd, c.bench, c.other, c.irq].map((v) => fmt(v, 0));
}

export const METHOD = `One run of \`npm run bench:controller\` takes about a minute. It drives \`switchyard controller\` on a
real kube-apiserver and etcd (\`harness/k8s/cluster.ts\`, with the binaries that \`scripts/k8s/build.sh\` builds):

\`\`\`sh
npm run bench:controller                      # 200 pools × 20 endpoints, 500 subscribers, 100 + 5 × 20 writes
npm run bench:controller -- --help            # flags: pools, endpoints, subscribers, rounds, bursts...
npm run bench:controller -- --what-if 'CPU profile' --profile    # a variant, added to the What-ifs table
\`\`\`

- **Objects.** Each pool has a Service, one EndpointSlice with N endpoints (addresses from
  10.200.0.0/16; nothing connects to them, no backend runs) and an InferencePool with one
  \`service\` backend. The pools are spread over a few namespaces.
- **Subscribers.** Light clients of the real stream run in the bench process (\`bench/controller/subscribers.ts\`).
  Each has its own TLS connection and its own ServiceAccount token, with audience \`switchyard\`.
  Each token is a separate TokenRequest, as every pod has its own. The clients are spread
  round-robin over the pools, so subscriber \`i\` follows pool \`i mod pools\`. A minimal SSE parser
  records the snapshot each subscriber holds and when it arrived. Like sidecars, the clients POST
  a report after every new snapshot and every 10 s, and reconnect with jittered backoff.
- **Initial sync.** The clock starts when the controller process is spawned. The subscribers
  connect as soon as it announces its port. A 404 before its pool cache has synced is retried
  with backoff. Sync is done when every subscriber holds its pool's first snapshot.
- **Writes.** Each write is a PUT of one EndpointSlice over a keep-alive connection. A write
  either flips one endpoint's \`ready\`, or adds or removes an address. Latency runs from just
  before the PUT to the moment the **last** subscriber of that pool holds a snapshot with exactly
  the new endpoint ids. There are two kinds of write:
  - *one at a time*: a new write starts after the previous one has reached every subscriber, plus
    a short gap;
  - *bursts*: several pools are written at once.

  A watch on EndpointSlices in the bench process timestamps when the API server delivered each
  write to a watcher. This splits the latency into the API server's share and the controller's
  share (informer, queue, reconcile, push).
- **Resources.** The controller's VmRSS and VmHWM (peak) come from \`/proc/<pid>/status\`, sampled
  every 200 ms. Its CPU (\`utime+stime\` from \`/proc/<pid>/stat\`) is taken per phase, next to the
  CPU of kube-apiserver, etcd, the bench process and everything else. All of them share the two
  cores, so the figures show what this machine does, not what the controller alone could do. The
  controller's own \`switchyard_controller_push_latency_seconds\` and
  \`…_reconcile_duration_seconds\` histograms are scraped from its admin \`/metrics\`.`;

export function renderMarkdown(r: Results): string {
  const s = r.settings;
  const m = r.measurements;
  const out: string[] = [];
  out.push(
    `Run ${r.generatedAt} (${Math.round(r.durationSeconds)} s, \`${r.command}\`), commit ${r.commit}. ${r.machine.cpus} × ${r.machine.cpuModel}, ${r.machine.memoryGiB} GiB, Linux ${r.machine.kernel}, Node ${r.machine.node}, Kubernetes ${r.machine.kubernetes}; load average before/after ${r.machine.loadBefore} / ${r.machine.loadAfter}.`,
    '',
    `${s.pools} pools × ${s.endpointsPerPool} endpoints in ${s.namespaces} namespaces; ${s.subscribers} subscribers (${s.subscribersPerPool.min}–${s.subscribersPerPool.max} per pool, ${s.subscribersPerPool.spread}; tokens ${s.tokens}${s.primeTokens === true ? ', token cache primed' : ''}; reports ${s.reportEveryMs > 0 ? `every ${s.reportEveryMs / 1000} s and after every snapshot` : 'off'}). ${s.rounds} writes one at a time (after ${s.warmupRounds} unmeasured, ${s.gapMs} ms apart), then ${s.bursts} bursts of ${s.burstSize} writes at once. Controller: \`${s.controllerFlags.join(' ')}\`${s.controllerNodeFlags === undefined ? '' : `; node flags in effect: ${s.controllerNodeFlags.length > 0 ? `\`${s.controllerNodeFlags.join(' ')}\`` : 'none'}`}${s.profile ? ', with --cpu-prof (slower)' : ''}.`,
    '',
    '### Targets',
    '',
    table(
      ['target', 'measured', 'met'],
      ['l', 'l', 'l'],
      r.targets.map((t) => [t.goal, t.detail, t.met ? 'yes' : '**NO**']),
    ),
    '### EndpointSlice write → every subscriber',
    '',
    'ms from just before the PUT. "last subscriber" is the figure the target is about: the pool is updated everywhere. "controller share" is the last subscriber minus the watch delivery of the same write.',
    '',
  );
  const head = ['', 'n', 'p50 ms', 'p90 ms', 'p99 ms', 'max ms', 'mean ms'];
  const align: Align[] = ['l', 'r', 'r', 'r', 'r', 'r', 'r'];
  const latencyRows = (l: LatencyFigures, what: string): string[][] => [
    distRow(`**${what}: last subscriber**`, l.lastSubscriberMs),
    distRow(`${what}: each subscriber`, l.perSubscriberMs),
    distRow(`${what}: API server answered the PUT`, l.writeAckMs),
    distRow(`${what}: watch event delivered (bench watcher)`, l.watchDeliveredMs),
    distRow(`${what}: controller share (last − watch)`, l.controllerShareMs),
    distRow(`${what}: fan-out spread (last − first subscriber)`, l.fanoutSpreadMs),
  ];
  out.push(
    table(head, align, [
      ...latencyRows(m.sequential, 'one at a time'),
      ...latencyRows(m.burst, `bursts of ${s.burstSize}`),
      distRow(`bursts of ${s.burstSize}: whole burst done`, m.burst.burstCompleteMs),
    ]),
  );
  const timeouts = m.sequential.timeouts + m.burst.timeouts;
  out.push(
    `Timeouts (no update within ${s.timeoutMs / 1000} s): ${timeouts}. By kind of change, one at a time (last subscriber, ms):`,
    '',
    table(
      head,
      align,
      Object.entries(m.sequential.byChange).map(([k, d]) => distRow(k, d)),
    ),
  );
  const sync = m.initialSync;
  out.push(
    '### Initial sync',
    '',
    table(
      ['from spawning the controller to', 'ms'],
      ['l', 'r'],
      [
        ['"controller listening"', fmt(sync.listeningMs, 0)],
        ['its "caches synced" log line', fmt(sync.cachesSyncedMs, 0)],
        [`all ${s.subscribers} subscribers connected (200)`, fmt(sync.allConnectedMs, 0)],
        [
          `**all ${s.subscribers} subscribers hold their first snapshot**`,
          fmt(sync.allFirstSnapshotMs, 0),
        ],
        ['first snapshot, per subscriber: p50', fmt(sync.firstSnapshotMs.p50, 0)],
        ['first snapshot, per subscriber: p99', fmt(sync.firstSnapshotMs.p99, 0)],
      ],
    ),
    ...(m.apiServerConnections === undefined
      ? []
      : [
          `Connections from the controller to the API server (sampled every 100 ms, so at least): ${m.apiServerConnections.initialSync.opened} opened until 2 s after the sync, at most ${m.apiServerConnections.initialSync.maxOpen} open at once; ${m.apiServerConnections.wholeRun.opened} over the whole run.`,
          '',
        ]),
    `Answers other than 200 while connecting: ${
      Object.entries(sync.refusals)
        .map(([k, v]) => `${k} × ${v}`)
        .join(', ') || 'none'
    }.`,
    '',
  );
  const res = m.resources;
  const phaseRow = (name: string, w: WindowStats): string[] => [
    name,
    fmt(w.seconds, 1),
    ...cpuCells(w.cpu),
    fmt(w.rssMb?.mean),
    fmt(w.rssMb?.max),
  ];
  out.push(
    '### Controller RSS and CPU',
    '',
    `CPU in % of one core (the machine has ${r.machine.cpus} × 100 %), per phase. "other" is every other process on the machine, and "irq" is interrupt and softirq time (loopback TCP).`,
    '',
    table(
      [
        'phase',
        's',
        'controller %',
        'kube-apiserver %',
        'etcd %',
        'bench %',
        'other %',
        'irq %',
        'controller RSS mean MB',
        'RSS max MB',
      ],
      ['l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
      [
        phaseRow('start → initial sync', res.sync),
        phaseRow(`idle (${s.subscribers} streams, reports only)`, res.idle),
        phaseRow('writes one at a time', res.sequential),
        phaseRow(`bursts of ${s.burstSize}`, res.burst),
      ],
    ),
    "What the RSS is made of (VmRSS split into anonymous and file-backed pages from `/proc/<pid>/status`; heap and external figures from the controller's own metrics):",
    '',
    table(
      [
        'when',
        's',
        'streams',
        'RSS MB',
        'anon MB',
        'file MB',
        'V8 heap total MB',
        'heap used MB',
        'external MB',
      ],
      ['l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
      res.memory.map((p) => [
        p.at,
        fmt(p.tSeconds),
        p.streams === null ? '–' : String(p.streams),
        fmt(p.rssMb),
        fmt(p.anonMb),
        fmt(p.fileMb),
        fmt(p.heapTotalMb),
        fmt(p.heapUsedMb),
        fmt(p.externalMb),
      ]),
    ),
    `Peak RSS (VmHWM, whole run): **${fmt(res.peakRssMb)} MB**; at the end ${fmt(res.rssAtEndMb)} MB. Controller CPU per write: ${fmt(res.cpuMsPerWriteSequential)} ms one at a time, ${fmt(res.cpuMsPerWriteBurst)} ms in bursts (everything it did in the phase, reports and status writes included, divided by the writes).`,
    '',
  );
  const cm = m.controllerMetrics;
  const histRow = (name: string, h: HistogramFigures): string[] => [
    name,
    String(h.count),
    fmt(h.p50Ms, 2),
    fmt(h.p90Ms, 2),
    fmt(h.p99Ms, 2),
    fmt(h.meanMs, 2),
  ];
  out.push(
    "### The controller's own metrics",
    '',
    "From its admin `/metrics`. The percentiles are estimated from the histogram buckets. Push latency runs from the first informer event of a change to writing the snapshot to the subscribers' sockets.",
    '',
    table(
      ['histogram', 'count', 'p50 ms', 'p90 ms', 'p99 ms', 'mean ms'],
      ['l', 'r', 'r', 'r', 'r', 'r'],
      [
        histRow('push latency, writes one at a time', cm.pushLatency.sequential),
        histRow(`push latency, bursts of ${s.burstSize}`, cm.pushLatency.burst),
        histRow('push latency, whole run (initial sync included)', cm.pushLatency.wholeRun),
        histRow('reconcile duration, writes one at a time', cm.reconcileDuration.sequential),
        histRow(`reconcile duration, bursts of ${s.burstSize}`, cm.reconcileDuration.burst),
        histRow('reconcile duration, whole run', cm.reconcileDuration.wholeRun),
      ],
    ),
    `Whole run: reconciles ${Object.entries(cm.reconciles)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')}; snapshots published ${cm.snapshotsPublished}; status writes ${
      Object.entries(cm.statusWrites)
        .map(([k, v]) => `${k} ${v}`)
        .join(', ') || '0'
    }; informer restarts ${Object.values(cm.informerRestarts).reduce((a, b) => a + b, 0)}; connected sidecars at the end ${cm.connectedSidecars ?? '–'}; event-loop lag p99 ${fmt(cm.eventLoopLagP99Ms)} ms; heap used ${fmt(cm.heapUsedMb)} MB. Subscribers: ${m.subscribers.snapshots} snapshots received, ${m.subscribers.drops} streams dropped, reports ${m.subscribers.reports.ok}/${m.subscribers.reports.sent} accepted.`,
    '',
  );
  const profiled = r.whatIfs?.find((w) => (w.profiles?.length ?? 0) > 0);
  const profiles = m.profiles.length > 0 ? m.profiles : (profiled?.profiles ?? []);
  if (profiles.length > 0)
    out.push(
      '### CPU profile of the controller',
      '',
      `From ${m.profiles.length > 0 ? 'this run' : `the what-if run "${profiled?.label}" (${profiled?.generatedAt.slice(0, 16).replace('T', ' ')})`}, with the controller under \`--cpu-prof\`, which slows it down. V8 samples wall time, so a frame also carries time spent waiting for a core. The raw profile is \`bench/results/controller.cpuprofile\` (not committed).`,
      '',
    );
  for (const p of profiles) {
    out.push(
      `#### ${p.window}`,
      '',
      `Busy ${fmt(p.busyMs, 0)} ms of ${fmt(p.totalMs, 0)} ms.`,
      '',
      table(
        ['area', 'ms', '% of busy'],
        ['l', 'r', 'r'],
        p.areas.slice(0, 12).map((a) => [a.area, fmt(a.ms, 0), fmt(a.pct)]),
      ),
      table(
        ['top self time: function (file:line)', 'area', 'ms', '% of busy'],
        ['l', 'l', 'r', 'r'],
        p.topSelf.slice(0, 15).map((f) => [`\`${f.function}\``, f.area, fmt(f.ms, 0), fmt(f.pct)]),
      ),
      table(
        ['inclusive time: switchyard and dependency functions', 'area', 'ms', '% of busy'],
        ['l', 'l', 'r', 'r'],
        p.topInclusive
          .slice(0, 15)
          .map((f) => [`\`${f.function}\``, f.area, fmt(f.ms, 0), fmt(f.pct)]),
      ),
    );
  }
  if (r.notes.length > 0) out.push('### Notes', '', ...r.notes.map((n) => `- ${n}`), '');
  const whatIfs = r.whatIfs ?? [];
  if (whatIfs.length > 0)
    out.push(
      '### What-ifs (each row: its own run, day and commit)',
      '',
      'Variant runs (`--what-if <label>` plus the flags shown), each a full run of its own, on the date and commit shown. "write → all" is the last subscriber of the pool, in ms; "other CPU" is the most that other processes on the machine used in any phase.',
      '',
      table(
        [
          'what-if',
          'flags',
          'sync ms',
          'API conns at sync',
          'write → all p50 / p99',
          'burst × p50 / p99',
          'idle RSS MB',
          'peak RSS MB',
          'V8 new space MB',
          'ctl CPU ms/write',
          'other CPU %',
          'run',
        ],
        ['l', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'l'],
        whatIfs.map((w) => [
          w.label,
          w.command === 'npm run bench:controller'
            ? '(defaults)'
            : `\`${w.command.replace(/^npm run bench:controller -- /, '')}\``,
          fmt(w.initialSyncMs, 0),
          w.apiConnectionsAtSync === undefined ? '–' : String(w.apiConnectionsAtSync),
          `${fmt(w.sequentialMs.p50)} / ${fmt(w.sequentialMs.p99)}`,
          `${w.burstSize} × ${fmt(w.burstMs.p50, 0)} / ${fmt(w.burstMs.p99, 0)}`,
          fmt(w.idleRssMb),
          fmt(w.peakRssMb),
          fmt(w.newSpaceMb, 0),
          fmt(w.cpuMsPerWrite),
          fmt(w.otherCpuPct, 0),
          `${w.generatedAt.slice(0, 16).replace('T', ' ')}, ${w.commit.split(' ')[0]}`,
        ]),
      ),
    );
  return datedHeadings(out.join('\n'), r.generatedAt, r.commit, /What-ifs/);
}
