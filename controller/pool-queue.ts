import type { PoolKey } from './core/pool-index.ts';
import { WorkQueue } from './core/work-queue.ts';

/**
 * The work queue of pool keys (core/work-queue.ts: de-duplicated, one key at a time, backoff per
 * key) on the shell's clock, with what the reconcile loop needs around it: a way to wait for the
 * next due key, and when each key's change was first seen (for the push-latency metric).
 */
export class PoolQueue {
  readonly #queue = new WorkQueue<PoolKey>();
  readonly #firstSeenMs = new Map<PoolKey, number>();
  #wake: (() => void) | undefined;

  /** Queues `key`, after `delayMs` if given. */
  add(key: PoolKey, delayMs = 0): void {
    if (!this.#firstSeenMs.has(key)) this.#firstSeenMs.set(key, performance.now());
    if (delayMs > 0) this.#queue.addAfter(key, delayMs, performance.now());
    else this.#queue.add(key);
    this.#wake?.();
  }

  addAll(keys: Iterable<PoolKey>): void {
    for (const key of keys) this.add(key);
  }

  /** Keys waiting (for the queue-depth gauge). */
  len(): number {
    return this.#queue.len();
  }

  /** The next due key, handed out until `done`; undefined when none is due. */
  get(): PoolKey | undefined {
    return this.#queue.get(performance.now());
  }

  /** Resolves when a key may be due: one was added, a delayed one came due, or `wake()`. */
  async wait(): Promise<void> {
    const dueAt = this.#queue.nextDueAt();
    await new Promise<void>((resolve) => {
      this.#wake = resolve;
      if (dueAt !== undefined) setTimeout(resolve, Math.max(0, dueAt - performance.now())).unref();
    });
    this.#wake = undefined;
  }

  wake(): void {
    this.#wake?.();
  }

  /** When the change that queued `key` was first seen (monotonic ms), while it is pending. */
  seenAtMs(key: PoolKey): number | undefined {
    return this.#firstSeenMs.get(key);
  }

  /** The change behind `key` has been handled: the next one is timed from when it is seen. */
  handled(key: PoolKey): void {
    this.#firstSeenMs.delete(key);
  }

  /** The reconcile of `key` succeeded: its backoff starts over. */
  forget(key: PoolKey): void {
    this.#queue.forget(key);
  }

  /** The reconcile of `key` failed: it comes back after its backoff. */
  retry(key: PoolKey): void {
    this.#queue.retry(key, performance.now());
  }

  /** The reconcile of `key` is over (a change meanwhile queues it again). */
  done(key: PoolKey): void {
    this.#queue.done(key);
  }
}
