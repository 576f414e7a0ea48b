import type { Logger } from 'pino';
import type { PoolKey } from './core/pool-index.ts';
import type { ControllerMetrics } from './metrics.ts';
import type { PoolQueue } from './pool-queue.ts';
import type { ReconcileOutcome } from './reconciler.ts';

export interface ReconcileLoopOptions {
  queue: PoolQueue;
  reconciler: { reconcile(key: PoolKey, seenAtMs: number): ReconcileOutcome };
  /** The caches the reconciler reads: nothing is reconciled before they have synced. */
  caches: { waitForSync(): Promise<void>; readonly pools: { keys(): PoolKey[] } };
  metrics: Pick<ControllerMetrics, 'reconciles' | 'reconcileDuration' | 'snapshotsPublished'>;
  logger: Logger;
}

/**
 * The worker: one key at a time, never the same key twice at once (the queue guarantees it). An
 * outcome is counted and may ask for a later reconcile; an exception is retried with the key's
 * backoff.
 */
export class ReconcileLoop {
  readonly #options: ReconcileLoopOptions;
  #stopped = false;
  #running: Promise<void> | undefined;

  constructor(options: ReconcileLoopOptions) {
    this.#options = options;
  }

  start(): void {
    this.#running = this.#run();
  }

  /** Stops taking keys; resolves when the reconcile in progress (if any) has ended. */
  async stop(): Promise<void> {
    this.#stopped = true;
    this.#options.queue.wake();
    await this.#running?.catch(() => undefined);
  }

  async #run(): Promise<void> {
    const { queue, reconciler, caches, metrics, logger } = this.#options;
    await caches.waitForSync();
    logger.info({ pools: caches.pools.keys().length }, 'caches synced; reconciling');
    while (!this.#stopped) {
      const key = queue.get();
      if (key === undefined) {
        await queue.wait();
        continue;
      }
      const startedMs = performance.now();
      try {
        const outcome = reconciler.reconcile(key, queue.seenAtMs(key) ?? startedMs);
        this.#conclude(key, outcome, startedMs);
        queue.forget(key);
      } catch (err) {
        metrics.reconciles.inc({ result: 'error' });
        logger.warn(
          { pool: key, err: (err as Error).message },
          'reconcile failed; retrying with backoff',
        );
        queue.retry(key);
      } finally {
        queue.done(key);
      }
      // Let stream writes, heartbeats and status writes run between two reconciles.
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
  }

  #conclude(key: PoolKey, outcome: ReconcileOutcome, startedMs: number): void {
    const { queue, metrics } = this.#options;
    switch (outcome.kind) {
      case 'requeue-after':
        queue.add(key, outcome.delayMs);
        return;
      case 'deleted':
        metrics.reconciles.inc({ result: 'deleted' });
        break;
      case 'published':
        metrics.snapshotsPublished.inc();
        metrics.reconciles.inc({ result: 'changed' });
        metrics.reconcileDuration.observe((performance.now() - startedMs) / 1000);
        break;
      case 'unchanged':
      case 'withheld':
        metrics.reconciles.inc({ result: 'unchanged' });
        metrics.reconcileDuration.observe((performance.now() - startedMs) / 1000);
        break;
    }
    queue.handled(key);
  }
}
