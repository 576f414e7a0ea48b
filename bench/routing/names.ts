/**
 * The names of the bench's scenarios and policies, in report order. A module of its own, with no
 * imports, so that `switchyard --help` can list them without loading the bench.
 */

export const SCENARIOS = [
  'steady',
  'slow-backend',
  'fast-failure',
  'rate-limited',
  'cold-start',
  'mixed-cost',
] as const;
export type ScenarioName = (typeof SCENARIOS)[number];

export const POLICY_NAMES = [
  'round-robin',
  'random',
  'least-connections',
  'p2c',
  'switchyard',
  'oracle',
  'haproxy-roundrobin',
  'haproxy-leastconn',
  'haproxy-random2',
  'nginx-least-conn',
  'caddy-random-choose-2',
  'caddy-least-conn',
  'litellm-simple-shuffle',
  'litellm-least-busy',
  'litellm-latency-based',
] as const;
export type PolicyName = (typeof POLICY_NAMES)[number];
