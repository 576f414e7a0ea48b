/**
 * The names of the routing bench's scenarios and policies, in report order. Here in cli/, with
 * no imports, so that `switchyard bench --help` can list them without loading the bench, and in
 * an installation (the image) that does not ship bench/ at all.
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
