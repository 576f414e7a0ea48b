import { Command, Option } from 'commander';
import { pino } from 'pino';
import { LOG_LEVELS, parseDurationMs, parseHostPort, parsePositiveInt } from './args.ts';
import { ConfigError, startSidecar, type HostPort } from '../sidecar/sidecar.ts';
import { addSimCommand } from './sim-command.ts';
import { addDemoCommand } from './demo-command.ts';

const program = new Command();
program
  .name('switchyard')
  .description(
    'Balances OpenAI-compatible LLM traffic across inference endpoints from inside each application pod. ' +
      'Apps call http://127.0.0.1:8080/v1; the sidecar picks an endpoint per request (power of two ' +
      'choices on in-flight × TTFT plus cost, prefix-cache affinity, passive circuit breakers, a retry budget).',
  )
  .showHelpAfterError('(run with --help for usage)')
  .enablePositionalOptions();

interface SidecarFlags {
  poolFile: string;
  listen: HostPort;
  admin: HostPort;
  maxBodyBytes: number;
  shutdownGrace: number;
  logLevel: (typeof LOG_LEVELS)[number];
}

program
  .command('sidecar')
  .description('Run the routing proxy for one pool (standalone from a pool file).')
  .requiredOption(
    '--pool-file <path>',
    'InferencePool manifest whose backends are URLs; watched, a valid change applies live',
  )
  .addOption(
    new Option('--listen <host:port>', 'proxy address the app calls')
      .default(parseHostPort('127.0.0.1:8080'), '127.0.0.1:8080')
      .argParser(parseHostPort),
  )
  .addOption(
    new Option('--admin <host:port>', 'admin address: /metrics /healthz /readyz /debug/backends')
      .default(parseHostPort('127.0.0.1:9090'), '127.0.0.1:9090')
      .argParser(parseHostPort),
  )
  .addOption(
    new Option('--max-body-bytes <n>', 'largest request body accepted (413 past it)')
      .default(16 * 1024 * 1024, '16 MiB')
      .argParser(parsePositiveInt),
  )
  .addOption(
    new Option('--shutdown-grace <duration>', 'on SIGTERM, how long streams in progress may finish')
      .default(30_000, '30s')
      .argParser(parseDurationMs),
  )
  .addOption(new Option('--log-level <level>', 'log level').choices(LOG_LEVELS).default('info'))
  .addHelpText(
    'after',
    '\nExample:\n  switchyard sidecar --pool-file pool.yaml\n  curl http://127.0.0.1:8080/v1/chat/completions -d \'{"model":"m","messages":[{"role":"user","content":"hi"}]}\'',
  )
  .action(async (flags: SidecarFlags) => {
    const logger = pino({ level: flags.logLevel, base: { component: 'sidecar' } });
    try {
      const sidecar = await startSidecar({
        poolFile: flags.poolFile,
        listen: flags.listen,
        admin: flags.admin,
        logger,
        maxBodyBytes: flags.maxBodyBytes,
        shutdownGraceMs: flags.shutdownGrace,
        env: process.env,
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

addSimCommand(program);
addDemoCommand(program);

await program.parseAsync(process.argv);
