import { readFileSync } from 'node:fs';
import { Option, type Command } from 'commander';
import { pino } from 'pino';
import { LOG_LEVELS, collectRepeated, parseDurationMs, parseHostPort } from './args.ts';
import { DEFAULT_LOAD_SCRAPE_EVERY_MS } from '../lib/load-scrape/period.ts';
import type { HostPort } from '../sidecar/sidecar.ts';
import { RelayConfigError, readTokenFile, startRelay } from '../relay/relay.ts';

interface RelayFlags {
  poolFile: string[];
  listen: HostPort;
  namespace: string;
  tokenFile?: string;
  tlsCertFile?: string;
  tlsKeyFile?: string;
  loadScrapeEvery: number;
  placementBytesPerSecond: number;
  heartbeat: number;
  logLevel: (typeof LOG_LEVELS)[number];
}

/** The controller's default: 8 KiB/s of placements per subscriber (docs/fleet-view.md). */
const DEFAULT_PLACEMENT_BYTES_PER_SECOND = 8192;

/** `switchyard relay`: the controller's stream for standalone sidecars, from pool files. */
export function addRelayCommand(program: Command): void {
  program
    .command('relay')
    .description(
      'Serve pool files to sidecars started with --controller, without Kubernetes: their snapshots, ' +
        "the servers' load scraped once for every sidecar, and where each sidecar sent which prompt " +
        'prefixes, so that every sidecar routes as if it saw the whole fleet (docs/fleet-view.md).',
    )
    .requiredOption(
      '--pool-file <path>',
      'a pool file to serve (repeatable, one pool each); re-read when it changes',
      collectRepeated,
    )
    .addOption(
      new Option('--listen <host:port>', 'address sidecars connect to (their --controller)')
        .default(parseHostPort('127.0.0.1:9300'), '127.0.0.1:9300')
        .argParser(parseHostPort),
    )
    .option(
      '--namespace <ns>',
      'the namespace the pools are served in (sidecars: --namespace)',
      'default',
    )
    .option(
      '--token-file <path>',
      'a shared secret sidecars present as their --token-file; required off loopback. With it, sidecars get the pools’ API keys',
    )
    .option(
      '--tls-cert-file <path>',
      'PEM certificate (sidecars: --ca-file); plain HTTP without it',
    )
    .option('--tls-key-file <path>', 'PEM private key of --tls-cert-file')
    .addOption(
      new Option(
        '--load-scrape-every <duration>',
        "how often each endpoint's /metrics is scraped for the load its server reports; 0 turns it off",
      )
        .default(DEFAULT_LOAD_SCRAPE_EVERY_MS, `${DEFAULT_LOAD_SCRAPE_EVERY_MS}ms`)
        .argParser(parseDurationMs),
    )
    .addOption(
      new Option(
        '--placement-bytes-per-second <n>',
        'the most bytes of placements (where other sidecars sent which prompts) sent to each sidecar per second; 0 turns sharing off',
      )
        .default(DEFAULT_PLACEMENT_BYTES_PER_SECOND)
        .argParser((v) => {
          const n = Number(v);
          if (!Number.isInteger(n) || n < 0) throw new Error('expected a whole number >= 0');
          return n;
        }),
    )
    .addOption(
      new Option('--heartbeat <duration>', 'heartbeat interval on snapshot streams')
        .default(10_000, '10s')
        .argParser(parseDurationMs),
    )
    .addOption(new Option('--log-level <level>', 'log level').choices(LOG_LEVELS).default('info'))
    .action(async (flags: RelayFlags) => {
      const logger = pino({ level: flags.logLevel, base: { component: 'relay' } });
      if ((flags.tlsCertFile === undefined) !== (flags.tlsKeyFile === undefined)) {
        process.stderr.write('switchyard relay: --tls-cert-file and --tls-key-file go together\n');
        process.exit(2);
      }
      let relay;
      try {
        relay = await startRelay({
          poolFiles: flags.poolFile,
          namespace: flags.namespace,
          host: flags.listen.host,
          port: flags.listen.port,
          token: flags.tokenFile === undefined ? undefined : readTokenFile(flags.tokenFile),
          tls:
            flags.tlsCertFile === undefined || flags.tlsKeyFile === undefined
              ? undefined
              : {
                  cert: readFileSync(flags.tlsCertFile, 'utf8'),
                  key: readFileSync(flags.tlsKeyFile, 'utf8'),
                },
          loadScrapeEveryMs: flags.loadScrapeEvery,
          placementBytesPerSecond: flags.placementBytesPerSecond,
          heartbeatMs: flags.heartbeat,
          env: process.env,
          logger,
        });
      } catch (err) {
        if (!(err instanceof RelayConfigError) && (err as NodeJS.ErrnoException).code === undefined)
          throw err;
        process.stderr.write(`switchyard relay: ${(err as Error).message}\n`);
        process.exit(2);
      }
      logger.info(
        { url: relay.url, pools: flags.poolFile.length, namespace: flags.namespace },
        `relay listening; start sidecars with --controller ${relay.url} --namespace ${flags.namespace} --pool <name>`,
      );
      // The URL alone on stdout, for scripts (the bench reads it).
      process.stdout.write(`${relay.url}\n`);
      const stop = (signal: string): void => {
        logger.info({ signal }, 'shutdown requested');
        relay.close();
        process.exit(0);
      };
      process.once('SIGTERM', () => stop('SIGTERM'));
      process.once('SIGINT', () => stop('SIGINT'));
    });
}
