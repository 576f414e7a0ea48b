import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { splitKey } from './core/pool-index.ts';
import type { PoolSignals } from './core/pool-signals.ts';

/** What the gauges read, at each scrape. */
export interface GaugeSources {
  queueDepth: () => number;
  connectedSidecars: () => number;
  isLeader: () => boolean;
  /** Labelled pods without the sidecar (undefined: injection is off). */
  podsNotInjected?: () => number | undefined;
  /** When the served certificate expires, ms since the epoch. */
  tlsNotAfterMs?: () => number | undefined;
  /** Per pool key: the endpoints the fleet sees unhealthy (the status' endpointHealth). */
  fleet?: () => ReadonlyMap<
    string,
    readonly {
      id: string;
      breakerOpen: number;
      reporting: number;
      errorPercent?: number | undefined;
    }[]
  >;
  /** Per pool key: its probed endpoints and the drifted ones. */
  drift?: () => ReadonlyMap<string, { ids: readonly string[]; drifted: ReadonlySet<string> }>;
  /** The endpoints this replica scrapes for load, by how they stand (undefined: scraping is off). */
  loadTargets?: () => Readonly<Record<string, number>> | undefined;
  /**
   * Every pool's autoscaling signals (issue 44; core/pool-signals.ts), read once per scrape; empty
   * on a replica that is not the leader.
   */
  poolSignals?: () => readonly PoolSignals[];
  /** TokenReviews waiting for one of the replica's connections to the API server, by lane. */
  reviewsWaiting?: () => { first: number; renewal: number };
}

/**
 * The help of the autoscaling gauges (docs/controller.md, "Autoscaling signals"). Exported on the
 * leader only: the others would export the same pools with their partial view.
 */
const SERVER_SOURCE =
  "as the controller scrapes the pool's servers' /metrics (--load-scrape-every): the leader's own reading when a sidecar of the pool is subscribed to it, else the reading of another replica that has one, relayed through its summary Lease (up to about 10 s older). Absent while no replica scrapes the pool (none of its sidecars connected, or scraping off) or no server reports it. On the leader only.";
const DEMAND_SOURCE =
  "summed over the pool's connected sidecars' last reports (every --report-every, 10 s by default; every second with budgets), those on other replicas through their summary Leases (up to about 10 s older). On the leader only.";
export const POOL_SIGNAL_HELP = {
  waiting: `Requests waiting in the pool's model servers (vllm:num_requests_waiting and the like), summed over the servers, ${SERVER_SOURCE}`,
  running: `Requests the pool's model servers are running, summed over the servers, ${SERVER_SOURCE}`,
  kvMean: `Mean KV-cache use (0..1) over the pool's servers that report it, ${SERVER_SOURCE}`,
  kvMax: `Largest KV-cache use (0..1) among the pool's servers, ${SERVER_SOURCE}`,
  ready:
    "Endpoints in the pool's snapshot (ready pods and URLs, less those drift detection excludes): what its sidecars route to. On the leader only.",
  requests: `Requests the apps sent to the pool per second, ${DEMAND_SOURCE}`,
  shed: `Requests the sidecars answered themselves with a 429 or 503 (no live endpoint, flow-control queue full or timed out, over budget, sheddable) per second, ${DEMAND_SOURCE}`,
  queued: `Requests waiting now in the sidecars' flow-control queues (spec.flowControl), ${DEMAND_SOURCE}`,
  held: `Requests the sidecars hold now because the pool has no ready endpoint (spec.scaleFromZero): scale from zero on this, ${DEMAND_SOURCE}`,
} as const;

/** The controller's Prometheus metrics (admin port, /metrics). */
export class ControllerMetrics {
  readonly registry = new Registry();
  readonly reconciles: Counter<'result'>;
  readonly reconcileDuration: Histogram;
  readonly placementsReceived: Counter;
  readonly placementsRelayed: Counter;
  readonly placementsDropped: Counter<'reason'>;
  readonly placementBytesSent: Counter;
  readonly pushLatency: Histogram;
  readonly authFailures: Counter<'reason'>;
  readonly sidecarAuth: Counter<'via'>;
  readonly tokenReviewDuration: Histogram;
  readonly informerRestarts: Counter<'informer' | 'reason'>;
  readonly statusWrites: Counter<'result'>;
  readonly snapshotsPublished: Counter;
  readonly injections: Counter<'result'>;
  readonly driftProbes: Counter<'result'>;
  readonly loadScrapes: Counter<'result'>;
  readonly loadScrapeDuration: Histogram;

  constructor() {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry, prefix: 'switchyard_controller_process_' });
    this.reconciles = new Counter({
      name: 'switchyard_controller_reconciles_total',
      help: 'Pool reconciles, by result: changed (a new snapshot), unchanged, deleted, error.',
      labelNames: ['result'],
      registers,
    });
    this.reconcileDuration = new Histogram({
      name: 'switchyard_controller_reconcile_duration_seconds',
      help: 'Time to compute a pool snapshot and publish it.',
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1],
      registers,
    });
    this.pushLatency = new Histogram({
      name: 'switchyard_controller_push_latency_seconds',
      help: 'From seeing a change (an informer event) to writing the new snapshot to subscribed sidecars.',
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      registers,
    });
    this.authFailures = new Counter({
      name: 'switchyard_controller_stream_auth_failures_total',
      help: 'Snapshot stream requests refused: unauthenticated (401) or forbidden (403).',
      labelNames: ['reason'],
      registers,
    });
    this.sidecarAuth = new Counter({
      name: 'switchyard_controller_sidecar_auth_total',
      help: "Sidecar requests (streams, reports, placement uploads) let in, by how their token was vouched for: cache (this replica's earlier TokenReview; in the minute after it ran out, while the token is reviewed again in the background), ticket (a review ticket from any replica's review, no API call), review (a TokenReview just now). Many reviews at once after a replica restart mean sidecars without a valid ticket.",
      labelNames: ['via'],
      registers,
    });
    this.tokenReviewDuration = new Histogram({
      name: 'switchyard_controller_token_review_duration_seconds',
      help: 'Time from a sidecar request needing a TokenReview to its answer, waiting for a connection to the API server included: what a sidecar without a cached review or a ticket waits before its stream opens.',
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers,
    });
    this.informerRestarts = new Counter({
      name: 'switchyard_controller_informer_restarts_total',
      help: 'Informers restarted by their supervisor, after an error or a silent watch.',
      labelNames: ['informer', 'reason'],
      registers,
    });
    this.statusWrites = new Counter({
      name: 'switchyard_controller_status_writes_total',
      help: 'InferencePool status writes by the leader, by result.',
      labelNames: ['result'],
      registers,
    });
    this.placementsReceived = new Counter({
      name: 'switchyard_controller_placements_received_total',
      help: 'Placements sidecars uploaded to this replica (issue 45, the fleet-wide view).',
      registers,
    });
    this.placementsRelayed = new Counter({
      name: 'switchyard_controller_placements_relayed_total',
      help: "Placements this replica put in a pool's placements event (once per event, whatever its subscribers).",
      registers,
    });
    this.placementsDropped = new Counter({
      name: 'switchyard_controller_placements_dropped_total',
      help: 'Placements not relayed, by reason: duplicate (same deepest hash and endpoint within 10 s), over_budget (did not fit the per-subscriber bytes per second, newest first), invalid (undecodable hashes).',
      labelNames: ['reason'],
      registers,
    });
    this.placementBytesSent = new Counter({
      name: 'switchyard_controller_placement_bytes_sent_total',
      help: 'Bytes of placements events written to subscribers, summed over subscribers.',
      registers,
    });
    this.snapshotsPublished = new Counter({
      name: 'switchyard_controller_snapshots_published_total',
      help: 'New pool snapshots published to the stream.',
      registers,
    });
    this.injections = new Counter({
      name: 'switchyard_controller_injections_total',
      help: 'Pod admissions the injection webhook answered, by result: injected, unchanged (already injected), skipped (labelled but cannot take the sidecar), ignored (not labelled or excluded namespace), error.',
      labelNames: ['result'],
      registers,
    });
    this.driftProbes = new Counter({
      name: 'switchyard_controller_drift_probes_total',
      help: 'Drift probes of endpoints by the leader, by result: ok, failed (a failure is not drift).',
      labelNames: ['result'],
      registers,
    });
    this.loadScrapes = new Counter({
      name: 'switchyard_controller_load_scrapes_total',
      help: 'Scrapes of model servers’ /metrics for their load, by result: ok, no_metrics (404, 401, 403 or no load gauges: left alone for 10 min), timeout, error.',
      labelNames: ['result'],
      registers,
    });
    this.loadScrapeDuration = new Histogram({
      name: 'switchyard_controller_load_scrape_duration_seconds',
      help: 'Time of one scrape of a model server’s /metrics, whatever its result.',
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      registers,
    });
  }

  /**
   * Registers the gauges, which read the controller's parts at each scrape. Called once, when
   * those parts exist (they count things with the metrics above, so they are built after them).
   */
  readFrom(read: GaugeSources): void {
    const registers = [this.registry];
    new Gauge({
      name: 'switchyard_controller_queue_depth',
      help: 'Pool keys waiting to be reconciled.',
      registers,
      collect() {
        this.set(read.queueDepth());
      },
    });
    new Gauge({
      name: 'switchyard_controller_connected_sidecars',
      help: 'Snapshot streams open on this replica.',
      registers,
      collect() {
        this.set(read.connectedSidecars());
      },
    });
    new Gauge({
      name: 'switchyard_controller_token_reviews_waiting',
      help: "TokenReviews waiting for one of the replica's connections to the API server: first (a sidecar not let in yet, which waits for it) and renewal (a connected sidecar's, served on its previous answer meanwhile; newcomers go first). A first lane that stays high means the API server is slower than sidecars arrive.",
      labelNames: ['lane'],
      registers,
      collect() {
        const waiting = read.reviewsWaiting?.();
        if (waiting === undefined) return;
        this.set({ lane: 'first' }, waiting.first);
        this.set({ lane: 'renewal' }, waiting.renewal);
      },
    });
    new Gauge({
      name: 'switchyard_controller_leader',
      help: '1 on the replica that holds the lease and writes status.',
      registers,
      collect() {
        this.set(read.isLeader() ? 1 : 0);
      },
    });
    new Gauge({
      name: 'switchyard_controller_pods_not_injected',
      help: 'Pods labelled switchyard.dev/pool that run without the sidecar (created while the webhook was unreachable, or skipped); each has a Warning Event.',
      registers,
      collect() {
        const n = read.podsNotInjected?.();
        if (n !== undefined) this.set(n);
      },
    });
    new Gauge({
      name: 'switchyard_controller_endpoint_breaker_open_sidecars',
      help: 'How many connected sidecars see an endpoint with its circuit breaker open (endpoints some sidecar sees unhealthy; on the leader).',
      labelNames: ['pool', 'endpoint'],
      registers,
      collect() {
        this.reset();
        for (const [pool, entries] of read.fleet?.() ?? [])
          for (const e of entries) this.set({ pool, endpoint: e.id }, e.breakerOpen);
      },
    });
    new Gauge({
      name: 'switchyard_controller_endpoint_error_percent',
      help: 'Errors among an endpoint’s requests as its sidecars see them, percent, averaged (endpoints some sidecar sees unhealthy; on the leader).',
      labelNames: ['pool', 'endpoint'],
      registers,
      collect() {
        this.reset();
        for (const [pool, entries] of read.fleet?.() ?? [])
          for (const e of entries)
            if (e.errorPercent !== undefined) this.set({ pool, endpoint: e.id }, e.errorPercent);
      },
    });
    new Gauge({
      name: 'switchyard_endpoint_drifted',
      help: '1 for an endpoint whose drift probe answers another fingerprint than its pool expects, 0 for one that matches (pools with drift.probeEvery only; on the leader).',
      labelNames: ['pool', 'endpoint'],
      registers,
      collect() {
        this.reset();
        for (const [pool, { ids, drifted }] of read.drift?.() ?? [])
          for (const id of ids) this.set({ pool, endpoint: id }, drifted.has(id) ? 1 : 0);
      },
    });
    new Gauge({
      name: 'switchyard_controller_load_targets',
      help: 'Model servers this replica scrapes for load (those of pools with sidecars subscribed here), by state: new, reporting, no_metrics, failing.',
      labelNames: ['state'],
      registers,
      collect() {
        this.reset();
        for (const [state, n] of Object.entries(read.loadTargets?.() ?? {}))
          this.set({ state: state.replace('-', '_') }, n);
      },
    });
    this.#poolSignalGauges(read);
    new Gauge({
      name: 'switchyard_controller_tls_certificate_expiry_timestamp_seconds',
      help: 'When the certificate the stream and webhook serve expires (Unix time). Alert well before it.',
      registers,
      collect() {
        const ms = read.tlsNotAfterMs?.();
        if (ms !== undefined) this.set(ms / 1000);
      },
    });
  }

  /** The per-pool gauges an autoscaler (KEDA, an HPA through an adapter) reads. */
  #poolSignalGauges(read: GaugeSources): void {
    const registers = [this.registry];
    // The first family of a scrape reads the signals; the others write the same rows, so that
    // every family of one scrape shows the same moment.
    let rows: readonly PoolSignals[] = [];
    const gauge = (
      name: string,
      help: string,
      value: (row: PoolSignals) => number | undefined,
      first = false,
    ): void => {
      new Gauge({
        name,
        help,
        labelNames: ['namespace', 'pool'],
        registers,
        collect() {
          if (first) rows = read.poolSignals?.() ?? [];
          this.reset();
          for (const row of rows) {
            const v = value(row);
            if (v === undefined) continue;
            const { namespace, name: pool } = splitKey(row.key);
            this.set({ namespace, pool }, v);
          }
        },
      });
    };
    const help = POOL_SIGNAL_HELP;
    gauge('switchyard_pool_server_requests_waiting', help.waiting, (r) => r.server?.waiting, true);
    gauge('switchyard_pool_server_requests_running', help.running, (r) => r.server?.running);
    gauge('switchyard_pool_server_kv_cache_usage_mean', help.kvMean, (r) => r.server?.kvCacheMean);
    gauge('switchyard_pool_server_kv_cache_usage_max', help.kvMax, (r) => r.server?.kvCacheMax);
    gauge('switchyard_pool_ready_endpoints', help.ready, (r) => r.readyEndpoints);
    gauge(
      'switchyard_pool_demand_requests_per_second',
      help.requests,
      (r) => r.demand.requestsPerSecond,
    );
    gauge('switchyard_pool_demand_shed_per_second', help.shed, (r) => r.demand.shedPerSecond);
    gauge('switchyard_pool_demand_queued_requests', help.queued, (r) => r.demand.queued);
    gauge('switchyard_pool_demand_held_requests', help.held, (r) => r.demand.held);
  }
}
