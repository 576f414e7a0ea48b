import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { POLICY_NAMES } from '../../lib/bench-names.ts';
import { POLICIES } from './routers.ts';

describe('bench names', () => {
  it('lists every policy the bench can run, in report order', () => {
    assert.deepEqual(
      POLICIES.map((p) => p.name),
      [...POLICY_NAMES],
    );
  });
});
