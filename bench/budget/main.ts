/**
 * `npm run bench:budget` (issue 43): do token budgets hold across a fleet of sidecars?
 *
 * 16 sidecars of one pool (`chat`, backends: 4 `switchyard sim` processes on loopback, as URL
 * backends), 3 workloads told apart by the `x-team` header, each with its own tokensPerMinute
 * budget: `a` offers half of its budget, `b` and `c` twice theirs. Each workload's traffic goes to
 * 4 of the 16 sidecars, drawn again every 10 s (`--shift-every`), so the demand moves between sidecars and the
 * shares must follow it. Two modes, one after the other:
 *
 * - `split`: the sidecars are fed by a real controller on a real kube-apiserver + etcd
 *   (harness/k8s), each with a ServiceAccount token bound to its own app pod, and enforce the
 *   shares the controller sends (re-split from what they report using and wanting);
 * - `standalone`: the same 16 sidecars on a pool file, each enforcing every budget whole — what a
 *   fleet without the split holds (up to 16 × the budget, here capped by the demand at 2 ×).
 *
 * Per workload, per calendar minute of each run and over the busiest sliding 60 s: tokens served
 * (prompt + completion, from every response's usage) and refusals. Writes bench/results/budget.json
 * (or --out). `--minutes` shortens a run (the committed one is 5).
 */
import http from 'node:http';
import { agentFor, closeReplayAgents } from '../routing/replay.ts';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import { stringify } from 'yaml';
import { startCluster, waitFor, type Cluster } from '../../harness/k8s/cluster.ts';
import { installInferencePoolCrd } from '../../harness/k8s/crd.ts';
import {
  controllerSidecarArgs,
  startSidecar,
  startSwitchyard,
  stopAll,
  type RunningProcess,
} from '../../harness/processes.ts';
import { mulberry32 } from '../../lib/rng.ts';
import { stderrLog } from '../common/log.ts';
import { startFleet, type SimFleet } from '../routing/backends.ts';
import { pseudoText } from '../routing/prompt.ts';
import { BASE_BACKEND } from '../routing/scenarios.ts';
import {
  budgetFigures,
  budgetTargets,
  type BudgetRecord,
  type WorkloadFigures,
  type WorkloadSpec,
} from './analysis.ts';

const log = stderrLog('[bench:budget] ');
const MODEL = 'bench-model';
const NS = 'apps';
const POOL = 'chat';
const HEADER = 'x-team';
const SIDECARS_PER_WORKLOAD = 4;
const MAX_QUEUE_WAIT = '10s';
const PROMPT_CHARS = 600;
const ANSWER_TOKENS = 100;
/** One streamed request in four (asking for usage), the rest plain JSON. */
const STREAM_EVERY = 4;

/** The workloads: budgets and what each offers (tokens per minute). */
export const WORKLOADS: readonly WorkloadSpec[] = [
  { name: 'a', tokensPerMinute: 30_000, demandTokensPerMinute: 15_000 },
  { name: 'b', tokensPerMinute: 60_000, demandTokensPerMinute: 120_000 },
  { name: 'c', tokensPerMinute: 90_000, demandTokensPerMinute: 180_000 },
];

type Mode = 'split' | 'standalone';

interface Flags {
  minutes: number;
  sidecars: number;
  backends: number;
  modes: Mode[];
  speed: number;
  seed: number;
  /** How often each workload's sidecars are drawn again, ms (0: never, the first draw stays). */
  shiftEveryMs: number;
  out: string;
  /** Where to write the shares over time (every sidecar's /debug/flow every 250 ms), if asked. */
  trace: string | undefined;
}

function parseFlags(): Flags {
  const { values } = parseArgs({
    options: {
      minutes: { type: 'string', default: '5' },
      sidecars: { type: 'string', default: '16' },
      backends: { type: 'string', default: '4' },
      modes: { type: 'string', default: 'split,standalone' },
      speed: { type: 'string', default: '10' },
      seed: { type: 'string', default: '1' },
      'shift-every': { type: 'string', default: '10' },
      out: {
        type: 'string',
        default: join(import.meta.dirname, '../results/budget.json'),
      },
      trace: { type: 'string' },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) {
    process.stdout.write(
      "npm run bench:budget -- [--minutes 5] [--sidecars 16] [--backends 4] [--modes split,standalone] [--speed 10] [--seed 1] [--shift-every 10 (seconds; 0: the demand never moves)] [--out bench/results/budget.json] [--trace shares.json (each sidecar's shares and queue every 250 ms)]\n",
    );
    process.exit(0);
  }
  const num = (name: string, v: string | undefined): number => {
    const n = Number(v);
    if (!Number.isFinite(n) || n <= 0) {
      process.stderr.write(`bench:budget: --${name} wants a number > 0, got ${v}\n`);
      process.exit(2);
    }
    return n;
  };
  const modes = values.modes.split(',').map((m) => m.trim());
  for (const m of modes)
    if (m !== 'split' && m !== 'standalone') {
      process.stderr.write(`bench:budget: --modes takes split and/or standalone, got ${m}\n`);
      process.exit(2);
    }
  return {
    minutes: num('minutes', values.minutes),
    sidecars: Math.round(num('sidecars', values.sidecars)),
    backends: Math.round(num('backends', values.backends)),
    modes: modes as Mode[],
    speed: num('speed', values.speed),
    seed: Math.round(num('seed', values.seed)),
    shiftEveryMs: shiftEvery(values['shift-every']),
    out: values.out,
    trace: values.trace,
  };
}

function shiftEvery(v: string | undefined): number {
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0) {
    process.stderr.write(`bench:budget: --shift-every wants seconds >= 0, got ${v}\n`);
    process.exit(2);
  }
  return n * 1000;
}

/** The pool's spec: the simulators as one URL backend, flow control with the three budgets. */
function poolSpec(urls: readonly string[]): Record<string, unknown> {
  return {
    backends: [{ name: 'sims', urls: urls.map((u) => `${u}/v1`) }],
    affinity: { key: 'None' },
    flowControl: {
      maxQueueWait: MAX_QUEUE_WAIT,
      workload: { header: HEADER },
      budgets: WORKLOADS.map((w) => ({ workload: w.name, tokensPerMinute: w.tokensPerMinute })),
    },
  };
}

interface Fleet {
  urls: string[];
  adminUrls: string[];
  stop(): Promise<void>;
  describe: string;
}

/** 16 sidecars on a pool file: each enforces every budget whole. */
async function standaloneFleet(flags: Flags, sims: SimFleet, dir: string): Promise<Fleet> {
  const file = join(dir, 'pool.yaml');
  writeFileSync(
    file,
    stringify({
      apiVersion: 'switchyard.dev/v1alpha1',
      kind: 'InferencePool',
      metadata: { name: POOL },
      spec: poolSpec(sims.urls),
    }),
  );
  const sidecars: RunningProcess[] = [];
  try {
    for (let i = 0; i < flags.sidecars; i++)
      sidecars.push(await startSidecar(file, ['--log-level', 'warn']));
  } catch (err) {
    await stopAll(sidecars);
    throw err;
  }
  return {
    urls: sidecars.map((s) => s.url),
    adminUrls: sidecars.map((s) => s.adminUrl ?? ''),
    stop: () => stopAll(sidecars),
    describe: `${flags.sidecars} standalone sidecars on one pool file, each enforcing every budget whole`,
  };
}

/**
 * A real API server, the pool as an InferencePool, a controller, and 16 sidecars fed by it, each
 * with a token bound to its own app pod (as injection deploys them).
 */
async function splitFleet(flags: Flags, sims: SimFleet, dir: string): Promise<Fleet> {
  log('starting etcd and kube-apiserver');
  const cluster: Cluster = await startCluster();
  const processes: RunningProcess[] = [];
  try {
    await installInferencePoolCrd(cluster);
    for (const name of [NS, 'switchyard'])
      await cluster.request('POST', '/api/v1/namespaces', {
        apiVersion: 'v1',
        kind: 'Namespace',
        metadata: { name },
      });
    await waitFor(
      'InferencePools to be served',
      async () =>
        (
          await cluster.request(
            'GET',
            `/apis/switchyard.dev/v1alpha1/namespaces/${NS}/inferencepools?limit=1`,
          )
        ).status === 200,
    );
    await cluster.applyYaml(
      stringify({
        apiVersion: 'switchyard.dev/v1alpha1',
        kind: 'InferencePool',
        metadata: { name: POOL, namespace: NS },
        spec: poolSpec(sims.urls),
      }),
    );
    log('starting the controller');
    const controller = await startSwitchyard([
      'controller',
      '--kubeconfig',
      cluster.kubeconfigPath,
      '--insecure-http',
      '--listen',
      '127.0.0.1:0',
      '--admin',
      '127.0.0.1:0',
      '--lease-namespace',
      'switchyard',
      '--identity',
      'controller-0',
      '--log-level',
      'warn',
    ]);
    processes.push(controller);
    log(`starting ${flags.sidecars} sidecars, each with a token bound to its app pod`);
    for (let i = 0; i < flags.sidecars; i++) {
      const pod = `app-${i}`;
      const res = await cluster.request('POST', `/api/v1/namespaces/${NS}/pods`, {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name: pod, labels: { 'switchyard.dev/pool': POOL } },
        spec: { serviceAccountName: 'default', containers: [{ name: 'app', image: 'app' }] },
      });
      if (res.status !== 201) throw new Error(`creating pod ${pod}: ${res.status}`);
      const token = await cluster.createServiceAccountToken(NS, 'default', {
        audience: 'switchyard',
        boundPod: pod,
      });
      const tokenFile = join(dir, `${pod}.token`);
      writeFileSync(tokenFile, token.token);
      const sidecar = await startSwitchyard([
        ...controllerSidecarArgs({
          controllerUrl: controller.url,
          pool: POOL,
          namespace: NS,
          tokenFile,
          sidecarId: pod,
        }),
        '--log-level',
        'warn',
      ]);
      processes.push(sidecar);
    }
    const sidecars = processes.slice(1);
    await waitFor(
      'every sidecar to hold the controller’s snapshot (/startupz)',
      async () => {
        const codes = await Promise.all(
          sidecars.map(async (s) => {
            const r = await fetch(`${s.adminUrl}/startupz`);
            await r.body?.cancel();
            return r.status;
          }),
        );
        return codes.every((c) => c === 200);
      },
      { timeoutMs: 60_000, intervalMs: 200 },
    );
    return {
      urls: sidecars.map((s) => s.url),
      adminUrls: sidecars.map((s) => s.adminUrl ?? ''),
      stop: async () => {
        await stopAll(processes);
        await cluster.stop();
      },
      describe: `${flags.sidecars} sidecars fed by one controller on a real kube-apiserver + etcd, tokens bound to their pods`,
    };
  } catch (err) {
    await stopAll(processes);
    await cluster.stop();
    throw err;
  }
}

interface Answer {
  status: number;
  code: string | undefined;
  tokens: number;
}

/** One chat request; its tokens from the body's usage (JSON, or the stream's usage chunk). */
function chat(baseUrl: string, payload: Buffer, team: string): Promise<Answer> {
  const url = new URL(`${baseUrl}/v1/chat/completions`);
  return new Promise((resolve) => {
    const req = http.request(
      {
        host: url.hostname,
        port: url.port,
        path: url.pathname,
        method: 'POST',
        agent: agentFor(baseUrl),
        headers: {
          'content-type': 'application/json',
          'content-length': payload.length,
          [HEADER]: team,
        },
        timeout: 120_000,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const status = res.statusCode ?? 0;
          const text = Buffer.concat(chunks).toString('utf8');
          resolve({ status, code: errorCode(text), tokens: usageTokens(text) });
        });
        res.on('error', () => resolve({ status: 0, code: undefined, tokens: 0 }));
      },
    );
    req.on('timeout', () => req.destroy(new Error('client timeout')));
    req.on('error', () => resolve({ status: 0, code: undefined, tokens: 0 }));
    req.end(payload);
  });
}

/** prompt + completion tokens of the last `usage` object in a JSON body or an SSE stream. */
export function usageTokens(text: string): number {
  const bodies = text.trimStart().startsWith('{')
    ? [text]
    : text
        .split('\n')
        .filter((l) => l.startsWith('data:') && !l.includes('[DONE]'))
        .map((l) => l.slice(5));
  let tokens = 0;
  for (const body of bodies) {
    try {
      const u = (
        JSON.parse(body) as {
          usage?: { prompt_tokens?: number; completion_tokens?: number } | null;
        }
      ).usage;
      if (u !== undefined && u !== null)
        tokens = (u.prompt_tokens ?? 0) + (u.completion_tokens ?? 0);
    } catch {
      // not JSON: no usage there
    }
  }
  return tokens;
}

function errorCode(text: string): string | undefined {
  try {
    return (JSON.parse(text) as { error?: { code?: string } }).error?.code ?? undefined;
  } catch {
    return undefined;
  }
}

function payload(i: number, stream: boolean): Buffer {
  return Buffer.from(
    JSON.stringify({
      model: MODEL,
      max_tokens: ANSWER_TOKENS,
      messages: [{ role: 'user', content: pseudoText(i, PROMPT_CHARS) }],
      ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
    }),
  );
}

/** Tokens one request costs (prompt + completion as the simulators count them). */
async function tokensPerRequest(sims: SimFleet): Promise<number> {
  const res = await chat(sims.urls[0]!, payload(0, false), 'calibration');
  if (res.status !== 200 || res.tokens === 0)
    throw new Error(`calibration request to ${sims.urls[0]} answered ${res.status}`);
  return res.tokens;
}

/** Which sidecars carry each workload's traffic in each 10 s period: 4 of them, redrawn. */
export function sidecarsFor(
  workload: number,
  period: number,
  sidecars: number,
  seed: number,
): number[] {
  const rng = mulberry32((seed * 1_000_003 + period * 97 + workload * 7919) >>> 0);
  const order = Array.from({ length: sidecars }, (_, i) => i);
  for (let i = order.length - 1; i > 0; i--) {
    const j = Math.floor(rng() * (i + 1));
    [order[i], order[j]] = [order[j]!, order[i]!];
  }
  return order.slice(0, Math.min(SIDECARS_PER_WORKLOAD, sidecars));
}

/** Open-loop Poisson traffic of every workload for `minutes`; every request's outcome. */
async function drive(
  urls: readonly string[],
  flags: Flags,
  perRequest: number,
): Promise<BudgetRecord[]> {
  const start = performance.now();
  const endAt = start + flags.minutes * 60_000;
  const records: BudgetRecord[] = [];
  const pending: Promise<void>[] = [];
  let n = 0;
  const loop = async (w: WorkloadSpec, wi: number): Promise<void> => {
    const rng = mulberry32((flags.seed * 31 + wi) >>> 0);
    const meanGapMs = 60_000 / (w.demandTokensPerMinute / perRequest);
    let due = start;
    for (;;) {
      due += -Math.log(1 - rng()) * meanGapMs;
      if (due >= endAt) return;
      const wait = due - performance.now();
      if (wait > 1) await new Promise((r) => setTimeout(r, wait));
      const at = performance.now() - start;
      const period = flags.shiftEveryMs > 0 ? Math.floor(at / flags.shiftEveryMs) : 0;
      const set = sidecarsFor(wi, period, urls.length, flags.seed);
      const url = urls[set[Math.floor(rng() * set.length)]!]!;
      const i = n++;
      pending.push(
        chat(url, payload(i + 1, i % STREAM_EVERY === 0), w.name).then((a) => {
          records.push({
            workload: w.name,
            sentAtMs: at,
            endedAtMs: performance.now() - start,
            status: a.status,
            code: a.code,
            tokens: a.status >= 200 && a.status < 300 ? a.tokens : 0,
          });
        }),
      );
    }
  };
  const progress = setInterval(() => {
    const s = ((performance.now() - start) / 1000).toFixed(0);
    const served = records.filter((r) => r.status === 200).length;
    const refused = records.filter((r) => r.status === 429).length;
    log(`  ${s} s: ${records.length} answered (${served} served, ${refused} refused)`);
  }, 30_000);
  try {
    await Promise.all(WORKLOADS.map((w, i) => loop(w, i)));
    await Promise.all(pending);
  } finally {
    clearInterval(progress);
  }
  return records;
}

/** One sample of one sidecar's flow state (`--trace`): its queue and its share of each budget. */
interface ShareSample {
  /** ms since the traffic started. */
  t: number;
  sidecar: number;
  queue: number;
  /** Tokens per minute by budget id; null before the first share. */
  shares: Record<string, number | null>;
}

/** Polls every sidecar's /debug/flow every 250 ms until stopped: what the shares did over time. */
function traceShares(adminUrls: readonly string[]): { stop(): Promise<ShareSample[]> } {
  const start = performance.now();
  const samples: ShareSample[] = [];
  let busy: Promise<unknown> = Promise.resolve();
  const poll = (): void => {
    const t = Math.round(performance.now() - start);
    busy = Promise.all(
      adminUrls.map(async (admin, sidecar) => {
        try {
          const res = await fetch(`${admin}/debug/flow`);
          const body = (await res.json()) as {
            pools?: {
              queue?: { requests?: number };
              budgets?: { id: string; share: { tokensPerMinute?: number } }[];
            }[];
          };
          const flow = body.pools?.[0] ?? {};
          samples.push({
            t,
            sidecar,
            queue: flow.queue?.requests ?? 0,
            shares: Object.fromEntries(
              (flow.budgets ?? []).map((b) => [b.id, b.share.tokensPerMinute ?? null]),
            ),
          });
        } catch {
          // a missed sample: the next one comes in 250 ms
        }
      }),
    );
  };
  const timer = setInterval(poll, 250);
  return {
    async stop() {
      clearInterval(timer);
      await busy;
      return samples;
    },
  };
}

interface ModeResult {
  mode: Mode;
  describe: string;
  figures: WorkloadFigures[];
  targets: ReturnType<typeof budgetTargets>;
  /** Every workload's tokens over the whole run, per minute on average, and × its budget. */
  totals: { name: string; tokensPerMinute: number; ofBudget: number }[];
  requests: number;
  wallS: number;
}

async function runMode(
  mode: Mode,
  flags: Flags,
  sims: SimFleet,
  perRequest: number,
): Promise<ModeResult> {
  const dir = mkdtempSync(join(tmpdir(), `switchyard-bench-budget-${mode}-`));
  const t = performance.now();
  try {
    const fleet =
      mode === 'split'
        ? await splitFleet(flags, sims, dir)
        : await standaloneFleet(flags, sims, dir);
    let records: BudgetRecord[];
    try {
      log(`${mode}: ${fleet.describe}; ${flags.minutes} min of traffic`);
      const tracer = flags.trace === undefined ? undefined : traceShares(fleet.adminUrls);
      try {
        records = await drive(fleet.urls, flags, perRequest);
      } finally {
        if (tracer !== undefined && flags.trace !== undefined) {
          const file = flags.trace.replace(/(\.json)?$/, `-${mode}.json`);
          writeFileSync(file, JSON.stringify(await tracer.stop()) + '\n');
          log(`${mode}: shares over time in ${file}`);
        }
      }
    } finally {
      closeReplayAgents();
      await fleet.stop();
    }
    await sims.idle();
    const minutes = Math.floor(flags.minutes);
    const figures = budgetFigures(records, WORKLOADS, Math.max(1, minutes));
    const targets = budgetTargets(figures);
    const totals = figures.map((f) => {
      const tokens = f.minutes.reduce((s, m) => s + m.tokens, 0) / Math.max(1, minutes);
      return { name: f.name, tokensPerMinute: tokens, ofBudget: tokens / f.tokensPerMinute };
    });
    for (const f of figures)
      log(
        `${mode} ${f.name} (budget ${f.tokensPerMinute}/min, demand ${f.demandTokensPerMinute}/min): minutes ${f.minutes.map((m) => `${(m.ofBudget * 100).toFixed(1)} %`).join(' ')}, sliding max ${(f.slidingMax.ofBudget * 100).toFixed(1)} %, refused ${f.refusedTotal}`,
      );
    for (const tg of targets)
      log(`${mode} target ${tg.name}: ${tg.met ? 'met' : 'NOT met'} (${tg.detail})`);
    return {
      mode,
      describe: fleet.describe,
      figures,
      targets,
      totals,
      requests: records.length,
      wallS: (performance.now() - t) / 1000,
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const flags = parseFlags();
  const started = performance.now();
  log(`starting ${flags.backends} simulators`);
  const sims = await startFleet(flags.backends);
  const modes: Partial<Record<Mode, ModeResult>> = {};
  let perRequest = 0;
  try {
    await sims.configure(
      Array.from({ length: flags.backends }, (_, i) => ({
        name: `b${i}`,
        sim: { ...BASE_BACKEND, name: `b${i}`, blockTokens: 16 },
        costPerMTok: 1,
      })),
      flags.speed,
      flags.seed,
      MODEL,
    );
    perRequest = await tokensPerRequest(sims);
    log(
      `a request costs ${perRequest} tokens; offered ${WORKLOADS.map((w) => `${w.name} ${(w.demandTokensPerMinute / perRequest).toFixed(0)} req/min`).join(', ')}`,
    );
    for (const mode of flags.modes) modes[mode] = await runMode(mode, flags, sims, perRequest);
  } finally {
    await sims.stop();
  }
  const results = {
    settings: {
      ...flags,
      out: undefined,
      trace: undefined,
      header: HEADER,
      sidecarsPerWorkload: SIDECARS_PER_WORKLOAD,
      maxQueueWait: MAX_QUEUE_WAIT,
      promptChars: PROMPT_CHARS,
      answerTokens: ANSWER_TOKENS,
      streamedShare: 1 / STREAM_EVERY,
      tokensPerRequest: perRequest,
    },
    workloads: WORKLOADS,
    modes,
    machine: { cpus: availableParallelism(), node: process.version },
    durationS: (performance.now() - started) / 1000,
  };
  mkdirSync(dirname(flags.out), { recursive: true });
  writeFileSync(flags.out, JSON.stringify(results, null, 2) + '\n');
  log(`wrote ${flags.out} in ${results.durationS.toFixed(0)} s`);
}

if (import.meta.main) {
  for (const signal of ['SIGINT', 'SIGTERM'] as const)
    process.once(signal, () => {
      log(`${signal}: stopping`);
      process.exit(130);
    });
  await main();
}
