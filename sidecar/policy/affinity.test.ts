import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  AFFINITY_MAX_SLOWDOWN,
  MIN_PREFIX_CHARS_FOR_AFFINITY,
  affinityFor,
  affinityKeyFor,
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

describe('affinityFor with key None', () => {
  test('returns nothing whatever the request carries', () => {
    const request = { headers: { 'x-session-id': 's1' }, body: { prompt: LONG } };
    assert.deepEqual(affinityFor(request, policy({ key: 'None' })), {});
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

describe('affinityFor with key Header', () => {
  test("carries the header's value and no prompt", () => {
    const request = { headers: { 'x-session-id': 'abc' }, body: { prompt: LONG } };
    assert.deepEqual(affinityFor(request, policy({ key: 'Header' })), { affinityKey: 'abc' });
  });

  test('a Prefix policy never reads the header', () => {
    const request = { headers: { 'x-session-id': 'abc' }, body: null };
    assert.equal(affinityKeyFor(request, policy()), undefined);
  });
});

describe('affinityFor with key Prefix', () => {
  const homeHash = (request: AffinityRequest, p: AffinityPolicy = policy()) => {
    const prompt = affinityFor(request, p).prompt;
    assert.ok(prompt !== undefined);
    return prompt.hashes[prompt.homeDepth - 1];
  };

  test('every turn of a conversation gets the home key of its first turn', () => {
    const first = [
      { role: 'system', content: SYSTEM },
      { role: 'user', content: 'What is a sidecar? ' + LONG },
    ];
    const turn1 = chat(...first);
    const turn2 = chat(
      ...first,
      { role: 'assistant', content: 'A process beside the app.' },
      { role: 'user', content: 'And a controller?' },
    );
    const turn3 = chat(
      ...(turn2.body as { messages: unknown[] }).messages,
      { role: 'assistant', content: 'It watches resources.' },
      { role: 'user', content: 'Thanks.' },
    );
    assert.equal(homeHash(turn2), homeHash(turn1));
    assert.equal(homeHash(turn3), homeHash(turn1));
  });

  test('two conversations with the same system prompt get different home keys', () => {
    const a = chat({ role: 'system', content: SYSTEM }, { role: 'user', content: 'one ' + LONG });
    const b = chat({ role: 'system', content: SYSTEM }, { role: 'user', content: 'two ' + LONG });
    assert.notEqual(homeHash(a), homeHash(b));
  });

  test('the home key covers at most prefixChars characters', () => {
    const p = policy({ prefixChars: 300 });
    const a = { headers: {}, body: { prompt: 'd'.repeat(600) + ' question one' } };
    const b = { headers: {}, body: { prompt: 'd'.repeat(600) + ' question two' } };
    assert.equal(homeHash(a, p), homeHash(b, p));
    assert.notEqual(homeHash(a), homeHash(b));
  });

  test('gives no prompt below MIN_PREFIX_CHARS_FOR_AFFINITY', () => {
    assert.deepEqual(affinityFor({ headers: {}, body: { prompt: 'x'.repeat(50) } }, policy()), {});
    assert.deepEqual(affinityFor(chat({ role: 'user', content: 'hi' }), policy()), {});
    assert.notEqual(
      affinityFor({ headers: {}, body: { prompt: 'x'.repeat(70) } }, policy()).prompt,
      undefined,
    );
  });

  test('property: never throws for any JSON body', () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.integer({ min: 1, max: 5000 }), (body, prefixChars) => {
        const input = affinityFor({ headers: {}, body }, policy({ prefixChars }));
        assert.equal(input.affinityKey, undefined);
        if (input.prompt !== undefined) {
          assert.ok(input.prompt.homeDepth >= 1);
          assert.ok(input.prompt.homeDepth <= input.prompt.hashes.length);
        }
      }),
    );
  });
});
