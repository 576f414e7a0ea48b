import type { Logger } from 'pino';
import {
  parseReport,
  type BudgetDemand,
  type EndpointHealthReport,
  type PoolDemand,
  type SidecarReport,
} from '../../../crds/snapshot.ts';
import {
  postJson,
  type ControllerConnections,
  type ControllerPost,
  type ControllerSession,
} from './controller-connections.ts';
import { describeError } from './describe-error.ts';
import type { AppliedSnapshot } from './snapshot-applier.ts';

export interface ReporterOptions {
  url: URL;
  /**
   * The sidecar's connection to the controller (controller-connections.ts): reports go on the
   * stream's connection, so they land on its replica and reuse its cached TokenReview.
   */
  connections: ControllerConnections;
  /** Who reports: the pod name. */
  sidecarId: string;
  everyMs: number;
  /** Default `UNCHANGED_REPORT_PERIODS`; 1: every periodic report goes, changed or not. */
  unchangedPeriods?: number | undefined;
  /** A report without an answer in this long is given up (the next one is due anyway). */
  timeoutMs: number;
  log: Logger;
  applied(): AppliedSnapshot | undefined;
  /** Per-endpoint health (see `endpointHealth`). */
  currentEndpoints(): EndpointHealthReport[];
  /**
   * Use and demand of the pool's budgets (issue 43); undefined or empty when the pool has none.
   * While it has some, reports go every `budgetEveryMs` instead of `everyMs`.
   */
  budgets?: (() => BudgetDemand[] | undefined) | undefined;
  /** Default 1 s. */
  budgetEveryMs?: number | undefined;
  /**
   * The pool's demand for the controller's autoscaling gauges (issue 44), read once per report:
   * its rates cover the time since the previous report.
   */
  demand?: (() => PoolDemand | undefined) | undefined;
}

/** Demand reports asked for by `demandNow()` go at most this often (4 a second). */
const DEMAND_MIN_GAP_MS = 250;

/**
 * A periodic report that says exactly what the last one the controller took said (an idle
 * sidecar's: same snapshot, same endpoint health, no demand) is skipped, for up to this many
 * periods since the last one sent (60 s at the default 10 s). The controller keeps a sidecar's
 * last report for as long as its stream is open, so nothing there ages; what it saves is the
 * controller's work per report, which is per sidecar: at 10,000 sidecars, 1,000 reports a second
 * took ~23 % of a core on each of 3 replicas at rest (docs/benchmarks.md). Reports with budgets
 * are never skipped (the split wants every second's), nor urgent ones.
 */
export const UNCHANGED_REPORT_PERIODS = 6;

/**
 * Posts `{applied version, endpoint health}` to the controller while a stream is open: every
 * `everyMs`, and at once after a snapshot was applied. One report at a time; an urgent one asked
 * for meanwhile goes right after it.
 */
export class Reporter {
  readonly #options: ReporterOptions;
  #closed = false;
  #session: ControllerSession | undefined;
  #timer: NodeJS.Timeout | undefined;
  #busy = false;
  #again = false;
  #lastSentMs = -Infinity;
  /** The body of the last report the controller answered 2xx, while nothing since says it lost it. */
  #lastTaken: string | undefined;
  #demandTimer: NodeJS.Timeout | undefined;
  readonly #inFlight = new Set<ControllerPost>();

  constructor(options: ReporterOptions) {
    this.#options = options;
  }

  /** A stream opened with these credentials: report with them until `stop()`. */
  start(session: ControllerSession): void {
    this.#session = session;
    // A new stream may be on another replica, which has none of this sidecar's reports.
    this.#lastTaken = undefined;
    const { everyMs, budgetEveryMs = 1_000 } = this.#options;
    if (this.#options.budgets === undefined) {
      this.#timer = setInterval(() => this.#send(false), everyMs);
      return;
    }
    // Tick at the faster period; without budgets, report only every `everyMs` as before.
    const tickMs = Math.min(everyMs, budgetEveryMs);
    this.#timer = setInterval(() => {
      if (this.#hasBudgets() || performance.now() - this.#lastSentMs >= everyMs - tickMs / 2)
        this.#send(false);
    }, tickMs);
  }

  /**
   * Requests wait for want of share: report the demand now, so the controller re-splits at once
   * rather than at the next period. At most 4 a second.
   */
  demandNow(): void {
    if (this.#closed || this.#session === undefined || this.#demandTimer !== undefined) return;
    const waitMs = Math.max(0, this.#lastSentMs + DEMAND_MIN_GAP_MS - performance.now());
    this.#demandTimer = setTimeout(() => {
      this.#demandTimer = undefined;
      this.#send(true);
    }, waitMs);
    this.#demandTimer.unref();
  }

  #hasBudgets(): boolean {
    try {
      return (this.#options.budgets?.()?.length ?? 0) > 0;
    } catch {
      return false;
    }
  }

  /** The stream closed: no more reports (one in flight finishes). */
  stop(): void {
    this.#stopTimer();
    this.#session = undefined;
  }

  /** Reports now, or right after the report in flight (a snapshot was just applied). */
  sendNow(): void {
    this.#send(true);
  }

  /** Stops for good and destroys the reports in flight; `closed()` waits for them. */
  close(): void {
    this.#closed = true;
    this.#stopTimer();
    for (const post of this.#inFlight) post.abort();
  }

  /** Resolves once no report is in flight. */
  async closed(): Promise<void> {
    await Promise.all([...this.#inFlight].map((post) => post.done));
  }

  #stopTimer(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
    clearTimeout(this.#demandTimer);
    this.#demandTimer = undefined;
  }

  #send(urgent: boolean): void {
    const session = this.#session;
    if (this.#closed || session === undefined) return;
    if (this.#busy) {
      if (urgent) this.#again = true;
      return;
    }
    const { log, timeoutMs } = this.#options;
    let endpoints: EndpointHealthReport[];
    try {
      endpoints = this.#options.currentEndpoints();
    } catch (err) {
      log.warn({ err: describeError(err) }, 'report not sent: reading the endpoint health failed');
      return;
    }
    let budgets: BudgetDemand[] | undefined;
    try {
      budgets = this.#options.budgets?.();
    } catch (err) {
      log.warn({ err: describeError(err) }, 'reading the budget demand failed; reported without');
    }
    let demand: PoolDemand | undefined;
    try {
      demand = this.#options.demand?.();
    } catch (err) {
      log.warn({ err: describeError(err) }, 'reading the pool demand failed; reported without');
    }
    const applied = this.#options.applied();
    const report: SidecarReport = {
      sidecar: this.#options.sidecarId,
      appliedVersion: applied?.version ?? 0,
      appliedHash: applied?.hash ?? '',
      endpoints,
      ...(budgets === undefined || budgets.length === 0 ? {} : { budgets }),
      ...(demand === undefined ? {} : { demand }),
    };
    const checked = parseReport(report);
    if (!checked.ok) {
      log.warn({ errors: checked.errors }, 'report not sent: it does not match the report schema');
      return;
    }
    const body = JSON.stringify(report);
    if (
      !urgent &&
      report.budgets === undefined &&
      body === this.#lastTaken &&
      performance.now() - this.#lastSentMs <
        this.#options.everyMs * ((this.#options.unchangedPeriods ?? UNCHANGED_REPORT_PERIODS) - 0.5)
    )
      return;
    this.#busy = true;
    this.#lastSentMs = performance.now();
    const post = postJson(this.#options.connections, this.#options.url, session, body, timeoutMs);
    this.#inFlight.add(post);
    void post.done
      .then((result) => {
        this.#inFlight.delete(post);
        this.#busy = false;
        const { status, error } = result;
        const taken = status >= 200 && status < 300;
        // Only a report the controller took may stand for the next ones.
        this.#lastTaken = taken && this.#session === session ? body : undefined;
        if (taken) log.debug({ appliedVersion: report.appliedVersion }, 'report sent');
        else if (status !== 0) log.debug({ status }, 'report refused by the controller');
        else if (!this.#closed) {
          log.debug({ err: describeError(error) }, 'report failed');
          // The controller refused it unprocessed (REFUSED_STREAM, or its connection going away
          // as it went out): once more, on a new connection when that one is gone. The
          // controller never saw it, so this cannot repeat it.
          if (result.notProcessed) this.#again = true;
        }
        if (this.#again) {
          this.#again = false;
          this.#send(false);
        }
      })
      // Never an unhandled rejection (it would end the sidecar): a bug here costs one report.
      .catch((err: unknown) =>
        log.error({ err: describeError(err) }, 'handling a report answer failed; reports go on'),
      );
  }
}
