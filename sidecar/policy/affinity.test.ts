import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  AFFINITY_MAX_SLOWDOWN,
  MIN_PREFIX_CHARS_FOR_AFFINITY,
  affinityKeyFor,
  rendezvousPick,
  stablePromptText,
  type AffinityRequest,
} from './affinity.ts';
import { testPolicy } from './testing.ts';
import type { AffinityPolicy } from './types.ts';

const policy = (overrides: Partial<AffinityPolicy> = {}): AffinityPolicy =>
  testPolicy({ affinity: { key: 'Prefix', ...overrides } }).affinity;

const SYSTEM = 'You are a meticulous assistant for the switchyard project. Answer briefly.';
const LONG = 'x'.repeat(200);

const chat = (...messages: unknown[]): AffinityRequest => ({ headers: {}, body: { messages } });
const keyOf = (request: AffinityRequest, p: AffinityPolicy = policy()) =>
  affinityKeyFor(request, p);

describe('constants', () => {
  test('keeps the affinity defaults named', () => {
    assert.equal(AFFINITY_MAX_SLOWDOWN, 2.5);
    assert.equal(MIN_PREFIX_CHARS_FOR_AFFINITY, 64);
  });
});

describe('affinityKeyFor with key None', () => {
  test('returns undefined whatever the request carries', () => {
    const request = { headers: { 'x-session-id': 's1' }, body: { prompt: LONG } };
    assert.equal(affinityKeyFor(request, policy({ key: 'None' })), undefined);
  });
});

describe('affinityKeyFor with key Header', () => {
  const header = policy({ key: 'Header' });

  test("returns the header's value", () => {
    assert.equal(keyOf({ headers: { 'x-session-id': 'abc' }, body: null }, header), 'abc');
  });

  test('returns the first value of a repeated header', () => {
    assert.equal(keyOf({ headers: { 'x-session-id': ['one', 'two'] }, body: null }, header), 'one');
  });

  test('returns undefined for an absent or empty header', () => {
    assert.equal(keyOf({ headers: {}, body: null }, header), undefined);
    assert.equal(keyOf({ headers: { 'x-session-id': '' }, body: null }, header), undefined);
    assert.equal(keyOf({ headers: { 'x-session-id': [] }, body: null }, header), undefined);
    assert.equal(keyOf({ headers: { 'x-session-id': undefined }, body: null }, header), undefined);
  });

  test('matches a header configured in another case against the lower-case request headers', () => {
    const mixed = policy({ key: 'Header', header: 'X-Session-Id' });
    assert.equal(keyOf({ headers: { 'x-session-id': 'abc' }, body: null }, mixed), 'abc');
  });

  test('returns undefined for malformed headers instead of throwing', () => {
    const bad = { headers: null, body: null } as unknown as AffinityRequest;
    assert.equal(keyOf(bad, header), undefined);
    const noName = policy({ key: 'Header', header: undefined as unknown as string });
    assert.equal(keyOf({ headers: { a: 'b' }, body: null }, noName), undefined);
  });
});

describe('affinityKeyFor with key Prefix', () => {
  test('ignores the last message: the next turn of a conversation gets the same key', () => {
    const turn1 = chat({ role: 'system', content: SYSTEM }, { role: 'user', content: 'first' });
    const turn2 = chat({ role: 'system', content: SYSTEM }, { role: 'user', content: 'second' });
    assert.notEqual(keyOf(turn1), undefined);
    assert.equal(keyOf(turn1), keyOf(turn2));
  });

  test('gives equal keys for equal prefixes and different keys for different ones', () => {
    const a = chat({ role: 'system', content: SYSTEM + ' A' }, { role: 'user', content: 'q' });
    const a2 = chat({ role: 'system', content: SYSTEM + ' A' }, { role: 'user', content: 'q2' });
    const b = chat({ role: 'system', content: SYSTEM + ' B' }, { role: 'user', content: 'q' });
    assert.equal(keyOf(a), keyOf(a2));
    assert.notEqual(keyOf(a), keyOf(b));
  });

  test('distinguishes roles with the same content', () => {
    const asSystem = chat({ role: 'system', content: LONG }, { role: 'user', content: 'q' });
    const asUser = chat({ role: 'user', content: LONG }, { role: 'user', content: 'q' });
    assert.notEqual(keyOf(asSystem), keyOf(asUser));
  });

  test('uses the only message of a one-message chat', () => {
    const one = chat({ role: 'user', content: LONG });
    assert.equal(stablePromptText(one.body), `user\u001f${LONG}\u001e`);
    assert.notEqual(keyOf(one), undefined);
  });

  test('hashes only the first prefixChars characters', () => {
    const p = policy({ prefixChars: 100 });
    const a = { headers: {}, body: { prompt: LONG + ' tail one' } };
    const b = { headers: {}, body: { prompt: LONG + ' tail two' } };
    assert.equal(keyOf(a, p), keyOf(b, p));
    assert.notEqual(
      keyOf(a, policy({ prefixChars: Infinity })),
      keyOf(b, policy({ prefixChars: Infinity })),
    );
  });

  test('returns a 16-digit hex hash that contains no prompt text', () => {
    const key = keyOf({ headers: {}, body: { prompt: 'secret '.repeat(20) } });
    assert.match(key!, /^[0-9a-f]{16}$/);
  });

  test('returns undefined for prompts shorter than MIN_PREFIX_CHARS_FOR_AFFINITY', () => {
    assert.equal(keyOf({ headers: {}, body: { prompt: 'x'.repeat(63) } }), undefined);
    assert.notEqual(keyOf({ headers: {}, body: { prompt: 'x'.repeat(64) } }), undefined);
    assert.equal(keyOf(chat({ role: 'user', content: 'hi' })), undefined);
  });

  test('returns undefined when prefixChars is below one or NaN', () => {
    const body = { prompt: LONG };
    for (const prefixChars of [0, 0.5, -1, Number.NaN]) {
      assert.equal(keyOf({ headers: {}, body }, policy({ prefixChars })), undefined);
    }
    // Below the minimum, no prefix can qualify: the schema should reject such values.
    assert.equal(keyOf({ headers: {}, body }, policy({ prefixChars: 32 })), undefined);
  });

  test('takes the text parts of array content and skips other parts', () => {
    const parts = chat(
      {
        role: 'user',
        content: [
          { type: 'text', text: SYSTEM },
          { type: 'image_url', image_url: { url: 'data:...' } },
          { type: 'text', text: 'and more' },
        ],
      },
      { role: 'user', content: 'new turn' },
    );
    assert.equal(stablePromptText(parts.body), `user\u001f${SYSTEM}\nand more\u001e`);
    const plain = chat(
      { role: 'user', content: `${SYSTEM}\nand more` },
      { role: 'user', content: 'x' },
    );
    assert.equal(keyOf(parts), keyOf(plain));
  });

  test('counts null content (an assistant turn with tool calls) as empty', () => {
    const body = chat(
      { role: 'system', content: SYSTEM },
      { role: 'assistant', content: null, tool_calls: [] },
      { role: 'user', content: 'x' },
    ).body;
    assert.equal(stablePromptText(body), `system\u001f${SYSTEM}\u001eassistant\u001f\u001e`);
  });

  test('uses a completions prompt, string or array of strings', () => {
    assert.equal(stablePromptText({ prompt: 'abc' }), 'abc');
    assert.equal(stablePromptText({ prompt: ['ab', 'cd'] }), 'ab\u001ecd');
    assert.notEqual(keyOf({ headers: {}, body: { prompt: [LONG, 'b'] } }), undefined);
  });

  test('returns undefined for token-id prompts, which have no characters', () => {
    assert.equal(
      keyOf({ headers: {}, body: { prompt: Array.from({ length: 100 }, (_, i) => i) } }),
      undefined,
    );
  });

  test('returns undefined for malformed bodies instead of throwing', () => {
    const malformed: unknown[] = [
      null,
      undefined,
      'a string body',
      42,
      [LONG],
      {},
      { messages: 'not an array' },
      { messages: [] },
      { messages: [42, { role: 'user', content: 'x' }] },
      { messages: [{ content: LONG }, { role: 'user', content: 'x' }] },
      {
        messages: [
          { role: 'user', content: 7 },
          { role: 'user', content: 'x' },
        ],
      },
      {
        messages: [
          { role: 'user', content: ['bare string part'] },
          { role: 'user', content: 'x' },
        ],
      },
      {
        messages: [
          { role: 'user', content: [{ type: 'text', text: 5 }] },
          { role: 'user', content: 'x' },
        ],
      },
      {
        messages: [
          { role: 'user', content: { text: LONG } },
          { role: 'user', content: 'x' },
        ],
      },
      { prompt: 12 },
      { prompt: [LONG, 3] },
    ];
    for (const body of malformed) {
      assert.equal(keyOf({ headers: {}, body }), undefined, JSON.stringify(body));
    }
  });

  test('returns undefined when reading the body throws', () => {
    const body = {
      get messages(): unknown {
        throw new Error('boom');
      },
    };
    assert.equal(keyOf({ headers: {}, body }), undefined);
  });

  test('stops reading messages once the prefix is long enough', () => {
    const body = {
      messages: [
        { role: 'system', content: LONG },
        'malformed later',
        { role: 'user', content: 'x' },
      ],
    };
    assert.notEqual(keyOf({ headers: {}, body }, policy({ prefixChars: 100 })), undefined);
    assert.equal(stablePromptText(body), undefined); // without a limit the whole prefix is read
  });

  test('property: never throws and returns undefined or a 16-digit hex key for any JSON body', () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.integer({ min: 0, max: 5000 }), (body, prefixChars) => {
        const key = affinityKeyFor({ headers: {}, body }, policy({ prefixChars }));
        assert.ok(key === undefined || /^[0-9a-f]{16}$/.test(key));
      }),
    );
  });
});

describe('rendezvousPick', () => {
  const ids = (n: number, prefix = 'pool/10.0.0.') =>
    Array.from({ length: n }, (_, i) => ({ id: `${prefix}${i + 1}:8000` }));

  test('returns undefined for no candidates', () => {
    assert.equal(rendezvousPick('k', []), undefined);
  });

  test('is deterministic and independent of the candidate order', () => {
    fc.assert(
      fc.property(fc.string(), fc.shuffledSubarray(ids(8), { minLength: 1 }), (key, subset) => {
        const reversed = [...subset].reverse();
        assert.equal(rendezvousPick(key, subset)!.id, rendezvousPick(key, reversed)!.id);
      }),
    );
  });

  test('resolves an exact weight tie (a duplicated id) to the first candidate', () => {
    const first = { id: 'same' };
    const second = { id: 'same' };
    assert.equal(rendezvousPick('k', [first, second]), first);
  });

  test('moves only the keys of a removed endpoint', () => {
    const all = ids(6);
    const without = all.filter((c) => c.id !== all[2]!.id);
    for (let k = 0; k < 2_000; k++) {
      const key = `key-${k}`;
      const before = rendezvousPick(key, all)!;
      const after = rendezvousPick(key, without)!;
      if (before.id !== all[2]!.id) assert.equal(after.id, before.id);
    }
  });

  test('moves keys only to a newly added endpoint, about 1/n of them', () => {
    const old = ids(5);
    const grown = [...old, { id: 'pool/10.0.0.99:8000' }];
    let moved = 0;
    const keys = 20_000;
    for (let k = 0; k < keys; k++) {
      const before = rendezvousPick(`key-${k}`, old)!;
      const after = rendezvousPick(`key-${k}`, grown)!;
      if (after.id !== before.id) {
        assert.equal(after.id, 'pool/10.0.0.99:8000');
        moved += 1;
      }
    }
    assert.ok(Math.abs(moved / keys - 1 / 6) < 0.015, `moved share ${moved / keys}`);
  });

  test('spreads keys evenly over endpoints with near-identical ids', () => {
    const candidates = ids(5);
    const counts = new Map<string, number>();
    const keys = 50_000;
    for (let k = 0; k < keys; k++) {
      const id = rendezvousPick(k.toString(16).padStart(16, '0'), candidates)!.id;
      counts.set(id, (counts.get(id) ?? 0) + 1);
    }
    for (const [id, count] of counts) {
      assert.ok(Math.abs(count / keys - 0.2) < 0.01, `${id} got ${count / keys}`);
    }
  });
});
