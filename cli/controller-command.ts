import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { Option, type Command } from 'commander';
import { pino } from 'pino';
import { LOG_LEVELS, parseDurationMs, parseHostPort } from './args.ts';

interface ControllerFlags {
  kubeconfig?: string;
  listen: { host: string; port: number };
  admin: { host: string; port: number };
  tlsCertFile?: string;
  tlsKeyFile?: string;
  insecureHttp?: boolean;
  heartbeat: number;
  leaseNamespace: string;
  leaseName: string;
  identity: string;
  logLevel: (typeof LOG_LEVELS)[number];
}

/** `switchyard controller`: watches InferencePools and streams snapshots to sidecars. */
export function addControllerCommand(program: Command): void {
  program
    .command('controller')
    .description(
      'Watch InferencePools, Services, EndpointSlices and referenced Secrets; stream a snapshot of each pool to its sidecars over HTTPS; the lease holder writes pool status.',
    )
    .option(
      '--kubeconfig <path>',
      'kubeconfig file (default: in-cluster config, else $KUBECONFIG or ~/.kube/config)',
    )
    .addOption(
      new Option('--listen <host:port>', 'snapshot stream address')
        .default(parseHostPort('0.0.0.0:8443'), '0.0.0.0:8443')
        .argParser(parseHostPort),
    )
    .addOption(
      new Option('--admin <host:port>', 'metrics and probes address')
        .default(parseHostPort('0.0.0.0:9091'), '0.0.0.0:9091')
        .argParser(parseHostPort),
    )
    .option('--tls-cert-file <path>', 'PEM certificate of the snapshot stream')
    .option('--tls-key-file <path>', 'PEM private key of the snapshot stream')
    .option(
      '--insecure-http',
      'serve the stream over plain HTTP (tests only: tokens and API keys would cross the network in clear)',
    )
    .addOption(
      new Option('--heartbeat <duration>', 'heartbeat interval on snapshot streams')
        .default(10_000, '10s')
        .argParser(parseDurationMs),
    )
    .addOption(
      new Option('--lease-namespace <ns>', 'namespace of the leader-election Lease').default(
        process.env.POD_NAMESPACE ?? 'switchyard',
        '$POD_NAMESPACE or switchyard',
      ),
    )
    .option('--lease-name <name>', 'name of the leader-election Lease', 'switchyard-controller')
    .addOption(
      new Option('--identity <id>', 'this replica in the Lease').default(
        process.env.POD_NAME ?? hostname(),
        '$POD_NAME or the hostname',
      ),
    )
    .addOption(new Option('--log-level <level>', 'log level').choices(LOG_LEVELS).default('info'))
    .action(async (flags: ControllerFlags) => {
      const logger = pino({ level: flags.logLevel, base: { component: 'controller' } });
      const fail = (message: string): never => {
        process.stderr.write(`switchyard controller: ${message}\n`);
        process.exit(2);
      };
      // Loaded on demand: the Kubernetes client is large, and other subcommands never need it.
      const { KubeConfig } = await import('@kubernetes/client-node');
      const { startController } = await import('../controller/controller.ts');
      const kubeConfig = new KubeConfig();
      try {
        if (flags.kubeconfig !== undefined) kubeConfig.loadFromFile(flags.kubeconfig);
        else kubeConfig.loadFromDefault();
      } catch (err) {
        fail(`cannot load the kubeconfig: ${(err as Error).message}`);
      }
      let tls: { cert: string; key: string } | undefined;
      if (flags.tlsCertFile !== undefined || flags.tlsKeyFile !== undefined) {
        if (flags.tlsCertFile === undefined || flags.tlsKeyFile === undefined)
          fail('give both --tls-cert-file and --tls-key-file');
        try {
          tls = {
            cert: readFileSync(flags.tlsCertFile!, 'utf8'),
            key: readFileSync(flags.tlsKeyFile!, 'utf8'),
          };
        } catch (err) {
          fail(`cannot read the TLS files: ${(err as Error).message}`);
        }
      } else if (flags.insecureHttp !== true) {
        fail(
          'the snapshot stream carries tokens and API keys: give --tls-cert-file and --tls-key-file (or --insecure-http for a test)',
        );
      }
      const controller = await startController({
        kubeConfig,
        logger,
        listen: flags.listen,
        admin: flags.admin,
        tls,
        heartbeatMs: flags.heartbeat,
        lease: {
          namespace: flags.leaseNamespace,
          name: flags.leaseName,
          identity: flags.identity,
          durationMs: 15_000,
          renewEveryMs: 2_000,
        },
        sidecarStaleAfterMs: 60_000,
        statusEveryMs: 1_000,
        replicaSummaryEveryMs: 5_000,
      });
      const stop = (signal: string): void => {
        logger.info({ signal }, 'shutdown requested');
        controller.stop().then(
          () => process.exit(0),
          () => process.exit(1),
        );
      };
      process.once('SIGTERM', () => stop('SIGTERM'));
      process.once('SIGINT', () => stop('SIGINT'));
    });
}
