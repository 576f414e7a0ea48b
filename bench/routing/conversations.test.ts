import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  chainConversations,
  conversationAffinity,
  conversationWorkload,
  promptText,
  traceChatMessages,
  turnMessages,
  type TurnRecord,
} from './conversations.ts';
import { PromptBuilder } from './prompt.ts';
import type { TraceRequest } from './trace.ts';

/** Blocks of 4 tokens keep the texts short: 16 characters a block at 4 characters a token. */
const BLOCK = 4;
const req = (inputTokens: number, hashIds: number[], outputTokens = 2, atMs = 0): TraceRequest => ({
  atMs,
  inputTokens,
  outputTokens,
  hashIds,
});

describe('chainConversations', () => {
  it('makes a request that starts with an earlier, shorter one’s full blocks its next turn', () => {
    const turns = chainConversations(
      [
        req(10, [1, 2, 3]), // blocks 1, 2 full; 3 partial
        req(18, [1, 2, 7, 8, 9]), // continues 0; blocks 1 2 7 8 full, 9 partial
        req(30, [1, 2, 7, 8, 10, 11, 12, 13]), // continues 1
        req(6, [5, 6]), // a new conversation
      ],
      BLOCK,
    );
    assert.deepEqual(turns, [
      { conversation: 0, turn: 1, parent: undefined },
      { conversation: 0, turn: 2, parent: 0 },
      { conversation: 0, turn: 3, parent: 1 },
      { conversation: 3, turn: 1, parent: undefined },
    ]);
  });

  it('does not chain a request to one that shares only a partial block, or is not shorter', () => {
    const turns = chainConversations(
      [
        req(3, [1]), // no full block: nothing can continue it
        req(20, [1, 2, 3, 4, 5]),
        req(20, [1, 2, 3, 4, 6]), // same length as 1: a sibling, not its next turn
        req(8, [9, 10]),
        req(7, [9, 10, 11]), // shorter than 3 although it starts with its blocks
      ],
      BLOCK,
    );
    assert.deepEqual(
      turns.map((t) => t.parent),
      [undefined, undefined, undefined, undefined, undefined],
    );
  });

  it('picks the earlier turn with the most blocks, and the latest of equals', () => {
    const turns = chainConversations(
      [req(8, [1, 2]), req(8, [1, 2]), req(12, [1, 2, 3]), req(40, [1, 2, 3, 4, 5, 6, 7])],
      BLOCK,
    );
    assert.equal(turns[2]!.parent, 1);
    assert.equal(turns[3]!.parent, 2);
    assert.equal(turns[3]!.turn, 3);
    assert.equal(turns[3]!.conversation, 1);
  });

  it('leaves requests without hash ids as first turns', () => {
    assert.deepEqual(chainConversations([req(10, []), { ...req(10, []), hashIds: undefined }], 4), [
      { conversation: 0, turn: 1, parent: undefined },
      { conversation: 1, turn: 1, parent: undefined },
    ]);
  });
});

describe('traceChatMessages', () => {
  const requests = [
    req(40, [1, 2, 3]),
    req(100, [1, 2, 7, 8, 9, 10, 11], 5),
    req(130, [1, 2, 7, 8, 9, 10, 12, 13, 14]),
  ];
  const prompts = new PromptBuilder({ blockTokens: 16, charsPerToken: 4, seed: 3 });
  const turns = chainConversations(requests, 16);
  const messages = traceChatMessages(requests, turns, prompts, 4);

  it('sends a first turn as its prompt, the first block as the system message', () => {
    assert.deepEqual(
      messages[0]!.map((m) => m.role),
      ['system', 'user'],
    );
    assert.equal(messages[0]![0]!.content, prompts.block(1));
    assert.equal(messages[0]!.map((m) => m.content).join(''), prompts.prompt(requests[0]!, 0));
  });

  it('repeats the earlier turn and its answer verbatim in the next turn', () => {
    assert.equal(turns[1]!.parent, 0);
    assert.equal(turns[2]!.parent, 1);
    const [first, second, third] = messages as [
      (typeof messages)[0],
      (typeof messages)[0],
      (typeof messages)[0],
    ];
    assert.deepEqual(second.slice(0, first.length), first);
    assert.deepEqual(second[first.length], {
      role: 'assistant',
      content: prompts.answer(0, requests[0]!.outputTokens * 4),
    });
    assert.equal(second[first.length + 1]!.role, 'user');
    assert.deepEqual(third.slice(0, second.length), second);
    assert.deepEqual(
      third.map((m) => m.role),
      ['system', 'user', 'assistant', 'user', 'assistant', 'user'],
    );
    // What the simulator caches: the next turn's prompt text starts with the whole earlier one.
    assert.ok(promptText(third).startsWith(promptText(second) + '\n'));
  });

  it('sizes a later turn to its input length, its own blocks first', () => {
    assert.equal(promptText(messages[1]!).length, 100 * 4);
    // The parent's full blocks are 1 and 2: the new user text starts with block 7's text.
    assert.ok(messages[1]!.at(-1)!.content.startsWith(prompts.block(7).slice(0, 16)));
  });
});

describe('conversationWorkload', () => {
  const spec = {
    conversations: 5,
    turns: 4,
    systemChars: 270,
    userChars: 200,
    answerTokens: 60,
    charsPerToken: 4,
  };

  it('is the same for the same seed and shares one system prompt', () => {
    const a = conversationWorkload(spec, 7);
    assert.deepEqual(conversationWorkload(spec, 7), a);
    assert.notDeepEqual(conversationWorkload(spec, 8), a);
    assert.equal(a.length, 5);
    assert.ok(a.every((c) => c.system === a[0]!.system && c.system.length === 270));
    for (const c of a) {
      assert.equal(c.users.length, 4);
      assert.ok(c.users.every((u) => u.length >= 150 && u.length <= 250));
      c.answers.forEach((answer, t) => assert.equal(answer.length, c.answerTokens[t]! * 4));
    }
  });

  it('builds turn t from the system prompt and every earlier exchange', () => {
    const c = conversationWorkload(spec, 1)[2]!;
    assert.deepEqual(turnMessages(c, 0), [
      { role: 'system', content: c.system },
      { role: 'user', content: c.users[0] },
    ]);
    const third = turnMessages(c, 2);
    assert.deepEqual(
      third.map((m) => m.role),
      ['system', 'user', 'assistant', 'user', 'assistant', 'user'],
    );
    assert.equal(third[4]!.content, c.answers[1]);
    assert.deepEqual(third.slice(0, 4), turnMessages(c, 1));
  });
});

describe('conversationAffinity', () => {
  const r = (
    conversation: number,
    turn: number,
    backend: string | undefined,
    ok = true,
  ): TurnRecord => ({
    conversation,
    turn,
    backend,
    ok,
  });

  it('counts later turns on their first turn’s backend and the busiest home', () => {
    const a = conversationAffinity([
      r(0, 1, 'b0'),
      r(0, 2, 'b0'),
      r(0, 3, 'b1'),
      r(1, 1, 'b0'),
      r(1, 2, 'b0'),
      r(2, 1, 'b2'),
      r(2, 2, 'b2'),
      r(2, 3, undefined),
      r(2, 4, 'b1', false),
    ]);
    assert.deepEqual(a, {
      conversations: 3,
      laterTurns: 4,
      laterTurnsHome: 3 / 4,
      maxHomeShare: 2 / 3,
      unknownBackend: 1,
    });
  });

  it('leaves out conversations whose first turn failed, and is undefined without later turns', () => {
    assert.equal(conversationAffinity([r(0, 1, 'b0'), r(1, 1, 'b1')]), undefined);
    assert.equal(conversationAffinity([r(0, 1, 'b0', false), r(0, 2, 'b0')]), undefined);
  });
});
