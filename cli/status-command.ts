import { Option, type Command, type CommanderError } from 'commander';
import { parseDurationMs } from './args.ts';

interface StatusFlags {
  pool?: string;
  namespace?: string;
  kubeconfig?: string;
  context?: string;
  admin?: string;
  output: 'table' | 'json';
  timeout: number;
}

const EXAMPLES = `
Examples:
  switchyard status --pool chat -n apps              the pool as the controller sees it (status)
  switchyard status --pool chat --context prod -o json | jq '.problems'
  kubectl -n apps port-forward pod/chat-app-7d9f 9090 &
  switchyard status --admin http://127.0.0.1:9090    one sidecar's own view (/debug/backends)
  kubectl -n apps exec chat-app-7d9f -c switchyard-sidecar -- \\
    node /app/bin/switchyard.js status --admin 127.0.0.1:9090
  switchyard status --pool chat -n apps > /dev/null && echo healthy

Exit codes: 0 healthy; 1 unhealthy (a condition not True, a breaker open or half-open, an
endpoint drifted, a model a backend declares with no ready endpoint, a sidecar not ready); 2
usage error, or the pool or sidecar cannot be read.
Columns and the JSON shape: docs/status.md.
`;

/** `switchyard status`: a pool's endpoints with health, drift and sync, for the person on call. */
export function addStatusCommand(program: Command): void {
  program
    .command('status')
    .description(
      "Show a pool's endpoints with health, drift and sync, and the models it serves: from the InferencePool's status in Kubernetes (--pool), or from one sidecar's admin API (--admin).",
    )
    .option('--pool <name>', 'the InferencePool to show (read from the Kubernetes API)')
    .option(
      '-n, --namespace <ns>',
      "with --pool: its namespace (default: the kubeconfig context's namespace, else default)",
    )
    .option(
      '--kubeconfig <file>',
      'with --pool: kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or the pod service account)',
    )
    .option('--context <name>', 'with --pool: kubeconfig context (default: the current one)')
    .option(
      '--admin <url>',
      "a sidecar's admin API instead of Kubernetes, e.g. http://127.0.0.1:9090 (reads /debug/backends and /readyz)",
    )
    .addOption(
      new Option('-o, --output <format>', 'table for people, json for scripts')
        .choices(['table', 'json'])
        .default('table'),
    )
    .addOption(
      new Option('--timeout <duration>', 'how long to wait for the API server or the sidecar')
        .default(10_000, '10s')
        .argParser(parseDurationMs),
    )
    .addHelpText('after', EXAMPLES)
    // Usage errors exit 2, so that 1 keeps meaning "unhealthy" for scripts.
    .exitOverride((err: CommanderError) => process.exit(err.exitCode === 0 ? 0 : 2))
    .action(async (flags: StatusFlags) => {
      const fail = (message: string, usage = false): never => {
        process.stderr.write(
          `switchyard status: ${message}\n${usage ? '(run switchyard status --help for usage)\n' : ''}`,
        );
        process.exit(2);
      };
      if ((flags.pool === undefined) === (flags.admin === undefined))
        fail('give either --pool <name> (Kubernetes) or --admin <url> (one sidecar)', true);
      if (flags.timeout <= 0) fail('--timeout: expected a duration above 0, like 10s', true);
      if (flags.admin !== undefined) {
        const k8sOnly = (['namespace', 'kubeconfig', 'context'] as const).filter(
          (f) => flags[f] !== undefined,
        );
        if (k8sOnly.length > 0)
          fail(`--${k8sOnly.join(', --')}: only with --pool, not with --admin`, true);
      }
      // Loaded on demand: the sidecar and the simulator never need any of this.
      const { adminBaseUrl, collectPool, collectSidecar, StatusSourceError } =
        await import('../status/collect.ts');
      const { renderStatusTable } = await import('../status/render.ts');
      let view;
      try {
        if (flags.admin !== undefined) {
          const base = adminBaseUrl(flags.admin);
          if (base === undefined)
            fail(`--admin ${flags.admin}: expected a URL like http://127.0.0.1:9090`, true);
          view = await collectSidecar(base!, { timeoutMs: flags.timeout });
        } else {
          view = await collectPool({
            pool: flags.pool!,
            namespace: flags.namespace,
            kubeconfig: flags.kubeconfig,
            context: flags.context,
            timeoutMs: flags.timeout,
          });
        }
      } catch (err) {
        if (err instanceof StatusSourceError) fail(err.message);
        throw err;
      }
      const text =
        flags.output === 'json' ? JSON.stringify(view, null, 2) + '\n' : renderStatusTable(view);
      // Exit once the text is written: a kept-alive API connection must not hold the process.
      process.stdout.write(text, () => process.exit(view.exitCode));
    });
}
