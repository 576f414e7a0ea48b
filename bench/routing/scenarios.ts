/**
 * The routing benchmark's scenarios: what the K simulated backends are like. All times are
 * simulated milliseconds (the simulators run `speed` times faster than that).
 */
import { LORA_LOAD_MS, type SimOptions } from '../../sim/options.ts';
import { mulberry32 } from '../../lib/rng.ts';
import { HASH_BLOCK_TOKENS } from './trace.ts';
import { SCENARIOS, type ScenarioName } from '../../lib/bench-names.ts';

export interface BackendSpec {
  name: string;
  sim: Partial<SimOptions>;
  /** $ per million tokens. */
  costPerMTok: number;
}

/**
 * A closed-loop multi-turn chat workload instead of the trace (conversations.ts): the issue's
 * 24 conversations of 6 turns, 8 at a time, on 4 backends, scaled with the number of backends.
 */
export interface ConversationsWorkload {
  conversationsPerBackend: number;
  concurrentPerBackend: number;
  turns: number;
  systemChars: number;
  userChars: number;
  answerTokens: number;
}

/**
 * LoRA adapters on the backends: `adapters` adapters of the one model, every backend able to serve
 * every one, at most `maxLoras` resident per backend, `loadMs` to load one that is not; each
 * request names an adapter drawn from a Zipf distribution of exponent `zipfS` (a few adapters
 * carry most of the traffic, a long tail the rest).
 */
export interface LoraWorkload {
  adapters: number;
  maxLoras: number;
  loadMs: number;
  zipfS: number;
}

export interface Scenario {
  name: ScenarioName;
  description: string;
  backends(count: number, heterogeneous: boolean): BackendSpec[];
  /** switchyard is run once per value: the cost↔latency exchange rate (undefined = latency only). */
  costWeights?: (number | undefined)[];
  /** Replays this workload instead of the trace. */
  conversations?: ConversationsWorkload;
  /** The trace's requests name LoRA adapters of the model (see LoraWorkload). */
  lora?: LoraWorkload;
  /**
   * Replays the trace at the arrival rate that keeps the servers this busy on average (a share of
   * their slot time, see `timeScaleFor`) instead of at `--time-scale`.
   */
  utilisation?: number;
  /**
   * A later turn of a trace conversation goes through another router instance than the turn
   * before it (see `routerInstances`), as through app replicas behind a Service.
   */
  laterTurnsElsewhere?: boolean;
}

/** What one request asks of a server, as the trace says it. */
export interface RequestSize {
  atMs: number;
  inputTokens: number;
  outputTokens: number;
}

/**
 * The simulated milliseconds of one slot a request holds with nothing cached and no other slot
 * busy: its prefill, then its decode. The nominal demand: prefix-cache hits make it smaller and
 * the decode's slowdown under load larger (docs/benchmarks.md, "Moderate load").
 */
export function slotMs(r: RequestSize, sim: Partial<SimOptions>): number {
  return r.inputTokens * sim.prefillMsPerToken! + r.outputTokens * sim.decodeMsPerToken!;
}

/**
 * The share of the fleet's slots the requests' nominal demand keeps busy, on average over the
 * replay, when the trace is replayed `timeScale` wall ms per trace ms on simulators running
 * `speed` times faster than real time.
 */
export function offeredUtilisation(
  requests: readonly RequestSize[],
  fleet: readonly BackendSpec[],
  timeScale: number,
  speed: number,
): number {
  const spanMs = traceSpanMs(requests) * timeScale * speed;
  const slots = fleet.reduce((n, b) => n + b.sim.slots!, 0);
  // Every request on the fleet's average server: heterogeneous fleets are not this scenario's.
  const work = requests.reduce(
    (sum, r) => sum + fleet.reduce((s, b) => s + slotMs(r, b.sim), 0) / fleet.length,
    0,
  );
  return spanMs > 0 && slots > 0 ? work / (spanMs * slots) : 0;
}

/** The time scale at which `offeredUtilisation` is `target`: it is inversely proportional. */
export function timeScaleFor(
  requests: readonly RequestSize[],
  fleet: readonly BackendSpec[],
  speed: number,
  target: number,
): number {
  const atOne = offeredUtilisation(requests, fleet, 1, speed);
  if (!(atOne > 0)) throw new Error('the trace has no span or no demand to derive a rate from');
  return atOne / target;
}

function traceSpanMs(requests: readonly RequestSize[]): number {
  if (requests.length < 2) return 0;
  return requests[requests.length - 1]!.atMs - requests[0]!.atMs;
}

/**
 * The router instance each request is sent through, of `instances`: request i through i mod R
 * (each instance serves 1/R of the clients), except, with `laterTurnsElsewhere`, turn t of the
 * conversation whose first turn is request c goes through (c + t − 1) mod R, as the
 * `conversations` scenario does: each turn through the next instance, never the one its previous
 * turn took (when R > 1).
 */
export function routerInstances(
  count: number,
  instances: number,
  turns: readonly { conversation: number; turn: number }[] | undefined,
  laterTurnsElsewhere: boolean,
): number[] {
  return Array.from({ length: count }, (_, i) => {
    const t = laterTurnsElsewhere ? turns?.[i] : undefined;
    return t === undefined ? i % instances : (t.conversation + t.turn - 1) % instances;
  });
}

/** The lora scenario's adapters: 16 of them, 4 resident per server, vLLM's load cost. */
export const LORA_WORKLOAD: LoraWorkload = {
  adapters: 16,
  maxLoras: 4,
  loadMs: LORA_LOAD_MS,
  zipfS: 1,
};

/** The adapter names of a workload: `lora-00`, `lora-01`, ... */
export function adapterNames(w: LoraWorkload): string[] {
  return Array.from({ length: w.adapters }, (_, i) => `lora-${String(i).padStart(2, '0')}`);
}

/**
 * The adapter of each of `count` requests: Zipf-distributed over the adapters (rank r drawn with
 * probability ∝ 1 / r^s), the ranks shuffled so that the popular adapters are not the first names,
 * reproducible from `seed`.
 */
export function zipfAdapters(w: LoraWorkload, count: number, seed: number): string[] {
  const rng = mulberry32(seed ^ 0x10ba);
  const names = adapterNames(w);
  for (let i = names.length - 1; i > 0; i--) {
    const j = Math.floor(rng() * (i + 1));
    [names[i], names[j]] = [names[j]!, names[i]!];
  }
  const weights = names.map((_, r) => 1 / Math.pow(r + 1, w.zipfS));
  const total = weights.reduce((a, b) => a + b, 0);
  const cumulative: number[] = [];
  let sum = 0;
  for (const weight of weights) cumulative.push((sum += weight / total));
  return Array.from({ length: count }, () => {
    const u = rng();
    const rank = cumulative.findIndex((c) => u < c);
    return names[rank < 0 ? names.length - 1 : rank]!;
  });
}

export { SCENARIOS, type ScenarioName };

/** A modest inference server: 6 sequences at a time, 20k prompt tokens/s, 100 tokens/s each. */
export const BASE_BACKEND: Partial<SimOptions> = {
  slots: 6,
  queueLimit: 1024,
  prefillMsPerToken: 0.05,
  decodeMsPerToken: 10,
  loadSlowdown: 0.5,
  // The trace's blocks are 512 tokens; 4096 of them (2 Mi tokens of KV cache) is a large GPU's
  // budget, enough that eviction is rare with affinity and hit rates measure routing.
  blockTokens: HASH_BLOCK_TOKENS,
  cacheBlocks: 4096,
  charsPerToken: 4,
  coldStartMs: 0,
  // Eight tokens a chunk after the first: a router's per-chunk work, multiplied by the time
  // compression, would otherwise dominate (TTFT, the first chunk, is unaffected).
  tokensPerChunk: 8,
};

function fleet(count: number, heterogeneous: boolean, cost = 1): BackendSpec[] {
  return Array.from({ length: count }, (_, i) => {
    const sim: Partial<SimOptions> = { ...BASE_BACKEND, name: `b${i}` };
    // --heterogeneous: b1 is half as fast, b2 has an eighth of the cache.
    if (heterogeneous && i === 1) {
      sim.prefillMsPerToken = BASE_BACKEND.prefillMsPerToken! * 2;
      sim.decodeMsPerToken = BASE_BACKEND.decodeMsPerToken! * 2;
    }
    if (heterogeneous && i === 2) sim.cacheBlocks = BASE_BACKEND.cacheBlocks! / 8;
    return { name: `b${i}`, sim, costPerMTok: cost };
  });
}

const byName: Record<ScenarioName, Scenario> = {
  steady: {
    name: 'steady',
    description: 'every backend healthy',
    backends: (k, h) => fleet(k, h),
  },
  moderate: {
    name: 'moderate',
    description:
      'every backend healthy, the trace replayed at the rate that keeps the servers about half busy (their nominal slot time, nothing cached), each later turn of a conversation through another router instance than the turn before',
    backends: (k, h) => fleet(k, h),
    utilisation: 0.5,
    laterTurnsElsewhere: true,
  },
  'slow-backend': {
    name: 'slow-backend',
    description: 'b0 is 4× slower (prefill and decode)',
    backends: (k, h) =>
      fleet(k, h).map((b, i) =>
        i === 0
          ? {
              ...b,
              sim: {
                ...b.sim,
                prefillMsPerToken: BASE_BACKEND.prefillMsPerToken! * 4,
                decodeMsPerToken: BASE_BACKEND.decodeMsPerToken! * 4,
              },
            }
          : b,
      ),
  },
  'fast-failure': {
    name: 'fast-failure',
    description: 'b0 answers every request with an instant 500',
    backends: (k, h) =>
      fleet(k, h).map((b, i) => (i === 0 ? { ...b, sim: { ...b.sim, errorRate: 1 } } : b)),
  },
  'rate-limited': {
    name: 'rate-limited',
    description: 'b0 answers half of its requests with 429 (Retry-After: 1)',
    backends: (k, h) =>
      fleet(k, h).map((b, i) => (i === 0 ? { ...b, sim: { ...b.sim, rateLimitRate: 0.5 } } : b)),
  },
  'cold-start': {
    name: 'cold-start',
    description: 'every backend starts cold (3 s warm-up) and is cold again after 2 s idle',
    backends: (k, h) =>
      fleet(k, h).map((b) => ({ ...b, sim: { ...b.sim, coldStartMs: 3000, coldIdleMs: 2000 } })),
  },
  'mixed-cost': {
    name: 'mixed-cost',
    description:
      'a cheap, slower in-cluster pool ($0.20/Mtok, 1.5× slower) and a fast, expensive provider ($1.00/Mtok, 2× faster, twice the slots) on a quarter of the backends',
    backends: (k, h) => {
      const providers = Math.max(1, Math.round(k / 4));
      return fleet(k, h).map((b, i) =>
        i < k - providers
          ? {
              ...b,
              name: `cheap${i}`,
              costPerMTok: 0.2,
              sim: {
                ...b.sim,
                name: `cheap${i}`,
                prefillMsPerToken: BASE_BACKEND.prefillMsPerToken! * 1.5,
                decodeMsPerToken: BASE_BACKEND.decodeMsPerToken! * 1.5,
              },
            }
          : {
              ...b,
              name: `provider${i - (k - providers)}`,
              costPerMTok: 1,
              sim: {
                ...b.sim,
                name: `provider${i - (k - providers)}`,
                slots: BASE_BACKEND.slots! * 2,
                prefillMsPerToken: BASE_BACKEND.prefillMsPerToken! / 2,
                decodeMsPerToken: BASE_BACKEND.decodeMsPerToken! / 2,
              },
            },
      );
    },
    // $/Mtok worth one (wall) millisecond: from "latency only" to "a cent saved is worth seconds".
    costWeights: [undefined, 0.01, 0.002, 0.0005, 0.0001],
  },
  lora: {
    name: 'lora',
    description: `every request names one of ${LORA_WORKLOAD.adapters} LoRA adapters of the model (Zipf, s = ${LORA_WORKLOAD.zipfS}); every backend can serve all of them but holds at most ${LORA_WORKLOAD.maxLoras} at once (LRU), and loading one that is not resident costs ${LORA_WORKLOAD.loadMs} ms before the prefill (run with --backends 8)`,
    backends: (k, h) =>
      fleet(k, h).map((b) => ({
        ...b,
        sim: {
          ...b.sim,
          loras: adapterNames(LORA_WORKLOAD).join(','),
          maxLoras: LORA_WORKLOAD.maxLoras,
          loraLoadMs: LORA_WORKLOAD.loadMs,
        },
      })),
    lora: LORA_WORKLOAD,
  },
  conversations: {
    name: 'conversations',
    description:
      'a chat application instead of the trace: 12 conversations of 6 turns per backend, 2 per backend at a time, one 270-character system prompt shared by all, ~200-character user turns, ~60-token answers; every turn repeats the conversation so far; backends cache 16-token blocks (vLLM’s default) so short prompts share blocks',
    backends: (k, h) => fleet(k, h).map((b) => ({ ...b, sim: { ...b.sim, blockTokens: 16 } })),
    conversations: {
      conversationsPerBackend: 12,
      concurrentPerBackend: 2,
      turns: 6,
      systemChars: 270,
      userChars: 200,
      answerTokens: 60,
    },
  },
};

export function scenario(name: ScenarioName): Scenario {
  return byName[name];
}
