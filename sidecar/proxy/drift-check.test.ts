import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { PassiveDriftCheck, SCAN_BYTES } from './drift-check.ts';

const probe = { fingerprint: 'llama/fp_a/abc', model: 'llama', systemFingerprint: 'fp_a' };
const chunk = (model: string, fp: string) =>
  Buffer.from(
    `data: {"id":"c1","object":"chat.completion.chunk","model":"${model}","system_fingerprint":"${fp}","choices":[]}\n\n`,
  );

describe('PassiveDriftCheck', () => {
  it('answers once, from the first chunk of a stream', () => {
    const same = new PassiveDriftCheck(probe);
    assert.equal(same.feed(chunk('llama', 'fp_a')), false);
    assert.equal(same.feed(chunk('other', 'fp_x')), undefined, 'decided already');
    assert.equal(new PassiveDriftCheck(probe).feed(chunk('llama', 'fp_b')), true);
    assert.equal(new PassiveDriftCheck(probe).feed(chunk('mistral', 'fp_a')), true);
  });

  it('waits for the fields across chunks, and gives up after SCAN_BYTES', () => {
    const check = new PassiveDriftCheck(probe);
    const whole = chunk('llama', 'fp_b');
    assert.equal(check.feed(whole.subarray(0, 40)), undefined);
    assert.equal(check.feed(whole.subarray(40)), true);
    const silent = new PassiveDriftCheck(probe);
    assert.equal(silent.feed(Buffer.alloc(SCAN_BYTES - 1, 0x20)), undefined);
    assert.equal(silent.feed(Buffer.from('   ')), false, 'nothing to contradict');
  });

  it('a response without system_fingerprint is judged by its model only', () => {
    const check = new PassiveDriftCheck({ fingerprint: 'llama/-/abc', model: 'llama' });
    assert.equal(check.feed(Buffer.from('{"id":"x","model":"llama","choices":[]}')), false);
  });
});
