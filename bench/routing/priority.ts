/**
 * `switchyard bench --scenario priority` (issue 43): interactive chat beside a batch flood on
 * saturated servers, through switchyard with and without flow control, least-connections and the
 * LLM-aware peers (docs/benchmarks.md#priority). Its own runner, not the trace replay: two
 * classes of clients run at once for a fixed wall-clock window.
 *
 * Capacity (simulated time): K servers × 6 slots, decode 10 ms/token slowing to 15 ms/token
 * when every slot is busy (BASE_BACKEND, loadSlowdown 0.5) = 400 completion tokens/s per server
 * at full load, 3,200 for 8. The offered load is 150 % of it: interactive ≈ 25 % (lanes that
 * each run conversations of 6 turns of ~60-token answers with a 2 s think time between turns),
 * batch 125 % (open-loop Poisson arrivals of 400-token answers: 0.125 × 3,200 × 1.25 / 400 per
 * server-second... see PRIORITY_WORKLOAD). Prefill is cheap (20k tokens/s) and left out.
 *
 * Interactive requests carry `x-switchyard-priority: 10`, batch `x-switchyard-priority: -1`.
 * A batch client that gets a 429 waits its Retry-After (capped) and tries again, up to a bound,
 * as a batch job would: the flood stays on.
 */
import http from 'node:http';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { availableParallelism } from 'node:os';
import { machineCpuSeconds } from '../../harness/proc.ts';
import { mulberry32 } from '../../lib/rng.ts';
import { startFleet, type SimFleet } from './backends.ts';
import { conversationWorkload, turnMessages, type Conversation } from './conversations.ts';
import { quantiles, type Quantiles } from './metrics.ts';
import { BENCH_CLIENT_KEY, type PolicyDefinition, type RouterSet } from './policy-definition.ts';
import { pseudoText } from './prompt.ts';
import { agentFor, chatPayload, closeReplayAgents } from './replay.ts';
import { POLICIES } from './routers.ts';
import { BASE_BACKEND, type BackendSpec } from './scenarios.ts';
import type { LoadSource } from '../../lib/bench-names.ts';

const MODEL = 'bench-model';
const CHARS_PER_TOKEN = 4;
export const PRIORITY_HEADER = 'x-switchyard-priority';

/** The workload, in simulated time; rates scale with the number of backends. */
export const PRIORITY_WORKLOAD = {
  /** Completion tokens/s one server produces with every slot busy: 6 slots / 15 ms per token. */
  serverTokensPerS: (BASE_BACKEND.slots! * 1000) / (BASE_BACKEND.decodeMsPerToken! * 1.5),
  /** Offered load as a fraction of capacity. */
  offered: 1.5,
  /** The interactive part of the offered load (the rest is batch). */
  interactiveShare: 0.25 / 1.5,
  interactive: {
    priority: 10,
    turns: 6,
    thinkMs: 2000,
    answerTokens: 60,
    systemChars: 270,
    userChars: 200,
  },
  batch: {
    priority: -1,
    /**
     * Batch jobs take whole answers (no one reads them token by token), so their requests do not
     * stream: until its answer comes back one may be preempted for chat (flowControl.saturation
     * .preemptSheddable). Streamed until 2026-12-07 (the figures before say so).
     */
    stream: false,
    answerTokens: 400,
    promptChars: 1000,
    /** Attempts per batch request (the first included) before the job gives it up. */
    maxAttempts: 8,
    /** Longest Retry-After honoured, wall ms. */
    maxRetryAfterMs: 5000,
  },
} as const;

/** The arithmetic of the load, for the report. */
export function priorityLoad(backends: number): {
  capacityTokensPerS: number;
  interactiveTokensPerS: number;
  batchTokensPerS: number;
  batchRequestsPerS: number;
  interactiveLanes: number;
} {
  const w = PRIORITY_WORKLOAD;
  const capacity = backends * w.serverTokensPerS;
  const interactive = capacity * w.offered * w.interactiveShare;
  const batch = capacity * w.offered - interactive;
  // A lane sends one turn per (think time + the turn's own time: ~60 tokens at 10–15 ms).
  const turnCycleS = (w.interactive.thinkMs + w.interactive.answerTokens * 12.5) / 1000;
  const lanes = Math.max(1, Math.round((interactive / w.interactive.answerTokens) * turnCycleS));
  return {
    capacityTokensPerS: capacity,
    interactiveTokensPerS: interactive,
    batchTokensPerS: batch,
    batchRequestsPerS: batch / w.batch.answerTokens,
    interactiveLanes: lanes,
  };
}

/** The variants of one run; `router` names the policy in routers.ts that serves it. */
export interface PriorityVariant {
  name: string;
  router: string;
  batch: boolean;
  flowControl: boolean;
  /** The pool's `flowControl` when on (default FLOW_CONTROL_SPEC). */
  flowSpec?: Record<string, unknown> | undefined;
  describe: string;
}

/** The pool's flow control for the `switchyard-flow` variants: the defaults (flow-schema). */
export const FLOW_CONTROL_SPEC: Record<string, unknown> = {};

export const PRIORITY_VARIANTS: readonly PriorityVariant[] = [
  {
    name: 'interactive-only',
    router: 'switchyard',
    batch: false,
    flowControl: true,
    describe:
      'the baseline of the target: the interactive clients alone, no batch, through switchyard with flow control',
  },
  {
    name: 'switchyard-flow',
    router: 'switchyard',
    batch: true,
    flowControl: true,
    describe: 'switchyard, the full policy, the pool with `flowControl: {}` (defaults)',
  },
  {
    name: 'switchyard-flow-preemption',
    router: 'switchyard',
    batch: true,
    flowControl: true,
    flowSpec: { saturation: { preemptSheddable: true } },
    describe:
      'switchyard with flow control and `preemptSheddable: true`: chat takes the slot of a batch request that has not answered yet',
  },
  {
    name: 'switchyard',
    router: 'switchyard',
    batch: true,
    flowControl: false,
    describe:
      'switchyard, the full policy, no flow control (the header is stripped, nothing queues)',
  },
  {
    name: 'least-connections',
    router: 'least-connections',
    batch: true,
    flowControl: false,
    describe: 'switchyard sidecar, --picker least-connections, no flow control',
  },
  ...[
    'smg-cache-aware',
    'vllm-router-cache-aware',
    'litellm-least-busy-central',
    'smg-cache-aware-central',
  ].map((router) => ({
    name: router,
    router,
    batch: true,
    flowControl: false,
    describe: 'an LLM-aware peer: takes no priorities, gets the same traffic',
  })),
];

export interface PrioritySettings {
  backends: number;
  routers: number;
  /** Variant names to run (default: all whose router is installed). */
  variants?: string[] | undefined;
  speed: number;
  seed: number;
  /** Measured wall seconds per variant, after `rampS`. */
  windowS: number;
  rampS: number;
  out: string;
  quiet: boolean;
  loadSource: LoadSource;
}

/** One request as its client saw it (all of a batch request's attempts together). */
interface Outcome {
  kind: 'interactive' | 'batch';
  sentAtMs: number;
  /** Simulated ms from the first attempt to the first byte of the answer that was served. */
  ttftMs: number | undefined;
  /** Simulated ms of the served attempt alone (its wait in a queue plus prefill). */
  lastAttemptTtftMs: number | undefined;
  ok: boolean;
  status: number;
  attempts: number;
  refusals: Record<string, number>;
  outputTokens: number;
  gaveUp: boolean;
}

export interface VariantResult {
  variant: string;
  describe: string;
  version: string;
  window: { wallS: number; simulatedS: number };
  interactive: {
    requests: number;
    served: number;
    errors: Record<string, number>;
    ttftMs: Quantiles;
    turnsPerSimulatedS: number;
  };
  batch: {
    requests: number;
    served: number;
    /** Batch part of every request served in the window. */
    shareOfServed: number;
    /** 429s the batch clients got (every attempt), by the error code of the body. */
    refusals: Record<string, number>;
    refusalsTotal: number;
    gaveUp: number;
    /** First attempt to first byte of the served answer (retries included), simulated ms. */
    waitMs: Quantiles;
    /** The served attempt alone, simulated ms. */
    ttftMs: Quantiles;
  };
  /** Completion tokens the servers produced per simulated second over the window. */
  serverTokensPerS: number;
  /** The same as a fraction of the fleet's capacity. */
  utilisation: number;
  machineCpuPercent: number | null;
}

export interface PriorityResults {
  settings: PrioritySettings;
  load: ReturnType<typeof priorityLoad>;
  workload: typeof PRIORITY_WORKLOAD;
  variants: Record<string, VariantResult>;
  skipped: Record<string, string>;
  targets: { name: string; value: number | null; limit: number; met: boolean | null }[];
  machine: { cpus: number; node: string };
  durationS: number;
}

interface Attempt {
  status: number;
  ok: boolean;
  ttftWallMs: number | undefined;
  retryAfterMs: number | undefined;
  code: string | undefined;
}

/**
 * One chat request with its priority header; aborted by `signal`. `streamed`: an SSE answer,
 * complete with its `[DONE]` (else one JSON body, whose first byte is the whole answer's).
 */
function attempt(
  baseUrl: string,
  payload: Buffer,
  priority: number,
  timeoutMs: number,
  signal: AbortSignal,
  streamed = true,
): Promise<Attempt> {
  const url = new URL(`${baseUrl}/v1/chat/completions`);
  const sent = performance.now();
  return new Promise((resolve) => {
    let first: number | undefined;
    let body = '';
    let tail = '';
    let status = 0;
    let retryAfter: string | undefined;
    let settled = false;
    const finish = (ok: boolean): void => {
      if (settled) return;
      settled = true;
      signal.removeEventListener('abort', onAbort);
      let code: string | undefined;
      if (status === 429 || (status >= 400 && !ok)) {
        try {
          code = (JSON.parse(body) as { error?: { code?: string } }).error?.code ?? undefined;
        } catch {
          code = undefined;
        }
      }
      const seconds = retryAfter === undefined ? NaN : Number(retryAfter);
      resolve({
        status,
        ok,
        ttftWallMs: first === undefined ? undefined : first - sent,
        retryAfterMs: Number.isFinite(seconds) ? seconds * 1000 : undefined,
        code,
      });
    };
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
          authorization: `Bearer ${BENCH_CLIENT_KEY}`,
          [PRIORITY_HEADER]: String(priority),
        },
        timeout: timeoutMs,
      },
      (res) => {
        status = res.statusCode ?? 0;
        const h = res.headers['retry-after'];
        retryAfter = typeof h === 'string' ? h : undefined;
        res.on('data', (chunk: Buffer) => {
          const text = chunk.toString('utf8');
          if (status >= 200 && status < 300) first ??= performance.now();
          else if (body.length < 4096) body += text;
          tail = (tail + text).slice(-32);
        });
        res.on('end', () =>
          finish(status >= 200 && status < 300 && (!streamed || tail.includes('[DONE]'))),
        );
        res.on('error', () => finish(false));
        res.on('aborted', () => finish(false));
      },
    );
    const onAbort = (): void => {
      req.destroy(new Error('window over'));
    };
    signal.addEventListener('abort', onAbort);
    req.on('timeout', () => req.destroy(new Error('client timeout')));
    req.on('error', () => finish(false));
    req.end(payload);
  });
}

const sleep = (ms: number, signal: AbortSignal): Promise<void> =>
  new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done(): void {
      clearTimeout(t);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done);
  });

/** Exponential gaps of mean `meanMs` (Poisson arrivals), reproducible from `seed`. */
function poissonGaps(meanMs: number, seed: number): () => number {
  const rng = mulberry32(seed ^ 0xba7c4);
  return () => -Math.log(1 - rng()) * meanMs;
}

/**
 * Runs the two client classes against `urls` for ramp + window wall seconds; returns every
 * request sent inside the window (times relative to the window's start).
 */
async function drive(
  urls: readonly string[],
  opts: {
    batch: boolean;
    backends: number;
    speed: number;
    seed: number;
    rampMs: number;
    windowMs: number;
    onWindowStart: () => Promise<void>;
    onWindowEnd: () => Promise<void>;
  },
): Promise<Outcome[]> {
  const w = PRIORITY_WORKLOAD;
  const load = priorityLoad(opts.backends);
  const speed = opts.speed;
  const start = performance.now();
  const windowStart = start + opts.rampMs;
  const windowEnd = windowStart + opts.windowMs;
  const stopSending = new AbortController();
  const abortBatch = new AbortController();
  const abortAll = new AbortController();
  const outcomes: Outcome[] = [];
  const inWindow = (t: number): boolean => t >= windowStart && t < windowEnd;
  const timeoutMs = 120_000 / speed;
  let url = 0;
  const nextUrl = (): string => urls[url++ % urls.length]!;

  const conversations: Conversation[] = conversationWorkload(
    {
      conversations: 4096,
      turns: w.interactive.turns,
      systemChars: w.interactive.systemChars,
      userChars: w.interactive.userChars,
      answerTokens: w.interactive.answerTokens,
      charsPerToken: CHARS_PER_TOKEN,
    },
    opts.seed,
  );
  let nextConversation = 0;
  const interactiveLane = async (lane: number): Promise<void> => {
    // Lanes start spread over one think time, not all at once.
    await sleep(
      ((lane / load.interactiveLanes) * w.interactive.thinkMs) / speed,
      stopSending.signal,
    );
    while (!stopSending.signal.aborted) {
      const c = conversations[nextConversation++ % conversations.length]!;
      for (let t = 0; t < c.users.length && !stopSending.signal.aborted; t++) {
        const payload = chatPayload(MODEL, c.answerTokens[t]!, turnMessages(c, t));
        const sentAt = performance.now();
        const a = await attempt(
          urls[(c.index + t) % urls.length]!,
          payload,
          w.interactive.priority,
          timeoutMs,
          abortAll.signal,
        );
        if (inWindow(sentAt))
          outcomes.push({
            kind: 'interactive',
            sentAtMs: sentAt - windowStart,
            ttftMs: a.ttftWallMs === undefined ? undefined : a.ttftWallMs * speed,
            lastAttemptTtftMs: a.ttftWallMs === undefined ? undefined : a.ttftWallMs * speed,
            ok: a.ok,
            status: a.status,
            attempts: 1,
            refusals: a.status === 429 ? { [a.code ?? 'unknown']: 1 } : {},
            outputTokens: c.answerTokens[t]!,
            gaveUp: false,
          });
        await sleep(w.interactive.thinkMs / speed, stopSending.signal);
      }
    }
  };

  const batchJobs: Promise<void>[] = [];
  const batchRequest = async (i: number): Promise<void> => {
    const payload = chatPayload(
      MODEL,
      w.batch.answerTokens,
      [{ role: 'user', content: pseudoText(opts.seed * 7919 + i, w.batch.promptChars) }],
      w.batch.stream,
    );
    const firstAt = performance.now();
    const refusals: Record<string, number> = {};
    let a: Attempt | undefined;
    let attempts = 0;
    let attemptAt = firstAt;
    while (attempts < w.batch.maxAttempts && !abortBatch.signal.aborted) {
      attempts++;
      attemptAt = performance.now();
      a = await attempt(
        nextUrl(),
        payload,
        w.batch.priority,
        timeoutMs,
        abortBatch.signal,
        w.batch.stream,
      );
      if (a.status !== 429) break;
      refusals[a.code ?? 'unknown'] = (refusals[a.code ?? 'unknown'] ?? 0) + 1;
      await sleep(
        Math.min(w.batch.maxRetryAfterMs, Math.max(100, a.retryAfterMs ?? 1000)),
        abortBatch.signal,
      );
    }
    if (!inWindow(firstAt)) return;
    const first = a?.ttftWallMs;
    outcomes.push({
      kind: 'batch',
      sentAtMs: firstAt - windowStart,
      ttftMs: first === undefined ? undefined : (attemptAt + first - firstAt) * speed,
      lastAttemptTtftMs: first === undefined ? undefined : first * speed,
      ok: a?.ok ?? false,
      status: a?.status ?? 0,
      attempts,
      refusals,
      outputTokens: w.batch.answerTokens,
      gaveUp: a?.status === 429,
    });
  };
  const batchLoop = async (): Promise<void> => {
    const gap = poissonGaps(1000 / load.batchRequestsPerS / speed, opts.seed);
    let due = performance.now();
    let i = 0;
    while (!stopSending.signal.aborted) {
      due += gap();
      const wait = due - performance.now();
      if (wait > 1) await sleep(wait, stopSending.signal);
      if (stopSending.signal.aborted) break;
      batchJobs.push(batchRequest(i++));
    }
  };

  const lanes = Array.from({ length: load.interactiveLanes }, (_, i) => interactiveLane(i));
  const flood = opts.batch ? batchLoop() : Promise.resolve();
  await sleep(windowStart - performance.now(), new AbortController().signal);
  await opts.onWindowStart();
  await sleep(windowEnd - performance.now(), new AbortController().signal);
  await opts.onWindowEnd();
  stopSending.abort();
  // The batch still running is cut off (it counts as not served); the interactive turns of the
  // window get a simulated minute to finish, then are cut off too.
  abortBatch.abort();
  const grace = setTimeout(() => abortAll.abort(), 60_000 / speed);
  await Promise.all([...lanes, flood]);
  await Promise.all(batchJobs);
  clearTimeout(grace);
  abortAll.abort();
  return outcomes;
}

const count = (rs: Outcome[], f: (o: Outcome) => boolean): number => rs.filter(f).length;

/** The figures of one variant from its clients' outcomes and the servers' counters. Pure. */
export function summarisePriority(
  outcomes: readonly Outcome[],
  completionTokens: number,
  windowWallS: number,
  speed: number,
  backends: number,
): Omit<VariantResult, 'variant' | 'describe' | 'version' | 'machineCpuPercent'> {
  const inter = outcomes.filter((o) => o.kind === 'interactive');
  const batch = outcomes.filter((o) => o.kind === 'batch');
  const served = outcomes.filter((o) => o.ok);
  const errors: Record<string, number> = {};
  for (const o of inter)
    if (!o.ok) {
      const k = o.status === 0 ? 'no-response' : o.status === 200 ? 'incomplete' : String(o.status);
      errors[k] = (errors[k] ?? 0) + 1;
    }
  const refusals: Record<string, number> = {};
  for (const o of batch)
    for (const [k, v] of Object.entries(o.refusals)) refusals[k] = (refusals[k] ?? 0) + v;
  const simulatedS = windowWallS * speed;
  const tokensPerS = completionTokens / simulatedS;
  const okTtft = (os: Outcome[], f: (o: Outcome) => number | undefined): number[] =>
    os.flatMap((o) => (o.ok && f(o) !== undefined ? [f(o)!] : []));
  return {
    window: { wallS: windowWallS, simulatedS },
    interactive: {
      requests: inter.length,
      served: count(inter, (o) => o.ok),
      errors,
      ttftMs: quantiles(okTtft(inter, (o) => o.ttftMs)),
      turnsPerSimulatedS: inter.length / simulatedS,
    },
    batch: {
      requests: batch.length,
      served: count(batch, (o) => o.ok),
      shareOfServed:
        served.length === 0 ? 0 : count(served, (o) => o.kind === 'batch') / served.length,
      refusals,
      refusalsTotal: Object.values(refusals).reduce((a, b) => a + b, 0),
      gaveUp: count(batch, (o) => o.gaveUp),
      waitMs: quantiles(okTtft(batch, (o) => o.ttftMs)),
      ttftMs: quantiles(okTtft(batch, (o) => o.lastAttemptTtftMs)),
    },
    serverTokensPerS: tokensPerS,
    utilisation: tokensPerS / (backends * PRIORITY_WORKLOAD.serverTokensPerS),
  };
}

async function completionTokens(fleet: SimFleet, specs: readonly BackendSpec[]): Promise<number> {
  return (await fleet.counters(specs)).reduce((s, c) => s + c.completionTokens, 0);
}

/** The targets of issue 43 from the variants that ran. */
export function priorityTargets(
  variants: Record<string, VariantResult>,
): PriorityResults['targets'] {
  const a = variants['interactive-only']?.interactive.ttftMs.p99;
  const b = variants['switchyard-flow']?.interactive.ttftMs.p99;
  const tb = variants['switchyard-flow']?.serverTokensPerS;
  const td = variants['least-connections']?.serverTokensPerS;
  const ratio = a !== undefined && b !== undefined && a > 0 ? b / a : null;
  const share = tb !== undefined && td !== undefined && td > 0 ? tb / td : null;
  return [
    {
      name: 'interactive TTFT p99, flow control / interactive alone',
      value: ratio,
      limit: 1.25,
      met: ratio === null ? null : ratio <= 1.25,
    },
    {
      name: 'server throughput, flow control / least-connections',
      value: share,
      limit: 0.95,
      met: share === null ? null : share >= 0.95,
    },
  ];
}

export async function runPriorityBench(settings: PrioritySettings): Promise<PriorityResults> {
  const started = performance.now();
  const log = (line: string): void => {
    if (!settings.quiet) process.stderr.write(`${line}\n`);
  };
  const skipped: Record<string, string> = {};
  const chosen: { variant: PriorityVariant; def: PolicyDefinition }[] = [];
  for (const variant of PRIORITY_VARIANTS) {
    if (settings.variants !== undefined && !settings.variants.includes(variant.name)) continue;
    const def = POLICIES.find((p) => p.name === variant.router)!;
    const why = def.unavailable();
    if (why !== undefined) skipped[variant.name] = why;
    else chosen.push({ variant, def });
  }
  for (const [name, why] of Object.entries(skipped)) log(`skipping ${name}: ${why}`);
  const load = priorityLoad(settings.backends);
  log(
    `priority: ${settings.backends} servers, capacity ${load.capacityTokensPerS.toFixed(0)} completion tokens/s (simulated); offered interactive ${load.interactiveTokensPerS.toFixed(0)} tokens/s (${load.interactiveLanes} lanes), batch ${load.batchTokensPerS.toFixed(0)} tokens/s (${load.batchRequestsPerS.toFixed(2)} requests/s)`,
  );
  const specs: BackendSpec[] = Array.from({ length: settings.backends }, (_, i) => ({
    name: `b${i}`,
    // 16 tokens a chunk: 400-token answers at 150 % load would otherwise be the machine's work.
    sim: { ...BASE_BACKEND, name: `b${i}`, blockTokens: 16, tokensPerChunk: 16 },
    costPerMTok: 1,
  }));
  const fleet = await startFleet(settings.backends);
  const variants: Record<string, VariantResult> = {};
  try {
    for (const [n, { variant, def }] of chosen.entries()) {
      await fleet.configure(specs, settings.speed, settings.seed, MODEL);
      await fleet.reset();
      const wallStart = performance.now();
      let routers: RouterSet;
      try {
        routers = await def.start({
          backends: specs.map((s, i) => ({
            name: s.name,
            url: fleet.urls[i]!,
            costPerMTok: s.costPerMTok,
          })),
          instances: def.central === true ? 1 : settings.routers,
          speed: settings.speed,
          costWeightPerMs: undefined,
          seed: settings.seed,
          model: MODEL,
          adapters: undefined,
          loadSource: settings.loadSource,
          poolSpec: variant.flowControl
            ? { flowControl: variant.flowSpec ?? FLOW_CONTROL_SPEC }
            : undefined,
        });
      } catch (err) {
        skipped[variant.name] = `did not start: ${(err as Error).message.split('\n')[0]}`;
        log(`[priority ${n + 1}/${chosen.length}] ${variant.name}: ${skipped[variant.name]}`);
        continue;
      }
      let tokensAtStart = 0;
      let tokensAtEnd = 0;
      let cpuBefore: ReturnType<typeof machineCpuSeconds>;
      let cpuAfter: ReturnType<typeof machineCpuSeconds>;
      let windowWallMs = 0;
      let windowStartedAt = 0;
      let outcomes: Outcome[];
      try {
        outcomes = await drive(routers.urls, {
          batch: variant.batch,
          backends: settings.backends,
          speed: settings.speed,
          seed: settings.seed,
          rampMs: settings.rampS * 1000,
          windowMs: settings.windowS * 1000,
          onWindowStart: async () => {
            windowStartedAt = performance.now();
            cpuBefore = machineCpuSeconds();
            tokensAtStart = await completionTokens(fleet, specs);
          },
          onWindowEnd: async () => {
            tokensAtEnd = await completionTokens(fleet, specs);
            cpuAfter = machineCpuSeconds();
            windowWallMs = performance.now() - windowStartedAt;
          },
        });
      } finally {
        closeReplayAgents();
        await routers.stop();
        await fleet.idle(60_000);
      }
      const cpu =
        cpuBefore! === undefined || cpuAfter! === undefined
          ? null
          : Math.round(
              (100 * (cpuAfter.tasks + cpuAfter.irq - cpuBefore.tasks - cpuBefore.irq)) /
                ((windowWallMs / 1000) * availableParallelism()),
            );
      const result: VariantResult = {
        variant: variant.name,
        describe: `${variant.describe} (${def.describe})`,
        version: def.version(),
        ...summarisePriority(
          outcomes,
          tokensAtEnd - tokensAtStart,
          windowWallMs / 1000,
          settings.speed,
          settings.backends,
        ),
        machineCpuPercent: cpu,
      };
      variants[variant.name] = result;
      const r = result;
      log(
        `[priority ${n + 1}/${chosen.length}] ${variant.name}: interactive TTFT p50 ${r.interactive.ttftMs.p50.toFixed(0)} p99 ${r.interactive.ttftMs.p99.toFixed(0)} ms (${r.interactive.served}/${r.interactive.requests}), batch share ${(r.batch.shareOfServed * 100).toFixed(1)} %, 429s ${r.batch.refusalsTotal}, batch wait p50 ${r.batch.waitMs.p50.toFixed(0)} p99 ${r.batch.waitMs.p99.toFixed(0)} ms, servers ${r.serverTokensPerS.toFixed(0)} tokens/s (${(r.utilisation * 100).toFixed(0)} %), CPU ${cpu ?? '?'} % (${((performance.now() - wallStart) / 1000).toFixed(0)} s)`,
      );
    }
  } finally {
    await fleet.stop();
  }
  const results: PriorityResults = {
    settings,
    load,
    workload: PRIORITY_WORKLOAD,
    variants,
    skipped,
    targets: priorityTargets(variants),
    machine: { cpus: availableParallelism(), node: process.version },
    durationS: (performance.now() - started) / 1000,
  };
  mkdirSync(settings.out, { recursive: true });
  const file = join(settings.out, `results-${settings.routers}-routers.json`);
  writeFileSync(file, JSON.stringify(results, null, 2) + '\n');
  for (const t of results.targets)
    log(
      `target ${t.name}: ${t.value === null ? 'not measured' : t.value.toFixed(3)} (limit ${t.limit}) ${t.met === null ? '' : t.met ? 'met' : 'NOT met'}`,
    );
  log(`wrote ${file} in ${results.durationS.toFixed(0)} s`);
  return results;
}
