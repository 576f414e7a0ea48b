import type { Logger } from 'pino';
import type { PoolSnapshot } from '../../../crds/snapshot.ts';
import { describeError } from './describe-error.ts';
import type { SnapshotCache } from './snapshot-cache.ts';

/** The snapshot in force, as the controller numbered and hashed it. */
export interface AppliedSnapshot {
  version: number;
  hash: string;
}

export type SnapshotSource = 'stream' | 'cache';

export interface SnapshotApplierOptions {
  /** The pool this sidecar serves: a snapshot of another pool is refused. */
  pool: { namespace: string; name: string };
  /**
   * Makes a snapshot the configuration in force: false when the same content (hash) is in force
   * already, and nothing changed; throwing means "not applied".
   */
  apply(snapshot: PoolSnapshot, source: SnapshotSource): boolean;
  cache: SnapshotCache;
  log: Logger;
}

/**
 * The one place a valid snapshot, from the stream or the cache on disk, becomes the pool in force:
 * it checks the snapshot is of our pool, hands it to `apply` (which tells a change from the same
 * content), logs it once, and keeps it in the cache when it came from the stream. The stream and
 * the cache only parse and validate; the active pool only applies.
 */
export class SnapshotApplier {
  readonly #options: SnapshotApplierOptions;
  #applied: AppliedSnapshot | undefined;

  constructor(options: SnapshotApplierOptions) {
    this.#options = options;
  }

  /** The snapshot in force (from the stream or the cache), undefined before any. */
  get applied(): AppliedSnapshot | undefined {
    return this.#applied;
  }

  /** Applies a valid snapshot; true when we are now in sync with it. */
  accept(snapshot: PoolSnapshot, source: SnapshotSource): boolean {
    const { log, pool } = this.#options;
    const { version, hash } = snapshot;
    if (snapshot.pool.namespace !== pool.namespace || snapshot.pool.name !== pool.name) {
      const got = `${snapshot.pool.namespace}/${snapshot.pool.name}`;
      if (source === 'cache')
        log.warn({ cached: got }, 'the snapshot cache belongs to another pool; ignored');
      else
        log.error(
          { id: version, got },
          'snapshot rejected: it is for another pool; the last good snapshot stays in force',
        );
      return false;
    }
    let changed: boolean;
    try {
      changed = this.#options.apply(snapshot, source);
    } catch (err) {
      log.error(
        { source, version, hash, err: describeError(err) },
        'applying the snapshot failed; the previous configuration stays in force',
      );
      return false;
    }
    const before = this.#applied;
    this.#applied = { version, hash };
    if (changed) {
      log.info(
        {
          source,
          version,
          hash,
          mode: snapshot.policy.mode,
          // By id only: an endpoint may carry an API key.
          endpoints: snapshot.endpoints.map((e) => e.id),
          // Drifted endpoints take no traffic: a pool with only drifted ones sheds every request.
          drifted: snapshot.endpoints.filter((e) => e.drifted === true).map((e) => e.id),
        },
        'snapshot applied',
      );
    } else if (before?.version !== version) {
      // A new controller leader may renumber the same content: adopt its number, apply nothing.
      log.debug(
        { from: before?.version, to: version, hash },
        'same snapshot content under a new version; not re-applied',
      );
    } else {
      log.debug({ version, hash }, 'snapshot unchanged');
      return true;
    }
    // A snapshot restored from the cache is already there.
    if (source === 'stream') this.#options.cache.save(snapshot);
    return true;
  }
}
