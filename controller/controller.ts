import type { Logger } from 'pino';
import { listen, type HostPort } from '../lib/listen.ts';
import { adminServer } from './admin-server.ts';
import { PoolIndex } from './core/pool-index.ts';
import { poolSignals } from './core/pool-signals.ts';
import { DriftMonitor } from './drift/monitor.ts';
import { InjectionAuditor } from './injection/auditor.ts';
import { ServiceAccountWatch } from './kube/account-watch.ts';
import { WebhookCaBundle } from './injection/ca-bundle.ts';
import type { InjectionConfig } from './injection/config.ts';
import { injectionWebhook, WEBHOOK_PATH } from './injection/webhook.ts';
import { InformerCaches } from './kube/caches.ts';
import type { KubeClientConfig } from './kube/kube-config.ts';
import { KubeRaw } from './kube/kube-raw.ts';
import { LeaderElector } from './kube/leader.ts';
import { NO_OWNERS, type Owners } from './kube/owners.ts';
import { loadPublisher } from './stream/load-publisher.ts';
import { ControllerMetrics } from './metrics.ts';
import { PoolEventRecorder } from './pool-events.ts';
import { PoolQueue } from './pool-queue.ts';
import { PoolStates } from './pool-states.ts';
import { ReconcileLoop } from './reconcile-loop.ts';
import { Reconciler } from './reconciler.ts';
import { StatusQueue } from './status-queue.ts';
import { StatusWriter } from './status-writer.ts';
import { PlacementPeers } from './stream/placement-peers.ts';
import { ReplicaSummaries } from './stream/replica-summary.ts';
import { SnapshotServer } from './stream/snapshot-server.ts';
import { TokenAuthenticator } from './stream/token-auth.ts';
import { advertisedUrl } from './core/advertised-url.ts';
import { ticketKey } from './stream/review-ticket.ts';
import { certificateNotAfterMs } from './tls/certificates.ts';
import { startTlsSource, type TlsConfig } from './tls/source.ts';

export type { HostPort, TlsConfig };

export interface ControllerOptions {
  /** The API server and credentials (kube/kube-config.ts). */
  kubeConfig: KubeClientConfig;
  logger: Logger;
  /** Address of the snapshot stream (HTTPS when `tls` is given). */
  listen: HostPort;
  /** Address of /metrics, /healthz, /readyz. */
  admin: HostPort;
  /** Where the serving certificate comes from; undefined: plain HTTP (tests only). */
  tls: TlsConfig | undefined;
  /** Sidecar injection: the webhook on the stream port, its caBundle, and the pod auditor. */
  injection?: InjectionOptions | undefined;
  heartbeatMs: number;
  lease: {
    namespace: string;
    name: string;
    identity: string;
    durationMs: number;
    renewEveryMs: number;
  };
  /** A sidecar that neither streams nor reports for this long no longer counts as connected. */
  sidecarStaleAfterMs: number;
  /** How often the leader refreshes status from sidecar reports (changes only are written). */
  statusEveryMs: number;
  /** How often each replica publishes its sidecars for the leader (a per-replica Lease). */
  replicaSummaryEveryMs: number;
  /** The longest a sidecar token's positive TokenReview is reused (`--token-review-cache`). */
  tokenReviewCacheMs: number;
  /**
   * How often each endpoint's /metrics is scraped for its load and each pool's load is streamed
   * (by every replica, for the pools with sidecars subscribed to it); 0 turns it off.
   */
  loadScrapeEveryMs: number;
  /**
   * Per subscriber, the most bytes a second of `placements` events (issue 45); 0 turns the relay
   * off (no header, uploads answered 404).
   */
  placementBytesPerSecond: number;
  /**
   * The address the other replicas reach this one's stream at (its pod IP): placements uploaded
   * here are relayed to their subscribers. Undefined: the listen address, unless it is a wildcard
   * (then placements stay on the replica they were uploaded to).
   */
  advertiseAddress?: string | undefined;
  /** This replica's own ServiceAccount token, sent to the peers and the one they must match. */
  readPeerToken?: () => string | undefined;
  /** Owners of what the controller creates itself, so that it goes with the release (owners.ts). */
  owners?: Owners;
}

export interface InjectionOptions {
  config: InjectionConfig;
  /** The MutatingWebhookConfiguration whose caBundle the leader keeps current (none: leave it). */
  webhookConfigName: string | undefined;
}

export interface RunningController {
  streamUrl: string;
  adminUrl: string;
  isLeader(): boolean;
  stop(): Promise<void>;
}

/**
 * The controller, wired: informers feed a de-duplicating key queue (events carry no payload: the
 * reconciler re-reads the caches, level-triggered); the reconciler computes the desired snapshot
 * with a pure function and publishes it only when its hash changed. Every replica serves streams;
 * the lease holder writes status and Events. Each part is built after the parts it uses; the
 * parts that react to leadership and certificate changes subscribe at the end.
 */
export async function startController(options: ControllerOptions): Promise<RunningController> {
  const { kubeConfig, logger, lease, injection } = options;

  // The API server, the lease, the serving certificate (nothing can be served without it).
  const raw = new KubeRaw(kubeConfig);
  const metrics = new ControllerMetrics();
  const owners = options.owners ?? NO_OWNERS;
  const leader = new LeaderElector({
    raw,
    ...lease,
    leaseDurationMs: lease.durationMs,
    logger,
    ownerReferences: owners.release,
  });
  const isLeader = (): boolean => leader.isLeader();
  const tls = await startTlsSource(options.tls, {
    raw,
    logger,
    ownerReferences: owners.release,
  });

  // Pools to reconcile, pools whose status is due, and what each pool's last reconcile decided.
  const queue = new PoolQueue();
  const statusQueue = new StatusQueue();
  const states = new PoolStates();
  const index = new PoolIndex();

  // The caches: each change enqueues the pools it concerns.
  const caches = new InformerCaches({
    api: raw,
    logger,
    index,
    queue,
    onRestart: (informer, reason) => metrics.informerRestarts.inc({ informer, reason }),
  });

  // Injection: the webhook, the caBundle the API server trusts it by, the pods it missed.
  const webhook =
    injection === undefined
      ? undefined
      : injectionWebhook({
          config: () => injection.config,
          caBundle: () => tls?.current().ca ?? '',
          pools: caches.pools,
          logger,
          metrics,
        });
  const caBundle =
    injection?.webhookConfigName === undefined || tls === undefined
      ? undefined
      : new WebhookCaBundle({
          raw,
          name: injection.webhookConfigName,
          caPem: () => tls.current().ca,
          isLeader,
          logger,
        });
  const auditor =
    injection === undefined
      ? undefined
      : new InjectionAuditor({
          raw,
          logger,
          identity: lease.identity,
          excludeNamespaces: () => injection.config.excludeNamespaces,
          isLeader,
          onRestart: (reason) => metrics.informerRestarts.inc({ informer: 'pods', reason }),
        });

  // Which ServiceAccounts exist: a deleted one's sidecars are refused within seconds, so their
  // reviews can be reused for the whole --token-review-cache (stream/review-cache.ts).
  const accounts = new ServiceAccountWatch({
    raw,
    logger,
    onRestart: (reason) => metrics.informerRestarts.inc({ informer: 'serviceaccounts', reason }),
  });

  // The stream: sidecars subscribe and report here; replicas share what their sidecars say.
  const peers =
    options.placementBytesPerSecond > 0
      ? new PlacementPeers({
          raw,
          readToken: () => options.readPeerToken?.(),
          peers: () => summaries.peerStreamUrls(),
          ca: () => tls?.current().ca,
          logger,
        })
      : undefined;
  // Review tickets are signed with a key derived from the serving key, which every replica shares
  // (stream/review-ticket.ts); after a rotation the previous key's tickets are still taken.
  let ticketKeys: Buffer[] = tls === undefined ? [] : [ticketKey(tls.current().key)];
  tls?.onChange((material) => {
    ticketKeys = [ticketKey(material.key), ...ticketKeys].slice(0, 2);
  });
  let ownStreamUrl: string | undefined = undefined; // known once listening
  const authenticator = new TokenAuthenticator(raw, {
    cacheMs: options.tokenReviewCacheMs,
    pods: auditor,
    accounts,
    ticketKeys: () => ticketKeys,
    onAuthenticated: (via, reviewMs) => {
      metrics.sidecarAuth.inc({ via });
      if (reviewMs !== undefined) metrics.tokenReviewDuration.observe(reviewMs / 1000);
    },
  });
  const stream: SnapshotServer = new SnapshotServer({
    authenticator,
    logger,
    metrics,
    heartbeatMs: options.heartbeatMs,
    tls: tls?.current(),
    routes: webhook === undefined ? {} : { [WEBHOOK_PATH]: webhook },
    poolExists: (key) => caches.pools.has(key),
    onSidecarChange: (key) => statusQueue.add(key),
    remoteDemand: (key, budget, unit) => summaries.remoteDemand(key, budget, unit),
    placements: { bytesPerSecond: options.placementBytesPerSecond },
    ...(peers === undefined ? {} : { placementPeers: peers }),
  });
  const summaries: ReplicaSummaries = new ReplicaSummaries({
    raw,
    namespace: lease.namespace,
    identity: lease.identity,
    publishEveryMs: options.replicaSummaryEveryMs,
    logger,
    ownerReferences: owners.replica,
    local: () => stream.sidecarViewsByPool(),
    onRemoteChange: (keys) => statusQueue.addAll(keys),
    localDemand: () => stream.budgetDemandByPool(),
    onRemoteDemandChange: () => stream.scheduleAllSplits(),
    localSignals: () => stream.localSignals(),
    streamUrl: () => ownStreamUrl,
  });

  // Server-reported load: every replica scrapes for the pools its own sidecars subscribe to.
  const load = loadPublisher(stream, options.loadScrapeEveryMs, logger, metrics);

  // The leader's work: Events, drift probes, status writes.
  const events = new PoolEventRecorder({
    raw,
    identity: lease.identity,
    isLeader,
    pools: caches.pools,
    logger,
  });
  const drift = new DriftMonitor({
    logger,
    isLeader,
    onProbe: (result) => metrics.driftProbes.inc({ result }),
    onChange: (key, changes) => {
      statusQueue.addNow(key);
      events.recordDrift(key, changes);
    },
  });
  const status = new StatusWriter({
    raw,
    queue: statusQueue,
    states,
    pools: caches.pools,
    isLeader,
    local: stream,
    remote: summaries,
    drift,
    metrics,
    logger,
    sidecarStaleAfterMs: options.sidecarStaleAfterMs,
    everyMs: options.statusEveryMs,
  });

  // Reconcile: a key from the queue, the caches read, a snapshot to the stream.
  const reconciler = new Reconciler({
    caches,
    index,
    states,
    stream,
    drift,
    events,
    status: statusQueue,
    logger,
  });
  const loop = new ReconcileLoop({ queue, reconciler, caches, metrics, logger });

  // The admin port.
  metrics.readFrom({
    queueDepth: () => queue.len(),
    connectedSidecars: () => stream.connectedCount(),
    isLeader,
    podsNotInjected: () => auditor?.notInjectedCount(),
    tlsNotAfterMs: () =>
      tls === undefined ? undefined : certificateNotAfterMs(tls.current().cert),
    drift: () => drift.drifted(),
    fleet: () => states.endpointHealth(),
    loadTargets: () => load?.counts(),
    reviewsWaiting: () => authenticator.reviewsWaiting,
    // Autoscaling signals (issue 44): the leader's own and the other replicas' summaries.
    poolSignals: () =>
      isLeader()
        ? poolSignals(stream.readyEndpoints(), stream.localSignals(), (key) =>
            summaries.remoteSignals(key),
          )
        : [],
  });
  const admin = adminServer({ metrics, synced: () => caches.synced, isLeader });

  // Who follows leadership and certificate changes.
  leader.onChange((leading) => {
    if (leading) {
      // A new leader owns status now: write every pool's current view.
      states.forgetWritten();
      // And announces the problems it finds, which it may have reconciled before it led.
      reconciler.announceProblems(caches.pools.keys());
      queue.addAll(caches.pools.keys());
      caBundle?.sync();
      auditor?.auditAll();
    }
    drift.leadershipChanged();
  });
  tls?.onChange((material) => {
    stream.setTls(material);
    caBundle?.sync();
  });

  // Start: watch, reconcile, lead, serve.
  status.start();
  loop.start();
  await Promise.all([caches.start(), auditor?.start(), accounts.start()]);
  leader.start();
  load?.start();
  caBundle?.start();
  const streamUrl = await listen(
    stream.listener.server,
    options.listen,
    tls === undefined ? 'http' : 'https',
  );
  ownStreamUrl = advertisedUrl(streamUrl, options.advertiseAddress);
  if (peers !== undefined && ownStreamUrl === undefined)
    logger.warn(
      'placements stay on the replica they were uploaded to: no --advertise-address ($POD_IP) to tell the other replicas',
    );
  // After listening: its first summary carries the stream URL the other replicas relay to.
  summaries.start();
  const adminUrl = await listen(admin, options.admin, 'http');
  // Always announced (unless silent): scripts and tests wait for this line to learn the ports.
  const announcer = logger.level === 'silent' ? logger : logger.child({}, { level: 'info' });
  announcer.info(
    { url: streamUrl, admin: adminUrl, identity: lease.identity },
    'controller listening',
  );

  return {
    streamUrl,
    adminUrl,
    isLeader,
    async stop() {
      const looped = loop.stop();
      status.stop();
      summaries.stop();
      peers?.close();
      load?.stop();
      drift.stop();
      caBundle?.stop();
      tls?.stop();
      stream.close();
      admin.closeAllConnections();
      admin.close();
      await leader.stop();
      await Promise.all([caches.stop(), auditor?.stop(), accounts.stop()]);
      await looped;
      raw.close();
    },
  };
}
