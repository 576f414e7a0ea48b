/**
 * The reconcile of one pool key, like a controller-runtime Reconciler: it re-reads the caches
 * (level-triggered: the key carries no payload), computes the desired snapshot with the pure core
 * (core/desired-snapshot.ts), publishes it when its hash changed, and returns what happened as a
 * value. Everything it reads and acts on is passed in, so a unit test drives it with plain fakes.
 */
import type { Logger } from 'pino';
import type { InferencePoolStatus } from '../crds/inference-pool.schema.ts';
import type { DriftPolicy, EndpointSpec } from '../crds/policy-types.ts';
import type { PoolSnapshot } from '../crds/snapshot.ts';
import { desiredSnapshot } from './core/desired-snapshot.ts';
import { reconcileEvents } from './core/events.ts';
import type { GaieLookup } from './core/gaie-endpoints.ts';
import type { EndpointSlice, Secret, Service } from './core/objects.ts';
import { splitKey, type PoolIndex, type PoolKey } from './core/pool-index.ts';
import type { Reason } from './core/problems.ts';
import type { PoolEvent, ReconcileResult } from './core/reconcile-result.ts';
import type {
  CachedPool,
  EndpointSliceCache,
  PoolCache,
  SecretCache,
  ServiceCache,
} from './kube/caches.ts';
import type { GaieCache } from './kube/gaie-cache.ts';
import type { PoolStates } from './pool-states.ts';

/** How soon a pool whose Secret watch has not synced yet is reconciled again. */
export const SECRET_SYNC_RETRY_MS = 100;
/** How soon a pool whose GAIE pool or pod watch has not listed yet is reconciled again. */
export const GAIE_SYNC_RETRY_MS = 250;

/** What one reconcile did. */
export type ReconcileOutcome =
  /** A new snapshot went out to the pool's sidecars. */
  | { kind: 'published'; version: number; hash: string }
  /** The snapshot served is still the right one (version 0 and hash '' while none was served). */
  | { kind: 'unchanged'; version: number; hash: string }
  /**
   * Nothing is sent: the spec is not accepted or no backend resolved (`reason`, the Ready
   * condition's), and the sidecars keep their last snapshot.
   */
  | { kind: 'withheld'; reason: Reason }
  /** The pool is gone: its streams end, its drift probes stop, its state is dropped. */
  | { kind: 'deleted' }
  /** Not decided yet: reconcile again after `delayMs`. */
  | { kind: 'requeue-after'; delayMs: number; reason: 'secret-not-synced' | 'gaie-not-synced' };

export interface ReconcilerCaches {
  pools: PoolCache;
  services: ServiceCache;
  slices: EndpointSliceCache;
  secrets: SecretCache;
  gaie: GaieCache;
}

/** Where snapshots go (the stream server). */
export interface SnapshotPublisher {
  /** `sinceMs`: when the change was first seen, for the push-latency metric. */
  publish(key: PoolKey, snapshot: PoolSnapshot, sinceMs: number): void;
  remove(key: PoolKey): void;
}

/** Drift detection, which follows what each pool resolves to. */
export interface DriftTracker {
  sync(
    key: PoolKey,
    policy: DriftPolicy | undefined,
    endpoints: readonly EndpointSpec[],
    previous: InferencePoolStatus['drift'] | undefined,
  ): void;
  remove(key: PoolKey): void;
}

export interface ReconcilerOptions {
  caches: ReconcilerCaches;
  /** Which Services and Secrets each pool references; kept current here. */
  index: PoolIndex;
  states: PoolStates;
  stream: SnapshotPublisher;
  drift: DriftTracker;
  events: { record(pool: CachedPool, events: readonly PoolEvent[]): void };
  /** The pool's status is due for a write (the leader's status writer takes it from there). */
  status: { addNow(key: PoolKey): void };
  logger: Logger;
}

export class Reconciler {
  readonly #options: ReconcilerOptions;
  /**
   * Pools whose next reconcile reports its problems as after a start (`reconcileEvents` without a
   * previous result). Only the leader records Events, and a pool's events are what changed since
   * its last reconcile: a replica that reconciled a broken pool before it led would never say so.
   */
  readonly #announce = new Set<PoolKey>();

  constructor(options: ReconcilerOptions) {
    this.#options = options;
  }

  /**
   * This replica has just become the leader: the next reconcile of each of `keys` records the
   * Events of its current problems (a False condition, an alias no endpoint serves), as a
   * restart would, and nothing for a healthy pool.
   */
  announceProblems(keys: Iterable<PoolKey>): void {
    for (const key of keys) this.#announce.add(key);
  }

  /** Reconciles `key`; `seenAtMs` is when the change that queued it was first seen. */
  reconcile(key: PoolKey, seenAtMs: number): ReconcileOutcome {
    const { caches, index, states, stream, drift, events, status, logger } = this.#options;
    const pool = caches.pools.get(key);
    if (pool === undefined) {
      index.deletePool(key);
      drift.remove(key);
      states.delete(key);
      this.#announce.delete(key);
      stream.remove(key);
      caches.secrets.watchOnly(index.referencedSecrets());
      caches.gaie.watchOnly(index.referencedGaiePools());
      return { kind: 'deleted' };
    }
    index.setPool(key, pool);
    caches.secrets.watchOnly(index.referencedSecrets());
    caches.gaie.watchOnly(index.referencedGaiePools());
    const { namespace } = splitKey(key);
    const secretNames = index.secretNamesOf(key);
    if (secretNames.some((name) => !caches.secrets.hasSynced(namespace, name))) {
      // Never publish a snapshot without a backend's key just because its Secret is not read yet.
      return { kind: 'requeue-after', delayMs: SECRET_SYNC_RETRY_MS, reason: 'secret-not-synced' };
    }
    const gaiePools = new Map<string, GaieLookup>();
    for (const name of index.gaiePoolNamesOf(key)) {
      const found = caches.gaie.lookup(namespace, name);
      // Never publish a snapshot without a GAIE tier's pods just because they are not listed yet.
      if (found === 'pending')
        return { kind: 'requeue-after', delayMs: GAIE_SYNC_RETRY_MS, reason: 'gaie-not-synced' };
      gaiePools.set(name, found);
    }

    const previous = states.get(key);
    const result = desiredSnapshot({
      pool,
      ...readReferences(caches, namespace, index.serviceNamesOf(key), secretNames),
      gaiePools,
      previous: previous?.result,
    });
    // Drift detection follows what the pool resolves to (a snapshot); without one it waits.
    if (result.snapshot !== undefined)
      drift.sync(key, result.snapshot.policy.drift, result.snapshot.endpoints, pool.status?.drift);

    let outcome: ReconcileOutcome;
    if (result.snapshot === undefined) {
      outcome = { kind: 'withheld', reason: readyReason(result) };
    } else if (previous !== undefined && result.hash === previous.hash) {
      outcome = { kind: 'unchanged', version: previous.version, hash: previous.hash };
    } else {
      const version = nextVersion(result.hash, pool.status?.snapshot, previous?.version);
      stream.publish(key, { ...result.snapshot, version }, seenAtMs);
      logger.info(
        { pool: key, version, hash: result.hash, endpoints: result.snapshot.endpoints.length },
        'snapshot published',
      );
      outcome = { kind: 'published', version, hash: result.hash };
    }
    const served =
      outcome.kind === 'withheld'
        ? { version: previous?.version ?? 0, hash: previous?.hash ?? '' }
        : outcome;
    states.reconciled(key, {
      result,
      version: served.version,
      hash: served.hash,
      generation: pool.metadata?.generation ?? 0,
    });
    events.record(
      pool,
      this.#announce.delete(key) ? reconcileEvents(undefined, result) : result.events,
    );
    status.addNow(key);
    return outcome;
  }
}

/**
 * The version of newly published content `hash`. It continues the sequence recorded in the pool's
 * status (written by the leader), so versions survive controller restarts and every replica
 * numbers the same content the same way: the recorded hash keeps its recorded version; other
 * content gets one more than the higher of the recorded version and this replica's last.
 */
function nextVersion(
  hash: string,
  recorded: { version?: number | undefined; hash?: string | undefined } | undefined,
  lastVersion: number | undefined,
): number {
  if (recorded !== undefined && recorded.hash === hash && recorded.version !== undefined)
    return recorded.version;
  return Math.max(recorded?.version ?? 0, lastVersion ?? 0) + 1;
}

/** What the pool references, from the caches, as the core reads it. */
function readReferences(
  caches: ReconcilerCaches,
  namespace: string,
  serviceNames: readonly string[],
  secretNames: readonly string[],
): {
  services: Map<string, Service>;
  slicesByService: Map<string, readonly EndpointSlice[]>;
  secrets: Map<string, Secret>;
} {
  const services = new Map<string, Service>();
  const slicesByService = new Map<string, readonly EndpointSlice[]>();
  for (const name of serviceNames) {
    const service = caches.services.get(namespace, name);
    if (service !== undefined) services.set(name, service);
    slicesByService.set(name, caches.slices.ofService(namespace, name));
  }
  const secrets = new Map<string, Secret>();
  for (const name of secretNames) {
    const secret = caches.secrets.get(namespace, name);
    if (secret !== undefined) secrets.set(name, secret);
  }
  return { services, slicesByService, secrets };
}

function readyReason(result: ReconcileResult): Reason {
  const ready = result.conditions.find((c) => c.type === 'Ready');
  if (ready === undefined) throw new Error('a reconcile result without a Ready condition');
  return ready.reason;
}
