import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { describe, test } from 'node:test';
import { LimitedBody } from './limited-body.ts';

async function passThrough(chunks: string[], limitBytes: number) {
  let tooLarge = 0;
  const body = new LimitedBody(limitBytes, () => (tooLarge += 1));
  const out: Buffer[] = [];
  body.on('data', (c: Buffer) => out.push(c));
  const done = new Promise((resolve) => body.on('end', resolve));
  Readable.from(chunks.map((c) => Buffer.from(c))).pipe(body);
  await done;
  return { text: Buffer.concat(out).toString(), tooLarge };
}

describe('LimitedBody', () => {
  test('passes a body within the limit through unchanged', async () => {
    assert.deepEqual(await passThrough(['ab', 'cd', 'e'], 5), { text: 'abcde', tooLarge: 0 });
  });

  test('stops passing bytes at the first chunk over the limit and says so once', async () => {
    assert.deepEqual(await passThrough(['ab', 'cd', 'ef', 'gh'], 5), { text: 'abcd', tooLarge: 1 });
  });
});
