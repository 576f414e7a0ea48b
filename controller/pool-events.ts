/**
 * Kubernetes Events on InferencePools, recorded by the leader: those of a reconcile (a condition
 * or the served snapshot changed; core/events.ts decides) and those of drift detection (a verdict
 * changed; drift/events.ts words them). A lost Event is logged, never fails what caused it.
 */
import type { Logger } from 'pino';
import { GROUP, VERSION } from '../crds/inference-pool.schema.ts';
import type { PoolKey } from './core/pool-index.ts';
import type { PoolEvent } from './core/reconcile-result.ts';
import { driftEvent } from './drift/events.ts';
import type { DriftChange } from './drift/monitor.ts';
import type { CachedPool, PoolCache } from './kube/caches.ts';
import { recordEvent, type EventToRecord } from './kube/event-recorder.ts';
import type { KubeRaw } from './kube/kube-raw.ts';

export interface PoolEventRecorderOptions {
  raw: KubeRaw;
  /** This replica, as the Events' `reportingInstance`. */
  identity: string;
  isLeader: () => boolean;
  pools: PoolCache;
  logger: Logger;
}

type EventBody = Pick<EventToRecord, 'type' | 'reason' | 'message'>;

export class PoolEventRecorder {
  readonly #options: PoolEventRecorderOptions;

  constructor(options: PoolEventRecorderOptions) {
    this.#options = options;
  }

  /** A reconcile's events, on its pool. */
  record(pool: CachedPool, events: readonly PoolEvent[]): void {
    void this.#post(pool, events);
  }

  /** Changes of drift verdicts, as Events on the pool (while it exists). */
  recordDrift(key: PoolKey, changes: readonly DriftChange[]): void {
    if (!this.#options.isLeader()) return;
    const pool = this.#options.pools.get(key);
    if (pool === undefined) return;
    const action = pool.spec.drift?.action ?? 'Exclude';
    const events = changes.map((change) => {
      const event = driftEvent(change, action);
      this.#options.logger.info({ pool: key, ...change }, event.message);
      return event;
    });
    void this.#post(pool, events);
  }

  async #post(pool: CachedPool, events: readonly EventBody[]): Promise<void> {
    const { raw, identity, isLeader, logger } = this.#options;
    if (!isLeader()) return;
    const involvedObject = {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: 'InferencePool',
      name: pool.metadata?.name ?? 'pool',
      namespace: pool.metadata?.namespace ?? 'default',
      uid: pool.metadata?.uid,
    };
    for (const event of events) {
      await recordEvent(raw, { involvedObject, ...event }, identity).catch((err: unknown) =>
        logger.warn({ err: (err as Error).message }, 'could not record an Event'),
      );
    }
  }
}
