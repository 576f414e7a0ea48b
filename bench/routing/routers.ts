/**
 * The routers the benchmark compares. Every policy runs as R independent instances (R sidecars,
 * R HAProxies, ...), each serving 1/R of the clients, as sidecars in R pods would; the oracle is
 * the one exception by design (one central router that knows everything).
 *
 * Peers are configured as their users would configure them for LLM traffic: streaming without
 * buffering, passive health from real responses, retries of failed requests on another server
 * where the peer can retry a POST, generous timeouts. Each needs its binary installed (Debian's
 * haproxy, nginx and caddy packages; LiteLLM, SMG and vllm-router from PyPI, gateways.ts); the
 * benchmark installs nothing, and a missing one is skipped with the reason. The gateways also run
 * centrally (`-central`): one instance for every client, the way they are usually deployed.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import {
  DEFAULT_LOAD_SCRAPE_EVERY_MS,
  MIN_LOAD_SCRAPE_EVERY_MS,
} from '../../lib/load-scrape/period.ts';
import { waitFor } from '../../harness/k8s/cluster.ts';
import {
  controllerSidecarArgs,
  startNodeScript,
  startSidecar,
  startSwitchyard,
  type RunningProcess,
} from '../../harness/processes.ts';
import {
  freePort,
  spawnListening,
  spawnNginx,
  tempDir,
  versionOf,
  which,
} from '../common/peers.ts';
import { gaieEpp, gaieLwepp } from './gaie.ts';
import { litellm, smg, vllmRouter } from './gateways.ts';
import {
  centralVariant,
  hostPort,
  startInstances,
  type Family,
  type PolicyDefinition,
  type RouterContext,
  type RouterSet,
} from './policy-definition.ts';

// --------------------------------------------------------------------------------------------
// switchyard (and the baselines inside it)
// --------------------------------------------------------------------------------------------

const RELAY_SCRIPT = join(import.meta.dirname, 'load-relay.ts');

function poolYaml(ctx: RouterContext, affinity: 'Prefix' | 'None'): string {
  const spec: Record<string, unknown> = {
    mode: 'Balance',
    affinity: { key: affinity },
    backends: ctx.backends.map((b) => ({
      name: b.name,
      url: `${b.url}/v1`,
      costPerMTok: b.costPerMTok,
    })),
  };
  // The sidecar measures wall time; the simulators run `speed` times faster than simulated time.
  if (ctx.costWeightPerMs !== undefined) spec['costWeightPerMs'] = ctx.costWeightPerMs * ctx.speed;
  Object.assign(spec, ctx.poolSpec);
  return stringify({
    apiVersion: 'switchyard.dev/v1alpha1',
    kind: 'InferencePool',
    metadata: { name: 'bench' },
    spec,
  });
}

/**
 * Placements relayed to each sidecar per second (the controller's default,
 * `--placement-bytes-per-second`): the fleet-wide view of issue 45 (docs/fleet-view.md).
 */
const PLACEMENT_BYTES_PER_SECOND = 8192;

function sidecars(picker: string, affinity: 'Prefix' | 'None', fleetView = true) {
  return async (ctx: RouterContext): Promise<RouterSet> => {
    const dir = tempDir('routing-sidecar');
    const file = join(dir, 'pool.yaml');
    writeFileSync(file, poolYaml(ctx, affinity));
    // The default scrape period in simulated time, as a sidecar (or the controller) in front of
    // real servers scrapes them.
    const scrapeEveryMs = Math.max(
      MIN_LOAD_SCRAPE_EVERY_MS,
      Math.round(DEFAULT_LOAD_SCRAPE_EVERY_MS / ctx.speed),
    );
    // One pool that declares no models: discovery is off by default (auto), and the lora
    // scenario's sidecars learn the adapters from the servers' /v1/models, as a user would set it.
    const discovery = ctx.adapters === undefined ? [] : ['--model-discovery', 'on'];
    if (ctx.loadSource === 'sidecar') {
      return startInstances(ctx.instances, () =>
        startSidecar(file, [
          '--log-level',
          'warn',
          '--picker',
          picker,
          '--load-scrape-every',
          `${scrapeEveryMs}ms`,
          ...discovery,
        ]),
      );
    }
    // As in Kubernetes: one scraper for every sidecar, its load streamed to them (load-relay.ts).
    const token = join(dir, 'token');
    writeFileSync(token, 'bench');
    const relay = await startNodeScript(RELAY_SCRIPT, [
      file,
      String(scrapeEveryMs),
      String(fleetView ? PLACEMENT_BYTES_PER_SECOND : 0),
    ]);
    let relayExited = false;
    void relay.exited.then(() => (relayExited = true));
    const adminUrls: string[] = [];
    try {
      const set = await startInstances(ctx.instances, async (i) => {
        const sidecar = await startSwitchyard([
          ...controllerSidecarArgs({
            controllerUrl: relay.url,
            // The relay serves the pool file's pool (`metadata.name: bench`) in namespace bench.
            namespace: 'bench',
            pool: 'bench',
            tokenFile: token,
            sidecarId: `bench-${i}`,
          }),
          '--log-level',
          'warn',
          '--picker',
          picker,
          ...discovery,
        ]);
        // It listens before the first snapshot arrives; /startupz passes once it has one.
        await untilStarted(sidecar).catch(async (err: unknown) => {
          await sidecar.stop();
          throw err;
        });
        if (sidecar.adminUrl !== undefined) adminUrls.push(sidecar.adminUrl);
        return sidecar;
      });
      return {
        ...set,
        auxPids: [relay.pid],
        placementBytesReceived: async () => {
          let sum = 0;
          for (const url of adminUrls) sum += await counterSum(url, PLACEMENT_BYTES_METRIC);
          return sum;
        },
        stop: async () => {
          // A relay gone mid-run left the sidecars on stale load: the run measured nothing, and
          // the bench stops with the relay's output rather than report it.
          const died = relayExited;
          try {
            await set.stop();
          } finally {
            await relay.stop();
          }
          if (died) throw new Error(`the load relay exited during the run:\n${relay.output()}`);
        },
      };
    } catch (err) {
      await relay.stop();
      throw err;
    }
  };
}

/** The sidecar's counter of placement bytes received (sidecar/telemetry, issue 45). */
const PLACEMENT_BYTES_METRIC = 'switchyard_placement_bytes_received_total';

/** The sum of a counter's samples on a sidecar's admin /metrics (0 when it has none). */
async function counterSum(adminUrl: string, name: string): Promise<number> {
  const res = await fetch(`${adminUrl}/metrics`);
  const text = await res.text();
  let sum = 0;
  for (const line of text.split('\n'))
    if (line.startsWith(name) && (line[name.length] === '{' || line[name.length] === ' '))
      sum += Number(line.slice(line.lastIndexOf(' ') + 1)) || 0;
  return sum;
}

/** Resolves once a sidecar's /startupz passes (a configuration applied), within 10 s. */
async function untilStarted(sidecar: RunningProcess): Promise<void> {
  await waitFor(
    'a sidecar to get its snapshot from the load relay',
    async () => {
      const res = await fetch(`${sidecar.adminUrl}/startupz`);
      await res.body?.cancel();
      return res.status === 200;
    },
    { timeoutMs: 10_000, intervalMs: 20 },
  ).catch((err: unknown) => {
    throw new Error(`${err instanceof Error ? err.message : String(err)}:\n${sidecar.output()}`);
  });
}

const switchyardVersion = (): string => {
  const pkg = JSON.parse(readFileSync(join(import.meta.dirname, '../../package.json'), 'utf8')) as {
    version: string;
  };
  return `switchyard ${pkg.version}`;
};

const inside = (
  name: string,
  picker: string,
  affinity: 'Prefix' | 'None',
  family: Family,
  describe: string,
  fleetView = true,
): PolicyDefinition => ({
  name,
  family,
  describe,
  unavailable: () => undefined,
  version: switchyardVersion,
  start: sidecars(picker, affinity, fleetView),
});

// --------------------------------------------------------------------------------------------
// Peers
// --------------------------------------------------------------------------------------------

/** HAProxy 2.6: `balance <algorithm>`, passive layer-7 checks, retries on 5xx to another server. */
function haproxy(balance: string, label: string): PolicyDefinition {
  return {
    name: `haproxy-${label}`,
    family: 'peer',
    describe: `HAProxy, balance ${balance}, observe layer7 (error-limit 10, on-error mark-down), retry-on 500/502/503/504 with redispatch`,
    unavailable: () =>
      which('haproxy') === undefined
        ? 'haproxy is not installed (apt-get install haproxy)'
        : undefined,
    version: () => versionOf('HAProxy', which('haproxy')!, '-v'),
    start: (ctx) =>
      startInstances(ctx.instances, async () => {
        const dir = tempDir('routing-haproxy');
        const port = await freePort();
        const config = join(dir, 'haproxy.cfg');
        writeFileSync(
          config,
          [
            'global',
            '  maxconn 8192',
            // The whole prompt must fit in a buffer for HAProxy to retry a POST elsewhere.
            '  tune.bufsize 524288',
            '',
            'defaults',
            '  mode http',
            '  timeout connect 5s',
            '  timeout client 300s',
            '  timeout server 300s',
            '  timeout http-keep-alive 65s',
            '  option http-keep-alive',
            '  option http-no-delay',
            '  http-reuse always',
            '  retries 2',
            '  option redispatch 1',
            // 2.6 retries on these statuses (429 is not among those it knows).
            '  retry-on conn-failure empty-response response-timeout 500 502 503 504',
            '',
            'frontend llm',
            `  bind 127.0.0.1:${port}`,
            '  option http-buffer-request',
            '  default_backend models',
            '',
            'backend models',
            `  balance ${balance}`,
            '  option httpchk GET /healthz',
            '  default-server check inter 2s fall 3 rise 2 observe layer7 error-limit 10 on-error mark-down maxconn 1024',
            ...ctx.backends.map((b) => `  server ${b.name} ${hostPort(b.url)}`),
            '',
          ].join('\n'),
        );
        return spawnListening('haproxy', which('haproxy')!, ['-f', config, '-db'], port);
      }),
  };
}

/** nginx 1.22: `least_conn` with max_fails, proxy_next_upstream on errors, no buffering. */
function nginx(): PolicyDefinition {
  return {
    name: 'nginx-least-conn',
    family: 'peer',
    describe:
      'nginx, least_conn, max_fails=3 fail_timeout=10s, proxy_next_upstream error timeout http_500 http_502 http_503 http_429 non_idempotent, proxy_buffering off',
    unavailable: () =>
      which('nginx') === undefined ? 'nginx is not installed (apt-get install nginx)' : undefined,
    version: () => versionOf('nginx', which('nginx')!, '-v'),
    start: (ctx) =>
      startInstances(ctx.instances, async () => {
        const dir = tempDir('routing-nginx');
        const port = await freePort();
        return spawnNginx(which('nginx')!, dir, port, {
          http: ['client_max_body_size 32m;', 'client_body_buffer_size 1m;'],
          upstream: [
            'least_conn;',
            ...ctx.backends.map((b) => `server ${hostPort(b.url)} max_fails=3 fail_timeout=10s;`),
            'keepalive 256;',
          ],
          location: [
            'proxy_read_timeout 300s;',
            'proxy_next_upstream error timeout http_500 http_502 http_503 http_429 non_idempotent;',
            'proxy_next_upstream_tries 3;',
          ],
        });
      }),
  };
}

/** Caddy 2.6: `lb_policy`, passive health on 5xx and 429, flush_interval -1 (streaming). */
function caddy(policy: string, label: string): PolicyDefinition {
  return {
    name: `caddy-${label}`,
    family: 'peer',
    describe: `Caddy, lb_policy ${policy}, passive health (max_fails 3, fail_duration 10s, unhealthy_status 5xx 429), lb_retries 2, flush_interval -1`,
    unavailable: () =>
      which('caddy') === undefined ? 'caddy is not installed (apt-get install caddy)' : undefined,
    version: () => versionOf('Caddy', which('caddy')!, 'version').replace(/^(\S+).*$/, 'Caddy $1'),
    start: (ctx) =>
      startInstances(ctx.instances, async () => {
        const dir = tempDir('routing-caddy');
        const port = await freePort();
        const config = join(dir, 'Caddyfile');
        writeFileSync(
          config,
          [
            '{',
            '  admin off',
            '  auto_https off',
            '}',
            `http://127.0.0.1:${port} {`,
            `  reverse_proxy ${ctx.backends.map((b) => hostPort(b.url)).join(' ')} {`,
            `    lb_policy ${policy}`,
            '    lb_retries 2',
            '    fail_duration 10s',
            '    max_fails 3',
            '    unhealthy_status 5xx 429',
            '    flush_interval -1',
            '  }',
            '}',
            '',
          ].join('\n'),
        );
        return spawnListening(
          'caddy',
          which('caddy')!,
          ['run', '--config', config, '--adapter', 'caddyfile'],
          port,
          {
            env: { HOME: dir, XDG_DATA_HOME: dir, XDG_CONFIG_HOME: dir },
          },
        );
      }),
  };
}

// --------------------------------------------------------------------------------------------

const ORACLE: PolicyDefinition = {
  name: 'oracle',
  family: 'oracle',
  describe:
    'one central router that knows every backend’s queue, cache and faults exactly (bench/routing/oracle.ts): the bound no real router reaches',
  unavailable: () => undefined,
  version: () => 'bench/routing/oracle.ts',
  start: () => Promise.reject(new Error('the oracle routes inside the load generator')),
};

/** The LLM gateways: each runs per client group like the others, and once more centrally. */
const GATEWAYS: readonly PolicyDefinition[] = [
  litellm('simple-shuffle', 'simple-shuffle'),
  litellm('least-busy', 'least-busy'),
  litellm('latency-based-routing', 'latency-based'),
  smg('cache_aware', 'cache-aware'),
  smg('power_of_two', 'p2c'),
  smg('prefix_hash', 'prefix-hash'),
  vllmRouter('cache_aware', 'cache-aware'),
  vllmRouter('consistent_hash', 'consistent-hash'),
  vllmRouter('power_of_two', 'p2c'),
];

export const POLICIES: readonly PolicyDefinition[] = [
  inside(
    'round-robin',
    'round-robin',
    'None',
    'baseline',
    'switchyard sidecar, --picker round-robin (no affinity, no scores; breakers and retries stay)',
  ),
  inside('random', 'random', 'None', 'baseline', 'switchyard sidecar, --picker random'),
  inside(
    'least-connections',
    'least-connections',
    'None',
    'baseline',
    'switchyard sidecar, --picker least-connections',
  ),
  inside(
    'p2c',
    'p2c',
    'None',
    'switchyard',
    'switchyard sidecar, P2C on (in-flight + 1) × EWMA TTFT + cost, affinity None',
  ),
  inside(
    'switchyard',
    'p2c',
    'Prefix',
    'switchyard',
    'switchyard sidecar, the full policy: prefix affinity, P2C, breakers, retry budget; with --load-source controller, placements shared across sidecars (the fleet-wide view)',
  ),
  inside(
    'switchyard-local',
    'p2c',
    'Prefix',
    'switchyard',
    'switchyard sidecar, the full policy, each sidecar knowing only the prompts it sent (placements not shared)',
    false,
  ),
  ORACLE,
  haproxy('roundrobin', 'roundrobin'),
  haproxy('leastconn', 'leastconn'),
  haproxy('random(2)', 'random2'),
  nginx(),
  caddy('random_choose 2', 'random-choose-2'),
  caddy('least_conn', 'least-conn'),
  ...GATEWAYS,
  ...GATEWAYS.map(centralVariant),
  gaieEpp,
  gaieLwepp,
];

export function policy(name: string): PolicyDefinition | undefined {
  return POLICIES.find((p) => p.name === name);
}
