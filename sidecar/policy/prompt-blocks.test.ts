import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  DEFAULT_BLOCK_CHARS,
  DEFAULT_MAX_BLOCKS,
  promptBlocks,
  type BlockOptions,
  type PromptBlocks,
} from './prompt-blocks.ts';

const OPTIONS: BlockOptions = { blockChars: 16, maxBlocks: 64, homeChars: 4096 };
const blocks = (body: unknown, options: BlockOptions = OPTIONS, minChars = 0): PromptBlocks => {
  const result = promptBlocks(body, options, minChars);
  assert.ok(result !== undefined, 'expected blocks');
  return result;
};
const SYSTEM = 'You are a meticulous assistant for the switchyard project.';
const chat = (...messages: unknown[]) => ({ messages });

/** How many leading hashes two prompts share. */
function shared(a: PromptBlocks, b: PromptBlocks): number {
  let n = 0;
  while (n < a.hashes.length && a.hashes[n] === b.hashes[n]) n += 1;
  return n;
}

describe('promptBlocks', () => {
  test('prompts that differ in one character, at any position, get different hashes', () => {
    const base = 'x'.repeat(200);
    const seen = new Set<number>();
    for (let at = 0; at < base.length; at++) {
      for (const c of ['a', 'b', '\u4e2d', '\ud83d\ude00'.charAt(0)]) {
        const text = base.slice(0, at) + c + base.slice(at + 1);
        const hashes = promptBlocks({ prompt: text }, { ...OPTIONS, blockChars: 256 }, 0)!.hashes;
        seen.add(hashes.at(-1)!);
      }
    }
    assert.equal(seen.size, 200 * 4);
  });

  test('keeps the defaults named', () => {
    assert.equal(DEFAULT_BLOCK_CHARS, 256);
    assert.equal(DEFAULT_MAX_BLOCKS, 256);
  });

  test('every block of a turn reappears in the next turn, the partial last one included', () => {
    const turn1 = blocks(
      chat(
        { role: 'system', content: SYSTEM },
        { role: 'user', content: 'first question, a bit long' },
      ),
    );
    const turn2 = blocks(
      chat(
        { role: 'system', content: SYSTEM },
        { role: 'user', content: 'first question, a bit long' },
        { role: 'assistant', content: 'an answer' },
        { role: 'user', content: 'second question' },
      ),
    );
    assert.equal(shared(turn1, turn2), turn1.hashes.length);
    assert.ok(turn2.hashes.length > turn1.hashes.length);
  });

  test('cuts blocks every blockChars characters and at every message end', () => {
    const result = blocks(
      chat({ role: 'user', content: 'x'.repeat(40) }, { role: 'user', content: 'y' }),
    );
    // "user" + sep + 40 × x + sep = 46 characters: 16, 32, 46; then "user" + sep + "y" + sep = 7.
    assert.deepEqual(result.ends, [16, 32, 46, 53]);
  });

  test('prompts that share a prefix share its full blocks, and diverge after it', () => {
    const a = blocks({ prompt: 'p'.repeat(100) + 'A'.repeat(50) });
    const b = blocks({ prompt: 'p'.repeat(100) + 'B'.repeat(50) });
    assert.equal(shared(a, b), Math.floor(100 / OPTIONS.blockChars));
  });

  test('distinguishes roles, names and tool calls with the same content', () => {
    const base = { role: 'user', content: 'c'.repeat(40) };
    const asSystem = blocks(chat({ ...base, role: 'system' }));
    const named = blocks(chat({ ...base, name: 'alice' }));
    const called = blocks(
      chat({ ...base, tool_calls: [{ function: { name: 'f', arguments: '{"a":1}' } }] }),
    );
    const tool = blocks(chat({ ...base, tool_call_id: 'call_1' }));
    const plain = blocks(chat(base));
    for (const other of [asSystem, named, called, tool]) {
      assert.notDeepEqual(other.hashes, plain.hashes);
    }
  });

  test('reads text parts; other parts count by kind and data, not by their bytes in full', () => {
    const withImage = (url: string) =>
      blocks(
        chat({
          role: 'user',
          content: [
            { type: 'text', text: SYSTEM },
            { type: 'image_url', image_url: { url } },
          ],
        }),
      );
    const big = 'data:image/png;base64,' + 'A'.repeat(100_000);
    assert.notDeepEqual(withImage(big + 'x').hashes, withImage(big + 'y').hashes);
    assert.ok(withImage(big).ends.at(-1)! < 1000, 'only the tail of the data is hashed');
    const audio = blocks(
      chat({ role: 'user', content: [{ type: 'input_audio', input_audio: { data: 'zzz' } }] }),
    );
    assert.ok(audio.hashes.length > 0);
    // An unknown part without data still counts by its kind; a part that is no object is skipped.
    blocks(
      chat({ role: 'user', content: [{ type: 'mystery' }, 7, { type: 'image', source: 's' }] }),
    );
  });

  test('reads null content (an assistant turn with only tool calls)', () => {
    const result = blocks(
      chat(
        { role: 'system', content: SYSTEM },
        { role: 'assistant', content: null, tool_calls: [{ function: { name: 'f' } }, 'bad', {}] },
      ),
    );
    assert.ok(result.hashes.length >= 2);
  });

  test('reads Anthropic Messages: the top-level system prompt comes first', () => {
    const anthropic = blocks({
      system: SYSTEM,
      messages: [{ role: 'user', content: [{ type: 'text', text: 'hello there' }] }],
    });
    const openai = blocks(
      chat(
        { role: 'system', content: SYSTEM },
        { role: 'user', content: [{ type: 'text', text: 'hello there' }] },
      ),
    );
    assert.deepEqual(anthropic.hashes, openai.hashes);
    const blocksSystem = blocks({
      system: [{ type: 'text', text: SYSTEM }],
      messages: [{ role: 'user', content: 'q' }],
    });
    assert.ok(blocksSystem.hashes.length > 0);
  });

  test("reads Anthropic tool blocks: a tool_use's name and input, a tool_result's content", () => {
    const turn = (input: unknown, result: unknown) =>
      blocks({
        system: SYSTEM,
        messages: [
          { role: 'user', content: 'what is the weather?' },
          { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'weather', input }] },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: result }] },
        ],
      });
    const base = turn({ city: 'Paris' }, 'sunny');
    assert.notDeepEqual(turn({ city: 'Rome' }, 'sunny').hashes, base.hashes);
    assert.notDeepEqual(turn({ city: 'Paris' }, 'rain').hashes, base.hashes);
    assert.notDeepEqual(
      turn({ city: 'Paris' }, [{ type: 'text', text: 'rain' }]).hashes,
      base.hashes,
    );
    assert.deepEqual(turn({ city: 'Paris' }, 'sunny').hashes, base.hashes);
    // A tool_use without a name or input, and a tool_result without an id, still hash.
    const bare = blocks({
      messages: [{ role: 'user', content: [{ type: 'tool_use' }, { type: 'tool_result' }] }],
    });
    assert.ok(bare.hashes.length > 0);
  });

  test('a Responses request continuing a stored response hashes only what it sends', () => {
    const next = blocks({ previous_response_id: 'resp_1', input: 'and then?' });
    assert.deepEqual(next.hashes, blocks({ input: 'and then?' }).hashes);
  });

  test('reads Responses: instructions, then a string input or input items', () => {
    const asString = blocks({ instructions: SYSTEM, input: 'what is a pod?' });
    const asChat = blocks(
      chat({ role: 'system', content: SYSTEM }, { role: 'user', content: 'what is a pod?' }),
    );
    assert.deepEqual(asString.hashes, asChat.hashes);
    const items = blocks({
      input: [
        { role: 'user', content: [{ type: 'input_text', text: 'what is a pod?' }] },
        { type: 'function_call', arguments: '{"x":1}' },
        { type: 'function_call_output', output: 'result' },
      ],
    });
    assert.ok(items.hashes.length >= 3);
    assert.equal(promptBlocks({ input: [7] }, OPTIONS, 0), undefined);
    assert.equal(promptBlocks({ instructions: 5 }, OPTIONS, 0), undefined);
  });

  test('reads completions: a string, or an array of strings', () => {
    assert.ok(blocks({ prompt: 'abc' }).hashes.length === 1);
    assert.ok(blocks({ prompt: ['ab', 'cd'] }).hashes.length === 2);
    assert.equal(promptBlocks({ prompt: [1, 2, 3] }, OPTIONS, 0), undefined);
    assert.equal(promptBlocks({ prompt: 12 }, OPTIONS, 0), undefined);
  });

  test('gives nothing below minChars or for bodies without a prompt', () => {
    assert.equal(promptBlocks({ prompt: 'x'.repeat(10) }, OPTIONS, 64), undefined);
    assert.notEqual(promptBlocks({ prompt: 'x'.repeat(70) }, OPTIONS, 64), undefined);
    for (const body of [
      null,
      undefined,
      'text',
      42,
      [1],
      {},
      { messages: [] },
      { messages: [7] },
    ]) {
      assert.equal(promptBlocks(body, OPTIONS, 0), undefined, JSON.stringify(body));
    }
  });

  test('gives nothing when reading the body throws', () => {
    const body = {
      get messages(): unknown {
        throw new Error('boom');
      },
    };
    assert.equal(promptBlocks(body, OPTIONS, 0), undefined);
  });

  test('stops at maxBlocks, and at maxBlocks × blockChars characters', () => {
    const options = { blockChars: 10, maxBlocks: 5, homeChars: 4096 };
    const long = blocks({ prompt: 'z'.repeat(1000) }, options);
    assert.equal(long.hashes.length, 5);
    assert.equal(long.ends.at(-1), 50);
    const manyMessages = blocks(
      chat(...Array.from({ length: 20 }, () => ({ role: 'user', content: 'm' }))),
      options,
    );
    assert.equal(manyMessages.hashes.length, 5);
    const manyParts = blocks(
      chat({
        role: 'user',
        content: Array.from({ length: 30 }, () => ({ type: 'text', text: 'abcdefghi' })),
      }),
      options,
    );
    assert.equal(manyParts.hashes.length, 5);
    const manyItems = blocks(
      { input: Array.from({ length: 20 }, () => ({ role: 'user', content: 'm' })) },
      options,
    );
    assert.equal(manyItems.hashes.length, 5);
  });

  test('tells how much of the prompt comes before its last message', () => {
    const single = blocks({ prompt: 'abcdefghijklmnopqrstuvwxyz' });
    assert.equal(single.historyChars, 0, 'one message: no history');
    assert.equal(single.cut, undefined);
    const turns = blocks(chat({ role: 'user', content: 'abc' }, { role: 'user', content: 'de' }));
    // "user" + separator + "abc" + separator: the first message, as hashed.
    assert.equal(turns.historyChars, 9);
    assert.equal(turns.cut, undefined, 'all of it was hashed: the ends tell the rest');
  });

  test('past the hashing cap, counts the earlier messages by their lengths', () => {
    const options = { blockChars: 10, maxBlocks: 5, homeChars: 4096 };
    const history = chat(
      { role: 'system', content: 's'.repeat(300) },
      { role: 'user', content: [{ type: 'text', text: 'u'.repeat(200) }, { type: 'image_url' }] },
      { role: 'assistant', content: null, tool_calls: [] },
      { role: 'user', content: 'q'.repeat(500) },
    );
    const cut = blocks(history, options);
    assert.equal(cut.cut, true);
    assert.equal(cut.historyChars, 500, 'system and first user turn');
    const anthropic = { system: 'x'.repeat(100), messages: [{ role: 'user', content: 'y' }] };
    assert.equal(blocks(anthropic, options).historyChars, 100);
    const responses = {
      instructions: 'i'.repeat(60),
      input: [
        { type: 'function_call_output', output: 'o'.repeat(40) },
        { role: 'user', content: 'z' },
      ],
    };
    assert.equal(blocks(responses, options).historyChars, 100);
    assert.equal(blocks({ prompt: ['p'.repeat(70), 'q'] }, options).historyChars, 70);
    const one = blocks({ prompt: 'z'.repeat(1000) }, options);
    assert.deepEqual([one.cut, one.historyChars], [true, 0], 'one long message: no history');
  });

  test('the home depth ends with the first user message, capped at homeChars', () => {
    const body = chat(
      { role: 'system', content: 's'.repeat(40) },
      { role: 'user', content: 'u'.repeat(20) },
      { role: 'assistant', content: 'a'.repeat(20) },
    );
    const result = blocks(body);
    // system: 7 + 40 + 1 = 48 chars → 16, 32, 48; user: 4 + 1 + 20 + 1 = 26 → 64, 74.
    assert.equal(result.homeDepth, 5);
    assert.equal(blocks(body, { ...OPTIONS, homeChars: 40 }).homeDepth, 2);
    assert.equal(blocks(body, { ...OPTIONS, homeChars: 5 }).homeDepth, 1);
    // A completions prompt is one user message: its first homeChars characters (16, 32, 48).
    assert.equal(blocks({ prompt: 'q'.repeat(100) }, { ...OPTIONS, homeChars: 50 }).homeDepth, 3);
    // No user message at all: the first homeChars characters.
    const assistantOnly = chat({ role: 'assistant', content: 'a'.repeat(100) });
    assert.equal(blocks(assistantOnly, { ...OPTIONS, homeChars: 50 }).homeDepth, 3);
  });

  test('property: hashes and ends line up, ends increase, the home depth is within them', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (body) => {
        const result = promptBlocks(body, OPTIONS, 0);
        if (result === undefined) return;
        assert.equal(result.hashes.length, result.ends.length);
        for (let i = 1; i < result.ends.length; i++) {
          assert.ok(result.ends[i]! > result.ends[i - 1]!);
        }
        assert.ok(result.homeDepth >= 1 && result.homeDepth <= result.hashes.length);
        for (const h of result.hashes) assert.ok(Number.isSafeInteger(h) && h >= 0);
      }),
    );
  });
});
