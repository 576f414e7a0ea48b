import { test } from 'node:test';
import assert from 'node:assert/strict';
import { inputOf, pool } from './testing.ts';

test('the pool fixture refuses an invalid spec', () => {
  assert.throws(() => pool({ backends: [] }), /invalid fixture/);
});

test('the input fixture files objects without names or labels under ""', () => {
  const input = inputOf(pool({ backends: [{ name: 'a', url: 'https://a.example/v1' }] }), {
    services: [{}],
    slices: [{ addressType: 'IPv4' }],
    secrets: [{}],
  });
  assert.deepEqual([...input.services.keys()], ['']);
  assert.deepEqual([...input.slicesByService.keys()], ['']);
  assert.deepEqual([...input.secrets.keys()], ['']);
});
