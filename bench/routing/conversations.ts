/**
 * Chat-shaped workloads: conversations sent the way chat clients call, each turn a `messages`
 * array (system, user, assistant, user, …) that repeats every earlier turn and its answer, so a
 * router's prefix affinity is measured on what it will really see. Pure: unit-tested in
 * conversations.test.ts.
 *
 * Two sources:
 * - a trace with hash-id chains (Mooncake): a request whose prompt starts with all of an earlier,
 *   shorter request's full blocks is that request's next turn (chainConversations);
 * - the synthetic multi-turn workload of the `conversations` scenario: many conversations of a
 *   few turns sharing one system prompt, run closed-loop (conversationWorkload).
 *
 * The answers are deterministic stand-ins of the earlier request's output length (the
 * simulator's own text is not kept): what matters is that the next turn repeats it verbatim.
 */
import { mulberry32 } from '../../lib/rng.ts';
import { pseudoText, type PromptBuilder } from './prompt.ts';
import type { TraceRequest } from './trace.ts';

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant';
  content: string;
}

/** Where a trace request sits in its conversation. */
export interface ChatTurn {
  /** Index (in the replayed requests) of the conversation's first turn. */
  conversation: number;
  /** 1 for the first turn. */
  turn: number;
  /** Index of the turn it continues, undefined for a first turn. */
  parent: number | undefined;
}

interface TrieNode {
  children: Map<number, TrieNode>;
  /** The latest request whose full blocks end here. */
  request: number | undefined;
}

/** How many of a request's hash ids stand for full blocks (the last one is usually partial). */
function fullBlocks(request: TraceRequest, blockTokens: number): number {
  return Math.min(request.hashIds?.length ?? 0, Math.floor(request.inputTokens / blockTokens));
}

/**
 * Rebuilds conversations from hash-id chains. A request continues the latest earlier request
 * whose full blocks (at least one) its own ids start with and whose prompt is shorter; of several,
 * the one with the most blocks. The last id of a request is normally a partial block, which the
 * next turn's ids do not repeat (its block is completed there), so only full blocks are compared.
 * Requests without hash ids are first turns. Linear in the number of ids (a trie of full blocks).
 */
export function chainConversations(
  requests: readonly TraceRequest[],
  blockTokens: number,
): ChatTurn[] {
  const root: TrieNode = { children: new Map(), request: undefined };
  const turns: ChatTurn[] = [];
  requests.forEach((request, index) => {
    const ids = request.hashIds ?? [];
    let node: TrieNode | undefined = root;
    let parent: number | undefined;
    for (const id of ids) {
      node = node.children.get(id);
      if (node === undefined) break;
      const candidate = node.request;
      if (candidate !== undefined && requests[candidate]!.inputTokens < request.inputTokens)
        parent = candidate;
    }
    const before = parent === undefined ? undefined : turns[parent]!;
    turns.push(
      before === undefined
        ? { conversation: index, turn: 1, parent: undefined }
        : { conversation: before.conversation, turn: before.turn + 1, parent },
    );
    let at = root;
    for (const id of ids.slice(0, fullBlocks(request, blockTokens))) {
      let next = at.children.get(id);
      if (next === undefined) {
        next = { children: new Map(), request: undefined };
        at.children.set(id, next);
      }
      at = next;
    }
    if (at !== root) at.request = index;
  });
  return turns;
}

/** What the simulator (and vLLM's chat template, roughly) reads: the contents, one per line. */
export function promptText(messages: readonly ChatMessage[]): string {
  return messages.map((m) => m.content).join('\n');
}

/** The shortest new user message of a later turn whose trace length leaves it no room. */
const MIN_USER_CHARS = 64;

/**
 * The messages of every trace request. A first turn is its prompt (the same text as a
 * single-message replay), its first block as the system message when it has more than one. A
 * later turn repeats its parent's messages, adds the parent's stand-in answer (its output length)
 * and a user message with the request's own blocks past the parent's, sized so the whole prompt
 * has the request's input length (at least MIN_USER_CHARS: a synthetic trace's next turn can be
 * shorter than its parent plus the answer).
 */
export function traceChatMessages(
  requests: readonly TraceRequest[],
  turns: readonly ChatTurn[],
  prompts: PromptBuilder,
  charsPerToken: number,
): ChatMessage[][] {
  const out: ChatMessage[][] = [];
  const lengths: number[] = [];
  requests.forEach((request, index) => {
    const turn = turns[index]!;
    const chars = Math.max(1, request.inputTokens * charsPerToken);
    if (turn.parent === undefined) {
      const text = prompts.prompt(request, index);
      const cut = prompts.blockChars;
      const messages: ChatMessage[] =
        text.length > cut
          ? [
              { role: 'system', content: text.slice(0, cut) },
              { role: 'user', content: text.slice(cut) },
            ]
          : [{ role: 'user', content: text }];
      out.push(messages);
      lengths.push(promptText(messages).length);
      return;
    }
    const parent = requests[turn.parent]!;
    const answer = prompts.answer(turn.parent, parent.outputTokens * charsPerToken);
    const before = lengths[turn.parent]! + 1 + answer.length + 1;
    const from = fullBlocks(parent, prompts.blockChars / charsPerToken);
    const user = prompts.continuation(
      request,
      index,
      from,
      Math.max(MIN_USER_CHARS, chars - before),
    );
    const messages: ChatMessage[] = [
      ...out[turn.parent]!,
      { role: 'assistant', content: answer },
      { role: 'user', content: user },
    ];
    out.push(messages);
    lengths.push(before + user.length);
  });
  return out;
}

// --------------------------------------------------------------------------------------------
// The synthetic multi-turn workload
// --------------------------------------------------------------------------------------------

export interface ConversationSpec {
  conversations: number;
  turns: number;
  /** The system prompt every conversation shares. */
  systemChars: number;
  /** Mean user message length (each is drawn from ±25 % of it). */
  userChars: number;
  /** Mean answer length in tokens (each is drawn from ±50 % of it). */
  answerTokens: number;
  charsPerToken: number;
}

export interface Conversation {
  index: number;
  system: string;
  users: string[];
  answers: string[];
  /** max_tokens of each turn: its answer's length in tokens. */
  answerTokens: number[];
}

const around = (rng: () => number, mean: number, spread: number): number =>
  Math.max(1, Math.round(mean * (1 - spread + 2 * spread * rng())));

/** The conversations of the `conversations` scenario, the same for every policy of one seed. */
export function conversationWorkload(spec: ConversationSpec, seed: number): Conversation[] {
  const rng = mulberry32((seed ^ 0x5bd1e995) >>> 0);
  const text = (chars: number): string => pseudoText(Math.floor(rng() * 2 ** 32), chars);
  const system = text(spec.systemChars);
  return Array.from({ length: spec.conversations }, (_, index) => {
    const answerTokens = Array.from({ length: spec.turns }, () =>
      around(rng, spec.answerTokens, 0.5),
    );
    return {
      index,
      system,
      users: Array.from({ length: spec.turns }, () => text(around(rng, spec.userChars, 0.25))),
      answers: answerTokens.map((t) => text(t * spec.charsPerToken)),
      answerTokens,
    };
  });
}

/** The messages of turn `turn` (0-based): the system prompt, then every earlier exchange. */
export function turnMessages(conversation: Conversation, turn: number): ChatMessage[] {
  const messages: ChatMessage[] = [{ role: 'system', content: conversation.system }];
  for (let t = 0; t < turn; t++)
    messages.push(
      { role: 'user', content: conversation.users[t]! },
      { role: 'assistant', content: conversation.answers[t]! },
    );
  messages.push({ role: 'user', content: conversation.users[turn]! });
  return messages;
}

// --------------------------------------------------------------------------------------------
// How well a router keeps conversations home
// --------------------------------------------------------------------------------------------

/** One request of a conversation as the client saw it. */
export interface TurnRecord {
  conversation: number;
  /** 1 for the first turn. */
  turn: number;
  /** The backend that answered (undefined when the response did not say). */
  backend: string | undefined;
  ok: boolean;
}

export interface ConversationAffinity {
  /** Conversations whose first turn succeeded and named its backend (their home). */
  conversations: number;
  /** Later turns of those that succeeded and named their backend. */
  laterTurns: number;
  /** Share of those later turns answered by their conversation's home. */
  laterTurnsHome: number;
  /** The largest share of conversations any one backend is home to. */
  maxHomeShare: number;
  /** Requests whose backend is unknown (left out of both figures). */
  unknownBackend: number;
}

/**
 * The share of later turns that reached their first turn's backend (the KV cache their earlier
 * turns built) and how unevenly conversations are spread, or undefined without later turns.
 */
export function conversationAffinity(
  records: readonly TurnRecord[],
): ConversationAffinity | undefined {
  const home = new Map<number, string>();
  let unknownBackend = 0;
  for (const r of records) {
    if (r.backend === undefined) unknownBackend++;
    else if (r.turn === 1 && r.ok) home.set(r.conversation, r.backend);
  }
  let laterTurns = 0;
  let atHome = 0;
  for (const r of records) {
    const h = home.get(r.conversation);
    if (r.turn === 1 || !r.ok || r.backend === undefined || h === undefined) continue;
    laterTurns++;
    if (r.backend === h) atHome++;
  }
  if (laterTurns === 0) return undefined;
  const perBackend = new Map<string, number>();
  for (const b of home.values()) perBackend.set(b, (perBackend.get(b) ?? 0) + 1);
  return {
    conversations: home.size,
    laterTurns,
    laterTurnsHome: atHome / laterTurns,
    maxHomeShare: Math.max(...perBackend.values()) / home.size,
    unknownBackend,
  };
}
