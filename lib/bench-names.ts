/**
 * The names of the routing bench's scenarios and policies, in report order, and how to install
 * its gateway peers. Not in bench/: the image ships no bench/, and `switchyard bench --help` lists
 * them there too; not in cli/ either, because the bench must not import the CLI (the CLI runs the
 * bench, so the dependency goes one way: cli/ → bench/ → lib/). No imports.
 */

export const SCENARIOS = [
  'steady',
  'moderate',
  'slow-backend',
  'fast-failure',
  'rate-limited',
  'cold-start',
  'mixed-cost',
  'conversations',
  'lora',
] as const;
export type ScenarioName = (typeof SCENARIOS)[number];

/**
 * Issue 43's scenario: interactive chat beside a batch flood on saturated servers, with and
 * without flow control (bench/routing/priority.ts). Its own runner, not a trace replay, so it is
 * not among SCENARIOS and `--scenario all` leaves it out; its variants are PRIORITY_VARIANT_NAMES.
 */
export const PRIORITY_SCENARIO = 'priority';
export const PRIORITY_VARIANT_NAMES = [
  'interactive-only',
  'switchyard-flow',
  'switchyard-flow-preemption',
  'switchyard',
  'least-connections',
  'smg-cache-aware',
  'vllm-router-cache-aware',
  'litellm-least-busy-central',
  'smg-cache-aware-central',
] as const;

/**
 * What feeds switchyard's sidecars in the bench: one controller stream that every sidecar
 * subscribes to, as in Kubernetes or behind `switchyard relay` (bench/routing/load-relay.ts: the
 * servers' load scraped once, placements shared between sidecars; the default), or each sidecar
 * scraping the servers itself and knowing only its own prompts, as standalone from a pool file.
 */
export const LOAD_SOURCES = ['sidecar', 'controller'] as const;
export type LoadSource = (typeof LOAD_SOURCES)[number];

/** The routers inside switchyard (its baselines too) and the oracle: every other is a peer. */
export const OWN_POLICY_NAMES = [
  'round-robin',
  'random',
  'least-connections',
  'p2c',
  'switchyard',
  'switchyard-local',
  'oracle',
] as const;

export const POLICY_NAMES = [
  ...OWN_POLICY_NAMES,
  'haproxy-roundrobin',
  'haproxy-leastconn',
  'haproxy-random2',
  'nginx-least-conn',
  'caddy-random-choose-2',
  'caddy-least-conn',
  'litellm-simple-shuffle',
  'litellm-least-busy',
  'litellm-latency-based',
  'smg-cache-aware',
  'smg-p2c',
  'smg-prefix-hash',
  'vllm-router-cache-aware',
  'vllm-router-consistent-hash',
  'vllm-router-p2c',
  // The same gateways, one shared instance for every client (routers.ts, centralVariant).
  'litellm-simple-shuffle-central',
  'litellm-least-busy-central',
  'litellm-latency-based-central',
  'smg-cache-aware-central',
  'smg-p2c-central',
  'smg-prefix-hash-central',
  'vllm-router-cache-aware-central',
  'vllm-router-consistent-hash-central',
  'vllm-router-p2c-central',
  // GAIE's endpoint pickers behind an ext_proc stand-in for Envoy, central by design (gaie.ts):
  // the full EPP (v1.5.0) and the round-robin reference picker (v1.6.2).
  'gaie-epp',
  'gaie-lwepp',
] as const;
export type PolicyName = (typeof POLICY_NAMES)[number];

/** How to install each gateway peer: a cached virtualenv, one line each (bench/routing/gateways.ts). */
export const INSTALL = {
  litellm:
    "python3 -m venv ~/.cache/switchyard/litellm-venv && ~/.cache/switchyard/litellm-venv/bin/pip install 'litellm[proxy]==1.106.12'",
  smg: "python3 -m venv ~/.cache/switchyard/smg-venv && ~/.cache/switchyard/smg-venv/bin/pip install 'smg==1.13.0'",
  vllmRouter:
    "python3 -m venv ~/.cache/switchyard/vllm-router-venv && ~/.cache/switchyard/vllm-router-venv/bin/pip install 'vllm-router==0.1.17'",
} as const;
