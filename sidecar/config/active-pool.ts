import type { PoolTimeouts } from '../../crds/policy-types.ts';
import type { EndpointSpec, PoolBalancer, PoolPolicy } from '../policy/types.ts';

/** The configuration in force: what a pool file or a controller snapshot resolved to. */
export interface ActivePool {
  name: string;
  /** Increases by one with every applied configuration (file change or snapshot). */
  version: number;
  /** Content hash of the configuration, to tell a real change from a no-op reload. */
  hash: string;
  policy: PoolPolicy;
  endpoints: readonly EndpointSpec[];
  timeouts: PoolTimeouts;
  balancer: PoolBalancer;
}
