/**
 * Admission: how a routed request gets under way. A pool with no endpoint that scales from zero
 * holds it (zero-gate.ts); a pool with flow control puts it through its gate (flow-gate.ts:
 * priority, queue, budgets); then an `Exchange` sends it upstream. Split from proxy-server.ts,
 * which reads, routes and answers requests; this is what happens once one is routed.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import type { ActivePool, HeldWaiter, PoolFlow } from '../config/active-pool.ts';
import type { ZeroHold } from '../policy/index.ts';
import { sendError, sendShuttingDown } from './errors.ts';
import { Exchange, type ExchangeDeps, type ExchangeInit } from './exchange.ts';
import { FlowGate, type GatedRequest } from './flow-gate.ts';
import type { SidecarMetrics } from './metrics.ts';
import { HoldGate, type HoldRequest } from './zero-gate.ts';

/**
 * A client request once its route is known: what every exchange of it starts from. `pool` is the
 * first pool until the request's model chose another (proxy-server.ts `#routeTo`); `account` says
 * which pool's metrics count the response the client sees.
 */
export type Routed = Pick<ExchangeInit, 'req' | 'res' | 'pool' | 'path' | 'query' | 'trace'> & {
  readonly account: { metrics: SidecarMetrics };
};

/** What a route adds to an exchange; by default none of it (no body, fields or affinity). */
export type RouteParts = Partial<Omit<ExchangeInit, keyof Routed>>;

/** One pool the proxy routes for: its name, its configuration in force (if any) and its metrics. */
export interface PoolSlot {
  readonly name: string;
  readonly current: ActivePool | undefined;
  readonly metrics: SidecarMetrics;
}

export interface AdmissionOptions {
  logger: Logger;
  /** Monotonic ms. */
  nowMs: () => number;
  isDraining: () => boolean;
  /** The priority of a request without `x-switchyard-priority` (`--priority`); see ProxyOptions. */
  defaultPriority?: number | undefined;
}

/** The request header that sets a request's priority (flow control); never forwarded. */
export const PRIORITY_HEADER = 'x-switchyard-priority';

/** An integer header value, or undefined when it is not one (a 400 names the header). */
export function parsePriority(value: string | string[] | undefined): number | undefined | false {
  if (value === undefined) return undefined;
  if (typeof value !== 'string' || !/^\s*[+-]?\d{1,9}\s*$/.test(value)) return false;
  return Number.parseInt(value, 10);
}

/** `max_tokens` (or `max_completion_tokens`, `max_output_tokens`) of a parsed body. */
function maxTokensOf(fields: Record<string, unknown> | undefined): number | undefined {
  if (fields === undefined) return undefined;
  for (const name of ['max_tokens', 'max_completion_tokens', 'max_output_tokens']) {
    const v = fields[name];
    if (typeof v === 'number' && Number.isFinite(v) && v >= 0) return v;
  }
  return undefined;
}

export class Admission {
  /** The flow gate of each pool with flow control, made at its first request. */
  readonly #gates = new WeakMap<PoolFlow, FlowGate>();
  /** The scale-from-zero gate of each pool, made at its first held request. */
  readonly #holds = new WeakMap<ZeroHold<HeldWaiter>, HoldGate>();

  private readonly exchangeDeps: ExchangeDeps;
  private readonly options: AdmissionOptions;
  /** The pools routed for, in order (proxy-server.ts). */
  readonly #slots: () => readonly PoolSlot[];

  constructor(
    exchangeDeps: ExchangeDeps,
    options: AdmissionOptions,
    slots: () => readonly PoolSlot[],
  ) {
    this.exchangeDeps = exchangeDeps;
    this.options = options;
    this.#slots = slots;
  }

  /**
   * Shutdown: every request held by scale from zero gets its 503 now, rather than waiting out the
   * grace for an endpoint (call once draining, so that nothing new is held).
   */
  refuseHeld(): void {
    for (const slot of this.#slots()) {
      const hold = slot.current?.hold;
      if (hold !== undefined) this.#holds.get(hold)?.refuseAll();
    }
  }

  /** `counted`: the request is in the pool's demand already (it was held first). */
  send(routed: Routed, parts: RouteParts, counted = false): void {
    if (routed.pool.hold.holds()) this.#hold(routed, parts, counted);
    else this.startExchange(routed, parts, counted);
  }

  /** Holds a request of a pool with no endpoint until one comes (or a bound refuses it). */
  #hold(routed: Routed, parts: RouteParts, counted: boolean): void {
    const { req, res, trace } = routed;
    if (this.options.isDraining()) {
      // Its body was still coming when the drain began (refuseHeld has run): nothing to wait for.
      sendShuttingDown(res);
      return;
    }
    // A held request is demand now (an autoscaler scales on it), not when it is released.
    if (!counted) routed.pool.demand?.request();
    const hold = routed.pool.hold;
    let gate = this.#holds.get(hold);
    if (gate === undefined) {
      gate = new HoldGate({
        poolName: routed.pool.name,
        hold,
        metrics: routed.account.metrics.hold,
        logger: this.options.logger,
        nowMs: this.options.nowMs,
      });
      this.#holds.set(hold, gate);
    }
    const request: HoldRequest = {
      bodyBytes: parts.raw?.length ?? 0,
      send: (heldMs) => {
        trace?.held?.(heldMs, 'released');
        // On the configuration in force now (the one that brought the endpoint).
        const current = this.#slots().find((s) => s.current?.hold === hold)?.current;
        this.send(current === undefined ? routed : { ...routed, pool: current }, parts, true);
      },
      refuse: (refusal) => {
        if (refusal.code !== 'shutting_down') {
          trace?.shed();
          routed.pool.demand?.shed();
        }
        trace?.held?.(
          refusal.heldMs ?? 0,
          refusal.heldMs === undefined
            ? 'full'
            : refusal.code === 'shutting_down'
              ? 'shutdown'
              : 'timeout',
        );
        sendError(res, 503, refusal.code, refusal.message, {
          'retry-after': String(refusal.retryAfterS),
          'x-switchyard-attempts': '0',
          ...(refusal.close === true ? { connection: 'close' } : {}),
        });
      },
      dropped: (heldMs) => trace?.held?.(heldMs, 'gone'),
      watchClient: (gone) => watchClient(req, res, gone),
    };
    gate.admit(request);
  }

  /**
   * Counts the request in the pool's load, then sends it upstream as an exchange; through the
   * pool's flow gate when the pool has flow control (flow-gate.ts).
   */
  startExchange(routed: Routed, parts: RouteParts, counted = false): Exchange {
    routed.pool.balancer.recordRequest();
    if (!counted) routed.pool.demand?.request();
    const { account, ...init } = routed;
    const flow = routed.pool.flow;
    // The budget ticket, once admitted: settled when the exchange ends (flow control only).
    let settle: ((tokens: number | undefined) => void) | undefined;
    const exchange = new Exchange(this.exchangeDeps, {
      raw: Buffer.alloc(0),
      fields: undefined,
      streamed: false,
      affinity: {},
      metrics: account.metrics,
      ...init,
      ...parts,
      ...(flow === undefined ? {} : { onEnd: (end) => settle?.(end.tokens) }),
    });
    if (flow === undefined) exchange.start();
    else this.#gate(flow, routed, account.metrics, exchange, parts, (s) => (settle = s));
    return exchange;
  }

  /** A request of a pool with flow control: its priority and workload, then the gate. */
  #gate(
    flow: PoolFlow,
    routed: Routed,
    metrics: SidecarMetrics,
    exchange: Exchange,
    parts: RouteParts,
    onTicket: (settle: (tokens: number | undefined) => void) => void,
  ): void {
    const { req, res, trace } = routed;
    const given = parsePriority(req.headers[PRIORITY_HEADER]);
    if (given === false) {
      sendError(
        res,
        400,
        'invalid_priority',
        `The ${PRIORITY_HEADER} header must be an integer (higher first; negative = sheddable), like "10" or "-1".`,
        {},
        PRIORITY_HEADER,
      );
      return;
    }
    const priority = given ?? this.options.defaultPriority ?? flow.policy.defaultPriority;
    const source = flow.policy.workload;
    let workload = '';
    if (source?.kind === 'Header') {
      const value = req.headers[source.header];
      workload = typeof value === 'string' ? value : (value?.join(',') ?? '');
    } else if (source !== undefined) workload = flow.sidecarWorkload ?? '';
    let gate = this.#gates.get(flow);
    if (gate === undefined) {
      gate = new FlowGate({
        poolName: routed.pool.name,
        flow,
        metrics: metrics.flow,
        nowMs: this.options.nowMs,
      });
      this.#gates.set(flow, gate);
    }
    const kick = gate;
    const bodyBytes = parts.raw?.length ?? (Number(req.headers['content-length']) || 0);
    // A sheddable request may be preempted for a higher priority until its answer starts:
    // registered with the gate while under way, sent again by the gate when it is.
    const preempts = flow.policy.preemptSheddable === true;
    const preemptable = preempts && priority < 0;
    let started = false;
    let stopRunning: (() => void) | undefined;
    let stopAwaiting: (() => void) | undefined;
    const request: GatedRequest = {
      priority,
      workload,
      bodyBytes,
      maxTokens: maxTokensOf(parts.fields),
      balancer: routed.pool.balancer,
      pickRequest: () => exchange.pickRequest(),
      start: (pick, ticket, waitedMs) => {
        trace?.flow?.({ priority, waitedMs });
        if (ticket !== undefined) {
          onTicket((tokens) => flow.ledger.settle(ticket, tokens, this.options.nowMs()));
        }
        if (started) exchange.resume(pick);
        else {
          started = true;
          // The attempt of the pool ends with the response: room for what waits.
          res.once('close', () => {
            stopRunning?.();
            stopAwaiting?.();
            kick.kick();
          });
          if (preemptable)
            exchange.onPreempted = () => {
              stopRunning?.();
              stopRunning = undefined;
              kick.readmit(request);
            };
          exchange.start(pick);
        }
        if (preempts && priority >= 0 && pick.kind === 'picked' && !res.closed)
          stopAwaiting = kick.awaiting({
            priority,
            unanswered: () => exchange.unanswered()?.endpointId,
            queuedThere: () => {
              const sent = exchange.unanswered();
              return (
                sent !== undefined &&
                routed.pool.balancer.queuedSince(sent.endpointId, sent.startedAtMs)
              );
            },
          });
        if (preemptable && pick.kind === 'picked' && !res.closed)
          stopRunning = kick.running({
            priority,
            startedMs: this.options.nowMs(),
            unanswered: () => exchange.unanswered()?.endpointId,
            preempt: () => exchange.preempt(),
          });
      },
      refuse: (refusal) => {
        routed.pool.demand?.shed();
        trace?.flow?.({ priority, waitedMs: refusal.waitedMs, refused: refusal.reason });
        sendError(res, 429, refusal.code, refusal.message, {
          'retry-after': String(refusal.retryAfterS),
          'x-switchyard-attempts': '0',
        });
      },
      watchClient: (gone) => watchClient(req, res, gone),
    };
    gate.admit(request);
  }
}

/**
 * Calls `gone` once the client of a waiting request (queued or held) leaves; returns what stops
 * watching. The socket's end too: the proxy keeps half-open connections (a client may half-close
 * and still read), so a client that left is otherwise seen only at a write, and a waiting request
 * writes nothing. A client that half-closes while it waits is taken as gone.
 */
function watchClient(req: IncomingMessage, res: ServerResponse, gone: () => void): () => void {
  const socket = req.socket;
  const onClose = (): void => {
    if (!res.writableFinished) gone();
  };
  const onEnd = (): void => {
    gone();
    res.destroy();
  };
  res.once('close', onClose);
  socket.once('end', onEnd);
  return () => {
    res.off('close', onClose);
    socket.off('end', onEnd);
  };
}
