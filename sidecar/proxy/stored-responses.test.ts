import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import v8 from 'node:v8';
import vm from 'node:vm';
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

/** A full garbage collection, without starting the test process with --expose-gc. */
function collectGarbage(): void {
  v8.setFlagsFromString('--expose-gc');
  const gc = vm.runInNewContext('gc') as () => void;
  gc();
  gc();
}

/** The heap kept by what `build` returns, per item of `count`, in bytes. */
function retainedPerItem(count: number, build: () => unknown): number {
  collectGarbage();
  const before = process.memoryUsage().heapUsed;
  const kept = build();
  collectGarbage();
  const after = process.memoryUsage().heapUsed;
  assert.ok(kept !== undefined);
  return (after - before) / count;
}

describe('StoredResponses memory (issue 40)', () => {
  const COUNT = 2_000;
  /** Where it was 32 KiB: the whole first chunk each id was cut from. */
  const BOUND_BYTES = 2 * 1024;
  const idOf = (i: number): string => `resp_${i.toString(16).padStart(40, '0')}`;
  /** A first chunk of 32 KiB with the id first, as a Responses answer with a long output. */
  const firstChunk = (i: number): Buffer =>
    Buffer.from(
      `{"id":"${idOf(i)}","object":"response","output_text":"${'x'.repeat(32 * 1024)}${i}"}`,
    );

  test('a remembered id keeps no more than itself alive, not the chunk it was read from', (t) => {
    const perId = retainedPerItem(COUNT, () => {
      const stored = new StoredResponses(() => 0);
      for (let i = 0; i < COUNT; i++) stored.rememberCreated(endpoint('a/1'), 200)?.(firstChunk(i));
      return stored;
    });
    t.diagnostic(`${(perId / 1024).toFixed(2)} KiB retained per remembered id`);
    assert.ok(perId < BOUND_BYTES, `${(perId / 1024).toFixed(1)} KiB retained per remembered id`);
  });

  test('an id looked up from a long URL is not kept as a view into that URL', (t) => {
    const stored = new StoredResponses(() => 0);
    for (let i = 0; i < COUNT; i++)
      stored.rememberCreated(endpoint('a/1'), 200)?.(Buffer.from(`{"id":"${idOf(i)}"}`));
    const pool = poolOf(endpoint('a/1'));
    const perId = retainedPerItem(COUNT, () => {
      for (let i = 0; i < COUNT; i++) {
        // As the proxy gets it: a slice of a path cut from a URL with a 16 KiB query.
        const url = `/v1/responses/${idOf(i)}?pad=${'p'.repeat(16 * 1024)}${i}`;
        const id = url.slice('/v1/responses/'.length, url.indexOf('?'));
        assert.equal(stored.routing(pool, id).kind, 'pinned');
      }
      return stored;
    });
    t.diagnostic(`${(perId / 1024).toFixed(2)} KiB retained per looked-up id`);
    assert.ok(perId < BOUND_BYTES, `${(perId / 1024).toFixed(1)} KiB retained per looked-up id`);
  });
});
