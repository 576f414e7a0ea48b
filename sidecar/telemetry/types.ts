/**
 * What the proxy tells tracing, as hooks it calls at the points that matter: a request arrives,
 * an attempt is sent, a retry is weighed, an attempt ends, the response closes. The proxy holds a
 * `ProxyTracer` only when tracing is configured; otherwise it holds undefined and calls nothing,
 * so tracing off costs one undefined check per hook. The implementation (otel-proxy-tracer.ts) is
 * loaded on demand by start-proxy-tracing.ts.
 */
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http';
import type {
  AffinityResult,
  Attempt,
  PoolBalancer,
  RefusalReason,
  RetryDecision,
} from '../policy/index.ts';

/** Traces the proxy's client requests. */
export interface ProxyTracer {
  /**
   * A client request arrived: its server span starts, as a child of the request's `traceparent`
   * when it has one. `route` is the path when the sidecar serves it, else undefined (a span name
   * must not carry an arbitrary path).
   */
  startRequest(
    method: string,
    path: string,
    route: string | undefined,
    headers: IncomingHttpHeaders,
  ): RequestTrace;
  /** Exports the spans still buffered, then stops. */
  shutdown(): Promise<void>;
}

/** What flow control did with a request (docs/sidecar.md, Flow control). */
export interface FlowOutcome {
  readonly priority: number;
  readonly waitedMs?: number | undefined;
  readonly refused?: RefusalReason | undefined;
}

/** Why a failed attempt was or was not followed by another. */
export type RetryVerdict = RetryDecision['kind'] | 'no-endpoint';

/** One client request's server span. */
export interface RequestTrace {
  /** The request is an inference call: its model (as the client sent it) and whether it streams. */
  generation(model: unknown, streamed: boolean): void;
  /**
   * An attempt is about to be sent: its client span starts, and its `traceparent` is written into
   * `headers` (replacing the client's), sampled or not, so the backend continues this trace.
   * Returns undefined when the span is not recorded (not sampled): nothing more to report.
   */
  startAttempt(pick: AttemptPick, headers: OutgoingHttpHeaders): AttemptTrace | undefined;
  /**
   * The pool the request's model chose, the model the client asked for and the one it is sent
   * with (an alias resolved): `switchyard.pool`, `switchyard.model.requested`/`.resolved`.
   */
  routed?(pool: string, requested: string | undefined, resolved: string | undefined): void;
  /** The balancer's answer when a failed attempt asked for a retry. */
  retryVerdict(verdict: RetryVerdict): void;
  /** Every endpoint was unavailable: the client got a 503 at once. */
  shed(): void;
  /**
   * Flow control let the request through (after `waitedMs` in the queue, if it waited) or
   * refused it (`refused`: the reason): `switchyard.flow.*` attributes.
   */
  flow?(outcome: FlowOutcome): void;
  /**
   * Scale from zero held the request `heldMs` while the pool had no endpoint, then `outcome`:
   * `switchyard.scale_from_zero.*` attributes.
   */
  held?(heldMs: number, outcome: 'released' | 'timeout' | 'gone' | 'shutdown' | 'full'): void;
  /** The client's response closed; `completed` is false when it was cut off. */
  end(status: number, completed: boolean): void;
}

/** What the balancer chose for one attempt, and why. */
export interface AttemptPick {
  readonly attempt: Attempt;
  /** 1 for the first attempt. */
  readonly number: number;
  /** The affinity decision of this pick. */
  readonly affinity: AffinityResult;
  /** To read the endpoint's standing (breaker, EWMA, load) when the span is recorded. */
  readonly balancer: PoolBalancer;
  /** Where the request goes (for `server.address`, `server.port`). */
  readonly host: string;
  readonly port: number;
}

/** One attempt's client span. */
export interface AttemptTrace {
  /** The first response body byte arrived. */
  firstByte(): void;
  /** A response body chunk (the usage reported in the body's tail is read from these). */
  data(chunk: Buffer): void;
  /** The upstream request failed with this code (ECONNREFUSED, ECONNRESET, ETIMEDOUT...). */
  upstreamError(code: string): void;
  /**
   * How the attempt was counted: the metrics code class (`2xx`, `4xx`, `429`, `5xx`, `error`,
   * `timeout`, `aborted`) and the upstream's status, 0 when none arrived.
   */
  report(codeClass: string, status: number): void;
  /** Nothing more happens on this attempt: the span ends. */
  end(): void;
}
