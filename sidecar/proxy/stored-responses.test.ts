import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { ActivePool } from '../config/active-pool.ts';
import type { EndpointSpec } from '../policy/index.ts';
import { StoredResponses } from './stored-responses.ts';

const endpoint = (id: string, overrides: Partial<EndpointSpec> = {}): EndpointSpec => ({
  id,
  backend: id.split('/')[0] ?? id,
  tier: 0,
  url: `http://${id}/v1`,
  costPerMTok: 0,
  ...overrides,
});

/** Only what `routing` reads of a pool. */
const poolOf = (...endpoints: EndpointSpec[]): ActivePool =>
  ({ name: 'chat', endpoints }) as unknown as ActivePool;

/** Feeds `body` to the tap an answer from `endpointId` gets. */
function answer(stored: StoredResponses, endpointId: string, body: string): void {
  stored.rememberCreated(endpoint(endpointId), 200)?.(Buffer.from(body));
}

describe('StoredResponses', () => {
  test('pins a response id to the endpoint whose answer carried it', () => {
    const stored = new StoredResponses(() => 0);
    answer(stored, 'a/1', '{"id":"resp_1","object":"response"}');
    answer(stored, 'b/2', 'event: response.created\ndata: {"response":{"id":"resp_2"}}\n\n');
    const pool = poolOf(endpoint('a/1'), endpoint('b/2'));
    assert.deepEqual(stored.routing(pool, 'resp_1'), { kind: 'pinned', endpointId: 'a/1' });
    assert.deepEqual(stored.routing(pool, 'resp_2'), { kind: 'pinned', endpointId: 'b/2' });
    assert.deepEqual(stored.routing(pool, 'resp_other'), { kind: 'anywhere' });
  });

  test('says the response is gone when its endpoint left the pool or is excluded as drifted', () => {
    const stored = new StoredResponses(() => 0);
    answer(stored, 'a/1', '{"id":"resp_1"}');
    const left = stored.routing(poolOf(endpoint('b/2')), 'resp_1');
    assert.equal(left.kind, 'gone');
    assert.match(left.kind === 'gone' ? left.message : '', /"resp_1".*a\/1.*left pool chat/);
    const drifted = stored.routing(poolOf(endpoint('a/1', { drifted: true })), 'resp_1');
    assert.match(drifted.kind === 'gone' ? drifted.message : '', /drift detection/);
  });

  test('forgets a response its server deleted', () => {
    const stored = new StoredResponses(() => 0);
    answer(stored, 'a/1', '{"id":"resp_1"}');
    assert.equal(stored.forgetOnSuccess('resp_1')(endpoint('a/1'), 200), undefined);
    assert.deepEqual(stored.routing(poolOf(endpoint('a/1')), 'resp_1'), { kind: 'anywhere' });
  });
});
