import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Answer, DEFAULT_OUTPUT_MAX, DEFAULT_OUTPUT_MIN } from './answer.ts';

const text = (a: Answer) => Array.from({ length: a.outputTokens }, (_, i) => a.token(i)).join('');

void test('the same prompt and seed give the same answer; another seed another one', () => {
  const a = new Answer('hello', undefined, 1);
  const b = new Answer('hello', undefined, 1);
  assert.equal(a.outputTokens, b.outputTokens);
  assert.equal(text(a), text(b));
  assert.equal(a.finish, 'stop');
  const lengths = new Set<number>();
  for (let seed = 0; seed < 50; seed++) {
    const n = new Answer('hello', undefined, seed).outputTokens;
    assert.ok(n >= DEFAULT_OUTPUT_MIN && n <= DEFAULT_OUTPUT_MAX, String(n));
    lengths.add(n);
  }
  assert.ok(lengths.size > 10);
});

void test('a requested maximum is the length, finished by length; words start capitalised', () => {
  const a = new Answer('hi', 5, 1);
  assert.equal(a.outputTokens, 5);
  assert.equal(a.finish, 'length');
  const words = text(a).split(' ');
  assert.equal(words.length, 5);
  assert.match(words[0] ?? '', /^[A-Z]/);
});
