/**
 * What every router the benchmark compares looks like to the runner: a named policy that starts
 * R instances (or one shared instance, for the `-central` variants of the gateways) in front of
 * the simulated backends. The definitions themselves live in routers.ts (switchyard, the classic
 * balancers, the oracle) and gateways.ts (LiteLLM, SMG, vllm-router).
 */

import type { LoadSource } from '../../lib/bench-names.ts';

/** The API key every client of the benchmark sends (LiteLLM's proxy insists on a master key). */
export const BENCH_CLIENT_KEY = 'sk-switchyard-bench-0000000000000000';

export interface BackendEndpoint {
  name: string;
  /** Base URL without /v1. */
  url: string;
  costPerMTok: number;
}

export interface RouterSet {
  /** One base URL (without /v1) per instance. */
  urls: string[];
  pids: number[];
  /**
   * Processes beside the instances that the set needs (switchyard's relay, standing in for the
   * controller): their CPU is reported apart from the instances'.
   */
  auxPids?: number[];
  /**
   * Bytes of placements (issue 45's fleet-wide view) the instances received so far, summed over
   * them; read just before the set stops. Absent: the router shares none.
   */
  placementBytesReceived?: () => Promise<number>;
  stop(): Promise<void>;
}

export interface RouterContext {
  backends: readonly BackendEndpoint[];
  /** How many instances to start: R, or 1 for a central variant. */
  instances: number;
  /** The simulators' speed: switchyard's cost exchange rate is given per simulated ms. */
  speed: number;
  /** $/Mtok worth one simulated ms, for switchyard (undefined: latency only). */
  costWeightPerMs: number | undefined;
  seed: number;
  /** The model name the clients send and the simulators serve (routers that route by model). */
  model: string;
  /**
   * The LoRA adapters of `model` the clients also send (the lora scenario), each served by every
   * backend; undefined = none. switchyard learns them from the servers' /v1/models.
   */
  adapters?: readonly string[] | undefined;
  /**
   * Who scrapes the servers' load for switchyard's sidecars: each sidecar itself (standalone), or
   * one controller stream all of them subscribe to (as in Kubernetes, load-relay.ts).
   */
  loadSource: LoadSource;
  /** More of the pool file's spec for switchyard's sidecars (the priority scenario's flowControl). */
  poolSpec?: Record<string, unknown> | undefined;
}

export type Family = 'baseline' | 'switchyard' | 'oracle' | 'peer';

/** An endpoint a peer calls on every backend before it routes to it. */
export interface WorkerProbe {
  method: 'GET';
  path: string;
  /** Why the peer needs it, for the error message ("they … "). */
  why: string;
}

export interface PolicyDefinition {
  name: string;
  family: Family;
  /** How it is configured, for the report. */
  describe: string;
  /** Why it cannot run here (a missing binary), or undefined when it can. */
  unavailable(): string | undefined;
  /** The software's version, for the report. */
  version(): string;
  /** Starts the instances (not for the oracle: it routes inside the load generator). */
  start(ctx: RouterContext): Promise<RouterSet>;
  /** One shared instance that every client sends to, instead of one per client group. */
  central?: boolean;
  /** Backend endpoints it cannot route without (checked before anything runs). */
  requires?: readonly WorkerProbe[];
}

/** Suffix of the variant that runs one shared instance for all clients. */
export const CENTRAL_SUFFIX = '-central';

/**
 * The same gateway deployed centrally: one instance sees every client's requests, one more hop
 * for each of them. Same settings, same binary; only the placement differs.
 */
export function centralVariant(def: PolicyDefinition): PolicyDefinition {
  return {
    ...def,
    name: `${def.name}${CENTRAL_SUFFIX}`,
    describe: `${def.describe}; one shared instance that every client sends to`,
    central: true,
  };
}

/** A started router process: what startInstances needs of it. */
export interface Instance {
  url: string;
  pid: number;
  stop(): Promise<unknown>;
}

/**
 * Starts `count` instances, at most `concurrency` at a time (sixteen processes starting at once
 * on two busy cores run past their start timeouts); all or none.
 */
export async function startInstances(
  count: number,
  start: (i: number) => Promise<Instance>,
  concurrency = 4,
): Promise<RouterSet> {
  const children: Instance[] = [];
  let failure: Error | undefined;
  // Ports come from `freePort` (bind 0, close, pass the number on): another process starting at
  // the same moment can take one in between, which 16 instances of two ports each met. Such an
  // instance is started again once, with fresh ports.
  const startOnce = async (i: number): Promise<Instance> => {
    try {
      return await start(i);
    } catch (err) {
      if (!/address already in use|EADDRINUSE/i.test(String((err as Error).message ?? err)))
        throw err;
      return start(i);
    }
  };
  let next = 0;
  const lane = async (): Promise<void> => {
    while (failure === undefined && next < count) {
      const i = next++;
      try {
        children.push(await startOnce(i));
      } catch (err) {
        failure ??= err instanceof Error ? err : new Error(String(err));
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(count, concurrency) }, lane));
  if (failure !== undefined) {
    await Promise.all(children.map((c) => c.stop()));
    throw failure;
  }
  return {
    urls: children.map((c) => c.url),
    pids: children.map((c) => c.pid),
    stop: async () => {
      await Promise.all(children.map((c) => c.stop()));
    },
  };
}

export const hostPort = (url: string): string => new URL(url).host;
