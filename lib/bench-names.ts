/**
 * The names of the routing bench's scenarios and policies, in report order. Not in bench/: the
 * image ships no bench/, and `switchyard bench --help` lists them there too; not in cli/ either,
 * because the bench must not import the CLI (the CLI runs the bench, so the dependency goes one
 * way: cli/ → bench/ → lib/). No imports.
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
