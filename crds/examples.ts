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

/**
 * Flow control: interactive chat and batch jobs share two servers; the batch job's requests wait
 * (or, sent with a negative priority, are refused) while the servers are full, and each team has
 * a budget under the pool's.
 */
export const FLOW_CONTROL_EXAMPLE = `apiVersion: switchyard.dev/v1alpha1
kind: InferencePool
metadata: {name: chat}
spec:
  backends:
  - {name: vllm, urls: [http://127.0.0.1:9101/v1, http://127.0.0.1:9102/v1]}
  flowControl:
    defaultPriority: 0
    maxQueueWait: 20s
    queue: {maxRequests: 500, maxBytes: 33554432}
    saturation: {kvCacheUsage: 0.9, maxInFlightPerEndpoint: 32}
    workload: {header: x-team}
    budgets:
    - {tokensPerMinute: 2000000}
    - {workload: chat, requestsPerMinute: 1200}
    - {workload: batch, requestsPerMinute: 300, tokensPerMinute: 500000}
`;
