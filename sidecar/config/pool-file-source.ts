import type { Logger } from 'pino';
import type { EndpointSpec } from '../policy/index.ts';
import type { ActivePoolState, PoolConfig } from './active-pool.ts';
import type { RunningConfigSource } from './config-source.ts';
import { ConfigError } from './config-error.ts';
import { formatProblems, loadPoolFile, watchPoolFile } from './pool-file.ts';
import { PoolFileParser } from './pool-file-parser.ts';
import { StandaloneDrift } from './standalone-drift.ts';
import { LoadMonitor } from '../../lib/load-scrape/monitor.ts';

export { ConfigError };

/** Reads the pool file a standalone sidecar starts with; throws `ConfigError` when it is invalid. */
export async function readPoolFile(
  file: string,
  env: Record<string, string | undefined>,
): Promise<PoolConfig> {
  const loaded = await loadPoolFile(file, env);
  if (!loaded.ok) throw new ConfigError(formatProblems(file, loaded.problems));
  return loaded.pool;
}

export interface PoolFileSourceOptions {
  file: string;
  env: Record<string, string | undefined>;
  /** The file as read at start (`readPoolFile`): applied at once. */
  first: PoolConfig;
  active: ActivePoolState;
  logger: Logger;
  /** A change of the file was invalid (and is not applied). */
  onRejected(): void;
  /**
   * How often each endpoint's `/metrics` is scraped for the load its server reports (in
   * Kubernetes the controller does this for every sidecar); 0 or absent: never.
   */
  loadScrapeEveryMs?: number | undefined;
}

/**
 * A standalone sidecar's configuration: the pool file, applied at start, re-read when it changes
 * (an invalid change is logged and the last good one stays), and the drift probes of its
 * endpoints when the file asks for them (in Kubernetes the controller probes instead).
 */
export class PoolFileSource implements RunningConfigSource {
  readonly #options: PoolFileSourceOptions;
  readonly #drift: StandaloneDrift;
  readonly #watcher: { close(): void };
  readonly #parser: PoolFileParser;
  #running: Promise<boolean> | undefined;
  #next: Promise<boolean> | undefined;
  readonly #load: LoadMonitor | undefined;
  /** The file's endpoints before the drift verdicts were applied to them. */
  #fileEndpoints: readonly EndpointSpec[] = [];

  constructor(options: PoolFileSourceOptions) {
    this.#options = options;
    this.#parser = new PoolFileParser(options.file);
    this.#parser.warm();
    this.#drift = new StandaloneDrift({
      logger: options.logger,
      onChange: () => options.active.replaceEndpoints(this.#drift.mark(this.#fileEndpoints)),
    });
    this.#apply(options.first);
    this.#watcher = watchPoolFile(options.file, () => void this.reload());
    const period = options.loadScrapeEveryMs ?? 0;
    if (period > 0) {
      const { active } = options;
      this.#load = new LoadMonitor({
        periodMs: period,
        logger: options.logger,
        pools: () => new Map([['pool', active.current()?.endpoints ?? []]]),
        // Each reading counts from when it was scraped; a fresher ORCA header wins.
        publish: (_pool, load) => {
          const balancer = active.current()?.balancer;
          for (const e of load.endpoints) balancer?.reportLoad(e.id, e, e.ageMs);
        },
      });
      this.#load.start();
    }
  }

  /**
   * Re-reads the file now (the watcher does this on change, SIGHUP too); false when it was
   * rejected. Reloads run one at a time, and one asked for while another runs reads the file
   * again after it, so the last write is always the one applied.
   */
  reload(): Promise<boolean> {
    if (this.#running === undefined) {
      this.#running = this.#reloadNow().finally(() => (this.#running = undefined));
      return this.#running;
    }
    this.#next ??= this.#running.then(() => {
      this.#next = undefined;
      return this.reload();
    });
    return this.#next;
  }

  async #reloadNow(): Promise<boolean> {
    const { file, env, logger } = this.#options;
    const next = await loadPoolFile(file, env, (text) => this.#parser.parse(text, env));
    if (!next.ok) {
      this.#options.onRejected();
      logger.error(
        { file, problems: next.problems },
        'pool file change rejected; the last good configuration stays in force',
      );
      return false;
    }
    this.#apply(next.pool);
    return true;
  }

  close(): Promise<void> {
    this.#watcher.close();
    this.#load?.stop();
    this.#drift.stop();
    this.#parser.close();
    return Promise.resolve();
  }

  #apply(config: PoolConfig): void {
    const { active, logger } = this.#options;
    // Before the drift probes are set up anew: an edit that changes nothing changes nothing.
    if (active.holds(config.hash)) return;
    this.#drift.configure(config.policy.drift, config.endpoints);
    const endpoints = this.#drift.mark(config.endpoints);
    active.apply({ ...config, endpoints });
    this.#fileEndpoints = config.endpoints;
    logger.info(
      {
        pool: config.name,
        version: active.current()?.version,
        hash: config.hash,
        mode: config.policy.mode,
        endpoints: endpoints.map((e) => e.id),
        // Drifted endpoints take no traffic: a pool with only drifted ones sheds every request.
        drifted: endpoints.filter((e) => e.drifted === true).map((e) => e.id),
      },
      'pool configuration applied',
    );
  }
}
