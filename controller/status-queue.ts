import type { PoolKey } from './core/pool-index.ts';

/**
 * Pools whose status may need a write: those who notice a change (reconciles, drift verdicts,
 * sidecars connecting and reporting) add keys here, and the leader's status writer takes them.
 * Like the work queue, it lets both sides be built without knowing each other.
 */
export class StatusQueue {
  readonly #due = new Set<PoolKey>();
  #urgent: (() => void) | undefined;

  /**
   * Written at the writer's next periodic pass: sidecars connect and report in bursts, and a
   * fleet of them must not turn into a write storm.
   */
  add(key: PoolKey): void {
    this.#due.add(key);
  }

  addAll(keys: Iterable<PoolKey>): void {
    for (const key of keys) this.#due.add(key);
  }

  /**
   * Written at once (what the pool's status says changed), but after the current task: the
   * reconcile that noticed never waits for the status to be computed.
   */
  addNow(key: PoolKey): void {
    this.#due.add(key);
    queueMicrotask(() => this.#urgent?.());
  }

  /** Takes up to `max` keys off the queue. */
  take(max: number): PoolKey[] {
    const keys = [...this.#due].slice(0, max);
    for (const key of keys) this.#due.delete(key);
    return keys;
  }

  get size(): number {
    return this.#due.size;
  }

  /** The writer: called after `addNow`. */
  onUrgent(listener: () => void): void {
    this.#urgent = listener;
  }
}
