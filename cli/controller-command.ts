import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { Option, type Command } from 'commander';
import { pino } from 'pino';
import { LOG_LEVELS, parseDurationMs, parseHostPort, parseNonNegativeNumber } from './args.ts';
import { DEFAULT_LOAD_SCRAPE_EVERY_MS } from '../lib/load-scrape/period.ts';
import { DEFAULT_TOKEN_REVIEW_CACHE_MS } from '../controller/stream/review-cache.ts';
import type { ControllerFlags as ControllerFlagValues } from '../controller/controller-options.ts';

type ControllerFlags = ControllerFlagValues & {
  logLevel: (typeof LOG_LEVELS)[number];
  peerTokenFile?: string | undefined;
};

/** `switchyard controller`: watches InferencePools and streams snapshots to sidecars. */
export function addControllerCommand(program: Command): void {
  program
    .command('controller')
    .description(
      'Watch InferencePools, Services, EndpointSlices and referenced Secrets; stream a snapshot of each pool to its sidecars over HTTPS; the lease holder writes pool status.',
    )
    .option(
      '--kubeconfig <path>',
      'kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, else the in-cluster config)',
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
      new Option(
        '--token-review-cache <duration>',
        "the longest a sidecar token's positive TokenReview is reused (1m to 1h): never past the token's expiry, only while the controller's ServiceAccount watch holds the token's account (otherwise 5m at most), and for a pod-bound token only while the controller's pod watch holds the pod; a connected sidecar's answer is renewed in the background in the minute after, newcomers' reviews first (docs/snapshot-protocol.md#authentication)",
      )
        .default(DEFAULT_TOKEN_REVIEW_CACHE_MS, '30m')
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
    .addOption(
      new Option(
        '--placement-bytes-per-second <n>',
        "relay the sidecars' placements (the fleet-wide view): at most this many bytes a second of placements events to each subscriber; 0 turns it off",
      )
        .default(8192)
        .argParser(parseNonNegativeNumber),
    )
    .addOption(
      new Option(
        '--advertise-address <ip>',
        "the address the other replicas reach this one's stream at, to relay placements uploaded here to their sidecars",
      ).default(process.env.POD_IP, '$POD_IP'),
    )
    .addOption(
      new Option(
        '--peer-token-file <path>',
        "this replica's ServiceAccount token, sent to the other replicas when relaying placements (they accept only their own ServiceAccount's)",
      )
        .default(undefined, 'the mounted ServiceAccount token')
        .hideHelp(),
    )
    .addOption(new Option('--log-level <level>', 'log level').choices(LOG_LEVELS).default('info'))
    .action(async (flags: ControllerFlags) => {
      const logger = pino({ level: flags.logLevel, base: { component: 'controller' } });
      const fail = (message: string): never => {
        process.stderr.write(`switchyard controller: ${message}\n`);
        process.exit(2);
      };
      const { startController } = await import('../controller/controller.ts');
      const { planControllerOptions } = await import('../controller/controller-options.ts');
      const { readTlsFiles } = await import('../controller/tls/source.ts');
      const { SERVICE_ACCOUNT_TOKEN } = await import('../controller/kube/owners.ts');
      const { loadKubeClientConfig } = await import('../controller/kube/kube-config.ts');
      const readText = (
        path: string,
      ): { ok: true; text: string } | { ok: false; message: string } => {
        try {
          return { ok: true, text: readFileSync(path, 'utf8') };
        } catch (err) {
          return { ok: false, message: (err as Error).message };
        }
      };
      let kubeconfigMissing: string | undefined;
      if (flags.kubeconfig === undefined) {
        const { missingKubeconfig } = await import('../status/collect.ts');
        const { existsSync } = await import('node:fs');
        const { homedir } = await import('node:os');
        kubeconfigMissing = missingKubeconfig({
          env: process.env,
          home: homedir(),
          exists: existsSync,
        });
      }
      const token = readText(SERVICE_ACCOUNT_TOKEN); // not in a pod: none
      const plan = planControllerOptions(flags, {
        injectionConfig:
          flags.injectionConfig === undefined ? undefined : readText(flags.injectionConfig),
        serviceAccountToken: token.ok ? token.text : undefined,
        kubeconfigMissing,
      });
      if (!plan.ok) return fail(plan.problem);
      const { tls } = plan.options;
      if (tls?.kind === 'files') {
        try {
          readTlsFiles(tls.files); // fail at start, naming the file, rather than at the first handshake
        } catch (err) {
          fail((err as Error).message);
        }
      }
      // Read without @kubernetes/client-node (~80 MB per replica): it is imported only for
      // what kube-config.ts cannot do itself (exec, auth-provider, proxy-url).
      let kubeConfig: Awaited<ReturnType<typeof loadKubeClientConfig>>;
      try {
        kubeConfig = await loadKubeClientConfig({ file: flags.kubeconfig });
      } catch (err) {
        return fail(`cannot load the kubeconfig: ${(err as Error).message}`);
      }
      if (kubeConfig.fallback !== undefined)
        logger.warn(
          { kubeconfig: kubeConfig.source, why: kubeConfig.fallback },
          'the kubeconfig needs @kubernetes/client-node: it is loaded, at ~80 MB of memory',
        );
      for (const note of plan.notes) logger.info(note);
      const { allocatorInUse } = await import('../controller/allocator.ts');
      const allocator = allocatorInUse();
      if (allocator.problem === undefined)
        logger.info({ allocator: allocator.allocator }, 'memory allocator');
      else logger.warn({ allocator: allocator.allocator }, allocator.problem);
      const peerTokenFile = flags.peerTokenFile ?? SERVICE_ACCOUNT_TOKEN;
      const controller = await startController({
        ...plan.options,
        // Re-read (kubelet rotates it); undefined when missing (not in a pod).
        readPeerToken: () => {
          const read = readText(peerTokenFile);
          return read.ok ? read.text : undefined;
        },
        kubeConfig,
        logger,
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
