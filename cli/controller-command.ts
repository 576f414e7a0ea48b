import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { Option, type Command } from 'commander';
import { pino } from 'pino';
import { LOG_LEVELS, parseDurationMs, parseHostPort } from './args.ts';
import {
  DEFAULT_LOAD_SCRAPE_EVERY_MS,
  loadScrapePeriodProblem,
} from '../lib/load-scrape/period.ts';
import type { InjectionOptions, TlsConfig } from '../controller/controller.ts';

interface ControllerFlags {
  kubeconfig?: string;
  listen: { host: string; port: number };
  admin: { host: string; port: number };
  tlsCertFile?: string;
  tlsKeyFile?: string;
  tlsCaFile?: string;
  tlsSecret?: string;
  tlsSecretNamespace?: string;
  tlsSan: string[];
  injectionConfig?: string;
  webhookConfigName?: string;
  insecureHttp?: boolean;
  heartbeat: number;
  loadScrapeEvery: number;
  leaseNamespace: string;
  leaseName: string;
  identity: string;
  podUid?: string;
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
    .option(
      '--tls-cert-file <path>',
      'PEM certificate of the stream and webhook (re-read every 30 s, e.g. from a cert-manager Secret)',
    )
    .option('--tls-key-file <path>', 'PEM private key of --tls-cert-file')
    .option(
      '--tls-ca-file <path>',
      'with --tls-cert-file: the CA that signed it, given to injected sidecars and the webhook caBundle (default: the certificate itself)',
    )
    .option(
      '--tls-secret <name>',
      'self-managed TLS: keep a CA and a serving certificate in this Secret, creating and renewing them (instead of --tls-cert-file)',
    )
    .addOption(
      new Option('--tls-secret-namespace <ns>', 'namespace of --tls-secret').default(
        undefined,
        'the --lease-namespace',
      ),
    )
    .addOption(
      new Option(
        '--tls-san <names>',
        'with --tls-secret: DNS names and IP addresses the certificate covers, comma-separated (repeatable)',
      )
        .default([] as string[])
        .argParser((value: string, previous: string[]) => [
          ...previous,
          ...value
            .split(',')
            .map((v) => v.trim())
            .filter((v) => v !== ''),
        ]),
    )
    .option(
      '--injection-config <path>',
      'inject the sidecar into pods labelled switchyard.dev/pool: serve the webhook at /mutate/pods with this configuration (YAML or JSON; docs/injection.md)',
    )
    .option(
      '--webhook-config-name <name>',
      'with --injection-config: the MutatingWebhookConfiguration whose caBundle the leader keeps current',
    )
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
      new Option(
        '--load-scrape-every <duration>',
        "how often each endpoint's /metrics is scraped for its load (vLLM, SGLang, TensorRT-LLM) and each pool's load is streamed to its sidecars; 0 turns it off",
      )
        .default(DEFAULT_LOAD_SCRAPE_EVERY_MS, `${DEFAULT_LOAD_SCRAPE_EVERY_MS}ms`)
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
    .addOption(
      new Option(
        '--pod-uid <uid>',
        "this replica's Pod UID (the pod named by --identity): it owns the replica's Lease, which then goes with the pod",
      ).default(process.env.POD_UID, '$POD_UID'),
    )
    .addOption(new Option('--log-level <level>', 'log level').choices(LOG_LEVELS).default('info'))
    .action(async (flags: ControllerFlags) => {
      const logger = pino({ level: flags.logLevel, base: { component: 'controller' } });
      const fail = (message: string): never => {
        process.stderr.write(`switchyard controller: ${message}\n`);
        process.exit(2);
      };
      const scrapeProblem = loadScrapePeriodProblem(flags.loadScrapeEvery);
      if (scrapeProblem !== undefined) fail(scrapeProblem);
      // Loaded on demand: the Kubernetes client is large, and other subcommands never need it.
      const { KubeConfig } = await import('@kubernetes/client-node');
      const { startController } = await import('../controller/controller.ts');
      const { readTlsFiles } = await import('../controller/tls/source.ts');
      const { parseInjectionConfig } = await import('../controller/injection/config.ts');
      const { parse: parseYaml } = await import('yaml');
      const kubeConfig = new KubeConfig();
      if (flags.kubeconfig === undefined) {
        // Without a configuration the client would quietly talk to http://localhost:8080.
        const { missingKubeconfig } = await import('../status/collect.ts');
        const { existsSync } = await import('node:fs');
        const { homedir } = await import('node:os');
        const missing = missingKubeconfig({
          env: process.env,
          home: homedir(),
          exists: existsSync,
        });
        if (missing !== undefined) fail(missing);
      }
      try {
        if (flags.kubeconfig !== undefined) kubeConfig.loadFromFile(flags.kubeconfig);
        else kubeConfig.loadFromDefault();
      } catch (err) {
        fail(`cannot load the kubeconfig: ${(err as Error).message}`);
      }
      let tls: TlsConfig | undefined;
      if (flags.tlsSecret !== undefined) {
        if (flags.tlsCertFile !== undefined || flags.tlsKeyFile !== undefined)
          fail(
            'give either --tls-secret (self-managed) or --tls-cert-file/--tls-key-file, not both',
          );
        if (flags.tlsSan.length === 0)
          fail(
            '--tls-secret needs --tls-san: the names sidecars and the API server reach the controller by',
          );
        tls = {
          kind: 'self-managed',
          namespace: flags.tlsSecretNamespace ?? flags.leaseNamespace,
          secretName: flags.tlsSecret,
          names: flags.tlsSan,
        };
      } else if (flags.tlsCertFile !== undefined || flags.tlsKeyFile !== undefined) {
        if (flags.tlsCertFile === undefined || flags.tlsKeyFile === undefined)
          fail('give both --tls-cert-file and --tls-key-file');
        const files = {
          certFile: flags.tlsCertFile!,
          keyFile: flags.tlsKeyFile!,
          caFile: flags.tlsCaFile,
        };
        try {
          readTlsFiles(files); // fail at start, naming the file, rather than at the first handshake
        } catch (err) {
          fail((err as Error).message);
        }
        tls = { kind: 'files', files };
      } else if (flags.insecureHttp !== true) {
        fail(
          'the snapshot stream carries tokens and API keys: give --tls-secret (self-managed), or --tls-cert-file and --tls-key-file (or --insecure-http for a test)',
        );
      }
      let injection: InjectionOptions | undefined;
      if (flags.injectionConfig !== undefined) {
        if (tls === undefined)
          fail('--injection-config needs TLS: the API server calls webhooks over HTTPS only');
        let text = '';
        try {
          text = readFileSync(flags.injectionConfig, 'utf8');
        } catch (err) {
          fail(`cannot read --injection-config: ${(err as Error).message}`);
        }
        let parsed: unknown;
        try {
          parsed = parseYaml(text);
        } catch (err) {
          fail(
            `--injection-config ${flags.injectionConfig} is not YAML or JSON: ${(err as Error).message}`,
          );
        }
        const result = parseInjectionConfig(parsed);
        if (!result.ok)
          fail(
            `--injection-config ${flags.injectionConfig} is invalid:\n  ${result.errors.join('\n  ')}`,
          );
        else injection = { config: result.config, webhookConfigName: flags.webhookConfigName };
      } else if (flags.webhookConfigName !== undefined) {
        fail('--webhook-config-name needs --injection-config');
      }
      // What the controller creates itself (Leases, the TLS Secret) is owned by its Pod or its
      // ServiceAccount, so `helm uninstall` leaves none of it (controller/kube/owners.ts).
      const { ownersOf, SERVICE_ACCOUNT_TOKEN } = await import('../controller/kube/owners.ts');
      let token: string | undefined;
      try {
        token = readFileSync(SERVICE_ACCOUNT_TOKEN, 'utf8');
      } catch {
        token = undefined; // not in a pod
      }
      const { owners, notes } = ownersOf({
        token,
        namespace: flags.leaseNamespace,
        pod: flags.podUid === undefined ? undefined : { name: flags.identity, uid: flags.podUid },
      });
      for (const note of notes) logger.info(note);
      const controller = await startController({
        owners,
        kubeConfig,
        logger,
        listen: flags.listen,
        admin: flags.admin,
        tls,
        injection,
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
        loadScrapeEveryMs: flags.loadScrapeEvery,
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
