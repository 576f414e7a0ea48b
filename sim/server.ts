/**
 * The backend simulator: an OpenAI-compatible HTTP server whose latency comes from a small model
 * of an inference engine. `startSim` wires the three parts together on the wall clock:
 *
 * - engine/: the model (slots, queue, prefill, prefix cache, decode, cold starts, faults); pure,
 *   time injected, no HTTP;
 * - simulator.ts: the options in force, the engine, the request counters, stats and run-time
 *   configuration;
 * - http/: the node:http server and its routes, one module per API surface.
 *
 * See docs/simulator.md for what is modelled and the HTTP API.
 */
import { resolveSimOptions } from './options.ts';
import type { SimOptions } from './options.ts';
import { SimHttpServer } from './http/http-server.ts';
import { simRoutes } from './http/routes.ts';
import { Simulator } from './simulator.ts';
import type { SimLogger, SimStats } from './simulator.ts';
import { wallTime } from './wall-time.ts';

export type { SimLogger, SimStats } from './simulator.ts';

export interface SimHandle {
  /**
   * `http://<host>:<port>` (`https://` with `tlsCert`), without a trailing slash (the API is
   * under `/v1`).
   */
  readonly url: string;
  readonly port: number;
  close(): Promise<void>;
  stats(): SimStats;
  /** Apply a run-time patch (anything but port/host). Throws `SimOptionError` naming the field. */
  configure(patch: Partial<SimOptions>): void;
  /** The effective options (name resolved, actual port). */
  options(): SimOptions;
}

export interface StartSimDeps {
  logger?: SimLogger | undefined;
}

const NOOP_LOGGER: SimLogger = { debug() {}, info() {}, warn() {} };

/**
 * Start a simulator. Options not given take their defaults (`DEFAULT_SIM_OPTIONS`); invalid ones
 * throw `SimOptionError`. Resolves once the server listens.
 */
export async function startSim(
  options: Partial<SimOptions> = {},
  deps: StartSimDeps = {},
): Promise<SimHandle> {
  const opts = resolveSimOptions(options);
  const sim = new Simulator(opts, { log: deps.logger ?? NOOP_LOGGER, time: wallTime });
  const server = new SimHttpServer(sim, simRoutes(sim));
  const port = await server.listen();
  const host = opts.host.includes(':') ? `[${opts.host}]` : opts.host;
  return {
    url: `${opts.tlsCert === undefined ? 'http' : 'https'}://${host}:${port}`,
    port,
    close: () => server.close(),
    stats: () => sim.stats(),
    configure: (patch) => {
      sim.configure(patch);
    },
    options: () => sim.effectiveOptions(),
  };
}
