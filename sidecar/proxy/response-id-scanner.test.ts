import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ownCopy, RESPONSE_ID_SCAN_LIMIT_BYTES, ResponseIdScanner } from './response-id-scanner.ts';

const scan = (...chunks: string[]): string[] => {
  const found: string[] = [];
  const scanner = new ResponseIdScanner((id) => found.push(id));
  for (const chunk of chunks) scanner.feed(Buffer.from(chunk));
  return found;
};

describe('ResponseIdScanner', () => {
  test("finds a JSON response object's id", () => {
    assert.deepEqual(
      scan('{"id":"resp_81615ae46904e0ca","created_at":1,"output":[{"id":"msg_1"}]}'),
      ['resp_81615ae46904e0ca'],
    );
  });

  test('finds the id of a stream from its response.created event, split across chunks', () => {
    assert.deepEqual(
      scan(
        'event: response.created\ndata: {"response":{"i',
        'd": "resp_9545"',
        ',"x":1}}\n\n',
        '{"id":"msg_2"}',
      ),
      ['resp_9545'],
    );
    assert.deepEqual(
      scan('data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_abc"}}'),
      ['resp_abc'],
    );
  });

  test('gives up past its limit', () => {
    assert.deepEqual(scan('x'.repeat(RESPONSE_ID_SCAN_LIMIT_BYTES), '{"id":"resp_late"}'), []);
  });
});

test('ownCopy keeps any text whole', () => {
  for (const text of ['resp_0123456789abcdef', 'café', 'résumé ✓ 🚀', ''])
    assert.equal(ownCopy(text), text);
});
