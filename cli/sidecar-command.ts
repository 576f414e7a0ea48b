import { hostname } from 'node:os';
import { InvalidArgumentError, Option, type Command } from 'commander';
import { pino } from 'pino';
import {
  LOG_LEVELS,
  collectRepeated,
  parseDurationMs,
  parseHostPort,
  parsePositiveInt,
} from './args.ts';
import {
  DEFAULT_LOAD_SCRAPE_EVERY_MS,
  loadScrapePeriodProblem,
} from '../lib/load-scrape/period.ts';
import { PICKERS, type Picker } from '../sidecar/policy/baseline-pickers.ts';
import type { ConfigSource, HostPort, ModelDiscoveryMode } from '../sidecar/sidecar.ts';

/** `--model-discovery` (sidecar.ts, `ModelDiscoveryMode`, says what each does). */
const MODEL_DISCOVERY_MODES: readonly ModelDiscoveryMode[] = ['auto', 'on', 'off'];

interface SidecarFlags {
  poolFile?: string[];
  controller?: string;
  namespace?: string;
  pool?: string[];
  tokenFile: string;
  caFile?: string;
  cacheFile?: string;
  sidecarId: string;
  reportEvery: number;
  listen: HostPort;
  admin: HostPort;
  maxBodyBytes: number;
  shutdownGrace: number;
  startupGrace: number;
  logLevel: (typeof LOG_LEVELS)[number];
  picker: Picker;
  loadScrapeEvery: number;
  modelDiscovery: ModelDiscoveryMode;
  priority?: number;
  workload?: string;
  sharePlacements: 'on' | 'off';
}

function configSource(flags: SidecarFlags): ConfigSource | string {
  if (flags.poolFile !== undefined && flags.controller !== undefined)
    return 'give either --pool-file or --controller, not both';
  if (flags.poolFile !== undefined) {
    if (flags.pool !== undefined)
      return '--pool is for --controller; a pool file names its pool (metadata.name)';
    return {
      kind: 'file',
      poolFile: flags.poolFile.length === 1 ? flags.poolFile[0]! : flags.poolFile,
      loadScrapeEveryMs: flags.loadScrapeEvery,
    };
  }
  if (flags.controller === undefined)
    return 'give --pool-file (standalone) or --controller with --pool (in Kubernetes)';
  if (flags.pool === undefined) return '--controller needs --pool <name>';
  return {
    kind: 'controller',
    controllerUrl: flags.controller,
    namespace: flags.namespace ?? process.env.POD_NAMESPACE ?? 'default',
    pool: flags.pool.length === 1 ? flags.pool[0]! : flags.pool,
    tokenFile: flags.tokenFile,
    caFile: flags.caFile,
    cacheFile: flags.cacheFile,
    sidecarId: flags.sidecarId,
    reportEveryMs: flags.reportEvery,
    sharePlacements: flags.sharePlacements === 'on',
  };
}

/** `--priority`: an integer, negative allowed. */
function parsePriorityFlag(value: string): number {
  if (!/^[+-]?\d{1,9}$/.test(value.trim()))
    throw new InvalidArgumentError(
      `expected an integer like 10 or -1, got ${JSON.stringify(value)}`,
    );
  return Number.parseInt(value, 10);
}

/** `switchyard sidecar`: the routing proxy, from a pool file or from the controller's stream. */
export function addSidecarCommand(program: Command): void {
  program
    .command('sidecar')
    .description(
      'Run the routing proxy for one pool or several: standalone from pool files, or fed by the controller.',
    )
    .option(
      '--pool-file <path>',
      'standalone: an InferencePool manifest whose backends are URLs, or a directory of them (*.yaml, *.yml, *.json, by name); repeatable, the first pool is the default; watched, a valid change applies live',
      collectRepeated,
    )
    .option(
      '--controller <url>',
      'in Kubernetes: the controller’s snapshot stream, e.g. https://switchyard-controller.switchyard.svc:8443',
    )
    .option(
      '--pool <name>',
      'with --controller: the InferencePool to route for; repeatable (one stream each), the first is the default',
      collectRepeated,
    )
    .addOption(
      new Option('--namespace <ns>', 'with --controller: the pool’s namespace').default(
        undefined,
        '$POD_NAMESPACE or default',
      ),
    )
    .option(
      '--token-file <path>',
      'with --controller: projected ServiceAccount token (audience switchyard)',
      '/var/run/secrets/switchyard/token',
    )
    .option('--ca-file <path>', 'with --controller: CA bundle of the controller’s certificate')
    .option(
      '--cache-file <path>',
      'with --controller: keep the last snapshot here and serve from it after a restart (several pools: one file each beside it, snapshot.<pool>.json)',
    )
    .addOption(
      new Option('--sidecar-id <id>', 'with --controller: this sidecar in reports').default(
        process.env.POD_NAME ?? hostname(),
        '$POD_NAME or the hostname',
      ),
    )
    .addOption(
      new Option(
        '--report-every <duration>',
        'with --controller: how often this sidecar reports to the controller (applied snapshot, endpoint health, demand for the autoscaling gauges); every second while its pool has budgets',
      )
        .default(10_000, '10s')
        .argParser((value: string) => {
          const ms = parseDurationMs(value);
          if (ms <= 0) throw new InvalidArgumentError('expected a duration above 0, like 10s');
          return ms;
        }),
    )
    .addOption(
      new Option('--listen <host:port>', 'proxy address the app calls')
        .default(parseHostPort('127.0.0.1:8080'), '127.0.0.1:8080')
        .argParser(parseHostPort),
    )
    .addOption(
      new Option(
        '--admin <host:port>',
        'admin address: /metrics /healthz /startupz /readyz /debug/backends',
      )
        .default(parseHostPort('127.0.0.1:9090'), '127.0.0.1:9090')
        .argParser(parseHostPort),
    )
    .addOption(
      new Option('--max-body-bytes <n>', 'largest request body accepted (413 past it)')
        .default(16 * 1024 * 1024, '16 MiB')
        .argParser(parsePositiveInt),
    )
    .addOption(
      new Option(
        '--shutdown-grace <duration>',
        'on SIGTERM, how long streams in progress may finish',
      )
        .default(30_000, '30s')
        .argParser(parseDurationMs),
    )
    .addOption(
      new Option(
        '--startup-grace <duration>',
        "/startupz passes once a configuration is applied, or after this long without one (so a controller that is down delays the app's start by at most this)",
      )
        .default(30_000, '30s')
        .argParser(parseDurationMs),
    )
    .addOption(
      new Option(
        '--load-scrape-every <duration>',
        "standalone: how often each endpoint's /metrics is scraped for the load its server reports (vLLM, SGLang, TensorRT-LLM; one that answers 404 is left alone); 0 turns it off. With --controller the controller scrapes",
      )
        .default(DEFAULT_LOAD_SCRAPE_EVERY_MS, `${DEFAULT_LOAD_SCRAPE_EVERY_MS}ms`)
        .argParser(parseDurationMs),
    )
    .addOption(
      new Option(
        '--model-discovery <mode>',
        "ask endpoints whose backend declares no models for their /v1/models (every 5 s): auto = when routing by model is in use (several pools, aliases, or a backend's models), on, off",
      )
        .choices(MODEL_DISCOVERY_MODES)
        .default('auto'),
    )
    .addOption(
      new Option(
        '--priority <int>',
        "flow control: the priority of this pod's requests without an x-switchyard-priority header (higher first, negative = sheddable); default: the pool's flowControl.defaultPriority. Injection sets it from the pod annotation switchyard.dev/priority",
      ).argParser(parsePriorityFlag),
    )
    .addOption(
      new Option(
        '--share-placements <on|off>',
        "with --controller: the fleet-wide view: upload where this sidecar sent which prompt prefixes (hashes only, never text) to a controller that relays them, and route by what the other sidecars placed; off: this sidecar's own placements only",
      )
        .choices(['on', 'off'])
        .default('on'),
    )
    .option(
      '--workload <value>',
      "flow control, standalone: this sidecar's workload for pools whose flowControl.workload is a ServiceAccount or a pod label (with --controller the controller names it)",
    )
    .addOption(new Option('--log-level <level>', 'log level').choices(LOG_LEVELS).default('info'))
    .addOption(
      new Option(
        '--picker <name>',
        'benchmarks only: replace prefix affinity and P2C by a baseline (breakers and retries stay)',
      )
        .choices(PICKERS)
        .default('p2c'),
    )
    .addHelpText(
      'after',
      '\nExamples:\n  switchyard sidecar --pool-file pool.yaml\n' +
        '  switchyard sidecar --pool-file chat.yaml --pool-file embed.yaml   (routed by the request model)\n' +
        `  switchyard sidecar --controller https://switchyard-controller.switchyard.svc:8443 --pool chat --ca-file /var/run/secrets/switchyard/ca.crt\n` +
        '  curl http://127.0.0.1:8080/v1/chat/completions -d \'{"model":"m","messages":[{"role":"user","content":"hi"}]}\'',
    )
    .action(async (flags: SidecarFlags) => {
      const scrapeProblem = loadScrapePeriodProblem(flags.loadScrapeEvery);
      if (scrapeProblem !== undefined) {
        process.stderr.write(`switchyard sidecar: ${scrapeProblem}\n`);
        process.exit(2);
      }
      const source = configSource(flags);
      if (typeof source === 'string') {
        process.stderr.write(`switchyard sidecar: ${source}\n`);
        process.exit(2);
      }
      const { ConfigError, startSidecar } = await import('../sidecar/sidecar.ts');
      const logger = pino({ level: flags.logLevel, base: { component: 'sidecar' } });
      try {
        const sidecar = await startSidecar({
          source,
          listen: flags.listen,
          admin: flags.admin,
          logger,
          maxBodyBytes: flags.maxBodyBytes,
          shutdownGraceMs: flags.shutdownGrace,
          startupGraceMs: flags.startupGrace,
          env: process.env,
          picker: flags.picker,
          modelDiscovery: flags.modelDiscovery,
          defaultPriority: flags.priority,
          workload: flags.workload,
        });
        const stop = (signal: string): void => {
          logger.info({ signal }, 'shutdown requested');
          sidecar.shutdown().then(
            () => process.exit(0),
            () => process.exit(1),
          );
        };
        process.once('SIGTERM', () => stop('SIGTERM'));
        process.once('SIGINT', () => stop('SIGINT'));
        // SIGHUP means "re-read your configuration" to daemons (nginx, HAProxy); Node's default
        // would kill the sidecar and cut every stream. A controller-fed sidecar has no file to
        // re-read: it logs and carries on (docs/sidecar.md, Signals).
        process.on('SIGHUP', () => {
          if (source.kind !== 'file') {
            logger.info(
              { signal: 'SIGHUP' },
              'SIGHUP ignored: the configuration comes from the controller',
            );
            return;
          }
          logger.info({ signal: 'SIGHUP', file: source.poolFile }, 'reloading the pool file');
          void sidecar.reload();
        });
      } catch (err) {
        if (err instanceof ConfigError) {
          process.stderr.write(`switchyard sidecar: ${err.message}\n`);
          process.exit(2);
        }
        const e = err as NodeJS.ErrnoException;
        if (e.code === 'EADDRINUSE') {
          process.stderr.write(
            `switchyard sidecar: address in use (${e.message}); pick another with --listen/--admin\n`,
          );
          process.exit(2);
        }
        throw err;
      }
    });
}
