import type { Logger } from 'pino';
import type { PoolTimeouts } from '../../crds/policy-types.ts';
import {
  Balancer,
  type Clock,
  type EndpointSpec,
  type Picker,
  type PolicyEvent,
  type PoolBalancer,
  type PoolPolicy,
  type Rng,
} from '../policy/index.ts';

/** A resolved pool configuration, from a pool file or a controller snapshot. */
export interface PoolConfig {
  name: string;
  /** Content hash of the configuration, to tell a real change from a no-op reload. */
  hash: string;
  policy: PoolPolicy;
  endpoints: EndpointSpec[];
  timeouts: PoolTimeouts;
}

/** The configuration in force: what a pool file or a controller snapshot resolved to. */
export interface ActivePool {
  name: string;
  /** Increases by one with every applied configuration (file change or snapshot). */
  version: number;
  /** Content hash of the configuration, to tell a real change from a no-op reload. */
  hash: string;
  policy: PoolPolicy;
  endpoints: readonly EndpointSpec[];
  timeouts: PoolTimeouts;
  balancer: PoolBalancer;
}

/**
 * Whether a pool names models for routing beyond `spec.models` (issue 42): aliases, or a backend's
 * `models`. A single pool that does neither routes exactly as before several pools existed.
 */
export function declaresModelRouting(pool: ActivePool): boolean {
  return (
    (pool.policy.aliases?.length ?? 0) > 0 || pool.endpoints.some((e) => e.models !== undefined)
  );
}

export interface ActivePoolStateOptions {
  clock: Clock;
  rng: Rng;
  /** A baseline picker instead of affinity + P2C (the routing benchmark's baselines). */
  picker?: Picker | undefined;
  logger: Logger;
  /** Called after every applied configuration. */
  onApplied?(pool: ActivePool): void;
}

/**
 * The one pool configuration in force and its balancer, which lives as long as the sidecar: a new
 * configuration updates it, so endpoint state (EWMA, breakers, in-flight) carries over by id.
 * Every configuration source (pool file, controller snapshot, drift verdicts) writes here; the
 * proxy and the admin server only read `current()`.
 */
export class ActivePoolState {
  readonly #options: ActivePoolStateOptions;
  #active: ActivePool | undefined;

  constructor(options: ActivePoolStateOptions) {
    this.#options = options;
  }

  /** Undefined until a first configuration is applied. */
  current(): ActivePool | undefined {
    return this.#active;
  }

  /** True when a configuration of this content (hash) is in force. */
  holds(hash: string): boolean {
    return this.#active?.hash === hash;
  }

  /**
   * Applies a configuration unless the same content (hash) is in force: the one place that tells
   * a change from a no-op; false for a no-op. `version`: the controller's snapshot version; a
   * file's configurations are simply counted. Its source logs it (once, with why it came).
   */
  apply(config: PoolConfig, version?: number): boolean {
    const { logger } = this.#options;
    const before = this.#active;
    if (before !== undefined && before.hash === config.hash) return false;
    if (before !== undefined && before.name !== config.name) {
      logger.warn(
        { from: before.name, to: config.name },
        'pool renamed in the pool file; metrics keep the first name until restart',
      );
    }
    const balancer = before?.balancer ?? this.#balancer(config);
    if (before !== undefined) balancer.update(config.policy, config.endpoints);
    const active: ActivePool = {
      name: config.name,
      version: version ?? (before?.version ?? 0) + 1,
      hash: config.hash,
      policy: config.policy,
      endpoints: config.endpoints,
      timeouts: config.timeouts,
      balancer,
    };
    this.#active = active;
    this.#options.onApplied?.(active);
    return true;
  }

  /** The same configuration with its endpoints marked anew (drift verdicts changed). */
  replaceEndpoints(endpoints: EndpointSpec[]): void {
    const active = this.#active;
    if (active === undefined) return;
    active.balancer.update(active.policy, endpoints);
    this.#active = { ...active, endpoints };
  }

  #balancer(config: PoolConfig): Balancer {
    const { clock, rng, picker } = this.#options;
    return new Balancer(config.policy, config.endpoints, {
      clock,
      rng,
      onEvent: (event) => this.#logEvent(event),
      picker,
    });
  }

  #logEvent(event: PolicyEvent): void {
    const { logger } = this.#options;
    const pool = this.#active?.name;
    if (event.kind === 'breaker') {
      const level = event.to === 'open' ? 'warn' : 'info';
      logger[level](
        {
          pool,
          endpoint: event.endpointId,
          from: event.from,
          to: event.to,
          reason: event.reason,
          openForMs: event.openForMs,
        },
        `circuit breaker ${event.to}`,
      );
    } else {
      logger.debug({ pool, endpoint: event.endpointId }, 'cold-start sample dropped');
    }
  }
}
