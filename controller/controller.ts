import http from 'node:http';
import { listen, type HostPort } from '../lib/listen.ts';
import {
  CoreV1Api,
  CustomObjectsApi,
  DiscoveryV1Api,
  type KubeConfig,
  type KubernetesListObject,
  type KubernetesObject,
} from '@kubernetes/client-node';
import type { Logger } from 'pino';
import {
  GROUP,
  PLURAL,
  VERSION,
  type InferencePool,
  type InferencePoolStatus,
} from '../crds/inference-pool.schema.ts';
import type { PoolSnapshot } from '../crds/snapshot.ts';
import { desiredSnapshot } from './core/desired-snapshot.ts';
import type { ReconcileResult } from './core/reconcile-result.ts';
import {
  SERVICE_NAME_LABEL,
  type EndpointSlice,
  type Secret,
  type Service,
} from './core/objects.ts';
import { driftEvent } from './drift/events.ts';
import { PoolIndex } from './core/pool-index.ts';
import { poolStatus, statusEqual, type SidecarView } from './core/status.ts';
import { WorkQueue } from './core/work-queue.ts';
import { DriftMonitor, type DriftChange } from './drift/monitor.ts';
import { recordEvent } from './kube/event-recorder.ts';
import type { InjectionConfig } from './injection/config.ts';
import { InjectionAuditor } from './injection/auditor.ts';
import { injectionWebhook, WEBHOOK_PATH } from './injection/webhook.ts';
import { KubeApiError, KubeRaw } from './kube/kube-raw.ts';
import { certificateNotAfterMs } from './tls/certificates.ts';
import {
  FileTlsSource,
  SelfManagedTlsSource,
  type TlsFiles,
  type TlsSource,
} from './tls/source.ts';
import { WebhookCaBundle } from './injection/ca-bundle.ts';
import { LeaderElector } from './kube/leader.ts';
import { ReplicaSummaries } from './stream/replica-summary.ts';
import { ControllerMetrics } from './metrics.ts';
import { SnapshotServer, type PoolKey } from './stream/snapshot-server.ts';
import { SupervisedInformer } from './kube/supervised-informer.ts';
import { TokenAuthenticator } from './stream/token-auth.ts';

/** Status writes in flight at once (they share a small pool of API connections). */
const STATUS_WRITE_CONCURRENCY = 4;

export type { HostPort };

export interface ControllerOptions {
  kubeConfig: KubeConfig;
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
}

export type TlsConfig =
  | { kind: 'files'; files: TlsFiles }
  | { kind: 'self-managed'; namespace: string; secretName: string; names: string[] };

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

interface PoolState {
  result: ReconcileResult;
  version: number;
  hash: string;
  generation: number;
  lastStatus: InferencePoolStatus | undefined;
}

const keyOf = (o: KubernetesObject): PoolKey =>
  `${o.metadata?.namespace ?? ''}/${o.metadata?.name ?? ''}`;

/**
 * The controller: informers feed a de-duplicating key queue (events carry no payload: the
 * reconciler re-reads the caches, level-triggered); reconcile computes the desired snapshot with a
 * pure function and publishes it only when its hash changed. Every replica serves streams; the
 * lease holder writes status and Events.
 */
export async function startController(options: ControllerOptions): Promise<RunningController> {
  const { kubeConfig, logger } = options;
  const core = kubeConfig.makeApiClient(CoreV1Api);
  const discovery = kubeConfig.makeApiClient(DiscoveryV1Api);
  const custom = kubeConfig.makeApiClient(CustomObjectsApi);
  const raw = new KubeRaw(kubeConfig);
  const queue = new WorkQueue<PoolKey>();
  const index = new PoolIndex();
  const states = new Map<PoolKey, PoolState>();
  const firstSeenMs = new Map<PoolKey, number>();
  let stopping = false;

  let wake: (() => void) | undefined;
  const enqueue = (key: PoolKey, delayMs = 0): void => {
    if (!firstSeenMs.has(key)) firstSeenMs.set(key, performance.now());
    if (delayMs > 0) queue.addAfter(key, delayMs, performance.now());
    else queue.add(key);
    wake?.();
  };
  const enqueueAll = (): void => {
    for (const pool of pools.list()) enqueue(keyOf(pool));
  };

  const leader = new LeaderElector({
    raw,
    ...options.lease,
    leaseDurationMs: options.lease.durationMs,
    logger,
    onChange: (isLeader) => {
      if (isLeader) {
        // A new leader owns status now: write every pool's current view.
        for (const s of states.values()) s.lastStatus = undefined;
        enqueueAll();
        caBundle?.sync();
        auditor?.auditAll();
      }
      drift.leadershipChanged();
    },
  });
  const metrics: ControllerMetrics = new ControllerMetrics({
    queueDepth: () => queue.len(),
    connectedSidecars: () => stream.connectedCount(),
    isLeader: () => leader.isLeader() ?? false,
    podsNotInjected: () => auditor?.notInjectedCount(),
    tlsNotAfterMs: () =>
      tls === undefined ? undefined : certificateNotAfterMs(tls.current().cert),
    drift: () => drift.drifted(),
    fleet: () =>
      new Map(
        [...states].flatMap(([key, st]) =>
          st.lastStatus?.endpointHealth === undefined ? [] : [[key, st.lastStatus.endpointHealth]],
        ),
      ),
  });
  const drift: DriftMonitor = new DriftMonitor({
    logger,
    isLeader: () => leader.isLeader(),
    onProbe: (result) => metrics.driftProbes.inc({ result }),
    onChange: (key, changes) => {
      statusDirty.add(key);
      void flushStatus();
      void recordDriftEvents(key, changes);
    },
  });

  // The serving certificate first: nothing can be served without it.
  let tls: TlsSource | undefined;
  if (options.tls?.kind === 'files') tls = new FileTlsSource(options.tls.files, logger);
  else if (options.tls?.kind === 'self-managed')
    tls = await SelfManagedTlsSource.start({ raw, logger, ...options.tls });
  const injection = options.injection;
  const caBundle =
    injection?.webhookConfigName === undefined || tls === undefined
      ? undefined
      : new WebhookCaBundle({
          raw,
          name: injection.webhookConfigName,
          caPem: () => tls.current().ca,
          isLeader: () => leader.isLeader(),
          logger,
        });
  const auditor =
    injection === undefined
      ? undefined
      : new InjectionAuditor({
          kubeConfig,
          raw,
          logger,
          identity: options.lease.identity,
          excludeNamespaces: () => injection.config.excludeNamespaces,
          isLeader: () => leader.isLeader(),
          onRestart: (reason) => metrics.informerRestarts.inc({ informer: 'pods', reason }),
        });

  const informer = <T extends KubernetesObject>(
    name: string,
    path: string,
    list: () => Promise<KubernetesListObject<T>>,
    onChange: (o: T) => void,
    extra: { labelSelector?: string; fieldSelector?: string } = {},
  ): SupervisedInformer<T> =>
    new SupervisedInformer<T>({
      name,
      kubeConfig,
      path,
      list,
      logger,
      onChange,
      ...extra,
      onRestart: (reason) => metrics.informerRestarts.inc({ informer: name, reason }),
      onSynced: enqueueAll,
    });

  const pools = informer<InferencePool & KubernetesObject>(
    PLURAL,
    `/apis/${GROUP}/${VERSION}/${PLURAL}`,
    () =>
      custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural: PLURAL }) as Promise<
        KubernetesListObject<InferencePool & KubernetesObject>
      >,
    (pool) => enqueue(keyOf(pool)),
  );
  const services = informer<Service & KubernetesObject>(
    'services',
    '/api/v1/services',
    () => core.listServiceForAllNamespaces(),
    (svc) => {
      for (const key of index.poolsForService(
        svc.metadata?.namespace ?? '',
        svc.metadata?.name ?? '',
      ))
        enqueue(key);
    },
  );
  const slices = informer<EndpointSlice & KubernetesObject>(
    'endpointslices',
    '/apis/discovery.k8s.io/v1/endpointslices',
    () => discovery.listEndpointSliceForAllNamespaces({ labelSelector: SERVICE_NAME_LABEL }),
    (slice) => {
      const service = slice.metadata?.labels?.[SERVICE_NAME_LABEL];
      if (service === undefined) return;
      for (const key of index.poolsForService(slice.metadata?.namespace ?? '', service))
        enqueue(key);
    },
    { labelSelector: SERVICE_NAME_LABEL },
  );

  // Secrets: one small watch per *referenced* Secret (a field selector on its name), so the
  // controller never lists or caches Secrets no pool uses.
  const secretInformers = new Map<string, SupervisedInformer<Secret & KubernetesObject>>();
  const ensureSecretInformers = (): void => {
    const wanted = new Set(index.referencedSecrets());
    for (const [ref, inf] of secretInformers) {
      if (wanted.has(ref)) continue;
      secretInformers.delete(ref);
      void inf.stop();
    }
    for (const ref of wanted) {
      if (secretInformers.has(ref)) continue;
      const [namespace, name] = ref.split('/') as [string, string];
      const inf = informer<Secret & KubernetesObject>(
        `secret ${ref}`,
        `/api/v1/namespaces/${namespace}/secrets`,
        () =>
          core.listNamespacedSecret({
            namespace,
            fieldSelector: `metadata.name=${name}`,
          }),
        () => {
          for (const key of index.poolsForSecret(namespace, name)) enqueue(key);
        },
        { fieldSelector: `metadata.name=${name}` },
      );
      secretInformers.set(ref, inf);
      void inf.start();
    }
  };

  /** This replica's sidecars of one pool, as the status core sees them. */
  const localSidecars = (key: PoolKey): Map<string, SidecarView> => {
    const reports = new Map<string, SidecarView>();
    for (const [id, sc] of stream.sidecars(key)) {
      reports.set(id, {
        streaming: sc.streams > 0,
        lastSeenMs: sc.lastSeenMs,
        appliedVersion: sc.report?.appliedVersion,
        appliedHash: sc.report?.appliedHash,
        endpoints: sc.report?.endpoints,
      });
    }
    return reports;
  };

  const writeStatus = async (
    key: PoolKey,
    pool: InferencePool & KubernetesObject,
    state: PoolState,
  ): Promise<void> => {
    if (leader.isLeader() !== true) return;
    const reports = localSidecars(key);
    // Sidecars connected to other replicas, as those replicas published them.
    for (const [id, remote] of summaries.remoteSidecars(key))
      if (!reports.has(id)) reports.set(id, remote);
    const status = poolStatus({
      generation: state.generation,
      result: state.result,
      snapshot:
        state.result.snapshot === undefined
          ? undefined
          : { version: state.version, hash: state.hash },
      sidecars: { reports, nowMs: performance.now(), staleAfterMs: options.sidecarStaleAfterMs },
      previous: state.lastStatus ?? pool.status,
      now: new Date().toISOString(),
      drift: drift.section(key),
    });
    if (state.lastStatus !== undefined && statusEqual(state.lastStatus, status)) return;
    const [namespace, name] = key.split('/') as [string, string];
    try {
      await raw.request(
        'PATCH',
        `/apis/${GROUP}/${VERSION}/namespaces/${namespace}/${PLURAL}/${name}/status`,
        { status },
        'application/merge-patch+json',
      );
      state.lastStatus = status;
      metrics.statusWrites.inc({ result: 'ok' });
    } catch (err) {
      metrics.statusWrites.inc({
        result: err instanceof KubeApiError && err.status === 404 ? 'gone' : 'error',
      });
      if (!(err instanceof KubeApiError && err.status === 404)) throw err;
    }
  };

  const recordEvents = async (
    pool: InferencePool & KubernetesObject,
    result: ReconcileResult,
  ): Promise<void> => {
    if (leader.isLeader() !== true) return;
    const namespace = pool.metadata?.namespace ?? 'default';
    for (const e of result.events) {
      await recordEvent(
        raw,
        {
          involvedObject: {
            apiVersion: `${GROUP}/${VERSION}`,
            kind: 'InferencePool',
            name: pool.metadata?.name ?? 'pool',
            namespace,
            uid: pool.metadata?.uid,
          },
          ...e,
        },
        options.lease.identity,
      ).catch((err: unknown) =>
        logger.warn({ err: (err as Error).message }, 'could not record an Event'),
      );
    }
  };

  const recordDriftEvents = async (key: PoolKey, changes: DriftChange[]): Promise<void> => {
    if (leader.isLeader() !== true) return;
    const [namespace, name] = key.split('/') as [string, string];
    const pool = pools.get(name, namespace);
    if (pool === undefined) return;
    for (const change of changes) {
      const event = driftEvent(change, pool.spec.drift?.action ?? 'Exclude');
      await recordEvent(
        raw,
        {
          involvedObject: {
            apiVersion: `${GROUP}/${VERSION}`,
            kind: 'InferencePool',
            name,
            namespace,
            uid: pool.metadata?.uid,
          },
          ...event,
        },
        options.lease.identity,
      ).catch((err: unknown) =>
        logger.warn({ err: (err as Error).message }, 'could not record an Event'),
      );
      logger.info({ pool: key, ...change }, event.message);
    }
  };

  const reconcile = (key: PoolKey): void => {
    const started = performance.now();
    const [namespace, name] = key.split('/') as [string, string];
    const pool = pools.get(name, namespace);
    if (pool === undefined) {
      index.deletePool(key);
      drift.remove(key);
      states.delete(key);
      stream.remove(key);
      firstSeenMs.delete(key);
      ensureSecretInformers();
      metrics.reconciles.inc({ result: 'deleted' });
      return;
    }
    index.setPool(key, pool);
    ensureSecretInformers();
    const secretRefs = index.secretNamesOf(key).map((secret) => `${namespace}/${secret}`);
    if (secretRefs.some((ref) => secretInformers.get(ref)?.hasSynced !== true)) {
      // Never publish a snapshot without a backend's key just because its Secret is not read yet.
      enqueue(key, 100);
      return;
    }
    const serviceNames = index.serviceNamesOf(key);
    const serviceMap = new Map<string, Service>();
    const slicesByService = new Map<string, EndpointSlice[]>();
    for (const svc of serviceNames) {
      const s = services.get(svc, namespace);
      if (s !== undefined) serviceMap.set(svc, s);
      slicesByService.set(
        svc,
        slices.list(namespace).filter((sl) => sl.metadata?.labels?.[SERVICE_NAME_LABEL] === svc),
      );
    }
    const secretMap = new Map<string, Secret>();
    for (const ref of secretRefs) {
      const secretName = ref.split('/')[1]!;
      const secret = secretInformers.get(ref)?.get(secretName, namespace);
      if (secret !== undefined) secretMap.set(secretName, secret);
    }
    const previous = states.get(key);
    const result = desiredSnapshot({
      pool,
      services: serviceMap,
      slicesByService,
      secrets: secretMap,
      previous: previous?.result,
    });
    // Drift detection follows what the pool resolves to (a snapshot); without one it waits.
    if (result.snapshot !== undefined)
      drift.sync(key, result.snapshot.policy.drift, result.snapshot.endpoints, pool.status?.drift);
    let version = previous?.version ?? 0;
    let hash = previous?.hash ?? '';
    if (result.snapshot !== undefined && result.hash !== previous?.hash) {
      // Continue the version sequence recorded in status, so versions survive controller restarts
      // and every replica numbers the same content the same way.
      const recorded = pool.status?.snapshot;
      version =
        recorded !== undefined && recorded.hash === result.hash && recorded.version !== undefined
          ? recorded.version
          : Math.max(recorded?.version ?? 0, previous?.version ?? 0) + 1;
      hash = result.hash;
      const snapshot: PoolSnapshot = { ...result.snapshot, version };
      stream.publish(key, snapshot, firstSeenMs.get(key) ?? started);
      metrics.snapshotsPublished.inc();
      metrics.reconciles.inc({ result: 'changed' });
      logger.info(
        { pool: key, version, hash, endpoints: snapshot.endpoints.length },
        'snapshot published',
      );
    } else {
      metrics.reconciles.inc({ result: 'unchanged' });
    }
    firstSeenMs.delete(key);
    const state: PoolState = {
      result,
      version,
      hash,
      generation: pool.metadata?.generation ?? 0,
      lastStatus: previous?.lastStatus,
    };
    states.set(key, state);
    metrics.reconcileDuration.observe((performance.now() - started) / 1000);
    void recordEvents(pool, result);
    statusDirty.add(key);
    void flushStatus();
  };

  const authenticator = new TokenAuthenticator(raw);
  const stream: SnapshotServer = new SnapshotServer({
    authenticator,
    logger,
    metrics,
    heartbeatMs: options.heartbeatMs,
    tls: tls?.current(),
    routes:
      injection === undefined
        ? {}
        : {
            [WEBHOOK_PATH]: injectionWebhook({
              config: () => injection.config,
              caBundle: () => tls?.current().ca ?? '',
              poolExists: (namespace, name) =>
                pools.hasSynced ? pools.get(name, namespace) !== undefined : undefined,
              logger,
              metrics,
            }),
          },
    poolExists: (key) => {
      const [namespace, name] = key.split('/') as [string, string];
      return pools.get(name, namespace) !== undefined;
    },
    onSidecarChange: (key) => statusDirty.add(key),
  });

  const summaries = new ReplicaSummaries({
    raw,
    namespace: options.lease.namespace,
    identity: options.lease.identity,
    publishEveryMs: options.replicaSummaryEveryMs,
    logger,
    local: () => new Map(stream.poolKeys().map((key) => [key, localSidecars(key)])),
    onRemoteChange: (keys) => {
      for (const key of keys) statusDirty.add(key);
    },
  });

  // Sidecar connects and reports change status counts; the leader folds them in periodically
  // rather than on every report, so a fleet of sidecars does not turn into a write storm.
  const statusDirty = new Set<PoolKey>();
  // Status writes run beside the worker, a few at a time: a reconcile only marks its pool dirty,
  // so publishing the next pool's snapshot never waits for an API round trip.
  let statusWriting = false;
  const flushStatus = async (): Promise<void> => {
    if (statusWriting || !leader.isLeader()) return;
    statusWriting = true;
    try {
      while (statusDirty.size > 0 && leader.isLeader() && !stopping) {
        const batch = [...statusDirty].slice(0, STATUS_WRITE_CONCURRENCY);
        for (const key of batch) statusDirty.delete(key);
        await Promise.all(
          batch.map(async (key) => {
            const state = states.get(key);
            const [namespace, name] = key.split('/') as [string, string];
            const pool = pools.get(name, namespace);
            if (state === undefined || pool === undefined) return;
            try {
              await writeStatus(key, pool, state);
            } catch (err) {
              statusDirty.add(key); // try again on the next pass
              logger.warn({ pool: key, err: (err as Error).message }, 'status write failed');
            }
          }),
        );
      }
    } finally {
      statusWriting = false;
    }
  };
  const statusTimer = setInterval(() => void flushStatus(), options.statusEveryMs);
  statusTimer.unref();

  // The worker: one key at a time, never the same key twice at once (the queue guarantees it).
  const worker = (async () => {
    await Promise.all([pools.waitForSync(), services.waitForSync(), slices.waitForSync()]);
    logger.info({ pools: pools.list().length }, 'caches synced; reconciling');
    while (!stopping) {
      const key = queue.get(performance.now());
      if (key === undefined) {
        const dueAt = queue.nextDueAt();
        await new Promise<void>((resolve) => {
          wake = resolve;
          if (dueAt !== undefined)
            setTimeout(resolve, Math.max(0, dueAt - performance.now())).unref();
        });
        wake = undefined;
        continue;
      }
      try {
        reconcile(key);
        queue.forget(key);
      } catch (err) {
        metrics.reconciles.inc({ result: 'error' });
        logger.warn(
          { pool: key, err: (err as Error).message },
          'reconcile failed; retrying with backoff',
        );
        queue.retry(key, performance.now());
      } finally {
        queue.done(key);
      }
      // Let stream writes, heartbeats and status writes run between two reconciles.
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
  })();

  const admin = http.createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (path === '/metrics') {
      metrics.registry.metrics().then(
        (text: string) => {
          res.writeHead(200, { 'content-type': metrics.registry.contentType });
          res.end(text);
        },
        () => {
          res.writeHead(500);
          res.end();
        },
      );
      return;
    }
    const synced = pools.hasSynced && services.hasSynced && slices.hasSynced;
    const body = (status: number, value: unknown): void => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(value));
    };
    if (path === '/healthz') body(200, { status: 'ok' });
    else if (path === '/readyz')
      body(synced ? 200 : 503, { synced, leader: leader.isLeader() ?? false });
    else body(404, { error: { code: 'unknown_url', message: 'try /metrics, /healthz, /readyz' } });
  });

  tls?.onChange((material) => {
    stream.setTls(material);
    caBundle?.sync();
  });

  await Promise.all([pools.start(), services.start(), slices.start(), auditor?.start()]);
  leader.start();
  summaries.start();
  caBundle?.start();
  const streamUrl = await listen(
    stream.server,
    options.listen,
    options.tls === undefined ? 'http' : 'https',
  );
  const adminUrl = await listen(admin, options.admin, 'http');
  // Always announced (unless silent): scripts and tests wait for this line to learn the ports.
  const announcer = logger.level === 'silent' ? logger : logger.child({}, { level: 'info' });
  announcer.info(
    { url: streamUrl, admin: adminUrl, identity: options.lease.identity },
    'controller listening',
  );

  return {
    streamUrl,
    adminUrl,
    isLeader: () => leader.isLeader() ?? false,
    async stop() {
      stopping = true;
      wake?.();
      clearInterval(statusTimer);
      summaries.stop();
      drift.stop();
      caBundle?.stop();
      tls?.stop();
      stream.close();
      admin.closeAllConnections();
      admin.close();
      await leader.stop();
      await Promise.all([
        pools.stop(),
        services.stop(),
        slices.stop(),
        auditor?.stop(),
        ...[...secretInformers.values()].map((i) => i.stop()),
      ]);
      await worker.catch(() => undefined);
      raw.close();
    },
  };
}
