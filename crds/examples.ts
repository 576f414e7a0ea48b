/**
 * The reference pool files of docs/configuration.md, as text. Tests (here and elsewhere) use them,
 * and crds/docs.test.ts checks that the documentation shows them verbatim.
 */

/** Three local backends, balanced; passive health tuned. */
export const BALANCE_EXAMPLE = `apiVersion: switchyard.dev/v1alpha1
kind: InferencePool
metadata: {name: chat}
spec:
  mode: Balance
  backends:
  - {name: a, url: http://127.0.0.1:9101/v1}
  - {name: b, url: http://127.0.0.1:9102/v1}
  - {name: c, url: http://127.0.0.1:9103/v1}
  health: {window: 5s, minRequests: 10, maxErrorRate: 0.5, openFor: 30s}
`;

/** A cheap primary and a dearer secondary with another model name; price matters. */
export const FAILOVER_EXAMPLE = `apiVersion: switchyard.dev/v1alpha1
kind: InferencePool
metadata: {name: chat}
spec:
  mode: Failover
  costWeightPerMs: 0.001
  backends:
  - {name: primary, url: http://127.0.0.1:9101/v1, costPerMTok: 0.2}
  - {name: secondary, url: http://127.0.0.1:9102/v1, costPerMTok: 0.6, model: other-model}
  affinity: {key: Prefix, prefixChars: 4096, maxSlowdown: 2.5}
  retry: {budgetPercent: 20, minPerSecond: 10, maxAttempts: 3}
`;
