import type { Logger } from 'pino';
import type { FlowControlPolicy, PoolTimeouts } from '../../crds/policy-types.ts';
import {
  Balancer,
  BudgetLedger,
  DemandMeter,
  FlowQueue,
  type BudgetDemand,
  type BudgetLedgerApi,
  type BudgetShare,
  type BudgetStatus,
  type FlowQueueApi,
  type Clock,
  type EndpointSpec,
  type Picker,
  type PolicyEvent,
  type PoolBalancer,
  type PoolPolicy,
  type PromptBlocks,
  type Rng,
  ZeroHold,
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
  /**
   * Flow control's state (issue 43), when the pool sets `flowControl`: lives with the pool like
   * its balancer (queue and budgets carry over a new configuration). Undefined: no queue, no
   * budgets, every request starts at once.
   */
  flow?: PoolFlow | undefined;
  /**
   * The requests and sheds of the pool, for the demand of the reports to the controller (issue
   * 44): lives with the pool like its balancer. Optional only for hand-made pools in tests.
   */
  demand?: DemandMeter | undefined;
  /**
   * Scale from zero (issue 44): the requests held while the pool has no endpoint. Lives as long
   * as the pool (one per `ActivePoolState`, the same object in every configuration), so held
   * requests outlive the configuration they came under; empty and inert unless the pool sets
   * `scaleFromZero`.
   */
  hold: ZeroHold<HeldWaiter>;
}

/**
 * A request held by scale from zero, as the proxy's hold gate (proxy/zero-gate.ts) keeps it: the
 * hold only orders and bounds these, the gate calls them.
 */
export interface HeldWaiter {
  /** An endpoint came: send it through the normal path (flow control first, if set). */
  release(): void;
  /** Answer the 503: held `maxWait` (`timeout`), or the sidecar is shutting down. */
  refuse(why: 'timeout' | 'shutdown'): void;
}

/**
 * A request waiting in a pool's flow queue, as the proxy's flow gate (proxy/flow-gate.ts) holds
 * it: the queue only orders these, the gate calls them.
 */
export interface FlowWaiter {
  /**
   * Try to start it now: `started` (it left the queue's hands), or what it still waits for:
   * `saturated` (no endpoint has room for it), `budget` (a budget of `budgetId` has no room).
   */
  tryStart(nowMs: number): 'started' | 'saturated' | { budgetId: string };
  /** Pushed out of the queue by a higher priority: answer it (429 queue_full). */
  evicted(): void;
}

/** How a pool's budgets are held: whole (a pool file), or as the controller's shares. */
export type BudgetSharing = 'whole' | 'shared';

/**
 * Flow control's state of one pool in this sidecar: the queue of requests waiting for room or
 * budget, and the budget ledger. Reconfigured on each applied configuration; the controller
 * client (config/controller/**) feeds it shares with `applyShares` and reads `demand()` for its
 * reports.
 */
export class PoolFlow {
  policy: FlowControlPolicy;
  readonly queue: FlowQueueApi<FlowWaiter>;
  readonly ledger: BudgetLedgerApi;
  readonly sharing: BudgetSharing;
  readonly #clock: Clock;
  /** `--workload`: this sidecar's workload when the controller names none (standalone). */
  readonly #flagWorkload: string | undefined;
  /** The workload the controller named in its last `shares` event. */
  #controllerWorkload: string | undefined;
  /** Called when budgets may have room again (new shares): the gate tries its queue. */
  onChange: (() => void) | undefined;

  constructor(
    policy: FlowControlPolicy,
    sharing: BudgetSharing,
    clock: Clock,
    workload: string | undefined,
  ) {
    this.policy = policy;
    this.sharing = sharing;
    this.#clock = clock;
    this.#flagWorkload = workload;
    this.queue = new FlowQueue<FlowWaiter>(limitsOf(policy));
    this.ledger = new BudgetLedger();
    this.ledger.configure(policy.budgets, sharing, clock.nowMs());
  }

  /** A new configuration of the pool: new bounds and budgets (state kept by budget id). */
  configure(policy: FlowControlPolicy): void {
    this.policy = policy;
    this.queue.setLimits(limitsOf(policy));
    this.ledger.configure(policy.budgets, this.sharing, this.#clock.nowMs());
    this.onChange?.();
  }

  /**
   * The workload of every request of this sidecar when the pool's workload is a ServiceAccount
   * or a pod label: the one the controller named, else `--workload`; undefined when neither.
   */
  get sidecarWorkload(): string | undefined {
    return this.#controllerWorkload ?? this.#flagWorkload;
  }

  /**
   * The controller's `shares` event for this sidecar: its shares of the pool's budgets, and the
   * workload it names for this sidecar (ServiceAccount, PodLabel pools). Kept until the next one
   * (also while the controller is down).
   */
  applyShares(shares: readonly BudgetShare[], workload: string | undefined): void {
    if (workload !== undefined) this.#controllerWorkload = workload;
    this.ledger.applyShares(shares, this.#clock.nowMs());
    this.onChange?.();
  }

  /** Every budget as this sidecar holds it now (metrics, `/debug/flow`, `switchyard status`). */
  budgets(): BudgetStatus[] {
    return this.ledger.status(this.#clock.nowMs());
  }

  /** Use and demand per budget over the last minute, for the report to the controller. */
  demand(): BudgetDemand[] {
    return this.ledger.demand(this.#clock.nowMs());
  }
}

function limitsOf(policy: FlowControlPolicy): { maxRequests: number; maxBytes: number } {
  return { maxRequests: policy.maxQueuedRequests, maxBytes: policy.maxQueuedBytes };
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
  /**
   * How this pool's budgets are held (flow control): `whole` from a pool file, `shared` (the
   * controller's shares) when fed by the controller. Default `whole`.
   */
  budgetSharing?: BudgetSharing | undefined;
  /** `--workload`: this sidecar's workload for ServiceAccount/PodLabel pools, standalone. */
  workload?: string | undefined;
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
  /** Scale from zero's held requests of this pool (see `ActivePool.hold`). */
  readonly hold = new ZeroHold<HeldWaiter>();
  /**
   * Told every prompt placement the balancer records (issue 45): the controller source queues
   * them for upload while its controller relays placements. Set and cleared by that source.
   */
  onPlacement: ((endpointId: string, prompt: PromptBlocks, nowMs: number) => void) | undefined;

  constructor(options: ActivePoolStateOptions) {
    this.#options = options;
  }

  /** Undefined until a first configuration is applied. */
  current(): ActivePool | undefined {
    return this.#active;
  }

  /** The balancer's clock (what `onPlacement`'s times are read on). */
  nowMs(): number {
    return this.#options.clock.nowMs();
  }

  /** Requests held now because the pool has no endpoint (scale from zero): `demand.held`. */
  heldRequests(): number {
    return this.hold.size;
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
    const flow = this.#flow(before?.flow, config.policy.flowControl);
    const demand = before?.demand ?? new DemandMeter(this.#options.clock);
    const active: ActivePool = {
      name: config.name,
      version: version ?? (before?.version ?? 0) + 1,
      hash: config.hash,
      policy: config.policy,
      endpoints: config.endpoints,
      timeouts: config.timeouts,
      balancer,
      flow,
      demand,
      hold: this.hold,
    };
    this.#active = active;
    // After the pool is in force: held requests released now go out on this configuration.
    this.hold.configure(config.policy.scaleFromZero, config.endpoints.length);
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

  /** The pool's flow state: kept and reconfigured, made when flow control is first set. */
  #flow(before: PoolFlow | undefined, policy: FlowControlPolicy | undefined): PoolFlow | undefined {
    if (policy === undefined) return undefined;
    if (before !== undefined) {
      before.configure(policy);
      return before;
    }
    const { clock, budgetSharing, workload } = this.#options;
    return new PoolFlow(policy, budgetSharing ?? 'whole', clock, workload);
  }

  #balancer(config: PoolConfig): Balancer {
    const { clock, rng, picker } = this.#options;
    return new Balancer(config.policy, config.endpoints, {
      clock,
      rng,
      onEvent: (event) => this.#logEvent(event),
      picker,
      onPlacement: (endpointId, prompt, nowMs) => this.onPlacement?.(endpointId, prompt, nowMs),
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
