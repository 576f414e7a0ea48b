import type { InferencePoolStatus } from '../crds/inference-pool.schema.ts';
import type { PoolKey } from './core/pool-index.ts';
import type { ReconcileResult } from './core/reconcile-result.ts';

/** What the controller keeps of one pool between reconciles and status writes. */
export interface PoolState {
  /** The last reconcile's result (its `events` were computed against the one before). */
  result: ReconcileResult;
  /** Version and hash of the snapshot served: the last one published (0 and '' before any). */
  version: number;
  hash: string;
  /** `metadata.generation` of the pool the result was computed from. */
  generation: number;
  /** The status this replica last wrote as leader; undefined: write the next one in any case. */
  lastStatus: InferencePoolStatus | undefined;
}

/**
 * Per pool, what its last reconcile decided (the reconciler writes it) and the status last written
 * (the status writer does). The one place both read, so neither has to know the other.
 */
export class PoolStates {
  readonly #states = new Map<PoolKey, PoolState>();

  get(key: PoolKey): PoolState | undefined {
    return this.#states.get(key);
  }

  /** Records a reconcile; the status last written stays what it was. */
  reconciled(key: PoolKey, state: Omit<PoolState, 'lastStatus'>): void {
    this.#states.set(key, { ...state, lastStatus: this.#states.get(key)?.lastStatus });
  }

  /** The pool is gone (a pool created again under its name starts afresh). */
  delete(key: PoolKey): void {
    this.#states.delete(key);
  }

  /** A new leader owns status now: the next write of every pool goes out whatever it says. */
  forgetWritten(): void {
    for (const state of this.#states.values()) state.lastStatus = undefined;
  }

  /** Per pool, the endpoints the fleet sees unhealthy, as last written to status. */
  endpointHealth(): Map<PoolKey, NonNullable<InferencePoolStatus['endpointHealth']>> {
    return new Map(
      [...this.#states].flatMap(([key, state]) =>
        state.lastStatus?.endpointHealth === undefined
          ? []
          : [[key, state.lastStatus.endpointHealth]],
      ),
    );
  }
}
