/**
 * The canary benchmark's workload and its analysis, pure (unit-tested in plan.test.ts): which
 * sidecar each request goes through and which conversation it belongs to, then, from the side of
 * the split that answered each one, the shares (overall, per sidecar, keyed and keyless) and the
 * conversations that ever changed sides.
 */
import { mulberry32 } from '../../lib/rng.ts';

export interface PlanOptions {
  /** Requests in all. */
  total: number;
  /** The part of them that belongs to a conversation (sends its key); the rest send none. */
  keyedShare: number;
  /** Turns per conversation. */
  turns: number;
  sidecars: number;
  seed: number;
}

/** One request of the plan. */
export interface PlannedRequest {
  /** The sidecar it goes through (0-based). */
  sidecar: number;
  /** Its conversation (its affinity key), or undefined for a keyless request. */
  conversation: number | undefined;
  /** 1-based turn within the conversation; 1 for a keyless request. */
  turn: number;
}

/**
 * `total` requests: `keyedShare` of them the turns of conversations of `turns` turns, the rest
 * keyless, interleaved at random (a conversation's turns stay in order). Every turn of a
 * conversation goes through another sidecar than the one before, so that a conversation staying
 * on its side is a property of the split every sidecar computes alike, not of one sidecar's memory.
 */
export function planRequests(o: PlanOptions): PlannedRequest[] {
  const rng = mulberry32(o.seed);
  const conversations = Math.floor((o.total * o.keyedShare) / o.turns);
  const keyless = o.total - conversations * o.turns;
  const nextTurn = new Array<number>(conversations).fill(1);
  const open: number[] = Array.from({ length: conversations }, (_, c) => c);
  let keylessLeft = keyless;
  const plan: PlannedRequest[] = [];
  while (plan.length < o.total) {
    const keyedLeft = o.total - plan.length - keylessLeft;
    if (keylessLeft > 0 && rng() * (keylessLeft + keyedLeft) < keylessLeft) {
      keylessLeft--;
      plan.push({ sidecar: Math.floor(rng() * o.sidecars), conversation: undefined, turn: 1 });
      continue;
    }
    const at = Math.floor(rng() * open.length);
    const c = open[at]!;
    const turn = nextTurn[c]!++;
    if (turn === o.turns) open.splice(at, 1);
    plan.push({ sidecar: (c + turn) % o.sidecars, conversation: c, turn });
  }
  return plan;
}

/** What came back for one planned request: the side that answered, or none (an error). */
export interface Outcome {
  request: PlannedRequest;
  /** The backend (side of the split) that answered; undefined when the request failed. */
  side: string | undefined;
  status: number;
}

export type Shares = Record<string, number>;

export interface CanaryAnalysis {
  requests: number;
  errors: number;
  /** Each side's share of the answered requests. */
  overall: Shares;
  keyless: Shares;
  keyed: Shares;
  bySidecar: { sidecar: number; requests: number; shares: Shares }[];
  /** |share − weight share| of each side, in percentage points, overall. */
  errorPp: Shares;
  conversations: {
    count: number;
    /** Conversations whose answered turns did not all come from one side. */
    flipped: number;
    /** A few of them, for the report. */
    flippedExamples: number[];
    /** The share of conversations that lived on each side (by their first answered turn). */
    onSide: Shares;
  };
}

function sharesOf(outcomes: readonly Outcome[], sides: readonly string[]): Shares {
  const answered = outcomes.filter((o) => o.side !== undefined);
  return Object.fromEntries(
    sides.map((s) => [
      s,
      answered.length === 0 ? 0 : answered.filter((o) => o.side === s).length / answered.length,
    ]),
  );
}

/** The split as measured, against `weights` (side name → weight). */
export function analyse(
  outcomes: readonly Outcome[],
  weights: Readonly<Record<string, number>>,
  sidecars: number,
): CanaryAnalysis {
  const sides = Object.keys(weights);
  const total = sides.reduce((sum, s) => sum + weights[s]!, 0);
  const overall = sharesOf(outcomes, sides);
  const sideOf = new Map<number, string>();
  const flipped = new Set<number>();
  for (const o of outcomes) {
    const c = o.request.conversation;
    if (c === undefined || o.side === undefined) continue;
    const first = sideOf.get(c);
    if (first === undefined) sideOf.set(c, o.side);
    else if (first !== o.side) flipped.add(c);
  }
  const conversations = new Set(
    outcomes.flatMap((o) => (o.request.conversation === undefined ? [] : [o.request.conversation])),
  );
  return {
    requests: outcomes.length,
    errors: outcomes.filter((o) => o.side === undefined).length,
    overall,
    keyless: sharesOf(
      outcomes.filter((o) => o.request.conversation === undefined),
      sides,
    ),
    keyed: sharesOf(
      outcomes.filter((o) => o.request.conversation !== undefined),
      sides,
    ),
    bySidecar: Array.from({ length: sidecars }, (_, i) => {
      const mine = outcomes.filter((o) => o.request.sidecar === i);
      return { sidecar: i, requests: mine.length, shares: sharesOf(mine, sides) };
    }),
    errorPp: Object.fromEntries(
      sides.map((s) => [s, total === 0 ? NaN : Math.abs(overall[s]! - weights[s]! / total) * 100]),
    ),
    conversations: {
      count: conversations.size,
      flipped: flipped.size,
      flippedExamples: [...flipped].slice(0, 10),
      onSide: Object.fromEntries(
        sides.map((s) => [
          s,
          sideOf.size === 0 ? 0 : [...sideOf.values()].filter((v) => v === s).length / sideOf.size,
        ]),
      ),
    },
  };
}
