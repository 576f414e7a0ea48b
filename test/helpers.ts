import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import OpenAI from 'openai';
import { scratchDir } from '../harness/pool-file.ts';
import { startSidecar, startSim, stopAll, type RunningProcess } from '../harness/processes.ts';

export { sleep };

export interface PoolFixture {
  sims: RunningProcess[];
  sidecar: RunningProcess;
  poolFile: string;
  dir: string;
  client: OpenAI;
  stop(): Promise<void>;
}

/**
 * Starts one simulator per entry, writes a pool file from `spec(urls)` and starts a sidecar on it.
 * `spec` gets the simulators' base URLs (without /v1) and returns the YAML of the pool file.
 */
export async function startPool(
  sims: { name: string; flags?: string[] }[],
  spec: (urls: string[]) => string,
  sidecarFlags: string[] = [],
): Promise<PoolFixture> {
  const { dir, cleanup } = await scratchDir();
  const started: RunningProcess[] = [];
  try {
    for (const s of sims) started.push(await startSim(s.name, s.flags));
    const poolFile = join(dir, 'pool.yaml');
    await writeFile(poolFile, spec(started.map((s) => s.url)));
    const sidecar = await startSidecar(poolFile, sidecarFlags);
    started.push(sidecar);
    const client = new OpenAI({
      baseURL: `${sidecar.url}/v1`,
      apiKey: 'client-key',
      maxRetries: 0,
    });
    return {
      sims: started.slice(0, sims.length),
      sidecar,
      poolFile,
      dir,
      client,
      async stop() {
        await stopAll(started);
        await cleanup();
      },
    };
  } catch (err) {
    await stopAll(started);
    await cleanup();
    throw err;
  }
}

export async function getJson<T>(url: string): Promise<T> {
  const res = await fetch(url);
  return (await res.json()) as T;
}

export async function simConfig(
  sim: RunningProcess,
  patch: Record<string, unknown>,
): Promise<void> {
  const res = await fetch(`${sim.url}/admin/config`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(patch),
  });
  if (!res.ok) throw new Error(`sim config failed: ${res.status} ${await res.text()}`);
}

export interface SimStats {
  requests: number;
  inFlight: number;
  queued: number;
  cacheHitBlocks: number;
  cacheMissBlocks: number;
  errors: number;
  rateLimited: number;
  stalled: number;
  completed: number;
  /** Requests whose client (here: the sidecar) went away before the answer was complete. */
  aborted: number;
  lastTraceparent: string | null;
}

export const simStats = (sim: RunningProcess): Promise<SimStats> =>
  getJson<SimStats>(`${sim.url}/admin/stats`);

export interface DebugEndpoint {
  id: string;
  backend: string;
  url: string;
  inFlight: number;
  load: number;
  reported: {
    running?: number;
    waiting?: number;
    kvCacheUsage?: number;
    interTokenLatencyMs?: number;
    ageMs: number;
  } | null;
  ewmaTtftMs: number;
  measuredTtftMs: number | null;
  ttftSamples: number;
  lastTtftSampleAgeMs: number | null;
  reportedSlowdown: number | null;
  breaker: 'closed' | 'open' | 'half-open';
  requests: number;
  errors: number;
  rateLimited: number;
}

export interface DebugBackends {
  pool: string;
  mode: string;
  snapshotVersion: number;
  endpoints: DebugEndpoint[];
}

export const debugBackends = (sidecar: RunningProcess): Promise<DebugBackends> =>
  getJson<DebugBackends>(`${sidecar.adminUrl}/debug/backends`);

/** Polls `check` until it returns true or `timeoutMs` passes. */
export async function eventually(
  check: () => Promise<boolean> | boolean,
  timeoutMs = 10_000,
  what = 'condition',
): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (performance.now() < deadline) {
    if (await check()) return;
    await sleep(50);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
}

/** A raw chat request without the OpenAI client's retries, returning status, headers and body. */
export async function rawChat(
  baseUrl: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; headers: Headers; text: string }> {
  const res = await fetch(`${baseUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

export const hello = (model = 'm', extra: Record<string, unknown> = {}) => ({
  model,
  max_tokens: 5,
  messages: [{ role: 'user', content: 'hello there' }],
  ...extra,
});
