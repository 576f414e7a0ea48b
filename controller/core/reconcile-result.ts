/**
 * What the reconcile core decides about a pool (`desired-snapshot.ts` computes it; `events.ts`,
 * `status.ts` and the shell read it). Types only, in a module of their own, so that the modules
 * reading a result do not import the module computing it.
 */
import type { PoolSnapshot } from '../../crds/snapshot.ts';
import type { ModelSummary } from './pool-models.ts';
import type { Problem, Reason } from './problems.ts';

export type ConditionType = 'Accepted' | 'ResolvedRefs' | 'Ready';

/** A condition as the core decides it; `status.ts` adds times and the generation. */
export interface ReconcileCondition {
  type: ConditionType;
  status: 'True' | 'False' | 'Unknown';
  reason: Reason;
  /** For a person; never a Secret's value. */
  message: string;
}

/** What the core decided about one backend. */
export interface BackendSummary {
  name: string;
  tier: number;
  /** Routable endpoints (0 while the backend has a problem: nothing is sent without its key). */
  ready: number;
  /** Every endpoint of the backend: addresses serving the port, routable or not; or its URLs. */
  total: number;
  /** Unresolved references (Service, port, Secret); empty when the backend resolved. */
  problems: Problem[];
}

/** A snapshot as the core computes it; the shell stamps the `version`. */
export type DesiredSnapshot = Omit<PoolSnapshot, 'version'>;

/** A Kubernetes Event about the pool (`events.ts` decides which). */
export interface PoolEvent {
  type: 'Normal' | 'Warning';
  /** A stable CamelCase code. */
  reason: Reason;
  /** For a person; never a Secret's value. */
  message: string;
}

export interface ReconcileResult {
  /**
   * What the sidecars should run on; undefined when nothing should be sent (the spec is not
   * accepted, or no backend resolved): the sidecars then keep their last good snapshot.
   */
  snapshot: DesiredSnapshot | undefined;
  /** `snapshot.hash`, or `''` without a snapshot. Covers API keys, reveals none. */
  hash: string;
  /** Accepted, ResolvedRefs and Ready, in that order. */
  conditions: ReconcileCondition[];
  /**
   * Over all backends: routable endpoints of resolved backends (not those drift detection
   * excludes), all endpoints, and the drifted ones (excluded or only flagged).
   */
  endpoints: { ready: number; total: number; drifted: number };
  /** Per backend, in spec order (empty when the spec was not valid). */
  backends: BackendSummary[];
  /**
   * The models the backends declare with their ready endpoints, then the aliases (status.models);
   * undefined when no backend declares models or the spec was not accepted.
   */
  models?: ModelSummary[] | undefined;
  /**
   * Aliases whose model no ready endpoint declares, when every backend declares its models (an
   * AliasTargetNotServed event when one joins); empty or undefined otherwise.
   */
  aliasesNotServed?: { name: string; model: string }[] | undefined;
  /** What changed since `previous`, worth a Kubernetes Event. */
  events: PoolEvent[];
}
