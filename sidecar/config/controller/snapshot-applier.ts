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
  /** Applies a snapshot to the sidecar; throwing means "not applied". */
  onSnapshot(snapshot: PoolSnapshot, source: SnapshotSource): void;
  cache: SnapshotCache;
  log: Logger;
}

/**
 * Decides what a valid snapshot of our pool changes: nothing when its content (hash) is in force,
 * otherwise it is applied and, when it came from the stream, cached on disk.
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

  /** Applies a valid snapshot of our pool; true when we are now in sync with it. */
  accept(snapshot: PoolSnapshot, source: SnapshotSource): boolean {
    const { log } = this.#options;
    const applied = this.#applied;
    if (applied !== undefined && applied.hash === snapshot.hash) {
      if (applied.version !== snapshot.version) {
        // A new controller leader may renumber the same content: adopt its number, apply nothing.
        log.debug(
          { from: applied.version, to: snapshot.version, hash: snapshot.hash },
          'same snapshot content under a new version; not re-applied',
        );
        this.#applied = { version: snapshot.version, hash: snapshot.hash };
        this.#save(snapshot, source);
      } else {
        log.debug({ version: snapshot.version, hash: snapshot.hash }, 'snapshot unchanged');
      }
      return true;
    }
    try {
      this.#options.onSnapshot(snapshot, source);
    } catch (err) {
      log.error(
        { source, version: snapshot.version, hash: snapshot.hash, err: describeError(err) },
        'applying the snapshot failed; the previous configuration stays in force',
      );
      return false;
    }
    this.#applied = { version: snapshot.version, hash: snapshot.hash };
    log.info(
      {
        source,
        version: snapshot.version,
        hash: snapshot.hash,
        mode: snapshot.policy.mode,
        endpoints: snapshot.endpoints.map((e) => e.id),
      },
      'snapshot applied',
    );
    this.#save(snapshot, source);
    return true;
  }

  /** A snapshot restored from the cache is already there. */
  #save(snapshot: PoolSnapshot, source: SnapshotSource): void {
    if (source === 'stream') this.#options.cache.save(snapshot);
  }
}
