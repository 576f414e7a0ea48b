import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from './prom.ts';
import type { AffinityResult, EndpointSpec, EndpointStatus } from '../policy/index.ts';

/** How an attempt ended, as the `code` label of `switchyard_requests_total`: a bounded set. */
export type CodeClass = '2xx' | '4xx' | '429' | '5xx' | 'error' | 'timeout' | 'aborted';
const CODE_CLASSES: readonly CodeClass[] = [
  '2xx',
  '4xx',
  '429',
  '5xx',
  'error',
  'timeout',
  'aborted',
];
const AFFINITY_RESULTS: readonly AffinityResult[] = ['hit', 'spill', 'overloaded', 'none'];

/** Seconds, tuned for LLM time-to-first-token: 5 ms up to 2 minutes. */
const TTFT_BUCKETS_S = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];

const BREAKER_VALUE = { closed: 0, 'half-open': 1, open: 2 } as const;

/** Children pre-bound per endpoint so the request path does no label lookups. */
export interface EndpointMetrics {
  labels: { pool: string; backend: string; endpoint: string };
  requests: Record<CodeClass, { inc(): void }>;
  ttft: { observe(seconds: number): void };
  /** Responses whose model or system_fingerprint contradicted the endpoint's drift probe. */
  driftMismatches: { inc(): void };
}

/**
 * The sidecar's Prometheus metrics. Labels are bounded: pool, backend, endpoint id, a code
 * class, an affinity result. No prompt text, no model names from clients, no keys.
 */
export class SidecarMetrics {
  readonly registry = new Registry();
  private readonly requests: Counter<'pool' | 'backend' | 'endpoint' | 'code'>;
  private readonly ttft: Histogram<'pool' | 'backend' | 'endpoint'>;
  private readonly driftMismatches: Counter<'pool' | 'backend' | 'endpoint'>;
  private readonly byEndpoint = new Map<string, EndpointMetrics>();
  private readonly affinity: Record<AffinityResult, { inc(): void }>;
  readonly retries: { inc(): void };
  readonly retryBudgetExhausted: { inc(): void };
  readonly shed: { inc(): void };
  private readonly responses: Counter<'pool' | 'code'>;
  private readonly responsesByCode = new Map<number, { inc(): void }>();
  readonly configApplied: { inc(): void };
  readonly configRejected: { inc(): void };
  private statusSource: () => EndpointStatus[] = () => [];

  private readonly pool: string;

  constructor(pool: string) {
    this.pool = pool;
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry, prefix: 'switchyard_process_' });
    this.requests = new Counter({
      name: 'switchyard_requests_total',
      help: 'Attempts sent to each endpoint, by outcome: 2xx, 4xx, 429, 5xx, error (connect/reset), timeout, aborted (client left).',
      labelNames: ['pool', 'backend', 'endpoint', 'code'],
      registers,
    });
    this.ttft = new Histogram({
      name: 'switchyard_ttft_seconds',
      help: 'Time from sending the request to the first response body byte, per endpoint (streaming requests).',
      labelNames: ['pool', 'backend', 'endpoint'],
      buckets: TTFT_BUCKETS_S,
      registers,
    });
    this.driftMismatches = new Counter({
      name: 'switchyard_drift_mismatches_total',
      help: "Responses whose model or system_fingerprint differed from what the endpoint's drift probe answered (the passive check; drift detection on only).",
      labelNames: ['pool', 'backend', 'endpoint'],
      registers,
    });
    // collect() runs with `this` bound to the gauge; read the balancer through these closures.
    const status = (): EndpointStatus[] => this.statusSource();
    new Gauge({
      name: 'switchyard_inflight',
      help: 'Requests in flight to each endpoint (until the stream ends or the client leaves).',
      labelNames: ['pool', 'backend', 'endpoint'],
      registers,
      collect() {
        this.reset();
        for (const s of status()) {
          this.set({ pool, backend: s.backend, endpoint: s.id }, s.inFlight);
        }
      },
    });
    new Gauge({
      name: 'switchyard_breaker_state',
      help: 'Circuit breaker per endpoint: 0 closed, 1 half-open, 2 open.',
      labelNames: ['pool', 'backend', 'endpoint'],
      registers,
      collect() {
        this.reset();
        for (const s of status()) {
          this.set({ pool, backend: s.backend, endpoint: s.id }, BREAKER_VALUE[s.breaker]);
        }
      },
    });
    new Gauge({
      name: 'switchyard_ewma_ttft_seconds',
      help: 'Smoothed time-to-first-token per endpoint, as the balancer scores it.',
      labelNames: ['pool', 'backend', 'endpoint'],
      registers,
      collect() {
        this.reset();
        for (const s of status()) {
          this.set({ pool, backend: s.backend, endpoint: s.id }, s.ewmaTtftMs / 1000);
        }
      },
    });
    new Gauge({
      name: 'switchyard_endpoint_drifted',
      help: 'Endpoints marked as serving a different model artefact (1) and excluded or warned.',
      labelNames: ['pool', 'backend', 'endpoint'],
      registers,
      collect() {
        this.reset();
        for (const s of status()) {
          this.set({ pool, backend: s.backend, endpoint: s.id }, s.drifted ? 1 : 0);
        }
      },
    });
    const retries = new Counter({
      name: 'switchyard_retries_total',
      help: 'Retries sent to another endpoint after a failure that reached no client byte.',
      labelNames: ['pool'],
      registers,
    });
    this.retries = retries.labels({ pool });
    const exhausted = new Counter({
      name: 'switchyard_retry_budget_exhausted_total',
      help: 'Failures that were not retried because the retry budget was spent.',
      labelNames: ['pool'],
      registers,
    });
    this.retryBudgetExhausted = exhausted.labels({ pool });
    const shed = new Counter({
      name: 'switchyard_shed_total',
      help: 'Requests answered 503 at once because no endpoint was live.',
      labelNames: ['pool'],
      registers,
    });
    this.shed = shed.labels({ pool });
    const affinity = new Counter({
      name: 'switchyard_affinity_total',
      help: 'Affinity decisions: hit (sticky endpoint used), slow or unavailable (fell back to P2C), none (no key).',
      labelNames: ['pool', 'result'],
      registers,
    });
    this.affinity = Object.fromEntries(
      AFFINITY_RESULTS.map((r) => [r, affinity.labels({ pool, result: r })]),
    ) as Record<AffinityResult, { inc(): void }>;
    this.responses = new Counter({
      name: 'switchyard_responses_total',
      help: 'Responses the client saw, by status code (sidecar errors included).',
      labelNames: ['pool', 'code'],
      registers,
    });
    const applied = new Counter({
      name: 'switchyard_config_applied_total',
      help: 'Pool configurations (file changes or snapshots) applied.',
      labelNames: ['pool'],
      registers,
    });
    this.configApplied = applied.labels({ pool });
    const rejected = new Counter({
      name: 'switchyard_config_rejected_total',
      help: 'Pool configurations rejected as invalid; the last good one stays in force.',
      labelNames: ['pool'],
      registers,
    });
    this.configRejected = rejected.labels({ pool });
  }

  /** Counts a response the client saw; children are bound once per status code. */
  response(status: number): void {
    let child = this.responsesByCode.get(status);
    if (child === undefined) {
      child = this.responses.labels({ pool: this.pool, code: String(status) });
      this.responsesByCode.set(status, child);
    }
    child.inc();
  }

  /** Gauges are read from the balancer at scrape time: nothing to update per request. */
  readStatusFrom(source: () => EndpointStatus[]): void {
    this.statusSource = source;
  }

  affinityResult(result: AffinityResult): void {
    this.affinity[result].inc();
  }

  forEndpoint(endpoint: EndpointSpec): EndpointMetrics {
    let m = this.byEndpoint.get(endpoint.id);
    if (m === undefined) {
      const labels = { pool: this.pool, backend: endpoint.backend, endpoint: endpoint.id };
      m = {
        labels,
        requests: Object.fromEntries(
          CODE_CLASSES.map((code) => [code, this.requests.labels({ ...labels, code })]),
        ) as Record<CodeClass, { inc(): void }>,
        ttft: this.ttft.labels(labels),
        driftMismatches: this.driftMismatches.labels(labels),
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
      for (const code of CODE_CLASSES) this.requests.remove({ ...m.labels, code });
      this.ttft.remove(m.labels);
    }
  }
}
