/**
 * The public API of the routing policy core. The shells around it (`sidecar/config/`,
 * `sidecar/proxy/`, `sidecar/admin/`, `sidecar/sidecar.ts`) import the policy from here only; a
 * test (sidecar/layers.test.ts) keeps it so.
 */
export type * from './types.ts';
export {
  AFFINITY_MAX_SLOWDOWN,
  MIN_PREFIX_CHARS_FOR_AFFINITY,
  affinityFor,
  affinityKeyFor,
  type AffinityInput,
  type AffinityRequest,
} from './affinity.ts';
export { ADAPTER_SERVED_RECENTLY_MS } from './adapter-residency.ts';
export { DEFAULT_LOAD_FACTOR, loadCapacity, rendezvousOrder } from './bounded-load.ts';
export { PrefixIndex } from './prefix-index.ts';
export {
  DEFAULT_MAX_QUEUED_PLACEMENTS,
  DEFAULT_PLACEMENT_DEDUP_MS,
  PlacementOutbox,
  type PlacementBatch,
  type PlacementOutboxOptions,
} from './placement-outbox.ts';
export {
  DEFAULT_RESPONSE_HOMES_MAX_AGE_MS,
  DEFAULT_RESPONSE_HOMES_MAX_ENTRIES,
  ResponseHomes,
} from './response-homes.ts';
export { promptBlocks } from './prompt-blocks.ts';
export { ReportedLoad } from './server-load.ts';
export {
  Balancer,
  DEFAULT_SHED_RETRY_AFTER_MS,
  MAX_RETRY_AFTER_COOLDOWN_MS,
  type BalancerDeps,
} from './balancer.ts';
export {
  Breaker,
  OPEN_JITTER_FRACTION,
  openDurationMs,
  tripReason,
  type BreakerTransition,
  type HealthReading,
  type TripReason,
} from './breaker.ts';
export {
  EWMA_NEW_SAMPLE_WEIGHT,
  FALLBACK_DEFAULT_TTFT_MS,
  MIN_TTFT_MS,
  TtftEwmas,
  blendEwma,
  isUsableTtftSample,
} from './ewma.ts';
export { PICKERS, type Picker } from './baseline-pickers.ts';
export { fnv1a64, toHex64, type Hash64 } from './hash.ts';
export { median } from './median.ts';
export { pickTwoChoices } from './p2c.ts';
export { RETRY_BUDGET_WINDOW_MS, RetryBudget, retryAllowance } from './retry-budget.ts';
export { sampleTwoDistinct, seededRng } from './rng.ts';
export { IDLE_FADE_MS, costTermMs, idleFade, score, type ScoreInputs } from './score.ts';
export { DEFAULT_BUCKET_COUNT, SlidingWindow } from './sliding-window.ts';
// Flow control (issue 43): the queue, the budgets, saturation (docs/flow-control.md).
export type * from './flow-types.ts';
export { budgetId } from './flow-types.ts';
export { FlowQueue } from './flow-queue.ts';
export {
  BURST_MS,
  BYTES_PER_TOKEN,
  BudgetLedger,
  DEFAULT_COMPLETION_TOKENS,
} from './budget-ledger.ts';
export { isSaturated } from './saturation.ts';
// Autoscaling signals (issue 44): the pool's demand as this sidecar reports it.
export { DEMAND_MIN_WINDOW_MS, DemandMeter, type DemandRates } from './demand-meter.ts';
// Scale from zero (issue 44): requests held while the pool has no endpoint.
export { ZeroHold, type HoldOffer, type HoldStreak } from './zero-hold.ts';
