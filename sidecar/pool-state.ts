import type { EndpointSpec, PoolBalancer, PoolPolicy } from './policy/types.ts';

/** Timeouts of one pool's upstream requests, in ms. */
export interface UpstreamTimeouts {
  /** TCP (and TLS) connect. */
  connectMs: number;
  /** From dispatch to the first response body byte: a stall past it is an error and may be retried. */
  firstByteMs: number;
  /** Longest silence between two body chunks once the response is flowing. */
  idleMs: number;
}

/** The configuration in force: what a pool file or a controller snapshot resolved to. */
export interface ActivePool {
  name: string;
  /** Increases by one with every applied configuration (file change or snapshot). */
  version: number;
  /** Content hash of the configuration, to tell a real change from a no-op reload. */
  hash: string;
  policy: PoolPolicy;
  endpoints: readonly EndpointSpec[];
  timeouts: UpstreamTimeouts;
  balancer: PoolBalancer;
}
