/**
 * `npm run bench:pick-cost`: what one balancing decision costs on the proxy's event loop, by pool
 * size, with and without the servers reporting their speed (vLLM's and SGLang's inter-token
 * latency, which the balancer compares with the candidates' median on every pick; docs/policy.md
 * §4, "A slower server"). Side by side, the two ways to get every candidate's slowdown: sorting
 * the latencies and taking the median without each one (the definition, and the first version),
 * and the middle three order statistics the balancer uses. Writes bench/results/pick-cost.json.
 * With prefix affinity on, the picks of new prompts (the affinity decision and, when it keeps no
 * home, the balancing: a single message in a pool whose every home is full walks every
 * candidate's count for the bet's check, then balances on the same counts). Picks only, no I/O: the figures are the policy's share of a request's
 * CPU, not a latency.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Balancer } from '../../sidecar/policy/balancer.ts';
import { lowerBound, medianWithout } from '../../sidecar/policy/median.ts';
import { seededRng } from '../../sidecar/policy/rng.ts';
import { slowdownAgainstPeers } from '../../sidecar/policy/server-speed.ts';
import { endpoint, fakeClock, testPolicy } from '../../sidecar/policy/testing.ts';
import { time } from '../common/micro-timing.ts';

const OUT = join(dirname(fileURLToPath(import.meta.url)), '../results/pick-cost.json');
const SIZES = [8, 64, 512, 4096];

/** Each candidate's slowdown by sorting: O(n log n) a pick. */
function slowdownsBySorting(latencies: readonly number[]): number[] {
  const sorted = [...latencies].sort((a, b) => a - b);
  return latencies.map((v) => v / (medianWithout(sorted, lowerBound(sorted, v)) ?? v));
}

interface PoolShape {
  /** The servers report their speed. */
  speeds: boolean;
  /** Prefix affinity on (the default of a pool file and an InferencePool). */
  prefix?: boolean;
  /**
   * Every endpoint has TTFT samples of this sidecar's own, 40 to 140 ms (a pool that has served:
   * affinity compares each candidate with their median).
   */
  measured?: boolean;
  /**
   * Every server reports a full batch and a queue (6 running, 1 waiting): no home has a free
   * slot, so a single message is not bet on and is balanced (docs/policy.md §3).
   */
  busy?: boolean;
}

/** A pool of `n` endpoints that report a batch of 2 running (or, `busy`, a full one). */
function pool(
  n: number,
  { speeds, prefix = false, measured = false, busy = false }: PoolShape,
): Balancer {
  const specs = Array.from({ length: n }, (_, i) => endpoint(`e${i}`));
  const policy = prefix ? testPolicy({ affinity: { key: 'Prefix' } }) : testPolicy();
  const clock = fakeClock();
  const balancer = new Balancer(policy, specs, {
    clock,
    rng: seededRng(1),
    onEvent: () => {},
  });
  // Every endpoint's request at once, then their first tokens in a scrambled order over 100 ms:
  // one at a time, a 4,096-endpoint round would leave each idle long enough for its next sample to
  // count as a cold start and be dropped.
  for (let sample = 0; measured && sample < 8; sample++) {
    const attempts = specs.map((s) => {
      const result = balancer.pick({ pinnedEndpointId: s.id });
      if (result.kind !== 'picked') throw new Error(`${s.id} is not live`);
      return result.attempt;
    });
    clock.advance(40);
    for (let k = 0; k < n; k++) {
      const attempt = attempts[(k * 7919) % n]!; // n is a power of two: a permutation
      clock.advance(100 / n);
      balancer.firstByte(attempt, true);
      balancer.finish(attempt, { kind: 'success', streamed: true });
    }
  }
  specs.forEach((s, i) =>
    balancer.reportLoad(s.id, {
      running: busy ? 6 : 2,
      waiting: busy ? 1 : 0,
      ...(speeds ? { interTokenLatencyMs: 10 + ((i * 7919) % 13) } : {}),
    }),
  );
  return balancer;
}

function pickAndFinish(balancer: Balancer): () => void {
  return () => {
    const result = balancer.pick({});
    if (result.kind === 'picked') balancer.finish(result.attempt, { kind: 'neutral' });
  };
}

/**
 * Picks of prompts no request has sent before, each with its own key: `history` 0 is a single
 * message (speculative, docs/policy.md §3), 256 a first turn after a system prompt. Each walks
 * its key's rendezvous order, and nearly always stops at the first endpoint.
 */
function pickNewPrompts(balancer: Balancer, history: number): () => void {
  let key = 0;
  return () => {
    key += 1;
    const result = balancer.pick({
      prompt: {
        hashes: [key, key + 2 ** 40],
        ends: [256, 2_000],
        homeDepth: 2,
        historyChars: history,
      },
    });
    if (result.kind === 'picked') balancer.finish(result.attempt, { kind: 'neutral' });
  };
}

const rows = SIZES.map((n) => {
  const latencies = Array.from({ length: n }, (_, i) => 10 + ((i * 7919) % 13));
  const iterations = n >= 4096 ? 1000 : n >= 512 ? 4000 : 20000;
  return {
    endpoints: n,
    pickNoSpeeds: time(iterations, pickAndFinish(pool(n, { speeds: false }))),
    pickWithSpeeds: time(iterations, pickAndFinish(pool(n, { speeds: true }))),
    pickFirstTurn: time(iterations, pickNewPrompts(pool(n, { speeds: true, prefix: true }), 256)),
    pickSingleMessage: time(iterations, pickNewPrompts(pool(n, { speeds: true, prefix: true }), 0)),
    pickSingleMessageBalanced: time(
      iterations,
      pickNewPrompts(pool(n, { speeds: true, prefix: true, busy: true }), 0),
    ),
    pickFirstTurnMeasured: time(
      iterations,
      pickNewPrompts(pool(n, { speeds: true, prefix: true, measured: true }), 256),
    ),
    slowdownsBySorting: time(iterations, () => void slowdownsBySorting(latencies)),
    slowdownsBySelection: time(iterations, () => {
      const slowdownOf = slowdownAgainstPeers(latencies);
      for (const v of latencies) slowdownOf(v);
    }),
  };
});

const result = { node: process.version, cpus: cpus().length, rows };
mkdirSync(dirname(OUT), { recursive: true });
writeFileSync(OUT, JSON.stringify(result, null, 2) + '\n');
for (const r of rows) {
  console.log(
    `${String(r.endpoints).padStart(5)} endpoints  pick p50 ${r.pickNoSpeeds.p50Us} µs, with speeds ${r.pickWithSpeeds.p50Us} µs, ` +
      `prefix affinity: a first turn ${r.pickFirstTurn.p50Us} µs, a single message ${r.pickSingleMessage.p50Us} µs ` +
      `(balanced, every home full: ${r.pickSingleMessageBalanced.p50Us} µs), ` +
      `a first turn with TTFT samples ${r.pickFirstTurnMeasured.p50Us} µs  ` +
      `(every slowdown: sorting ${r.slowdownsBySorting.p50Us} µs, selection ${r.slowdownsBySelection.p50Us} µs)`,
  );
}
console.log(`wrote ${OUT}`);
