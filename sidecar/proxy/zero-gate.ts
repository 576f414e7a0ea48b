/**
 * Scale from zero's shell (issue 44; docs/sidecar.md, Scale from zero): while a pool with
 * `scaleFromZero` has no endpoint, its requests (bodies read) are held here instead of getting the
 * 503 at once; when a configuration with an endpoint is applied they go out, in arrival order,
 * through the normal path (flow control, if set, still applies). Past a bound (`maxRequests`,
 * `maxBytes`, `maxWait`) a request gets the same 503 + Retry-After as a pool with no endpoint, with
 * a code that says which bound. A client that leaves while held is dropped at once, nothing sent.
 * At shutdown every held request gets its 503 at once (they would only wait out the grace).
 *
 * The hold itself is pure (policy/zero-hold.ts, owned by the pool's ActivePoolState so that the
 * controller client can report its size); this holds the one timer, the client watches and logs.
 */
import type { Logger } from 'pino';
import type { HeldWaiter } from '../config/active-pool.ts';
import type { HoldStreak, QueueEntry, ZeroHold } from '../policy/index.ts';
import type { SidecarErrorCode } from './errors.ts';

/** How a held request left the hold: the `outcome` label of the held-time histogram. */
export type HoldOutcome = 'released' | 'timeout' | 'gone' | 'shutdown';

/** The Retry-After of every refusal: as a pool with no endpoint answers (DEFAULT_SHED_RETRY_AFTER_MS). */
export const HOLD_RETRY_AFTER_S = 1;

/** A 503 the client gets. */
export interface HoldRefusal {
  readonly code: SidecarErrorCode;
  readonly message: string;
  readonly retryAfterS: number;
  /** Held this long first (undefined: refused at once). */
  readonly heldMs?: number | undefined;
  /** Close the connection after it (shutdown). */
  readonly close?: boolean | undefined;
}

/** One request at the hold, as the proxy hands it over (its exchange not made yet). */
export interface HoldRequest {
  /** Bytes of the body it holds (counted against `maxBytes`). */
  readonly bodyBytes: number;
  /** Send it now, through the normal path, on the pool's configuration in force. */
  send(heldMs: number): void;
  refuse(refusal: HoldRefusal): void;
  /** Calls `gone` once when the client leaves unanswered; returns what stops watching. */
  watchClient(gone: () => void): () => void;
  /** The request left the hold without being sent (client gone): its span says so. */
  dropped?(heldMs: number): void;
}

export interface HoldGateMetrics {
  /** A request left the hold after `seconds`. */
  left(outcome: HoldOutcome, seconds: number): void;
  /** A request was refused without being held (full), or at timeout: the no-endpoint 503. */
  shed(): void;
}

export interface HoldTimers {
  setTimeout(fn: () => void, ms: number): { unref?(): unknown };
  clearTimeout(handle: unknown): void;
  /** Runs `fn` after the code now running (a snapshot's apply), before any other I/O. */
  queueMicrotask(fn: () => void): void;
}

const NODE_TIMERS: HoldTimers = {
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout),
  queueMicrotask: (fn) => queueMicrotask(fn),
};

export interface HoldGateDeps {
  readonly poolName: string;
  readonly hold: ZeroHold<HeldWaiter>;
  readonly metrics: HoldGateMetrics;
  readonly logger: Logger;
  /** Monotonic ms. */
  readonly nowMs: () => number;
  readonly timers?: HoldTimers | undefined;
}

function seconds(ms: number): string {
  return `${Math.round(ms) / 1000}s`;
}

/** The gate of one pool's hold: one per `ZeroHold` (the proxy keeps them), as long as the pool. */
export class HoldGate {
  readonly #deps: HoldGateDeps;
  readonly #timers: HoldTimers;
  #timer: unknown;
  #timerAtMs: number | undefined;
  #releaseScheduled = false;

  constructor(deps: HoldGateDeps) {
    this.#deps = deps;
    this.#timers = deps.timers ?? NODE_TIMERS;
    deps.hold.onChange = () => this.#scheduleRelease();
  }

  /** A request of a pool that holds now (`hold.holds()`): hold it, or refuse it (full). */
  admit(request: HoldRequest): void {
    const { hold, logger, poolName, nowMs } = this.#deps;
    const now = nowMs();
    const held = new Held(this, request, now);
    const offered = hold.offer(request.bodyBytes, now, held);
    if (offered.kind === 'full') {
      held.stopWatching();
      const policy = hold.policy!;
      this.#deps.metrics.shed();
      request.refuse({
        code: 'scale_from_zero_full',
        message: `Pool ${poolName} has no endpoint yet (scaling from zero), and this sidecar holds its most ${offered.limit === 'requests' ? `requests waiting for one (scaleFromZero.maxRequests, ${policy.maxRequests})` : `bytes of held request bodies (scaleFromZero.maxBytes, ${policy.maxBytes})`}. Retry after the Retry-After, or raise the pool's scaleFromZero bounds.`,
        retryAfterS: HOLD_RETRY_AFTER_S,
      });
      return;
    }
    held.entry = offered.entry;
    if (offered.first) {
      const policy = hold.policy!;
      logger.info(
        {
          pool: poolName,
          maxWaitMs: policy.maxWaitMs,
          maxRequests: policy.maxRequests,
          maxBytes: policy.maxBytes,
        },
        'scale from zero: the pool has no endpoint; holding its requests until the first one is ready',
      );
    }
    this.#arm();
  }

  /** Shutdown: every held request gets its 503 now. */
  refuseAll(): void {
    const entries = this.#deps.hold.takeAll('shutdown');
    for (const entry of entries) entry.value.refuse('shutdown');
    this.#settled();
  }

  /** Internal to `Held`. */
  get deps(): HoldGateDeps {
    return this.#deps;
  }

  /** Internal to `Held`: its client left. */
  drop(entry: QueueEntry<HeldWaiter>): void {
    this.#deps.hold.remove(entry);
    this.#settled();
  }

  /**
   * After the snapshot's apply and what runs with it (the flow state's new shares): the requests
   * then start on the configuration in force, ahead of any request that arrives later.
   */
  #scheduleRelease(): void {
    if (this.#releaseScheduled) return;
    this.#releaseScheduled = true;
    this.#timers.queueMicrotask(() => {
      this.#releaseScheduled = false;
      const { hold } = this.#deps;
      if (hold.holds()) return; // the endpoint went again before this ran
      for (const entry of hold.takeAll('released')) entry.value.release();
      this.#settled();
    });
  }

  #timedOut(): void {
    this.#timer = undefined;
    this.#timerAtMs = undefined;
    const expired = this.#deps.hold.expire(this.#deps.nowMs());
    for (const entry of expired) entry.value.refuse('timeout');
    this.#settled();
  }

  /** Entries left the hold: re-arm the timer for the oldest, log the end of a streak. */
  #settled(): void {
    this.#arm();
    const streak = this.#deps.hold.endStreak();
    if (streak !== undefined) this.#logEnd(streak);
  }

  /** One timer, at the oldest held request's deadline (none while nothing is held). */
  #arm(): void {
    const at = this.#deps.hold.nextDeadlineMs();
    if (at === this.#timerAtMs) return;
    if (this.#timer !== undefined) this.#timers.clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#timerAtMs = at;
    if (at === undefined) return;
    const handle = this.#timers.setTimeout(
      () => this.#timedOut(),
      Math.max(0, at - this.#deps.nowMs()),
    );
    handle.unref?.();
    this.#timer = handle;
  }

  #logEnd(streak: HoldStreak): void {
    const { logger, poolName, nowMs } = this.#deps;
    const { sinceMs, ...counts } = streak;
    const fields = { pool: poolName, heldForMs: Math.round(nowMs() - sinceMs), ...counts };
    const what =
      streak.released > 0
        ? 'an endpoint is ready; held requests released'
        : streak.timedOut > 0
          ? 'no endpoint came within scaleFromZero.maxWait; held requests answered 503'
          : streak.shutdown > 0
            ? 'shutting down; held requests answered 503'
            : 'every held request left (its client disconnected)';
    logger.info(fields, `scale from zero: ${what}`);
  }
}

/** One held request: its client watch, and what it does when it leaves the hold. */
class Held implements HeldWaiter {
  readonly #gate: HoldGate;
  readonly #request: HoldRequest;
  readonly #since: number;
  readonly #unwatch: () => void;
  entry: QueueEntry<HeldWaiter> | undefined;
  #done = false;

  constructor(gate: HoldGate, request: HoldRequest, now: number) {
    this.#gate = gate;
    this.#request = request;
    this.#since = now;
    this.#unwatch = request.watchClient(() => this.#clientGone());
  }

  stopWatching(): void {
    this.#done = true;
    this.#unwatch();
  }

  release(): void {
    const heldMs = this.#leave('released');
    if (heldMs !== undefined) this.#request.send(heldMs);
  }

  refuse(why: 'timeout' | 'shutdown'): void {
    const heldMs = this.#leave(why);
    if (heldMs === undefined) return;
    const { poolName, hold, metrics } = this.#gate.deps;
    if (why === 'shutdown') {
      this.#request.refuse({
        code: 'shutting_down',
        message: `This sidecar is shutting down; it held this request ${seconds(heldMs)} waiting for pool ${poolName}'s first endpoint. Retry on a fresh connection.`,
        retryAfterS: HOLD_RETRY_AFTER_S,
        heldMs,
        close: true,
      });
      return;
    }
    metrics.shed();
    this.#request.refuse({
      code: 'scale_from_zero_timeout',
      message: `Pool ${poolName} has no endpoint: this request was held ${seconds(heldMs)} (scaleFromZero.maxWait, ${seconds(hold.policy?.maxWaitMs ?? heldMs)}) waiting for the first one to be ready, and none came. Retry after the Retry-After; if this lasts, check the pool's autoscaler and its servers' startup.`,
      retryAfterS: HOLD_RETRY_AFTER_S,
      heldMs,
    });
  }

  #clientGone(): void {
    if (this.#done) return;
    const heldMs = this.#leave('gone');
    if (this.entry !== undefined) this.#gate.drop(this.entry);
    this.entry = undefined;
    if (heldMs !== undefined) this.#request.dropped?.(heldMs);
  }

  /** Out of the hold for good: watch stopped, time observed; undefined when it already left. */
  #leave(outcome: HoldOutcome): number | undefined {
    if (this.#done) return undefined;
    this.#done = true;
    this.#unwatch();
    const heldMs = Math.max(0, this.#gate.deps.nowMs() - this.#since);
    this.#gate.deps.metrics.left(outcome, heldMs / 1000);
    return heldMs;
  }
}
