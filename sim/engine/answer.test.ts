import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Answer, DEFAULT_OUTPUT_MAX, DEFAULT_OUTPUT_MIN } from './answer.ts';

const text = (a: Answer) => Array.from({ length: a.outputTokens }, (_, i) => a.token(i)).join('');
const free = { maxTokens: undefined };

void test('the same prompt and seed give the same answer; another seed another one', () => {
  const a = new Answer('hello', free, 1);
  const b = new Answer('hello', free, 1);
  assert.equal(a.outputTokens, b.outputTokens);
  assert.equal(text(a), text(b));
  assert.equal(a.finish, 'stop');
  assert.equal(a.stopReason, null);
  const lengths = new Set<number>();
  for (let seed = 0; seed < 50; seed++) {
    const n = new Answer('hello', free, seed).outputTokens;
    assert.ok(n >= DEFAULT_OUTPUT_MIN && n <= DEFAULT_OUTPUT_MAX, String(n));
    lengths.add(n);
  }
  assert.ok(lengths.size > 10);
});

void test('a requested maximum is the length, finished by length; words start capitalised', () => {
  const a = new Answer('hi', { maxTokens: 5 }, 1);
  assert.equal(a.outputTokens, 5);
  assert.equal(a.finish, 'length');
  const words = text(a).split(' ');
  assert.equal(words.length, 5);
  assert.match(words[0] ?? '', /^[A-Z]/);
});

void test('the room left in the context cuts an answer, which then finishes by length', () => {
  const cut = new Answer('hi', { maxTokens: 50, roomTokens: 7 }, 1);
  assert.equal(cut.outputTokens, 7);
  assert.equal(cut.finish, 'length');
  const own = new Answer('hello', free, 1);
  const short = new Answer('hello', { maxTokens: undefined, roomTokens: 3 }, 1);
  assert.ok(own.outputTokens > 3);
  assert.equal(short.outputTokens, 3);
  assert.equal(short.finish, 'length');
  assert.equal(text(short), text(own).split(' ').slice(0, 3).join(' '));
  const roomy = new Answer('hello', { maxTokens: undefined, roomTokens: 10_000 }, 1);
  assert.equal(roomy.finish, 'stop');
});

void test('a stop string ends the answer at the token that completes it, the text cut before it', () => {
  const whole = text(new Answer('stop here', { maxTokens: 20 }, 3));
  const words = whole.split(' ');
  const third = words[2]!;
  const a = new Answer('stop here', { maxTokens: 20, stop: ['zzz', third] }, 3);
  assert.equal(a.finish, 'stop');
  assert.equal(a.stopReason, third);
  assert.equal(text(a), whole.slice(0, whole.indexOf(third)));
  assert.ok(a.outputTokens <= 3, String(a.outputTokens));
  // A string that spans two tokens is found too, and the tokens before it are cut.
  const span = `${words[3]} ${words[4]!.slice(0, 2)}`;
  const b = new Answer('stop here', { maxTokens: 20, stop: [span] }, 3);
  assert.equal(b.stopReason, span);
  assert.equal(text(b), whole.slice(0, whole.indexOf(span)));
  // Never produced: the answer runs to its maximum; an empty string never stops it.
  const c = new Answer('stop here', { maxTokens: 20, stop: ['never produced', ''] }, 3);
  assert.equal(c.finish, 'length');
  assert.equal(c.stopReason, null);
  assert.equal(text(c), whole);
});

void test('the choices of one request say other words; choice 0 is the answer of n = 1', () => {
  const one = text(new Answer('pick', { maxTokens: 12 }, 1));
  assert.equal(text(new Answer('pick', { maxTokens: 12 }, 1, 0)), one);
  assert.notEqual(text(new Answer('pick', { maxTokens: 12 }, 1, 1)), one);
});
