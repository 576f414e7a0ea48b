/**
 * `switchyard bench`: replays a trace against K simulated backends through R instances of every
 * policy, scenario by scenario and seed by seed, and writes results.json, report.md and plots into
 * --out (docs/benchmarks.md#routing).
 *
 * The steps: choose the policies (skip what is not installed), start the simulators, check they
 * answer what the chosen peers need, warm up, then for each scenario, seed and policy: reset the
 * simulators, start the routers, replay, read the counters, stop the routers. Last, the median of
 * every figure over the seeds, the targets, the report and the plots.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { availableParallelism, loadavg } from 'node:os';
import { cpuSeconds, machineCpuSeconds } from '../../harness/proc.ts';
import { blockKeys } from '../../sim/engine/prefix-cache.ts';
import type { SimOptions } from '../../sim/options.ts';
import { startFleet, type SimFleet } from './backends.ts';
import {
  chainConversations,
  conversationAffinity,
  conversationWorkload,
  promptText,
  traceChatMessages,
  type ChatTurn,
} from './conversations.ts';
import {
  cdf,
  shareOverTime,
  summarise,
  type ClientResult,
  type PolicyResult,
  type SharePoint,
} from './metrics.ts';
import { Oracle } from './oracle.ts';
import { writePlots } from './plots.ts';
import type { PolicyDefinition, RouterSet } from './policy-definition.ts';
import { Progress } from './progress.ts';
import { PromptBuilder } from './prompt.ts';
import {
  buildPayloads,
  closeReplayAgents,
  replay,
  replayConversations,
  type ReplayTarget,
} from './replay.ts';
import { renderReport, checkTargets } from './report.ts';
import type { BenchResults, BenchSettings, RunRecord, ScenarioResult } from './results.ts';
import { POLICIES } from './routers.ts';
import {
  adapterNames,
  SCENARIOS,
  offeredUtilisation,
  routerInstances,
  scenario,
  timeScaleFor,
  zipfAdapters,
  type LoraWorkload,
  type Scenario,
} from './scenarios.ts';
import { aggregateSeeds, type SeedRun } from './seeds.ts';
import {
  HASH_BLOCK_TOKENS,
  idealHitRate,
  parseTrace,
  sampleEvenly,
  type TraceRequest,
} from './trace.ts';

/** Something the benchmark cannot run without; the command exits 2 with the message. */
export class BenchSetupError extends Error {
  readonly code = 'BENCH_SETUP';
}

const MODEL = 'bench-model';
const CHARS_PER_TOKEN = 4;
const CPUS = availableParallelism();
const WARM_UP_REQUESTS = 300;
/**
 * Requests sent through every router set before its measured replay, then the simulators reset:
 * a router in production has run for days, and the first few hundred requests through a process
 * that just started measure its JIT (a Node router's hot path runs interpreted at first), not its
 * routing. Their prompts are another seed's, sharing no text with the measured ones, so that what
 * a router learns in the warm-up (an index of prefixes, a radix tree) cannot help or mislead it.
 */
const ROUTER_WARM_UP_REQUESTS = 200;
const ROUTER_WARM_UP_SEED = 1_000_003;
/**
 * A client gives up on a request that sent nothing for a simulated minute (19 s of wall time at
 * the default speed 3.2) and counts it as an error: what an interactive application's timeout does, and
 * what keeps a router that cannot keep up from stretching a run without end.
 */
const CLIENT_TIMEOUT_SIMULATED_MS = 60_000;

export async function runBench(settings: BenchSettings): Promise<BenchResults> {
  const started = performance.now();
  // Other work on the machine moves every figure; the report says how busy it was.
  const loadAtStart = loadavg();
  const trace = parseTrace(readFileSync(settings.trace, 'utf8'));
  const requests = sampleEvenly(trace.requests, settings.maxRequests);
  const blockTokens = trace.blockTokens ?? HASH_BLOCK_TOKENS;
  const turns =
    settings.prompts === 'chat' && trace.blockTokens !== undefined
      ? chainConversations(requests, blockTokens)
      : undefined;
  const inputs = new TraceInputs(requests, turns, blockTokens);
  const seeds = Array.from({ length: settings.seeds }, (_, k) => settings.seed + k);

  const progress = new Progress(settings.quiet);
  const { chosen, skipped } = choosePolicies(settings.policies);
  for (const [name, why] of Object.entries(skipped)) progress.line(`skipping ${name}: ${why}`);

  const fleet: SimFleet = await startFleet(settings.backends);
  const runs: Record<string, Record<string, Collected>> = {};
  const rates: NonNullable<BenchResults['scenarioRates']> = {};
  try {
    await checkRequirements(chosen, fleet.urls[0]!);
    await warmUp(fleet, settings, requests, inputs.forSeed(settings.seed), progress);
    const weightsOf = (sc: Scenario, def: PolicyDefinition): (number | undefined)[] =>
      def.name === 'switchyard' ? (sc.costWeights ?? [undefined]) : [undefined];
    const totalRuns = settings.scenarios.reduce(
      (n, s) =>
        n + seeds.length * chosen.reduce((m, def) => m + weightsOf(scenario(s), def).length, 0),
      0,
    );
    let run = 0;
    for (const name of settings.scenarios) {
      const sc = scenario(name);
      const specs = sc.backends(settings.backends, settings.heterogeneous);
      const timeScale =
        sc.utilisation === undefined
          ? settings.timeScale
          : timeScaleFor(requests, specs, settings.speed, sc.utilisation);
      rates[name] = {
        timeScale,
        offeredUtilisation: offeredUtilisation(requests, specs, timeScale, settings.speed),
      };
      runs[name] = {};
      for (const seed of seeds) {
        const options = await fleet.configure(specs, settings.speed, seed, MODEL);
        const backendsByPort = new Map(
          fleet.urls.map((u, i) => [Number(new URL(u).port), specs[i]!.name]),
        );
        for (const def of chosen) {
          for (const weight of weightsOf(sc, def)) {
            run++;
            const label =
              weight === undefined || sc.costWeights === undefined
                ? def.name
                : `${def.name}@w=${weight}`;
            if (skipped[label] !== undefined) continue;
            const tag = `[${name}${seeds.length > 1 ? ` seed ${seed}` : ''}] ${label}`;
            const total = sc.conversations
              ? settings.backends *
                sc.conversations.conversationsPerBackend *
                sc.conversations.turns
              : requests.length;
            progress.start(tag, run, totalRuns, total);
            const wallStart = performance.now();
            const outcome = await runOnce({
              def,
              weight,
              sc,
              seed,
              settings,
              timeScale,
              fleet,
              specs,
              options,
              backendsByPort,
              requests,
              turns,
              inputs,
              onResult: (done) => progress.update(done),
            });
            if (outcome.kind === 'did-not-start') {
              // A peer that will not start (a config its version refuses): say so and go on.
              skipped[label] = outcome.reason;
              progress.done(`${tag}: ${outcome.reason}`);
              continue;
            }
            outcome.run.wallS = (performance.now() - wallStart) / 1000;
            const collected = (runs[name][label] ??= {
              def,
              weight,
              costWeights: sc.costWeights !== undefined,
              seeds: [],
              ttfts: [],
              shareOverTime: [],
            });
            collected.seeds.push(outcome.run);
            collected.ttfts.push(...outcome.ttfts);
            if (collected.seeds.length === 1) collected.shareOverTime = outcome.shareOverTime;
            progress.done(`${tag}: ${summaryLine(outcome.run)}`);
          }
        }
      }
    }
  } finally {
    await fleet.stop();
  }

  const { scenarios, records } = aggregate(runs);
  const lastAt = requests[requests.length - 1]?.atMs ?? 0;
  const results: BenchResults = {
    settings: { ...settings, model: MODEL, charsPerToken: CHARS_PER_TOKEN, blockTokens },
    trace: {
      file: basename(settings.trace),
      format: trace.format,
      requestsInFile: trace.requests.length,
      requestsReplayed: requests.length,
      laterTurns: turns === undefined ? null : turns.filter((t) => t.turn > 1).length,
      idealHitRate: idealHitRate(requests) ?? null,
      idealHitRateWholeTrace: idealHitRate(trace.requests) ?? null,
      traceSpanS: lastAt / 1000,
      replaySpanS: (lastAt * settings.timeScale) / 1000,
    },
    machine: { cpus: CPUS, node: process.version },
    versions: Object.fromEntries(chosen.map((p) => [p.name, p.version()])),
    skipped,
    policiesDescribed: Object.fromEntries(chosen.map((p) => [p.name, p.describe])),
    scenarios,
    scenarioRates: rates,
    scenarioDescriptions: Object.fromEntries(
      settings.scenarios.map((s) => [s, scenario(s).description]),
    ),
    targets: { checks: [] },
    durationS: 0,
    loadAverage: { start: loadAtStart, end: loadavg() },
  };
  results.targets = checkTargets(results);
  results.durationS = (performance.now() - started) / 1000;
  await writeOutputs(settings.out, results, records, settings.plots, progress);
  return results;
}

/** The figures of one run, for the progress line. */
function summaryLine(run: SeedRun): string {
  const r = run.result;
  const chats =
    r.conversations === undefined
      ? ''
      : `, later turns home ${(r.conversations.laterTurnsHome * 100).toFixed(1)} %, busiest home ${(r.conversations.maxHomeShare * 100).toFixed(1)} %`;
  const loads =
    r.adapterLoadsPer1k === undefined
      ? ''
      : `, adapter loads ${r.adapterLoadsPer1k.toFixed(0)} per 1,000 requests`;
  return `TTFT p50 ${fmt(r.ttftMs.p50)} p99 ${fmt(r.ttftMs.p99)} ms, errors ${(r.errorRate * 100).toFixed(2)} %, hit rate ${(r.cacheHitRate * 100).toFixed(1)} %${chats}${loads} (${run.wallS.toFixed(1)} s)`;
}

/** Every policy's runs reduced to medians (results.json) and plot data (runs.json). */
function aggregate(runs: Record<string, Record<string, Collected>>): {
  scenarios: BenchResults['scenarios'];
  records: Record<string, Record<string, RunRecord>>;
} {
  const records: Record<string, Record<string, RunRecord>> = {};
  const scenarios: BenchResults['scenarios'] = {};
  for (const [s, byLabel] of Object.entries(runs)) {
    records[s] = {};
    scenarios[s] = {};
    for (const [label, c] of Object.entries(byLabel)) {
      const result: ScenarioResult = {
        ...aggregateSeeds(c.seeds),
        ...(c.costWeights && c.def.name === 'switchyard'
          ? { costWeightPerMs: c.weight ?? null }
          : {}),
      };
      scenarios[s][label] = result;
      records[s][label] = {
        ...result,
        policy: c.def.name,
        family: c.def.family,
        ttftCdf: cdf(c.ttfts),
        shareOverTime: c.shareOverTime,
      };
    }
  }
  return { scenarios, records };
}

/** results.json, runs.json (what --replot redraws from), the plots and report.md. */
async function writeOutputs(
  out: string,
  results: BenchResults,
  records: Record<string, Record<string, RunRecord>>,
  drawPlots: boolean,
  progress: Progress,
): Promise<void> {
  mkdirSync(out, { recursive: true });
  writeFileSync(join(out, 'results.json'), JSON.stringify(results, null, 2) + '\n');
  // Every run with its TTFT CDF: what the plots are drawn from, so --replot can redraw them.
  writeFileSync(join(out, RUNS_FILE), JSON.stringify(records) + '\n');
  const plots = drawPlots ? await writePlots(out, records, results) : [];
  writeFileSync(join(out, 'report.md'), renderReport(results, plots));
  progress.line(
    `wrote ${join(out, 'results.json')}, report.md${plots.length > 0 ? ` and ${plots.length} plots` : ''} in ${results.durationS.toFixed(0)} s`,
  );
}

/** One policy's runs in one scenario, gathered over the seeds. */
interface Collected {
  def: PolicyDefinition;
  weight: number | undefined;
  costWeights: boolean;
  seeds: SeedRun[];
  ttfts: number[];
  shareOverTime: SharePoint[];
}

function choosePolicies(names: readonly string[]): {
  chosen: PolicyDefinition[];
  skipped: Record<string, string>;
} {
  const chosen: PolicyDefinition[] = [];
  const skipped: Record<string, string> = {};
  for (const name of names) {
    const def = POLICIES.find((p) => p.name === name);
    if (def === undefined) throw new Error(`unknown policy ${name}`);
    const why = def.unavailable();
    if (why !== undefined) skipped[name] = why;
    else chosen.push(def);
  }
  return { chosen, skipped };
}

/**
 * Fails before anything runs when a chosen peer needs an endpoint the simulators do not serve:
 * without it the peer would not route at all (or would wait minutes), and the run would measure
 * nothing.
 */
async function checkRequirements(
  chosen: readonly PolicyDefinition[],
  backend: string,
): Promise<void> {
  const byPath = new Map<string, { why: string; policies: string[] }>();
  for (const def of chosen)
    for (const probe of def.requires ?? []) {
      const entry = byPath.get(probe.path) ?? { why: probe.why, policies: [] };
      entry.policies.push(def.name);
      byPath.set(probe.path, entry);
    }
  const missing: string[] = [];
  for (const [path, { why, policies }] of byPath) {
    let status = 0;
    try {
      status = (await fetch(`${backend}${path}`)).status;
    } catch {
      // status 0: no answer at all
    }
    if (status < 200 || status >= 300)
      missing.push(
        `${policies.join(', ')} need GET ${path} on every backend: ${why}. \`switchyard sim\` answers ${status === 0 ? 'nothing' : status} there.`,
      );
  }
  if (missing.length > 0)
    throw new BenchSetupError(
      `${missing.join('\n')}\nLeave those policies out (--policies) until the simulator serves it.`,
    );
}

/**
 * The request bodies of the trace for one seed (its prompts' text), built once and kept for
 * every scenario, and what the oracle keys each request by.
 */
class TraceInputs {
  readonly #requests;
  readonly #turns;
  readonly #blockTokens;
  readonly #bySeed = new Map<string, { payloads: Buffer[]; oracleKeys: number[][] | undefined }>();

  constructor(
    requests: readonly TraceRequest[],
    turns: readonly ChatTurn[] | undefined,
    blockTokens: number,
  ) {
    this.#requests = requests;
    this.#turns = turns;
    this.#blockTokens = blockTokens;
  }

  /**
   * With `lora`, every request names one of its adapters (drawn from the seed; one per
   * conversation) instead of the model: the same prompts, another model field.
   */
  forSeed(
    seed: number,
    lora?: LoraWorkload,
  ): { payloads: Buffer[]; oracleKeys: number[][] | undefined } {
    const key = lora === undefined ? String(seed) : `${seed}:lora`;
    let inputs = this.#bySeed.get(key);
    if (inputs !== undefined) return inputs;
    const adapters =
      lora === undefined ? undefined : zipfAdapters(lora, this.#requests.length, seed);
    // A conversation keeps its adapter: every turn names the one its first turn drew.
    const model =
      adapters === undefined
        ? MODEL
        : (i: number) => adapters[this.#turns?.[i]?.conversation ?? i]!;
    const prompts = new PromptBuilder({
      blockTokens: this.#blockTokens,
      charsPerToken: CHARS_PER_TOKEN,
      seed,
    });
    const requests = this.#requests;
    if (this.#turns === undefined) {
      inputs = {
        payloads: buildPayloads(requests, model, (i) => [
          { role: 'user', content: prompts.prompt(requests[i]!, i) },
        ]),
        oracleKeys: undefined,
      };
    } else {
      const messages = traceChatMessages(requests, this.#turns, prompts, CHARS_PER_TOKEN);
      inputs = {
        payloads: buildPayloads(requests, model, (i) => messages[i]!),
        // The simulators cache blocks of the joined text, which no longer falls on hash-id
        // block boundaries after a first turn: the oracle shadows their own keys instead.
        oracleKeys: messages.map((m) =>
          blockKeys(promptText(m), this.#blockTokens * CHARS_PER_TOKEN),
        ),
      };
    }
    this.#bySeed.set(key, inputs);
    return inputs;
  }
}

/**
 * Warm-up, not measured: the simulators' and the load generator's code paths compiled, so the
 * first policy does not pay for the JIT.
 */
async function warmUp(
  fleet: SimFleet,
  settings: BenchSettings,
  requests: readonly TraceRequest[],
  inputs: { payloads: Buffer[] },
  progress: Progress,
): Promise<void> {
  const specs = scenario('steady').backends(settings.backends, false);
  await fleet.configure(specs, settings.speed, settings.seed, MODEL);
  const n = Math.min(requests.length, WARM_UP_REQUESTS);
  progress.start('warm-up', 0, 0, n);
  await replay(
    { urls: fleet.urls },
    {
      requests: requests.slice(0, n),
      payloads: inputs.payloads.slice(0, n),
      timeScale: settings.timeScale,
      speed: settings.speed,
      onResult: (done) => progress.update(done),
    },
  );
  closeReplayAgents();
  await fleet.idle();
}

/**
 * The router warm-up (ROUTER_WARM_UP_REQUESTS), not measured. It runs on a healthy fleet — a
 * scenario's fault (a failing or slow backend) starts with the measured replay, so every router
 * meets it the same way, unwarned — and the simulators are reset after it.
 */
async function warmUpRouters(
  urls: readonly string[],
  run: {
    requests: readonly TraceRequest[];
    inputs: TraceInputs;
    settings: BenchSettings;
    timeScale: number;
    fleet: SimFleet;
    sc: Scenario;
    specs: ReturnType<Scenario['backends']>;
    seed: number;
    turns: readonly ChatTurn[] | undefined;
  },
  timeoutMs: number,
): Promise<void> {
  const { settings, fleet } = run;
  const n = Math.min(run.requests.length, ROUTER_WARM_UP_REQUESTS);
  // Backends that serve adapters keep listing them through the warm-up (the base model's
  // requests load none): a router that learns what each server serves from its /v1/models must
  // not start the measured run on a list without them.
  await fleet.configure(
    run.sc.lora !== undefined
      ? run.specs
      : scenario('steady').backends(settings.backends, settings.heterogeneous),
    settings.speed,
    run.seed,
    MODEL,
  );
  await replay(
    { urls },
    {
      requests: run.requests.slice(0, n),
      payloads: run.inputs.forSeed(ROUTER_WARM_UP_SEED).payloads.slice(0, n),
      timeScale: run.timeScale,
      instances: instancesOf(run, urls.length).slice(0, n),
      speed: settings.speed,
      timeoutMs,
    },
  );
  await fleet.idle();
  await fleet.configure(run.specs, settings.speed, run.seed, MODEL);
  await fleet.reset();
}

/** The router instance of each trace request in this scenario (scenarios.ts `routerInstances`). */
function instancesOf(
  run: { requests: readonly TraceRequest[]; turns: readonly ChatTurn[] | undefined; sc: Scenario },
  routers: number,
): number[] {
  return routerInstances(
    run.requests.length,
    Math.max(1, routers),
    run.turns,
    run.sc.laterTurnsElsewhere === true,
  );
}

type Outcome =
  | { kind: 'did-not-start'; reason: string }
  | { kind: 'ran'; run: SeedRun; ttfts: number[]; shareOverTime: SharePoint[] };

/** One policy, one seed, one scenario: start the routers, replay, count, stop. */
async function runOnce(run: {
  def: PolicyDefinition;
  weight: number | undefined;
  sc: Scenario;
  seed: number;
  settings: BenchSettings;
  /** This scenario's wall ms per trace ms (`--time-scale`, or derived from its utilisation). */
  timeScale: number;
  fleet: SimFleet;
  specs: ReturnType<Scenario['backends']>;
  options: SimOptions[];
  backendsByPort: ReadonlyMap<number, string>;
  requests: readonly TraceRequest[];
  turns: readonly ChatTurn[] | undefined;
  inputs: TraceInputs;
  onResult: (done: number) => void;
}): Promise<Outcome> {
  const { def, sc, settings, fleet, specs } = run;
  await fleet.reset();
  let routers: RouterSet | undefined;
  try {
    if (def.family !== 'oracle') {
      try {
        routers = await def.start({
          backends: specs.map((s, i) => ({
            name: s.name,
            url: fleet.urls[i]!,
            costPerMTok: s.costPerMTok,
          })),
          instances: def.central === true ? 1 : settings.routers,
          speed: settings.speed,
          costWeightPerMs: run.weight,
          seed: run.seed,
          model: MODEL,
          adapters: sc.lora === undefined ? undefined : adapterNames(sc.lora),
          loadSource: settings.loadSource ?? 'controller',
        });
      } catch (err) {
        return {
          kind: 'did-not-start',
          reason: `did not start: ${(err as Error).message.split('\n').slice(0, 6).join(' | ')}`,
        };
      }
    }
    const target: ReplayTarget =
      def.family === 'oracle'
        ? {
            urls: [],
            oracle: { backends: fleet.urls, router: new Oracle(run.options, settings.speed) },
          }
        : { urls: routers!.urls };
    const timeoutMs = CLIENT_TIMEOUT_SIMULATED_MS / settings.speed;
    if (routers !== undefined) {
      await warmUpRouters(routers.urls, run, timeoutMs);
    }
    const cpuBefore = machineCpuSeconds();
    const instanceCpu = processCpu(routers?.pids ?? []);
    const auxCpu = processCpu(routers?.auxPids ?? []);
    const placementsBefore = (await routers?.placementBytesReceived?.()) ?? 0;
    const replayStart = performance.now();
    let results: ClientResult[];
    let affinity: PolicyResult['conversations'];
    if (sc.conversations !== undefined) {
      const w = sc.conversations;
      const out = await replayConversations(target, {
        conversations: conversationWorkload(
          {
            conversations: w.conversationsPerBackend * settings.backends,
            turns: w.turns,
            systemChars: w.systemChars,
            userChars: w.userChars,
            answerTokens: w.answerTokens,
            charsPerToken: CHARS_PER_TOKEN,
          },
          run.seed,
        ),
        concurrency: w.concurrentPerBackend * settings.backends,
        model: MODEL,
        speed: settings.speed,
        blockChars: run.options[0]!.blockTokens * CHARS_PER_TOKEN,
        charsPerToken: CHARS_PER_TOKEN,
        backendsByPort: run.backendsByPort,
        onResult: run.onResult,
        timeoutMs,
      });
      results = out.results;
      affinity = conversationAffinity(out.turns);
    } else {
      const inputs = run.inputs.forSeed(run.seed, sc.lora);
      results = await replay(target, {
        requests: run.requests,
        payloads: inputs.payloads,
        oracleKeys: inputs.oracleKeys,
        timeScale: run.timeScale,
        instances: instancesOf(run, target.urls.length),
        speed: settings.speed,
        backendsByPort: run.backendsByPort,
        onResult: run.onResult,
        timeoutMs,
      });
      affinity =
        run.turns === undefined
          ? undefined
          : conversationAffinity(
              results.map((r, i) => ({
                conversation: run.turns![i]!.conversation,
                turn: run.turns![i]!.turn,
                backend: r.backend,
                ok: r.ok,
              })),
            );
    }
    const cpuAfter = machineCpuSeconds();
    const wallS = (performance.now() - replayStart) / 1000;
    const perRequest = (cpuS: number | undefined): number | undefined =>
      cpuS === undefined || results.length === 0
        ? undefined
        : Math.round((cpuS * 1000 * 1000) / results.length) / 1000;
    const routerCpuMsPerRequest = perRequest(instanceCpu());
    const auxCpuMsPerRequest = perRequest(auxCpu());
    const placementBytes =
      routers?.placementBytesReceived === undefined
        ? undefined
        : (await routers.placementBytesReceived()) - placementsBefore;
    if (settings.dumpRequests === true) dumpRequests(run, def.name, results);
    const machineCpuPercent =
      cpuBefore === undefined || cpuAfter === undefined || wallS <= 0
        ? null
        : Math.round(
            (100 * (cpuAfter.tasks + cpuAfter.irq - cpuBefore.tasks - cpuBefore.irq)) /
              (wallS * CPUS),
          );
    const counters = await fleet.counters(specs);
    const result = {
      ...summarise(results, counters, settings.speed, { lora: sc.lora !== undefined }),
      ...(affinity === undefined ? {} : { conversations: affinity }),
      ...(routerCpuMsPerRequest === undefined ? {} : { routerCpuMsPerRequest }),
      ...(auxCpuMsPerRequest === undefined || routers?.auxPids === undefined
        ? {}
        : { auxCpuMsPerRequest }),
      ...(placementBytes === undefined || routers === undefined || wallS <= 0
        ? {}
        : {
            placementBytesPerInstancePerSecond: Math.round(
              placementBytes / routers.urls.length / wallS,
            ),
          }),
      machineCpuPercent,
    };
    return {
      kind: 'ran',
      run: { seed: run.seed, result, wallS: 0 },
      ttfts: results.flatMap((r) => (r.ok && r.ttftMs !== undefined ? [r.ttftMs] : [])),
      shareOverTime: shareOverTime(results),
    };
  } finally {
    // The client's kept-alive sockets first: a sidecar draining on SIGTERM waits for them.
    closeReplayAgents();
    await routers?.stop();
    await fleet.idle();
  }
}

/**
 * CPU seconds `pids` spend from now until the returned function is called (undefined when a
 * process could not be read at either end, or there is none).
 */
function processCpu(pids: readonly number[]): () => number | undefined {
  const read = (): number | undefined => {
    if (pids.length === 0) return undefined;
    let sum = 0;
    for (const pid of pids) {
      const s = cpuSeconds(pid);
      if (s === undefined) return undefined;
      sum += s;
    }
    return sum;
  };
  const before = read();
  return () => {
    const after = read();
    return before === undefined || after === undefined ? undefined : after - before;
  };
}

const RUNS_FILE = 'runs.json';

/**
 * Redraws the plots and rewrites report.md of an earlier run in `out` from its results.json and
 * runs.json, without running anything: for a change to the plots, the report or the targets.
 */
export async function replot(out: string): Promise<string[]> {
  const read = <T>(name: string): T => {
    try {
      return JSON.parse(readFileSync(join(out, name), 'utf8')) as T;
    } catch (err) {
      throw new Error(
        `cannot read ${join(out, name)} (${(err as Error).message}); --replot needs a directory an earlier run wrote`,
        { cause: err },
      );
    }
  };
  const results = read<BenchResults>('results.json');
  // The targets as the report checks them now (results.json keeps what the run wrote).
  results.targets = checkTargets(results);
  const records = read<Record<string, Record<string, RunRecord>>>(RUNS_FILE);
  const plots = await writePlots(out, records, results);
  writeFileSync(join(out, 'report.md'), renderReport(results, plots));
  return plots;
}

const fmt = (ms: number): string => (Number.isFinite(ms) ? ms.toFixed(0) : '–');

export { SCENARIOS };

/** `--dump-requests`: every request of one run, in the order of the trace (or of the turns). */
function dumpRequests(
  run: {
    settings: BenchSettings;
    sc: Scenario;
    seed: number;
    weight?: number | undefined;
    requests: readonly TraceRequest[];
    turns: readonly ChatTurn[] | undefined;
  },
  policy: string,
  results: readonly ClientResult[],
): void {
  const dir = join(run.settings.out, 'requests', run.sc.name);
  mkdirSync(dir, { recursive: true });
  const weight = run.weight === undefined ? '' : `-w${run.weight}`;
  const rows = results.map((r, i) => {
    const request = run.sc.conversations === undefined ? run.requests[i] : undefined;
    const turn = request === undefined ? undefined : run.turns?.[i];
    return {
      ...r,
      ...(request === undefined
        ? {}
        : { inputTokens: request.inputTokens, outputTokens: request.outputTokens }),
      ...(turn === undefined ? {} : { conversation: turn.conversation, turn: turn.turn }),
    };
  });
  writeFileSync(join(dir, `${policy}${weight}-seed${run.seed}.json`), JSON.stringify(rows));
}
