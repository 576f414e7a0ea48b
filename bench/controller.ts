/**
 * `npm run bench:controller`: the controller at scale, on a real kube-apiserver + etcd.
 *
 * 200 pools × 20 endpoints (Services, EndpointSlices, InferencePools) and 500 light simulated
 * sidecars on the real HTTPS snapshot stream. Measures:
 *
 *   - initial sync: controller spawned → every subscriber holds its pool's first snapshot;
 *   - EndpointSlice write → the last subscriber of that pool holds a snapshot with the change
 *     (p50/p90/p99/max), one write at a time and in bursts of concurrent writes, split into the
 *     API server's share (a watch in the bench process) and the controller's;
 *   - the controller's RSS (VmRSS, VmHWM) and CPU per phase, next to kube-apiserver's, etcd's and
 *     everything else's on this 2-core machine; its own push-latency and reconcile histograms.
 *
 * Writes bench/results/controller.json and the Controller section at the end of
 * docs/benchmarks.md. `--help` for the flags.
 */
import { execFileSync } from 'node:child_process';
import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { startSwitchyard, type RunningProcess } from '../harness/processes.ts';
import { startCluster, waitFor, type Cluster } from '../test/k8s/cluster.ts';
import { installInferencePoolCrd } from '../test/k8s/crd.ts';
import { onExit } from '../test/k8s/exit-hooks.ts';
import {
  Api,
  createObjects,
  expectedKey,
  makePools,
  makeTls,
  maxPools,
  mintTokens,
  mutate,
  paths,
  sliceObject,
  SliceWatch,
  type Change,
  type PoolFixture,
} from './controller-fixture.ts';
import {
  childrenByName,
  ConnectionProbe,
  cpuSeconds,
  loadAverage,
  machineCpuSeconds,
  memoryMb,
  moduleBaselines,
  rssParts,
  Sampler,
  type WindowStats,
} from './controller-proc.ts';
import { summariseProfile, type ProfileSummary } from './controller-profile.ts';
import {
  distribution,
  histogramDelta,
  labelled,
  parseMetrics,
  renderMarkdown,
  writeDocs,
  type LatencyFigures,
  type MemoryPoint,
  type Results,
  type Target,
  type WhatIfRow,
} from './controller-report.ts';
import { Subscriber } from './controller-subscribers.ts';

const REPO = fileURLToPath(new URL('..', import.meta.url));
const TARGET_P99_MS = 1000;
const TARGET_RSS_MB = 300;
const PUSH = 'switchyard_controller_push_latency_seconds';
const RECONCILE = 'switchyard_controller_reconcile_duration_seconds';

const HELP = `npm run bench:controller -- [flags]

  --pools <n>             InferencePools, each with a Service and one EndpointSlice (default 200)
  --endpoints <n>         endpoints per EndpointSlice (default 20)
  --subscribers <n>       simulated sidecars; subscriber i follows pool i mod pools (default 500)
  --namespaces <n>        namespaces the pools are spread over (default 4)
  --rounds <n>            measured EndpointSlice writes one at a time (default 100)
  --warmup <n>            unmeasured writes before them (default 5)
  --gap-ms <ms>           pause between two writes one at a time (default 200)
  --bursts <n>            measured bursts of concurrent writes (default 5; 0: none)
  --burst-size <n>        pools written at once in a burst (default 20)
  --idle-seconds <s>      idle window after the initial sync (default 10)
  --report-every <s>      subscribers' report interval, as the sidecar's --report-every
                          (default 10; 0: no reports)
  --tokens <kind>         subscriber: a token of its own per subscriber (default);
                          namespace: one token per namespace, shared
  --timeout <s>           a write that has not reached every subscriber by then is a timeout
                          (default 15)
  --profile               run the controller with --cpu-prof and summarise the initial sync,
                          idle and writes windows (the profile goes to
                          bench/results/controller.cpuprofile)
  --node-args=<flags>     extra node flags for the controller, for what-ifs, e.g.
                          --node-args=--max-semi-space-size=8 (recorded in the results)
  --controller-env <K=V>  an environment variable for the controller (repeatable), e.g.
                          SWITCHYARD_V8_FLAGS=applied (bin/switchyard.js then keeps V8's
                          default young generation)
  --prime-tokens          connect one subscriber per distinct token first, and the rest once
                          those hold a snapshot (with --tokens namespace: no TokenReview burst)
  --clear-what-ifs        drop the recorded what-if rows (a main run keeps them otherwise)
  --wait-quiet <s>        first wait up to this long for other work on the machine to drop
                          below 25 % of a core (default 0)
  --what-if <label>       a variant run: record a one-row summary under this label in the
                          results JSON (the main measurements stay) and in the docs'
                          What-ifs table; e.g. --what-if "semi-space 8 MB" --node-args ...
  --out <file>            results JSON (default bench/results/controller.json)
  --no-docs               do not write the Controller section of docs/benchmarks.md
`;

interface Flags {
  pools: number;
  endpoints: number;
  subscribers: number;
  namespaces: number;
  rounds: number;
  warmup: number;
  gapMs: number;
  bursts: number;
  burstSize: number;
  idleSeconds: number;
  reportEveryMs: number;
  tokens: 'per-subscriber' | 'per-namespace';
  timeoutMs: number;
  profile: boolean;
  nodeArgs: string[];
  controllerEnv: Record<string, string>;
  primeTokens: boolean;
  clearWhatIfs: boolean;
  waitQuietSeconds: number;
  whatIf: string | undefined;
  out: string;
  docs: boolean;
}

function parseFlags(): Flags {
  const { values } = parseArgs({
    allowNegative: true,
    options: {
      help: { type: 'boolean', short: 'h' },
      pools: { type: 'string', default: '200' },
      endpoints: { type: 'string', default: '20' },
      subscribers: { type: 'string', default: '500' },
      namespaces: { type: 'string', default: '4' },
      rounds: { type: 'string', default: '100' },
      warmup: { type: 'string', default: '5' },
      'gap-ms': { type: 'string', default: '200' },
      bursts: { type: 'string', default: '5' },
      'burst-size': { type: 'string', default: '20' },
      'idle-seconds': { type: 'string', default: '10' },
      'report-every': { type: 'string', default: '10' },
      tokens: { type: 'string', default: 'subscriber' },
      timeout: { type: 'string', default: '15' },
      profile: { type: 'boolean', default: false },
      'node-args': { type: 'string', default: '' },
      'controller-env': { type: 'string', multiple: true, default: [] },
      'prime-tokens': { type: 'boolean', default: false },
      'clear-what-ifs': { type: 'boolean', default: false },
      'wait-quiet': { type: 'string', default: '0' },
      'what-if': { type: 'string' },
      out: { type: 'string', default: join(REPO, 'bench/results/controller.json') },
      docs: { type: 'boolean', default: true },
    },
  });
  if (values.help) {
    process.stdout.write(HELP);
    process.exit(0);
  }
  const num = (name: string, value: string, min: number): number => {
    const n = Number(value);
    if (!Number.isFinite(n) || n < min) {
      process.stderr.write(`--${name}: expected a number ≥ ${min}, got ${value}\n`);
      process.exit(2);
    }
    return n;
  };
  const int = (name: string, value: string, min: number): number => {
    const n = num(name, value, min);
    if (!Number.isInteger(n)) {
      process.stderr.write(`--${name}: expected a whole number, got ${value}\n`);
      process.exit(2);
    }
    return n;
  };
  const endpoints = int('endpoints', values.endpoints, 1);
  const pools = int('pools', values.pools, 1);
  if (pools > maxPools(endpoints)) {
    process.stderr.write(
      `--pools: at most ${maxPools(endpoints)} pools of ${endpoints} endpoints fit in 10.200.0.0/16\n`,
    );
    process.exit(2);
  }
  if (values.tokens !== 'subscriber' && values.tokens !== 'namespace') {
    process.stderr.write('--tokens: subscriber or namespace\n');
    process.exit(2);
  }
  const namespaces = int('namespaces', values.namespaces, 1);
  return {
    pools,
    endpoints,
    subscribers: int('subscribers', values.subscribers, 1),
    namespaces: Math.min(namespaces, pools),
    rounds: int('rounds', values.rounds, 1),
    warmup: int('warmup', values.warmup, 0),
    gapMs: num('gap-ms', values['gap-ms'], 0),
    bursts: int('bursts', values.bursts, 0),
    burstSize: Math.min(int('burst-size', values['burst-size'], 1), pools),
    idleSeconds: num('idle-seconds', values['idle-seconds'], 0),
    reportEveryMs: num('report-every', values['report-every'], 0) * 1000,
    tokens: values.tokens === 'subscriber' ? 'per-subscriber' : 'per-namespace',
    timeoutMs: num('timeout', values.timeout, 1) * 1000,
    profile: values.profile,
    nodeArgs: values['node-args'].split(/\s+/).filter((a) => a !== ''),
    controllerEnv: Object.fromEntries(
      values['controller-env'].map((kv) => {
        const eq = kv.indexOf('=');
        if (eq <= 0) {
          process.stderr.write(`--controller-env: expected NAME=value, got ${kv}\n`);
          process.exit(2);
        }
        return [kv.slice(0, eq), kv.slice(eq + 1)];
      }),
    ),
    primeTokens: values['prime-tokens'],
    clearWhatIfs: values['clear-what-ifs'],
    waitQuietSeconds: num('wait-quiet', values['wait-quiet'], 0),
    whatIf: values['what-if'],
    out: values.out,
    docs: values.docs,
  };
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const log = (line: string): void => void process.stderr.write(`[bench:controller] ${line}\n`);

/** A seeded shuffle (mulberry32), so every run writes the pools in the same order. */
function shuffled<T>(items: readonly T[], seed: number): T[] {
  let a = seed >>> 0;
  const random = (): number => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

async function waitQuiet(seconds: number): Promise<void> {
  if (seconds <= 0) return;
  const deadline = performance.now() + seconds * 1000;
  for (;;) {
    const a = machineCpuSeconds();
    const selfA = cpuSeconds('self') ?? 0;
    await sleep(2_000);
    const b = machineCpuSeconds();
    const selfB = cpuSeconds('self') ?? 0;
    const busy = a === undefined || b === undefined ? 0 : (b.tasks - a.tasks - (selfB - selfA)) / 2;
    if (busy < 0.25) return;
    if (performance.now() > deadline) {
      log(`still ${Math.round(busy * 100)} % of a core busy elsewhere; measuring anyway`);
      return;
    }
    log(
      `waiting for the machine to quiet down (${Math.round(busy * 100)} % of a core busy elsewhere)`,
    );
  }
}

/** One measured write. */
interface WriteResult {
  pool: PoolFixture;
  change: Change;
  t0: number;
  ackMs: number;
  watchMs: number | undefined;
  /** ms after t0 at which each subscriber held the change (Infinity: not within the timeout). */
  arrivalsMs: number[];
  timedOut: boolean;
}

interface Pending {
  expected: string;
  t0: number;
  arrivals: Map<string, number>;
  need: number;
  resolve: () => void;
}

function latencyFigures(writes: readonly WriteResult[]): LatencyFigures {
  const last = writes.map((w) => (w.timedOut ? Infinity : Math.max(...w.arrivalsMs)));
  const byChange: Record<string, number[]> = {};
  writes.forEach((w, i) => (byChange[w.change] ??= []).push(last[i]!));
  const shares = writes.flatMap((w, i) =>
    w.watchMs === undefined || w.timedOut ? [] : [last[i]! - w.watchMs],
  );
  return {
    writes: writes.length,
    timeouts: writes.filter((w) => w.timedOut).length,
    writeAckMs: distribution(writes.map((w) => w.ackMs)),
    watchDeliveredMs: distribution(
      writes.flatMap((w) => (w.watchMs === undefined ? [] : [w.watchMs])),
    ),
    lastSubscriberMs: distribution(last),
    perSubscriberMs: distribution(writes.flatMap((w) => w.arrivalsMs)),
    controllerShareMs: distribution(shares),
    fanoutSpreadMs: distribution(
      writes.flatMap((w) =>
        w.timedOut ? [] : [Math.max(...w.arrivalsMs) - Math.min(...w.arrivalsMs)],
      ),
    ),
    byChange: Object.fromEntries(Object.entries(byChange).map(([k, v]) => [k, distribution(v)])),
  };
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

function gitCommit(): string {
  try {
    const sha = execFileSync('git', ['rev-parse', '--short', 'HEAD'], {
      cwd: REPO,
      encoding: 'utf8',
    }).trim();
    const dirty =
      execFileSync('git', ['status', '--porcelain'], { cwd: REPO, encoding: 'utf8' }).trim() !== '';
    return dirty ? `${sha} (with uncommitted changes)` : sha;
  } catch {
    return 'unknown';
  }
}

async function main(): Promise<void> {
  const flags = parseFlags();
  const started = performance.now();
  const hrtimeOffsetUs = Number(process.hrtime.bigint() / 1000n) - performance.now() * 1000;
  await waitQuiet(flags.waitQuietSeconds);
  const loadBefore = loadAverage();
  const dir = mkdtempSync(join(os.tmpdir(), 'switchyard-bench-controller-'));
  const profDir = join(dir, 'prof');
  let cluster: Cluster | undefined;
  let controller: RunningProcess | undefined;
  let api: Api | undefined;
  let watch: SliceWatch | undefined;
  let sampler: Sampler | undefined;
  const subscribers: Subscriber[] = [];
  // The harness kills its children on a normal exit; this also covers SIGINT/SIGTERM.
  const removeHook = onExit(() => {
    if (controller !== undefined) {
      try {
        process.kill(controller.pid, 'SIGKILL');
      } catch {
        // gone already
      }
    }
    rmSync(dir, { recursive: true, force: true });
  });

  try {
    // ---- cluster and objects --------------------------------------------------------------
    log('starting etcd and kube-apiserver');
    let t = performance.now();
    cluster = await startCluster();
    const clusterMs = performance.now() - t;
    const cl = cluster;
    await installInferencePoolCrd(cl);
    const children = childrenByName(['etcd', 'kube-apiserver']);
    sampler = new Sampler({
      apiServer: children.get('kube-apiserver'),
      etcd: children.get('etcd'),
    });
    api = new Api(cl);
    const namespaces = Array.from({ length: flags.namespaces }, (_, i) => `bench-${i}`);
    const pools = makePools(flags.pools, flags.endpoints, namespaces);
    log(
      `creating ${flags.pools} Services, EndpointSlices and InferencePools in ${flags.namespaces} namespaces`,
    );
    t = performance.now();
    // The CRD can take a moment to be served after Established.
    const a = api;
    await waitFor(
      'InferencePools to be served',
      async () => (await a.request('GET', `${paths.pools('default')}?limit=1`)).status === 200,
    );
    await createObjects(api, pools, namespaces);
    const objectsMs = performance.now() - t;

    // Subscriber i follows pool i mod pools.
    const poolOf = (i: number): PoolFixture => pools[i % pools.length]!;
    const perNamespace = new Map<string, number>();
    for (let i = 0; i < flags.subscribers; i++) {
      const ns = poolOf(i).namespace;
      perNamespace.set(ns, (perNamespace.get(ns) ?? 0) + 1);
    }
    log(
      `minting ${flags.tokens === 'per-subscriber' ? flags.subscribers : perNamespace.size} ServiceAccount tokens`,
    );
    t = performance.now();
    const tokens = new Map<string, string[]>();
    for (const [ns, count] of perNamespace)
      tokens.set(ns, await mintTokens(api, cl, ns, flags.tokens === 'per-subscriber' ? count : 1));
    const tokensMs = performance.now() - t;
    const used = new Map<string, number>();
    const tokenFor = (ns: string): string => {
      const list = tokens.get(ns)!;
      const n = used.get(ns) ?? 0;
      used.set(ns, n + 1);
      return list[n % list.length]!;
    };

    watch = new SliceWatch(cl);
    watch.start();
    const tls = makeTls(dir);
    const ca = readFileSync(tls.caFile, 'utf8');
    const controllerFlags = [
      '--listen',
      '127.0.0.1:0',
      '--admin',
      '127.0.0.1:0',
      '--lease-namespace',
      'switchyard',
      '--identity',
      'controller-0',
      // Nothing may connect to the bench's 10.200.x.x endpoints (controller-fixture.ts).
      '--load-scrape-every',
      '0',
    ];
    const args = [
      'controller',
      '--kubeconfig',
      cl.kubeconfigPath,
      '--tls-cert-file',
      tls.certFile,
      '--tls-key-file',
      tls.keyFile,
      ...controllerFlags,
    ];

    // ---- initial sync ---------------------------------------------------------------------
    const pending = new Map<number, Pending>();
    const onSnapshot = (s: Subscriber, at: number): void => {
      const p = pending.get(s.pool.index);
      if (p === undefined || s.key !== p.expected || p.arrivals.has(s.id)) return;
      p.arrivals.set(s.id, at - p.t0);
      if (p.arrivals.size === p.need) p.resolve();
    };
    await sleep(1_000); // a baseline sample before the controller exists
    log('starting the controller');
    const spawnAt = performance.now();
    const spawnDate = Date.now();
    mkdirSync(profDir, { recursive: true });
    controller = await startSwitchyard(args, {
      timeoutMs: 60_000,
      env: flags.controllerEnv,
      nodeArgs: [
        ...flags.nodeArgs,
        ...(flags.profile ? ['--cpu-prof', '--cpu-prof-dir', profDir] : []),
      ],
    });
    sampler.controllerPid = controller.pid;
    // The node flags the controller really runs with (bin/switchyard.js may add its own).
    const nodeFlags = (() => {
      try {
        const argv = readFileSync(`/proc/${controller.pid}/cmdline`, 'utf8').split('\0');
        const script = argv.findIndex((a) => a.endsWith('switchyard.js'));
        return argv.slice(1, script === -1 ? 1 : script).filter((a) => !a.includes('/'));
      } catch {
        return [];
      }
    })();
    // The controller's connections to the API server: every 100 ms while syncing, then every 1 s.
    const probe = new ConnectionProbe(controller.pid, Number(new URL(cl.server).port));
    probe.sample();
    probe.start(100);
    const listeningMs = performance.now() - spawnAt;
    const running = controller;
    const scrape = async (): Promise<Map<string, number>> =>
      parseMetrics(await (await fetch(`${running.adminUrl}/metrics`)).text());
    const memory: MemoryPoint[] = [];
    /** What the controller's RSS is made of now: /proc and its own heap metrics. */
    const memoryPoint = async (at: string): Promise<void> => {
      const metrics = await scrape();
      const mb = (name: string): number | null => {
        const v = metrics.get(`switchyard_controller_process_${name}`);
        return v === undefined ? null : Math.round((v / 2 ** 20) * 10) / 10;
      };
      const parts = rssParts(running.pid);
      const r1 = (v: number | undefined): number | null =>
        v === undefined ? null : Math.round(v * 10) / 10;
      memory.push({
        at,
        tSeconds: Math.round((performance.now() - spawnAt) / 100) / 10,
        rssMb: r1(memoryMb(running.pid)?.rss),
        anonMb: r1(parts?.anon),
        fileMb: r1(parts?.file),
        heapTotalMb: mb('nodejs_heap_size_total_bytes'),
        heapUsedMb: mb('nodejs_heap_size_used_bytes'),
        externalMb: mb('nodejs_external_memory_bytes'),
        streams: metrics.get('switchyard_controller_connected_sidecars') ?? null,
        heapSpacesMb: Object.fromEntries(
          [...metrics]
            .flatMap(([key, v]) => {
              const m =
                /^switchyard_controller_process_nodejs_heap_space_size_(total|used)_bytes\{space="([^"]+)"\}$/.exec(
                  key,
                );
              return m === null ? [] : [[`${m[2]} ${m[1]}`, Math.round((v / 2 ** 20) * 10) / 10]];
            })
            .sort(),
        ) as Record<string, number>,
      });
    };
    await memoryPoint('listening, no subscriber yet');
    for (let i = 0; i < flags.subscribers; i++) {
      const pool = poolOf(i);
      const s = new Subscriber({
        index: i,
        pool,
        token: tokenFor(pool.namespace),
        baseUrl: controller.url,
        ca,
        reportEveryMs: flags.reportEveryMs,
        onSnapshot,
      });
      subscribers.push(s);
    }
    if (flags.primeTokens) {
      // One subscriber per distinct token first, until it holds a snapshot: the controller's
      // token cache then answers every later connection without a TokenReview.
      const seen = new Set<string>();
      const primers = subscribers.filter((s) => !seen.has(s.token) && seen.add(s.token));
      log(`priming the controller's token cache with ${primers.length} subscribers`);
      for (const s of primers) s.start();
      await waitFor(
        'the priming subscribers to hold a first snapshot',
        () => primers.every((s) => s.firstSnapshotAt !== undefined),
        { timeoutMs: 120_000, intervalMs: 20 },
      );
      for (const s of subscribers) if (!primers.includes(s)) s.start();
    } else for (const s of subscribers) s.start();
    log(`${flags.subscribers} subscribers connecting to ${controller.url}`);
    await waitFor(
      'every subscriber to hold a first snapshot',
      () => subscribers.every((s) => s.firstSnapshotAt !== undefined),
      { timeoutMs: 120_000, intervalMs: 20 },
    );
    const syncedAt = Math.max(...subscribers.map((s) => s.firstSnapshotAt!));
    const cachesSynced = controller
      .output()
      .split('\n')
      .flatMap((line) => {
        if (!line.includes('caches synced')) return [];
        try {
          return [(JSON.parse(line) as { time: number }).time - spawnDate];
        } catch {
          return [];
        }
      })[0];
    const refusalsAtSync: Record<string, number> = {};
    for (const s of subscribers)
      for (const [k, v] of Object.entries(s.refusals))
        refusalsAtSync[k] = (refusalsAtSync[k] ?? 0) + v;
    log(`initial sync: ${Math.round(syncedAt - spawnAt)} ms`);
    await memoryPoint('initial sync done');

    // ---- idle -----------------------------------------------------------------------------
    await sleep(2_000);
    probe.sample();
    const syncConnections = { opened: probe.seen.size, maxOpen: probe.maxOpen };
    probe.start(1_000);
    const idleFrom = performance.now();
    await sleep(flags.idleSeconds * 1000);
    sampler.sample();
    const idleTo = performance.now();
    await memoryPoint('after the idle window');

    // ---- writes ---------------------------------------------------------------------------
    const subscribersOf = new Map<number, number>();
    for (let i = 0; i < flags.subscribers; i++) {
      const idx = poolOf(i).index;
      subscribersOf.set(idx, (subscribersOf.get(idx) ?? 0) + 1);
    }
    const order = shuffled(
      pools.filter((p) => subscribersOf.has(p.index)),
      42,
    );
    let cursor = 0;
    const nextPool = (): PoolFixture => order[cursor++ % order.length]!;
    const burstSize = Math.min(flags.burstSize, order.length);
    const w = watch;

    // Alternate the kind of change over all writes, so each kind is measured about as often.
    let writesMade = 0;
    const write = async (pool: PoolFixture): Promise<WriteResult> => {
      const change = mutate(pool, writesMade++ % 2 === 0 ? 'readiness' : 'address');
      let resolve!: () => void;
      const done = new Promise<void>((r) => (resolve = r));
      const p: Pending = {
        expected: expectedKey(pool),
        t0: 0,
        arrivals: new Map(),
        need: subscribersOf.get(pool.index) ?? 0,
        resolve,
      };
      pending.set(pool.index, p);
      p.t0 = performance.now();
      const res = await a.request<{ metadata?: { resourceVersion?: string } }>(
        'PUT',
        `${paths.slices(pool.namespace)}/${pool.slice}`,
        sliceObject(pool),
      );
      const ackMs = performance.now() - p.t0;
      if (res.status !== 200) throw new Error(`PUT ${pool.slice}: HTTP ${res.status}: ${res.text}`);
      let timer: NodeJS.Timeout | undefined;
      const timedOut = await Promise.race([
        done.then(() => false),
        new Promise<boolean>((r) => (timer = setTimeout(() => r(true), flags.timeoutMs))),
      ]);
      clearTimeout(timer);
      pending.delete(pool.index);
      const rv = res.body.metadata?.resourceVersion ?? '';
      let watchAt = w.deliveredAt(pool.namespace, pool.slice, rv);
      if (watchAt === undefined) {
        await sleep(100);
        watchAt = w.deliveredAt(pool.namespace, pool.slice, rv);
      }
      const arrivalsMs = [...p.arrivals.values()];
      while (arrivalsMs.length < p.need) arrivalsMs.push(Infinity);
      return {
        pool,
        change,
        t0: p.t0,
        ackMs,
        watchMs: watchAt === undefined ? undefined : watchAt - p.t0,
        arrivalsMs,
        timedOut,
      };
    };

    log(`${flags.warmup} warm-up writes, then ${flags.rounds} measured, one at a time`);
    for (let i = 0; i < flags.warmup; i++) {
      await write(nextPool());
      await sleep(flags.gapMs);
    }
    const before = await scrape();
    const seqFrom = performance.now();
    const sequential: WriteResult[] = [];
    for (let i = 0; i < flags.rounds; i++) {
      sequential.push(await write(nextPool()));
      await sleep(flags.gapMs);
    }
    sampler.sample();
    const seqTo = performance.now();
    const afterSeq = await scrape();

    const burstGapMs = Math.max(1_000, flags.gapMs);
    const burstWrites: WriteResult[] = [];
    const burstComplete: number[] = [];
    let burstFrom = performance.now();
    if (flags.bursts > 0) {
      log(`1 warm-up burst, then ${flags.bursts} measured bursts of ${burstSize} writes at once`);
      const burst = (): Promise<WriteResult[]> =>
        Promise.all(Array.from({ length: burstSize }, () => nextPool()).map(write));
      await burst();
      await sleep(burstGapMs);
      burstFrom = performance.now();
      for (let i = 0; i < flags.bursts; i++) {
        const results = await burst();
        burstWrites.push(...results);
        const first = Math.min(...results.map((r) => r.t0));
        const last = Math.max(...results.map((r) => r.t0 + Math.max(...r.arrivalsMs)));
        burstComplete.push(last - first);
        await sleep(burstGapMs);
      }
    }
    sampler.sample();
    const burstTo = performance.now();
    const after = await scrape();
    const endMemory = memoryMb(controller.pid);
    probe.sample();
    probe.stop();
    await memoryPoint('after the writes');

    // ---- stop -----------------------------------------------------------------------------
    const subscriberStats = {
      connects: subscribers.reduce((n, s) => n + s.connects, 0),
      drops: subscribers.reduce((n, s) => n + s.drops, 0),
      snapshots: subscribers.reduce((n, s) => n + s.snapshots, 0),
      reports: {
        sent: subscribers.reduce((n, s) => n + s.reports.sent, 0),
        ok: subscribers.reduce((n, s) => n + s.reports.ok, 0),
        failed: subscribers.reduce((n, s) => n + s.reports.failed, 0),
      },
      refusals: {} as Record<string, number>,
    };
    for (const s of subscribers)
      for (const [k, v] of Object.entries(s.refusals))
        subscriberStats.refusals[k] = (subscriberStats.refusals[k] ?? 0) + v;
    for (const s of subscribers) s.close();
    log('stopping the controller');
    await controller.stop(15_000);
    const sliceWatchRestarts = watch.restarts;

    const profiles: ProfileSummary[] = [];
    if (flags.profile) {
      const file = readdirSync(profDir).find((f) => f.endsWith('.cpuprofile'));
      if (file !== undefined) {
        const kept = join(dirname(flags.out), 'controller.cpuprofile');
        mkdirSync(dirname(kept), { recursive: true });
        copyFileSync(join(profDir, file), kept);
        // performance.now() and V8's profile clock are both the monotonic clock (µs in profiles).
        const us = (ms: number): number => Math.round(ms * 1000 + hrtimeOffsetUs);
        profiles.push(
          summariseProfile(kept, REPO, {
            fromUs: us(spawnAt),
            toUs: us(syncedAt),
            label: `start → initial sync (${flags.subscribers} subscribers connecting)`,
          }),
          summariseProfile(kept, REPO, {
            fromUs: us(idleFrom),
            toUs: us(idleTo),
            label: 'idle (streams open, reports only)',
          }),
          summariseProfile(kept, REPO, {
            fromUs: us(seqFrom),
            toUs: us(burstTo),
            label: 'the measured writes (one at a time and bursts)',
          }),
        );
      } else log('no CPU profile was written');
    }

    // ---- results --------------------------------------------------------------------------
    const win = (from: number, to: number): WindowStats => sampler!.window(from, to);
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
    mkdirSync(dirname(flags.out), { recursive: true });
    let previous: Results | undefined;
    try {
      previous = JSON.parse(readFileSync(flags.out, 'utf8')) as Results;
    } catch {
      // no earlier results
    }
    // A what-if run adds one summary row to the stored results; a main run replaces the main
    // measurements and keeps the what-if rows (each names its own date and commit).
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
      await writeDocs(join(REPO, 'docs/benchmarks.md'), renderMarkdown(stored));
    log(
      `wrote ${flags.out}${flags.docs ? ' and the Controller section of docs/benchmarks.md' : ''}`,
    );
  } finally {
    for (const s of subscribers) s.close();
    await controller?.stop(5_000).catch(() => undefined);
    watch?.stop();
    api?.close();
    sampler?.stop();
    await cluster?.stop();
    removeHook();
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
