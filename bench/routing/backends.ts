/**
 * The K simulated backends (`switchyard sim` processes) of a benchmark run: started once,
 * reconfigured per scenario through their admin API, reset to a fresh state before every policy.
 */
import { startSwitchyard, type RunningProcess } from '../../harness/processes.ts';
import { DEFAULT_SIM_OPTIONS, type SimOptions } from '../../sim/options.ts';
import type { BackendCounters } from './metrics.ts';
import type { BackendSpec } from './scenarios.ts';

export interface SimFleet {
  urls: string[];
  pids: number[];
  /**
   * Applies a scenario: every option set, from the defaults up (nothing of the last one stays).
   * The simulators serve `model` only, as a real server serves its one model (SMG routes by the
   * model its workers list).
   */
  configure(
    specs: readonly BackendSpec[],
    speed: number,
    seed: number,
    model: string,
  ): Promise<SimOptions[]>;
  /** A fresh start for the next policy: counters, caches, fault sequences, cold state. */
  reset(): Promise<void>;
  /** Waits until no request holds a slot or waits (the last policy's leftovers are gone). */
  idle(timeoutMs?: number): Promise<void>;
  counters(specs: readonly BackendSpec[]): Promise<BackendCounters[]>;
  stop(): Promise<void>;
}

interface Stats {
  name: string;
  requests: number;
  inFlight: number;
  queued: number;
  cacheHitBlocks: number;
  cacheMissBlocks: number;
  promptTokens: number;
  completionTokens: number;
  loraAdapterLoads?: number;
}

async function postJson<T>(url: string, body: unknown): Promise<T> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`POST ${url}: ${res.status} ${text}`);
  return JSON.parse(text) as T;
}

export async function startFleet(count: number): Promise<SimFleet> {
  const sims: RunningProcess[] = await Promise.all(
    Array.from({ length: count }, (_, i) =>
      startSwitchyard(['sim', '--port', '0', '--name', `b${i}`]),
    ),
  );
  const stats = (): Promise<Stats[]> =>
    Promise.all(
      sims.map(async (s) => (await (await fetch(`${s.url}/admin/stats`)).json()) as Stats),
    );
  return {
    urls: sims.map((s) => s.url),
    pids: sims.map((s) => s.pid),
    async configure(specs, speed, seed, model) {
      return Promise.all(
        sims.map((s, i) => {
          const { port: _port, host: _host, ...defaults } = DEFAULT_SIM_OPTIONS;
          const spec = specs[i]!;
          return postJson<SimOptions>(`${s.url}/admin/config`, {
            ...defaults,
            ...spec.sim,
            name: spec.name,
            model,
            speed,
            seed: seed + i,
          });
        }),
      );
    },
    async reset() {
      await Promise.all(sims.map((s) => postJson(`${s.url}/admin/reset`, {})));
    },
    async idle(timeoutMs = 30_000) {
      const deadline = performance.now() + timeoutMs;
      while (performance.now() < deadline) {
        if ((await stats()).every((s) => s.inFlight === 0 && s.queued === 0)) return;
        await new Promise((r) => setTimeout(r, 50));
      }
    },
    async counters(specs) {
      return (await stats()).map((s, i) => ({
        name: specs[i]!.name,
        requests: s.requests,
        cacheHitBlocks: s.cacheHitBlocks,
        cacheMissBlocks: s.cacheMissBlocks,
        promptTokens: s.promptTokens,
        completionTokens: s.completionTokens,
        costPerMTok: specs[i]!.costPerMTok,
        loraAdapterLoads: s.loraAdapterLoads ?? 0,
      }));
    },
    async stop() {
      await Promise.all(sims.map((s) => s.stop()));
    },
  };
}
