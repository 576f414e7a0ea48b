import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { InvalidArgumentError, Option, type Command } from 'commander';
import {
  INSTALL,
  LOAD_SOURCES,
  POLICY_NAMES as BENCH_POLICY_NAMES,
  PRIORITY_SCENARIO,
  PRIORITY_VARIANT_NAMES,
  SCENARIOS,
  type LoadSource,
} from '../lib/bench-names.ts';
import { parsePositiveInt } from './args.ts';

const REPO = fileURLToPath(new URL('../', import.meta.url));
const DEFAULT_TRACE = fileURLToPath(
  new URL('../../shared/traces/mooncake-synthetic.jsonl', import.meta.url),
);
const SCENARIO_NAMES: readonly string[] = [...SCENARIOS, PRIORITY_SCENARIO];
const POLICY_NAMES: readonly string[] = BENCH_POLICY_NAMES;

const list =
  (allowed: readonly string[], what: string, all: readonly string[] = allowed) =>
  (value: string): string[] => {
    const items =
      value === 'all'
        ? [...all]
        : value
            .split(',')
            .map((v) => v.trim())
            .filter((v) => v !== '');
    for (const item of items)
      if (!allowed.includes(item))
        throw new InvalidArgumentError(
          `unknown ${what} "${item}"; known: ${allowed.join(', ')}, or all`,
        );
    if (items.length === 0) throw new InvalidArgumentError(`give at least one ${what}`);
    return items;
  };

const positiveNumber = (value: string): number => {
  const n = Number(value);
  if (!Number.isFinite(n) || n <= 0) throw new InvalidArgumentError('expected a number > 0');
  return n;
};

interface BenchFlags {
  trace: string;
  backends: number;
  routers: number;
  policies: string[];
  scenario: string[];
  timeScale: number;
  speed: number;
  maxRequests: number;
  seed: number;
  seeds: number;
  prompts: 'chat' | 'single';
  out: string;
  heterogeneous?: boolean;
  plots: boolean;
  quiet?: boolean;
  replot?: boolean;
  dumpRequests?: boolean;
  loadSource: LoadSource;
  variants?: string[];
  window: number;
  ramp: number;
}

/** `switchyard bench`: the routing benchmark (docs/benchmarks.md#routing). */
export function addBenchCommand(program: Command): void {
  program
    .command('bench')
    .description(
      'Replay an LLM request trace against simulated backends through R instances of every routing policy (switchyard, baselines, an oracle, HAProxy, nginx, Caddy, LiteLLM, SMG, vllm-router; the gateways also as one central instance; GAIE’s endpoint picker behind an ext_proc stand-in for Envoy) and write results.json, a report and plots.',
    )
    .addOption(
      new Option(
        '--trace <file>',
        'trace: JSON lines (Mooncake) or Azure CSV, told apart by content',
      ).default(DEFAULT_TRACE, '../shared/traces/mooncake-synthetic.jsonl'),
    )
    .addOption(
      new Option('--backends <k>', 'simulated backends').default(8).argParser(parsePositiveInt),
    )
    .addOption(
      new Option(
        '--routers <r>',
        'instances of every router, each serving 1/R of the clients (the -central variants: one for all)',
      )
        .default(4)
        .argParser(parsePositiveInt),
    )
    .addOption(
      new Option('--policies <list>', `comma-separated, or all: ${POLICY_NAMES.join(', ')}`)
        .default(POLICY_NAMES, 'all')
        .argParser(list(POLICY_NAMES, 'policy')),
    )
    .addOption(
      new Option(
        '--scenario <list>',
        `comma-separated, or all (every one but ${PRIORITY_SCENARIO}, which runs on its own): ${SCENARIO_NAMES.join(', ')}`,
      )
        .default(['steady', 'fast-failure'], 'steady,fast-failure')
        .argParser(list(SCENARIO_NAMES, 'scenario', SCENARIOS)),
    )
    .addOption(
      new Option(
        '--variants <list>',
        `--scenario ${PRIORITY_SCENARIO}: comma-separated, or all (default): ${PRIORITY_VARIANT_NAMES.join(', ')}`,
      ).argParser(list(PRIORITY_VARIANT_NAMES, 'variant')),
    )
    .addOption(
      new Option(
        '--window <seconds>',
        `--scenario ${PRIORITY_SCENARIO}: measured wall seconds per variant`,
      )
        .default(60)
        .argParser(positiveNumber),
    )
    .addOption(
      new Option(
        '--ramp <seconds>',
        `--scenario ${PRIORITY_SCENARIO}: wall seconds of traffic before the window (not measured)`,
      )
        .default(10)
        .argParser(positiveNumber),
    )
    .addOption(
      new Option(
        '--time-scale <factor>',
        'wall ms per trace ms (0.02: arrivals 50 times faster; with --speed it sets the load)',
      )
        .default(0.02)
        .argParser(positiveNumber),
    )
    .addOption(
      new Option(
        '--speed <factor>',
        'simulator speed: simulated ms per wall ms (with --time-scale it sets the load)',
      )
        .default(3.2)
        .argParser(positiveNumber),
    )
    .addOption(
      new Option(
        '--max-requests <n>',
        'replay n requests spread evenly over the trace, every k-th (0: the whole trace)',
      )
        .default(1000)
        .argParser((v: string) => {
          const n = Number(v);
          if (!Number.isInteger(n) || n < 0)
            throw new InvalidArgumentError('expected a whole number >= 0');
          return n;
        }),
    )
    .addOption(
      new Option('--seed <n>', 'first seed of prompts and fault draws')
        .default(1)
        .argParser(Number),
    )
    .addOption(
      new Option(
        '--seeds <n>',
        'runs of every policy, seeds seed..seed+n-1; results hold the median, the report median and range',
      )
        .default(3)
        .argParser(parsePositiveInt),
    )
    .addOption(
      new Option(
        '--prompts <shape>',
        'chat: rebuild conversations from hash-id chains and send later turns as messages repeating the earlier turns and answers; single: each prompt as one user message (a trace without hash ids is always single)',
      )
        .choices(['chat', 'single'])
        .default('chat'),
    )
    .addOption(
      new Option('--out <dir>', 'where results.json, report.md and plots go').default(
        `${REPO}bench/results/routing`,
        'bench/results/routing',
      ),
    )
    .addOption(
      new Option(
        '--load-source <who>',
        "what feeds switchyard's sidecars: one controller stream they all subscribe to, which scrapes the servers' load once and relays where each sidecar sent which prompts (controller, as in Kubernetes or with switchyard relay), or each sidecar scraping the servers itself and knowing only its own prompts (sidecar, standalone from a pool file)",
      )
        .choices(LOAD_SOURCES)
        .default('controller'),
    )
    .option('--heterogeneous', 'make b1 half as fast and give b2 an eighth of the cache')
    .option('--no-plots', 'skip the plots')
    .option('--quiet', 'no progress output')
    .option(
      '--dump-requests',
      "also write every request's outcome (sent, ended, TTFT, backend, a switchyard sidecar's affinity decision, prompt size, turn) to requests/<scenario>/<policy>-seed<n>.json under --out",
    )
    .option(
      '--replot',
      'run nothing: redraw the plots and rewrite report.md of the earlier run in --out',
    )
    .addHelpText(
      'after',
      '\nPeers are used when installed and skipped with one line otherwise: apt-get install haproxy nginx caddy;\n' +
        `LiteLLM: ${INSTALL.litellm}\n` +
        `SMG: ${INSTALL.smg}\n` +
        `vllm-router: ${INSTALL.vllmRouter}\n` +
        '(or point SWITCHYARD_LITELLM, SWITCHYARD_SMG, SWITCHYARD_VLLM_ROUTER at the executables).\n' +
        'SMG and vllm-router register a backend only once it answers GET /health: the bench stops first if the simulators do not.\n\n' +
        'Examples:\n  switchyard bench                                  # steady + fast-failure, 1,000 requests, every policy\n' +
        '  switchyard bench --scenario all --max-requests 0  # the whole trace, every scenario (long)\n' +
        '  switchyard bench --trace ../shared/traces/azure2023-conv.csv --policies switchyard,round-robin\n' +
        '  switchyard bench --scenario conversations --routers 16 --policies switchyard,smg-cache-aware,smg-cache-aware-central\n' +
        '  switchyard bench --scenario lora --policies switchyard,round-robin,least-connections,p2c  # 16 LoRA adapters, 4 resident per server\n' +
        '  switchyard bench --routers 16 --load-source sidecar  # each sidecar scrapes the servers itself, as standalone from a pool file\n' +
        '  switchyard bench --scenario priority --routers 4  # interactive chat beside a batch flood, with and without flow control (bench/results/routing-priority/)',
    )
    .action(async (flags: BenchFlags) => {
      if (flags.replot === true) {
        const { replot } = await import('../bench/routing/run.ts');
        try {
          const plots = await replot(flags.out);
          process.stderr.write(`wrote ${flags.out}/report.md and ${plots.length} plots\n`);
        } catch (err) {
          process.stderr.write(`switchyard bench: ${(err as Error).message}\n`);
          process.exit(2);
        }
        return;
      }
      if (flags.scenario.includes(PRIORITY_SCENARIO)) {
        if (flags.scenario.length > 1) {
          process.stderr.write(
            `switchyard bench: --scenario ${PRIORITY_SCENARIO} runs on its own (its own clients, not the trace); run the others separately\n`,
          );
          process.exit(2);
        }
        for (const signal of ['SIGINT', 'SIGTERM'] as const)
          process.once(signal, () => {
            process.stderr.write(
              `\nswitchyard bench: ${signal}, stopping the simulators and routers\n`,
            );
            process.exit(130);
          });
        const { runPriorityBench } = await import('../bench/routing/priority.ts');
        const out = flags.out.endsWith('bench/results/routing')
          ? `${flags.out}-priority`
          : flags.out;
        const results = await runPriorityBench({
          backends: flags.backends,
          routers: flags.routers,
          variants: flags.variants,
          speed: flags.speed,
          seed: flags.seed,
          windowS: flags.window,
          rampS: flags.ramp,
          out,
          quiet: flags.quiet === true,
          loadSource: flags.loadSource,
        });
        const failed = results.targets.filter((t) => t.met === false).length;
        if (failed > 0 && flags.quiet !== true)
          process.stderr.write(`${failed} target(s) not met: see ${out}\n`);
        return;
      }
      if (!existsSync(flags.trace)) {
        process.stderr.write(`switchyard bench: no trace at ${flags.trace} (give --trace FILE)\n`);
        process.exit(2);
      }
      if (!existsSync(`${REPO}bench/routing/run.ts`)) {
        process.stderr.write(
          'switchyard bench: the benchmark is not part of this installation; run it from a checkout of the repository\n',
        );
        process.exit(2);
      }
      // Ctrl-C: exit through process.exit, so the exit hooks stop every simulator and router.
      for (const signal of ['SIGINT', 'SIGTERM'] as const)
        process.once(signal, () => {
          process.stderr.write(
            `\nswitchyard bench: ${signal}, stopping the simulators and routers\n`,
          );
          process.exit(130);
        });
      const { runBench, BenchSetupError } = await import('../bench/routing/run.ts');
      const { TraceError } = await import('../bench/routing/trace.ts');
      try {
        const results = await runBench({
          trace: flags.trace,
          backends: flags.backends,
          routers: flags.routers,
          policies: flags.policies,
          scenarios: flags.scenario as never,
          timeScale: flags.timeScale,
          speed: flags.speed,
          maxRequests: flags.maxRequests,
          seed: flags.seed,
          seeds: flags.seeds,
          prompts: flags.prompts,
          out: flags.out,
          heterogeneous: flags.heterogeneous === true,
          plots: flags.plots,
          quiet: flags.quiet === true,
          dumpRequests: flags.dumpRequests === true,
          loadSource: flags.loadSource,
        });
        const failed = results.targets.checks.filter((c) => c.met === false).length;
        if (failed > 0 && flags.quiet !== true)
          process.stderr.write(`${failed} target(s) not met: see ${flags.out}/report.md\n`);
      } catch (err) {
        if (err instanceof TraceError) {
          process.stderr.write(`switchyard bench: ${flags.trace}: ${err.message}\n`);
          process.exit(2);
        }
        if (err instanceof BenchSetupError) {
          process.stderr.write(`switchyard bench: ${err.message}\n`);
          process.exit(2);
        }
        throw err;
      }
    });
}
