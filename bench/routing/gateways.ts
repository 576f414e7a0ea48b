/**
 * The LLM gateways the benchmark compares: LiteLLM's proxy, SMG (Shepherd Model Gateway) and
 * vllm-router, the routers a platform team picks for LLM traffic. Each is a Python package,
 * installed into a cached virtualenv (docs/benchmarks.md#routing); the benchmark installs nothing
 * and skips a missing one with one line. Each is configured as its documentation recommends for
 * production; `describe` lists every setting that differs from the binary's defaults and the
 * defaults that decide its routing.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { INSTALL } from '../../lib/bench-names.ts';
import { freePort, spawnListening, tempDir, which, type Child } from '../common/peers.ts';
import {
  BENCH_CLIENT_KEY,
  startInstances,
  type PolicyDefinition,
  type RouterContext,
  type WorkerProbe,
} from './policy-definition.ts';

/** The executable `command`: $`envVar`, then PATH, then the virtualenv the docs make. */
function venvBinary(envVar: string, command: string, venv: string): string | undefined {
  const candidates = [
    process.env[envVar],
    which(command),
    join(homedir(), `.cache/switchyard/${venv}/bin/${command}`),
  ];
  return candidates.find((c) => c !== undefined && c !== '' && existsSync(c));
}

/** The installed version of `pkg`, asked of the Python interpreter in `binary`'s shebang line. */
function packageVersion(binary: string | undefined, pkg: string): string {
  if (binary === undefined) return '?';
  const shebang = /^#!(\S+)/.exec(readFileSync(binary, 'latin1').slice(0, 512))?.[1];
  if (shebang === undefined || !existsSync(shebang)) return '?';
  const out = spawnSync(
    shebang,
    ['-c', `import importlib.metadata as m; print(m.version(${JSON.stringify(pkg)}))`],
    { encoding: 'utf8' },
  );
  return out.stdout.trim() || '?';
}

/** The LiteLLM proxy: `litellm`, from $SWITCHYARD_LITELLM, PATH, or the venv the README makes. */
export function litellmBinary(): string | undefined {
  return venvBinary('SWITCHYARD_LITELLM', 'litellm', 'litellm-venv');
}

/** SMG: `smg`, from $SWITCHYARD_SMG, PATH, or ~/.cache/switchyard/smg-venv. */
export function smgBinary(): string | undefined {
  return venvBinary('SWITCHYARD_SMG', 'smg', 'smg-venv');
}

/** vllm-router: `vllm-router`, from $SWITCHYARD_VLLM_ROUTER, PATH, or its venv. */
export function vllmRouterBinary(): string | undefined {
  return venvBinary('SWITCHYARD_VLLM_ROUTER', 'vllm-router', 'vllm-router-venv');
}

// --------------------------------------------------------------------------------------------
// LiteLLM
// --------------------------------------------------------------------------------------------

/** LiteLLM proxies starting at a time: each takes a core for seconds while Python imports it. */
const LITELLM_STARTS_AT_ONCE = 2;

/**
 * One LiteLLM proxy over every backend, one model group per model the clients send (the base
 * model, and in the lora scenario each adapter: every backend in every group, as each serves
 * them all), the Router's `routing_strategy` inside a group.
 */
async function startLitellm(ctx: RouterContext, strategy: string): Promise<Child> {
  const dir = tempDir('routing-litellm');
  const port = await freePort();
  const config = join(dir, 'config.yaml');
  writeFileSync(
    config,
    stringify({
      model_list: [ctx.model, ...(ctx.adapters ?? [])].flatMap((model) =>
        ctx.backends.map((b) => ({
          model_name: model,
          litellm_params: {
            model: `openai/${model}`,
            api_base: `${b.url}/v1`,
            api_key: 'unused',
            stream_timeout: 300,
          },
          model_info: { id: model === ctx.model ? b.name : `${b.name}/${model}` },
        })),
      ),
      router_settings: {
        routing_strategy: strategy,
        num_retries: 2,
        allowed_fails: 3,
        cooldown_time: 10,
      },
      litellm_settings: { drop_params: true, request_timeout: 300, telemetry: false },
      // The proxy refuses to start without one; the load generator sends it to every router.
      general_settings: { master_key: BENCH_CLIENT_KEY },
    }),
  );
  const args = ['--config', config, '--host', '127.0.0.1', '--port', String(port)];
  return spawnListening('litellm', litellmBinary()!, [...args, '--num_workers', '1'], port, {
    // Importing LiteLLM takes seconds of CPU; sixteen of them share two cores.
    timeoutMs: 180_000,
    env: {
      // No network: the model cost map and telemetry must not be fetched.
      LITELLM_LOCAL_MODEL_COST_MAP: 'True',
      LITELLM_LOG: 'ERROR',
      LITELLM_TELEMETRY: 'False',
      DISABLE_ADMIN_UI: 'True',
      HOME: dir,
    },
  });
}

/** LiteLLM's proxy with its Router: `routing_strategy`, retries and cooldowns as documented. */
export function litellm(strategy: string, label: string): PolicyDefinition {
  return {
    name: `litellm-${label}`,
    family: 'peer',
    describe: `LiteLLM proxy, router_settings.routing_strategy ${strategy}, num_retries 2, allowed_fails 3, cooldown_time 10`,
    unavailable: () =>
      litellmBinary() === undefined ? `litellm is not installed (${INSTALL.litellm})` : undefined,
    version: () => `LiteLLM ${packageVersion(litellmBinary(), 'litellm')}`,
    start: (ctx) =>
      startInstances(ctx.instances, () => startLitellm(ctx, strategy), LITELLM_STARTS_AT_ONCE),
  };
}

// --------------------------------------------------------------------------------------------
// SMG and vllm-router
// --------------------------------------------------------------------------------------------

/**
 * Both register a worker only once `GET /health` answers 2xx (vLLM and SGLang serve it): SMG
 * retries the registration every 30 s, vllm-router waits up to 10 minutes before it listens.
 */
const HEALTH_PROBE: WorkerProbe = {
  method: 'GET',
  path: '/health',
  why: 'they register a backend only once it answers 2xx there, as vLLM and SGLang do',
};

/** Waits until SMG lists every backend as a healthy worker (registration runs after it listens). */
async function waitForWorkers(child: Child, count: number, timeoutMs: number): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  let last = '';
  while (performance.now() < deadline) {
    try {
      const res = await fetch(`${child.url}/workers`, { signal: AbortSignal.timeout(2_000) });
      last = await res.text();
      const body = JSON.parse(last) as { workers?: { is_healthy?: boolean }[] };
      if ((body.workers ?? []).filter((w) => w.is_healthy === true).length >= count) return;
    } catch {
      // not answering yet
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  await child.stop(0);
  throw new Error(
    `smg did not register ${count} healthy workers within ${timeoutMs} ms (GET /workers: ${last.slice(0, 300)})\n${child.output()}`,
  );
}

/**
 * SMG's settings besides the policy: the docs' "Production Balanced" health checks and
 * "High-Availability" retries; circuit breakers, cache-aware and overload thresholds at their
 * defaults, which its docs recommend starting from.
 */
const SMG_SETTINGS = [
  ...['--health-check-interval-secs', '30', '--health-failure-threshold', '3'],
  ...['--health-success-threshold', '2', '--health-check-timeout-secs', '5'],
  ...['--retry-max-retries', '3', '--retry-initial-backoff-ms', '100'],
  ...['--retry-backoff-multiplier', '2.0'],
];

/** SMG's default period of its engine-load poll, in seconds of the servers' (simulated) time. */
const SMG_LOAD_POLL_S = 10;

/**
 * `--load-monitor-interval` (whole wall seconds) that keeps SMG's default 10 s poll at 10 s of
 * the simulators' time: they run `speed` times faster than real time, so the default would look
 * at each server's load 3.2× less often than in production (once every 32 simulated seconds at
 * the default speed), and SMG 1.13's routing (cache-aware included) reads that polled load: with
 * it, the central SMG ran at a TTFT p50 of 4.3 s on `steady` (docs/benchmarks.md, "SMG given a
 * fair chance").
 */
export function smgLoadMonitorInterval(speed: number): number {
  return Math.max(1, Math.round(SMG_LOAD_POLL_S / speed));
}

const SMG_POLICY_DEFAULTS: Record<string, string> = {
  cache_aware:
    'cache-threshold 0.3, balance-abs-threshold 64, balance-rel-threshold 1.5, max-tree-size 64 Mi chars, eviction-interval 60 s',
  power_of_two: 'power-of-two-load-metric expected_wait',
  prefix_hash:
    'prefix-token-count 256, prefix-hash-load-factor 1.25, prefix-hash-balance-abs-threshold 10',
};

/**
 * `$SWITCHYARD_SMG_ARGS`: more `smg launch` flags, space-separated, appended after the bench's
 * own (SMG takes the last of a repeated flag): for trying its options on short runs.
 */
function smgExtraArgs(): string[] {
  return (process.env.SWITCHYARD_SMG_ARGS ?? '').split(/\s+/).filter((a) => a !== '');
}

/** One SMG over every backend, ready once it lists each of them as a healthy worker. */
async function startSmg(ctx: RouterContext, policy: string): Promise<Child> {
  const dir = tempDir('routing-smg');
  const [port, metricsPort] = [await freePort(), await freePort()];
  const child = await spawnListening(
    'smg',
    smgBinary()!,
    [
      'launch',
      ...['--host', '127.0.0.1', '--port', String(port)],
      ...['--worker-urls', ...ctx.backends.map((b) => b.url)],
      ...['--policy', policy, '--backend', 'vllm'],
      ...SMG_SETTINGS,
      ...['--load-monitor-interval', String(smgLoadMonitorInterval(ctx.speed))],
      ...smgExtraArgs(),
      // Each instance needs its own metrics port (the default 29000 would collide).
      ...['--prometheus-host', '127.0.0.1', '--prometheus-port', String(metricsPort)],
      // Lifecycle, not routing: the bench stops it once no request is in flight.
      ...['--shutdown-grace-period-secs', '1'],
      ...['--log-level', 'warn'],
    ],
    port,
    { timeoutMs: 60_000, env: { HOME: dir } },
  );
  await waitForWorkers(child, ctx.backends.length, 60_000);
  return child;
}

/** SMG 1.13 (`smg launch`) over HTTP in front of the simulators, one policy. */
export function smg(policy: string, label: string): PolicyDefinition {
  return {
    name: `smg-${label}`,
    family: 'peer',
    describe:
      `SMG, smg launch --policy ${policy} --backend vllm (${SMG_POLICY_DEFAULTS[policy] ?? 'defaults'}); ` +
      'health checks every 30 s (3 failures, 2 successes, 5 s timeout), retries 3 (100 ms, ×2.0 backoff) on 408/429/5xx, ' +
      'circuit breaker after 10 consecutive failures for 60 s, worker overload protection at its defaults (8 waiting, 0.8 KV usage); ' +
      `engine load polled every ${SMG_LOAD_POLL_S} s of simulated time, its default (--load-monitor-interval ${SMG_LOAD_POLL_S} / --speed, in whole wall seconds)`,
    unavailable: () =>
      smgBinary() === undefined ? `smg is not installed (${INSTALL.smg})` : undefined,
    version: () => `SMG ${packageVersion(smgBinary(), 'smg')}`,
    requires: [HEALTH_PROBE],
    start: (ctx) => startInstances(ctx.instances, () => startSmg(ctx, policy)),
  };
}

const VLLM_ROUTER_POLICY_DEFAULTS: Record<string, string> = {
  cache_aware:
    'cache-threshold 0.3, balance-abs-threshold 64, balance-rel-threshold 1.5, max-tree-size 32 Mi chars, eviction-interval 120 s; token ids from each worker’s /v1/chat/completions/render or /tokenize when it serves them, else the text',
  consistent_hash:
    'key: an X-Session-ID (… X-Trace-ID) header or the body’s session_params.session_id, user, session_id or user_id, else the request text, which 0.1.17 reads as empty for chat requests: the clients send no key, so every request hashes alike',
  power_of_two: 'load from the workers’ /get_load every 5 s, else its own in-flight counts',
};

/** One vllm-router over every backend; it listens only once each answered GET /health. */
async function startVllmRouter(ctx: RouterContext, policy: string): Promise<Child> {
  const dir = tempDir('routing-vllm-router');
  const [port, metricsPort] = [await freePort(), await freePort()];
  return spawnListening(
    'vllm-router',
    vllmRouterBinary()!,
    [
      ...['--host', '127.0.0.1', '--port', String(port)],
      ...['--worker-urls', ...ctx.backends.map((b) => b.url)],
      ...['--policy', policy],
      ...['--prometheus-host', '127.0.0.1', '--prometheus-port', String(metricsPort)],
      // Lifecycle, not routing: when a first /health check is slow on a busy machine, look
      // again after a second, not after the default 30.
      ...['--worker-startup-check-interval', '1'],
      ...['--log-level', 'warning'],
    ],
    port,
    { timeoutMs: 60_000, env: { HOME: dir } },
  );
}

/** vllm-router 0.1.17 in front of the simulators, one policy, its documented defaults. */
export function vllmRouter(policy: string, label: string): PolicyDefinition {
  return {
    name: `vllm-router-${label}`,
    family: 'peer',
    describe:
      `vllm-router, --policy ${policy} (${VLLM_ROUTER_POLICY_DEFAULTS[policy] ?? 'defaults'}); ` +
      'health checks every 60 s (3 failures, 2 successes, 5 s timeout), its default retries and circuit breaker, max-concurrent-requests 32768, queue 100',
    unavailable: () =>
      vllmRouterBinary() === undefined
        ? `vllm-router is not installed (${INSTALL.vllmRouter})`
        : undefined,
    version: () => `vllm-router ${packageVersion(vllmRouterBinary(), 'vllm-router')}`,
    requires: [HEALTH_PROBE],
    start: (ctx) => startInstances(ctx.instances, () => startVllmRouter(ctx, policy)),
  };
}
