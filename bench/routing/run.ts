/**
 * `switchyard bench`: replays a trace against K simulated backends through R instances of every
 * policy, scenario by scenario, and writes results.json, report.md and plots into --out
 * (docs/benchmarks.md#routing).
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { availableParallelism } from 'node:os';
import { machineCpuSeconds } from '../../harness/proc.ts';
import { startFleet, type SimFleet } from './backends.ts';
import { cdf, summarise } from './metrics.ts';
import { Oracle } from './oracle.ts';
import { writePlots } from './plots.ts';
import { Progress } from './progress.ts';
import { PromptBuilder } from './prompt.ts';
import { buildPayloads, closeReplayAgents, replay } from './replay.ts';
import { renderReport, checkTargets } from './report.ts';
import type { BenchResults, BenchSettings, RunRecord } from './results.ts';
import { POLICIES, type PolicyDefinition, type RouterSet } from './routers.ts';
import { SCENARIOS, scenario, type ScenarioName } from './scenarios.ts';
import { HASH_BLOCK_TOKENS, idealHitRate, parseTrace, sampleEvenly } from './trace.ts';

const MODEL = 'bench-model';
const CPUS = availableParallelism();
const WARM_UP_REQUESTS = 300;
/**
 * A client gives up on a request that sent nothing for a simulated minute (under 5 s of wall time
 * at speed 12.8) and counts it as an error: what an interactive application's timeout does, and
 * what keeps a router that cannot keep up from stretching a run without end.
 */
const CLIENT_TIMEOUT_SIMULATED_MS = 60_000;

export async function runBench(settings: BenchSettings): Promise<BenchResults> {
  const started = performance.now();
  const text = readFileSync(settings.trace, 'utf8');
  const trace = parseTrace(text);
  const requests = sampleEvenly(trace.requests, settings.maxRequests);
  const charsPerToken = 4;
  const prompts = new PromptBuilder({
    blockTokens: trace.blockTokens ?? HASH_BLOCK_TOKENS,
    charsPerToken,
    seed: settings.seed,
  });
  const chosen: PolicyDefinition[] = [];
  const skipped: Record<string, string> = {};
  for (const name of settings.policies) {
    const def = POLICIES.find((p) => p.name === name);
    if (def === undefined) throw new Error(`unknown policy ${name}`);
    const why = def.unavailable();
    if (why !== undefined) skipped[name] = why;
    else chosen.push(def);
  }
  const progress = new Progress(settings.quiet);
  for (const [name, why] of Object.entries(skipped)) progress.line(`skipping ${name}: ${why}`);
  const payloads = buildPayloads(requests, prompts, MODEL);

  const fleet: SimFleet = await startFleet(settings.backends);
  // Warm-up, not measured: the simulators' and the load generator's code paths compiled, so the
  // first policy does not pay for the JIT.
  {
    const specs = scenario('steady').backends(settings.backends, false);
    await fleet.configure(specs, settings.speed, settings.seed);
    const n = Math.min(requests.length, WARM_UP_REQUESTS);
    progress.start('warm-up', 0, 0, n);
    await replay(
      { urls: fleet.urls },
      {
        requests: requests.slice(0, n),
        payloads: payloads.slice(0, n),
        timeScale: settings.timeScale,
        speed: settings.speed,
        onResult: (done) => progress.update(done),
      },
    );
    closeReplayAgents();
    await fleet.idle();
  }
  const records: Record<string, Record<string, RunRecord>> = {};
  try {
    const runsPerScenario = (s: ScenarioName): number =>
      chosen.reduce(
        (n, p) => n + (p.name === 'switchyard' ? (scenario(s).costWeights?.length ?? 1) : 1),
        0,
      );
    const totalRuns = settings.scenarios.reduce((n, s) => n + runsPerScenario(s), 0);
    let run = 0;
    for (const name of settings.scenarios) {
      const sc = scenario(name);
      const specs = sc.backends(settings.backends, settings.heterogeneous);
      const options = await fleet.configure(specs, settings.speed, settings.seed);
      records[name] = {};
      for (const def of chosen) {
        const weights = def.name === 'switchyard' ? (sc.costWeights ?? [undefined]) : [undefined];
        for (const weight of weights) {
          run++;
          const label =
            weight === undefined || sc.costWeights === undefined
              ? def.name
              : `${def.name}@w=${weight}`;
          progress.start(`[${name}] ${label}`, run, totalRuns, requests.length);
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
                  instances: settings.routers,
                  speed: settings.speed,
                  costWeightPerMs: weight,
                  seed: settings.seed,
                });
              } catch (err) {
                // A peer that will not start (a config its version refuses): say so and go on.
                const reason = `did not start: ${(err as Error).message.split('\n').slice(0, 6).join(' | ')}`;
                skipped[label] = reason;
                progress.done(`[${name}] ${label}: ${reason}`);
                continue;
              }
            }
            const cpuBefore = machineCpuSeconds();
            const wallBefore = performance.now();
            const results = await replay(
              def.family === 'oracle'
                ? {
                    urls: [],
                    oracle: { backends: fleet.urls, router: new Oracle(options, settings.speed) },
                  }
                : { urls: routers!.urls },
              {
                requests,
                payloads,
                timeScale: settings.timeScale,
                speed: settings.speed,
                onResult: (done) => progress.update(done),
                timeoutMs: CLIENT_TIMEOUT_SIMULATED_MS / settings.speed,
              },
            );
            const cpuAfter = machineCpuSeconds();
            const wallS = (performance.now() - wallBefore) / 1000;
            const machineCpuPercent =
              cpuBefore === undefined || cpuAfter === undefined || wallS <= 0
                ? null
                : Math.round(
                    (100 * (cpuAfter.tasks + cpuAfter.irq - cpuBefore.tasks - cpuBefore.irq)) /
                      (wallS * CPUS),
                  );
            const counters = await fleet.counters(specs);
            const summary = { ...summarise(results, counters, settings.speed), machineCpuPercent };
            records[name][label] = {
              ...summary,
              policy: def.name,
              family: def.family,
              ...(sc.costWeights === undefined || def.name !== 'switchyard'
                ? {}
                : { costWeightPerMs: weight ?? null }),
              ttftCdf: cdf(
                results.flatMap((r) => (r.ok && r.ttftMs !== undefined ? [r.ttftMs] : [])),
              ),
            };
            progress.done(
              `[${name}] ${label}: TTFT p50 ${fmt(summary.ttftMs.p50)} p99 ${fmt(summary.ttftMs.p99)} ms, errors ${(summary.errorRate * 100).toFixed(2)} %, hit rate ${(summary.cacheHitRate * 100).toFixed(1)} %`,
            );
          } finally {
            // The client's kept-alive sockets first: a sidecar draining on SIGTERM waits for them.
            closeReplayAgents();
            await routers?.stop();
            await fleet.idle();
          }
        }
      }
    }
  } finally {
    await fleet.stop();
  }

  const scenarios: BenchResults['scenarios'] = {};
  for (const [s, byPolicy] of Object.entries(records)) {
    scenarios[s] = Object.fromEntries(
      Object.entries(byPolicy).map(([p, r]) => {
        const { policy: _p, family: _f, ttftCdf: _c, ...result } = r;
        return [p, result];
      }),
    );
  }
  const lastAt = requests[requests.length - 1]?.atMs ?? 0;
  const results: BenchResults = {
    settings: {
      ...settings,
      model: MODEL,
      charsPerToken,
      blockTokens: trace.blockTokens ?? HASH_BLOCK_TOKENS,
    },
    trace: {
      file: basename(settings.trace),
      format: trace.format,
      requestsInFile: trace.requests.length,
      requestsReplayed: requests.length,
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
    scenarioDescriptions: Object.fromEntries(
      settings.scenarios.map((s) => [s, scenario(s).description]),
    ),
    targets: { checks: [] },
    durationS: 0,
  };
  results.targets = checkTargets(results);
  results.durationS = (performance.now() - started) / 1000;
  mkdirSync(settings.out, { recursive: true });
  writeFileSync(join(settings.out, 'results.json'), JSON.stringify(results, null, 2) + '\n');
  // Every run with its TTFT CDF: what the plots are drawn from, so --replot can redraw them.
  writeFileSync(join(settings.out, RUNS_FILE), JSON.stringify(records) + '\n');
  const plots = settings.plots ? await writePlots(settings.out, records, results) : [];
  writeFileSync(join(settings.out, 'report.md'), renderReport(results, plots));
  progress.line(
    `wrote ${join(settings.out, 'results.json')}, report.md${plots.length > 0 ? ` and ${plots.length} plots` : ''} in ${results.durationS.toFixed(0)} s`,
  );
  return results;
}

const RUNS_FILE = 'runs.json';

/**
 * Redraws the plots and rewrites report.md of an earlier run in `out` from its results.json and
 * runs.json, without running anything: for a change to the plots or the report.
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
  const records = read<Record<string, Record<string, RunRecord>>>(RUNS_FILE);
  const plots = await writePlots(out, records, results);
  writeFileSync(join(out, 'report.md'), renderReport(results, plots));
  return plots;
}

const fmt = (ms: number): string => (Number.isFinite(ms) ? ms.toFixed(0) : '–');

export { SCENARIOS };
