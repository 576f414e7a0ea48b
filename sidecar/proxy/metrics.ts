import {
  CounterFamily,
  HistogramFamily,
  LINES_PER_SLICE,
  familiesText,
  gaugeFamily,
  labelText,
  labelValue,
  type Family,
} from './exposition.ts';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from './prom.ts';
import type {
  AffinityResult,
  BudgetStatus,
  RefusalReason,
  EndpointGauges,
  EndpointSpec,
  PrefillExchangeReading,
} from '../policy/index.ts';

/** How an attempt ended, as the `code` label of `switchyard_requests_total`: a bounded set. */
export type CodeClass =
  '2xx' | '4xx' | '429' | '5xx' | 'error' | 'timeout' | 'aborted' | 'preempted';
const CODE_CLASSES: readonly CodeClass[] = [
  '2xx',
  '4xx',
  '429',
  '5xx',
  'error',
  'timeout',
  'aborted',
  'preempted',
];
const AFFINITY_RESULTS: readonly AffinityResult[] = ['hit', 'spill', 'overloaded', 'none'];

/** Seconds, tuned for LLM time-to-first-token: 5 ms up to 2 minutes. */
export const TTFT_BUCKETS_S = [
  0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120,
];

const BREAKER_VALUE = { closed: 0, 'half-open': 1, open: 2 } as const;

/** Seconds a request waited in the flow-control queue: 1 ms up to 2 minutes. */
export const QUEUE_WAIT_BUCKETS_S = [
  0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120,
];

/** Seconds a request was held by scale from zero: 10 ms up to 20 minutes (maxWait 5m by default). */
export const HELD_BUCKETS_S = [0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 120, 180, 300, 600, 1200];
const HOLD_OUTCOMES = ['released', 'timeout', 'gone', 'shutdown'] as const;

/**
 * Distinct priorities given their own `priority` label value per pool; past them `other` (the
 * priority header is the client's: its values must not grow the series without bound).
 */
export const MAX_PRIORITY_LABELS = 16;

const REFUSAL_REASONS: readonly RefusalReason[] = [
  'saturated',
  'budget',
  'queue-full',
  'sheddable',
];

/** What flow control's gauges read at scrape time (config/active-pool.ts, `PoolFlow`). */
export interface FlowReading {
  readonly queue: { countsByPriority(): Map<number, number> };
  budgets(): BudgetStatus[];
}

/** Children pre-bound per endpoint so the request path does no label lookups. */
export interface EndpointMetrics {
  labels: { pool: string; backend: string; endpoint: string };
  requests: Record<CodeClass, { inc(): void }>;
  ttft: { observe(seconds: number): void };
  /** Responses whose model or system_fingerprint contradicted the endpoint's drift probe. */
  driftMismatches: { inc(): void };
}

/**
 * The help texts of the per-endpoint families: most of the text at a large pool (up to 7 + 17 + 1
 * + 4 lines per endpoint).
 */
export const ENDPOINT_FAMILY_HELP = {
  requests:
    'Attempts sent to each endpoint, by outcome: 2xx, 4xx, 429, 5xx, error (connect/reset), timeout, aborted (client left), preempted (a sheddable request ended by flow control to make room for a higher priority, then sent again).',
  ttft: 'Time from sending the request to the first response body byte, per endpoint (streaming requests).',
  driftMismatches:
    "Responses whose model or system_fingerprint differed from what the endpoint's drift probe answered (the passive check; drift detection on only).",
  inflight: 'Requests in flight to each endpoint (until the stream ends or the client leaves).',
  breaker: 'Circuit breaker per endpoint: 0 closed, 1 half-open, 2 open.',
  ewmaTtft: 'Smoothed time-to-first-token per endpoint, as the balancer scores it.',
  drifted: 'Endpoints marked as serving a different model artefact (1) and excluded or warned.',
} as const;

/**
 * The sidecar's Prometheus metrics. Labels are bounded: pool, backend, endpoint id, a code
 * class, an affinity result. No prompt text, no model names from clients, no keys.
 *
 * The process and pool-level families are prom-client's (`registry`); the per-endpoint families
 * are the sidecar's own (exposition.ts), so that `exposition()` can write them in slices.
 */
export class SidecarMetrics {
  readonly registry: Registry;
  readonly #shared: SharedFamilies;
  private readonly byEndpoint = new Map<string, EndpointMetrics>();
  private readonly affinity: Record<AffinityResult, { inc(): void }>;
  readonly retries: { inc(): void };
  readonly retryBudgetExhausted: { inc(): void };
  readonly shed: { inc(): void };
  readonly clientStalled: { inc(): void };
  private readonly responsesByCode = new Map<number, { inc(): void }>();
  readonly configApplied: { inc(): void };
  readonly configRejected: { inc(): void };
  /**
   * `endpoints` deltas (issue 46) applied, and not applied (the stream was dropped for a full
   * snapshot).
   */
  readonly deltas: { applied: { inc(): void }; rejected: { inc(): void } };
  private gaugeSource: () => readonly EndpointGauges[] = () => [];
  private exchangeSource: () => PrefillExchangeReading | undefined = () => undefined;
  private flowSource: () => FlowReading | undefined = () => undefined;
  private heldSource: () => number | undefined = () => undefined;
  readonly #priorityLabels = new Map<number, string>();
  /** Flow control's counts for the gate (flow-gate.ts); bound children, no lookups per request. */
  readonly flow: {
    refused(reason: RefusalReason): void;
    leftQueue(priority: number, seconds: number): void;
    /** A sheddable request was preempted for one of a higher priority. */
    preempted(): void;
  };
  /** The fleet-wide view's counts (issue 45), for the controller source; bound children. */
  readonly placements: {
    uploaded(count: number): void;
    received(count: number, bytes: number): void;
    uploadFailed(): void;
    dropped(count: number): void;
  };
  /** Scale from zero's counts for the hold gate (zero-gate.ts); bound children. */
  readonly hold: {
    left(outcome: (typeof HOLD_OUTCOMES)[number], seconds: number): void;
    shed(): void;
  };

  private readonly pool: string;

  /**
   * The metrics of one pool. A sidecar that follows several pools makes one per pool, each after
   * the first given the first (`sameRegistry`): they share one registry and one set of families,
   * each writing its series under its own `pool` label.
   */
  constructor(pool: string, sameRegistry?: SidecarMetrics) {
    this.pool = pool;
    const shared = sameRegistry === undefined ? new SharedFamilies() : sameRegistry.#shared;
    this.#shared = shared;
    this.registry = shared.registry;
    shared.pools.push(this);
    this.retries = shared.retries.labels({ pool });
    this.retryBudgetExhausted = shared.exhausted.labels({ pool });
    this.shed = shared.shed.labels({ pool });
    this.clientStalled = shared.stalled.labels({ pool });
    this.affinity = Object.fromEntries(
      AFFINITY_RESULTS.map((r) => [r, shared.affinity.labels({ pool, result: r })]),
    ) as Record<AffinityResult, { inc(): void }>;
    this.configApplied = shared.applied.labels({ pool });
    this.configRejected = shared.rejected.labels({ pool });
    this.deltas = {
      applied: shared.deltas.labels({ pool, result: 'applied' }),
      rejected: shared.deltas.labels({ pool, result: 'rejected' }),
    };
    const refusals = Object.fromEntries(
      REFUSAL_REASONS.map((r) => [r, shared.refusals.labels({ pool, reason: r })]),
    ) as Record<RefusalReason, { inc(): void }>;
    const preemptions = shared.preemptions.labels({ pool });
    this.flow = {
      refused: (reason) => refusals[reason].inc(),
      preempted: () => preemptions.inc(),
      leftQueue: (priority, seconds) =>
        shared.queueWait.observe({ pool, priority: this.priorityLabel(priority) }, seconds),
    };
    const heldTime = Object.fromEntries(
      HOLD_OUTCOMES.map((o) => [o, shared.heldTime.labels({ pool, outcome: o })]),
    ) as unknown as Record<(typeof HOLD_OUTCOMES)[number], { observe(seconds: number): void }>;
    const uploaded = shared.placementsUploaded.labels({ pool });
    const received = shared.placementsReceived.labels({ pool });
    const receivedBytes = shared.placementBytesReceived.labels({ pool });
    const failed = shared.placementUploadFailures.labels({ pool });
    const dropped = shared.placementsDropped.labels({ pool });
    this.placements = {
      uploaded: (count) => uploaded.inc(count),
      received: (count, bytes) => {
        received.inc(count);
        receivedBytes.inc(bytes);
      },
      uploadFailed: () => failed.inc(),
      dropped: (count) => dropped.inc(count),
    };
    this.hold = {
      left: (outcome, seconds) => heldTime[outcome].observe(seconds),
      // The no-endpoint 503 it stands for (switchyard_shed_total), whether held first or not.
      shed: () => this.shed.inc(),
    };
  }

  /** Scale from zero: the requests held now for this pool, read at scrape time. */
  readHeldFrom(source: () => number | undefined): void {
    this.heldSource = source;
  }

  /** The requests held now (undefined: no series). */
  heldReading(): number | undefined {
    return this.heldSource();
  }

  /** The `priority` label value of a priority: itself, or `other` past MAX_PRIORITY_LABELS. */
  priorityLabel(priority: number): string {
    let label = this.#priorityLabels.get(priority);
    if (label === undefined) {
      label = this.#priorityLabels.size < MAX_PRIORITY_LABELS ? String(priority) : 'other';
      this.#priorityLabels.set(priority, label);
    }
    return label;
  }

  /** Flow control's queue and budgets of this pool, read at scrape time (none: no series). */
  readFlowFrom(source: () => FlowReading | undefined): void {
    this.flowSource = source;
  }

  /** The pool's flow state now, for the scrape-time gauges. */
  flowReading(): FlowReading | undefined {
    return this.flowSource();
  }

  /** The prefill exchange's rate `field` of this pool, in seconds; undefined until measured. */
  exchangeSeconds(field: keyof PrefillExchangeReading): number | undefined {
    const ms = this.exchangeSource()?.[field];
    return ms === undefined || !Number.isFinite(ms) ? undefined : ms / 1000;
  }

  /** This pool's `pool` label value. */
  get poolName(): string {
    return this.pool;
  }

  /** Counts a response the client saw; children are bound once per status code. */
  response(status: number): void {
    let child = this.responsesByCode.get(status);
    if (child === undefined) {
      child = this.#shared.responses.labels({ pool: this.pool, code: String(status) });
      this.responsesByCode.set(status, child);
    }
    child.inc();
  }

  /** The prefill exchange's rates are read from the balancer at scrape time. */
  readExchangeFrom(source: () => PrefillExchangeReading | undefined): void {
    this.exchangeSource = source;
  }

  /** Gauges are read from the balancer at scrape time: nothing to update per request. */
  readGaugesFrom(source: () => readonly EndpointGauges[]): void {
    this.gaugeSource = source;
  }

  affinityResult(result: AffinityResult): void {
    this.affinity[result].inc();
  }

  forEndpoint(endpoint: EndpointSpec): EndpointMetrics {
    let m = this.byEndpoint.get(endpoint.id);
    if (m === undefined) {
      const labels = { pool: this.pool, backend: endpoint.backend, endpoint: endpoint.id };
      const text = labelText(labels);
      m = {
        labels,
        requests: Object.fromEntries(
          CODE_CLASSES.map((code) => [code, this.#shared.requests.child(`${text},code="${code}"`)]),
        ) as Record<CodeClass, { inc(): void }>,
        ttft: this.#shared.ttft.child(text),
        driftMismatches: this.#shared.driftMismatches.child(text),
      };
      this.byEndpoint.set(endpoint.id, m);
    }
    return m;
  }

  /** Drop the series of endpoints that left the pool, so dead endpoints do not linger in dashboards. */
  retain(endpoints: readonly EndpointSpec[]): void {
    const keep = new Set(endpoints.map((e) => e.id));
    for (const [id, m] of this.byEndpoint) {
      if (keep.has(id)) continue;
      this.byEndpoint.delete(id);
      const text = labelText(m.labels);
      for (const code of CODE_CLASSES) this.#shared.requests.remove(`${text},code="${code}"`);
      this.#shared.ttft.remove(text);
      this.#shared.driftMismatches.remove(text);
    }
  }

  /**
   * The `/metrics` text in pieces, each a bounded amount of work: prom-client's families one
   * piece each, then the per-endpoint families in slices of `linesPerSlice` lines. The caller
   * yields to the event loop between pieces; joined, they are one Prometheus text exposition.
   */
  async *exposition(linesPerSlice = LINES_PER_SLICE): AsyncGenerator<string> {
    for (const metric of this.registry.getMetricsAsArray())
      yield `${await this.registry.getSingleMetricAsString(metric.name)}\n\n`;
    yield* familiesText(this.endpointFamilies(), linesPerSlice);
  }

  /**
   * The per-endpoint families, in the order prom-client registered them before. The four gauges
   * read the balancer once, when the first of them is written, so they agree with each other.
   */
  endpointFamilies(): Family[] {
    // Every pool's rows, in pool order, each with its pool's label text.
    const pools = this.#shared.pools;
    let rows: readonly PoolRow[] | undefined;
    const read = (): readonly PoolRow[] =>
      (rows ??= pools.flatMap((m) => {
        const pool = labelValue(m.pool);
        return m.gaugeSource().map((gauges) => ({ pool, gauges }));
      }));
    // Each endpoint's label text, made by the first gauge and reused by the other three.
    const labels: string[] = [];
    const labelsOf = (r: PoolRow, i: number): string =>
      (labels[i] ??=
        `pool="${r.pool}",backend="${labelValue(r.gauges.backend)}",endpoint="${labelValue(r.gauges.id)}"`);
    const gauge = (name: string, help: string, value: (s: EndpointGauges) => number): Family =>
      gaugeFamily(name, help, read, labelsOf, (r) => value(r.gauges));
    const help = ENDPOINT_FAMILY_HELP;
    const shared = this.#shared;
    return [
      shared.requests,
      shared.ttft,
      shared.driftMismatches,
      gauge('switchyard_inflight', help.inflight, (s) => s.inFlight),
      gauge('switchyard_breaker_state', help.breaker, (s) => BREAKER_VALUE[s.breaker]),
      gauge('switchyard_ewma_ttft_seconds', help.ewmaTtft, (s) => s.ewmaTtftMs / 1000),
      gauge('switchyard_endpoint_drifted', help.drifted, (s) => (s.drifted ? 1 : 0)),
    ];
  }
}

/** One endpoint's gauges and its pool's label value, as the gauge families write them. */
interface PoolRow {
  readonly pool: string;
  readonly gauges: EndpointGauges;
}

/**
 * The registry and the families every pool of one sidecar writes into: prom-client's (each
 * registered once), and the per-endpoint families the sidecar writes itself.
 */
class SharedFamilies {
  readonly registry = new Registry();
  /** Every pool's metrics, in pool order. */
  readonly pools: SidecarMetrics[] = [];
  readonly requests = new CounterFamily('switchyard_requests_total', ENDPOINT_FAMILY_HELP.requests);
  readonly ttft = new HistogramFamily(
    'switchyard_ttft_seconds',
    ENDPOINT_FAMILY_HELP.ttft,
    TTFT_BUCKETS_S,
  );
  readonly driftMismatches = new CounterFamily(
    'switchyard_drift_mismatches_total',
    ENDPOINT_FAMILY_HELP.driftMismatches,
  );
  readonly retries: Counter<'pool'>;
  readonly exhausted: Counter<'pool'>;
  readonly shed: Counter<'pool'>;
  readonly stalled: Counter<'pool'>;
  readonly affinity: Counter<'pool' | 'result'>;
  readonly responses: Counter<'pool' | 'code'>;
  readonly applied: Counter<'pool'>;
  readonly rejected: Counter<'pool'>;
  readonly refusals: Counter<'pool' | 'reason'>;
  readonly preemptions: Counter<'pool'>;
  readonly queueWait: Histogram<'pool' | 'priority'>;
  readonly heldTime: Histogram<'pool' | 'outcome'>;
  readonly placementsUploaded: Counter<'pool'>;
  readonly placementsReceived: Counter<'pool'>;
  readonly placementBytesReceived: Counter<'pool'>;
  readonly placementUploadFailures: Counter<'pool'>;
  readonly placementsDropped: Counter<'pool'>;
  readonly deltas: Counter<'pool' | 'result'>;

  constructor() {
    const registers = [this.registry];
    const pools = this.pools;
    collectDefaultMetrics({ register: this.registry, prefix: 'switchyard_process_' });
    this.retries = new Counter({
      name: 'switchyard_retries_total',
      help: 'Retries sent to another endpoint after a failure that reached no client byte.',
      labelNames: ['pool'],
      registers,
    });
    this.exhausted = new Counter({
      name: 'switchyard_retry_budget_exhausted_total',
      help: 'Failures that were not retried because the retry budget was spent.',
      labelNames: ['pool'],
      registers,
    });
    this.shed = new Counter({
      name: 'switchyard_shed_total',
      help: 'Requests answered 503 at once because no endpoint was live.',
      labelNames: ['pool'],
      registers,
    });
    this.stalled = new Counter({
      name: 'switchyard_client_stalled_total',
      help: 'Client connections closed because the client read nothing of its response for timeouts.clientStall; the upstream request was cancelled, and the endpoint not blamed.',
      labelNames: ['pool'],
      registers,
    });
    this.affinity = new Counter({
      name: 'switchyard_affinity_total',
      help: "Affinity decisions: hit (the key's home, or the holder of the prompt's longest known prefix), spill (a later endpoint of the key's order), overloaded (no endpoint of the key had room: balanced), none (no key).",
      labelNames: ['pool', 'result'],
      registers,
    });
    this.responses = new Counter({
      name: 'switchyard_responses_total',
      help: 'Responses the client saw, by status code (sidecar errors included).',
      labelNames: ['pool', 'code'],
      registers,
    });
    this.applied = new Counter({
      name: 'switchyard_config_applied_total',
      help: 'Pool configurations (file changes or snapshots) applied.',
      labelNames: ['pool'],
      registers,
    });
    this.rejected = new Counter({
      name: 'switchyard_config_rejected_total',
      help: 'Pool configurations rejected as invalid; the last good one stays in force.',
      labelNames: ['pool'],
      registers,
    });
    this.refusals = new Counter({
      name: 'switchyard_flow_refusals_total',
      help: 'Requests flow control answered 429, by reason: saturated (waited flowControl.maxQueueWait, no endpoint had room), budget (over a requests/tokens-per-minute budget), queue-full (the queue was full, or a higher priority pushed it out), sheddable (negative priority while others wait or nothing has room). Rising saturated: add capacity or lower load; budget: the workload spends its budget.',
      labelNames: ['pool', 'reason'],
      registers,
    });
    this.preemptions = new Counter({
      name: 'switchyard_flow_preemptions_total',
      help: 'Sheddable requests (negative priority) whose attempt flow control ended before any of its answer reached the client, to free the slot for a request of a higher priority that found every endpoint saturated; each was queued and sent again (flowControl.saturation.preemptSheddable). A preempted attempt is also counted in switchyard_requests_total{code="preempted"}.',
      labelNames: ['pool'],
      registers,
    });
    // The fleet-wide view (issue 45; docs/fleet-view.md).
    this.placementsUploaded = new Counter({
      name: 'switchyard_placements_uploaded_total',
      help: "Prompt placements (digests of a prompt's block hashes and the endpoint it went to) this sidecar uploaded to the controller and the controller took.",
      labelNames: ['pool'],
      registers,
    });
    this.placementsReceived = new Counter({
      name: 'switchyard_placements_received_total',
      help: "Placements the controller relayed to this sidecar (placements events), including ones naming endpoints this sidecar's pool does not have (ignored).",
      labelNames: ['pool'],
      registers,
    });
    this.placementBytesReceived = new Counter({
      name: 'switchyard_placement_bytes_received_total',
      help: 'Bytes of placements event data received from the controller.',
      labelNames: ['pool'],
      registers,
    });
    this.placementUploadFailures = new Counter({
      name: 'switchyard_placement_upload_failures_total',
      help: 'Placement uploads that failed (network, timeout, refused); each batch is dropped, not retried.',
      labelNames: ['pool'],
      registers,
    });
    this.deltas = new Counter({
      name: 'switchyard_snapshot_deltas_total',
      help: 'Endpoints deltas from the controller (issue 46), by result: applied, or rejected (another base version, an unknown id, a hash mismatch, invalid: each time the sidecar reconnected to get the full snapshot).',
      labelNames: ['pool', 'result'],
      registers,
    });
    this.placementsDropped = new Counter({
      name: 'switchyard_placements_dropped_total',
      help: 'Placements never uploaded because 4,096 were already waiting (uploads slower than placements, for long).',
      labelNames: ['pool'],
      registers,
    });
    this.queueWait = new Histogram({
      name: 'switchyard_flow_queue_wait_seconds',
      help: "Time requests waited in this sidecar's flow-control queue, by priority, observed when they left it (started, refused or the client left).",
      labelNames: ['pool', 'priority'],
      buckets: QUEUE_WAIT_BUCKETS_S,
      registers,
    });
    new Gauge({
      name: 'switchyard_flow_queue_requests',
      help: "Requests waiting in this sidecar's flow-control queue now, by priority (waiting for an endpoint with room or for budget).",
      labelNames: ['pool', 'priority'],
      registers,
      collect() {
        this.reset();
        for (const m of pools) {
          const flow = m.flowReading();
          if (flow === undefined) continue;
          for (const [priority, n] of flow.queue.countsByPriority())
            this.inc({ pool: m.poolName, priority: m.priorityLabel(priority) }, n);
        }
      },
    });
    this.heldTime = new Histogram({
      name: 'switchyard_scale_from_zero_held_seconds',
      help: 'Time requests were held while their pool had no endpoint (spec.scaleFromZero), by outcome: released (an endpoint came; the request went out), timeout (held scaleFromZero.maxWait: 503), gone (the client left), shutdown (503 at shutdown).',
      labelNames: ['pool', 'outcome'],
      buckets: HELD_BUCKETS_S,
      registers,
    });
    new Gauge({
      name: 'switchyard_scale_from_zero_held_requests',
      help: 'Requests this sidecar holds now because their pool has no endpoint (spec.scaleFromZero); what the controller sums as switchyard_pool_demand_held_requests.',
      labelNames: ['pool'],
      registers,
      collect() {
        this.reset();
        for (const m of pools) {
          const held = m.heldReading();
          if (held !== undefined) this.set({ pool: m.poolName }, held);
        }
      },
    });
    // The budgets of every pool, read from its ledger at scrape time.
    const budgetGauge = (
      name: string,
      help: string,
      value: (b: BudgetStatus, unit: 'requests' | 'tokens') => number | undefined,
    ): void => {
      new Gauge({
        name,
        help,
        labelNames: ['pool', 'budget', 'unit'],
        registers,
        collect() {
          this.reset();
          for (const m of pools) {
            const flow = m.flowReading();
            if (flow === undefined) continue;
            for (const b of flow.budgets()) {
              for (const unit of ['requests', 'tokens'] as const) {
                const v = value(b, unit);
                if (v !== undefined) this.set({ pool: m.poolName, budget: b.id, unit }, v);
              }
            }
          }
        },
      });
    };
    const perMinute = (
      rate: { requestsPerMinute?: number | undefined; tokensPerMinute?: number | undefined },
      unit: 'requests' | 'tokens',
    ): number | undefined => (unit === 'requests' ? rate.requestsPerMinute : rate.tokensPerMinute);
    budgetGauge(
      'switchyard_budget_used_per_minute',
      'What this sidecar used of each budget over the last minute (requests, or prompt + completion tokens); near switchyard_budget_share_per_minute, requests start to wait or get 429 over_budget.',
      (b, unit) => (perMinute(b.limit, unit) === undefined ? undefined : b.used[unit]),
    );
    budgetGauge(
      'switchyard_budget_share_per_minute',
      "This sidecar's share of each budget per minute (standalone: the whole budget; with the controller: the share it sent).",
      (b, unit) => perMinute(b.share, unit),
    );
    budgetGauge(
      'switchyard_budget_limit_per_minute',
      'Each budget of the pool per minute, for the whole fleet (flowControl.budgets).',
      (b, unit) => perMinute(b.limit, unit),
    );
    // The prefill exchange's two rates of every pool, read at scrape time; absent until measured.
    const exchangeGauge = (
      name: string,
      help: string,
      field: keyof PrefillExchangeReading,
    ): void => {
      new Gauge({
        name,
        help,
        labelNames: ['pool'],
        registers,
        collect() {
          this.reset();
          for (const m of pools) {
            const seconds = m.exchangeSeconds(field);
            if (seconds !== undefined) this.set({ pool: m.poolName }, seconds);
          }
        },
      });
    };
    exchangeGauge(
      'switchyard_prefill_seconds_per_kib',
      'Time to first token per KiB of request on servers with a free slot, as the pool measured it: with switchyard_slot_hold_seconds, what a cached prefix is worth in queue positions.',
      'prefillMsPerKiB',
    );
    exchangeGauge(
      'switchyard_slot_hold_seconds',
      'How long a request holds its server slot, start to end, as the pool measured it; over the server batch, the cost of one queue position.',
      'holdMs',
    );
  }
}
