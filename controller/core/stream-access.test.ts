import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { PoolSnapshot } from '../../crds/snapshot.ts';
import {
  holdsApiKeys,
  poolsFollowedBy,
  streamAccess,
  withoutApiKeys,
  workloadOf,
} from './stream-access.ts';

const endpoint = (id: string, apiKey?: string): PoolSnapshot['endpoints'][number] => ({
  id,
  backend: id,
  tier: 0,
  url: `http://${id}/v1`,
  costPerMTok: 0,
  ...(apiKey === undefined ? {} : { apiKey, apiKeyHeader: 'x-api-key' as const }),
});

const snapshot = (endpoints: PoolSnapshot['endpoints']): PoolSnapshot =>
  ({
    version: 3,
    hash: 'h',
    pool: { namespace: 'ns', name: 'chat' },
    policy: {},
    timeouts: {},
    endpoints,
  }) as unknown as PoolSnapshot;

describe('stream access', () => {
  test('a pod follows the pool its label names, and only that one', () => {
    assert.deepEqual(
      [...poolsFollowedBy({ metadata: { labels: { 'switchyard.dev/pool': 'chat' } } })],
      ['chat'],
    );
    assert.deepEqual(
      [...poolsFollowedBy({ metadata: { labels: { 'switchyard.dev/pool': '' } } })],
      [],
    );
    assert.deepEqual([...poolsFollowedBy({ metadata: {} })], []);
    assert.deepEqual([...poolsFollowedBy({})], []);
  });

  test('a pod also follows the pools its annotation lists, after its label’s', () => {
    const metadata = {
      labels: { 'switchyard.dev/pool': 'chat' },
      annotations: { 'switchyard.dev/pools': 'embed,chat, rerank' },
    };
    assert.deepEqual([...poolsFollowedBy({ metadata })], ['chat', 'embed', 'rerank']);
    // Without the label the pod is not injected, and its annotation names nothing.
    const unlabelled = { annotations: { 'switchyard.dev/pools': 'embed' } };
    assert.deepEqual([...poolsFollowedBy({ metadata: unlabelled })], []);
    const refused = streamAccess({ name: 'app-1', follows: new Set(['chat']) }, 'embed');
    assert.match(
      refused.kind === 'refused' ? refused.message : '',
      /or add embed to its annotation switchyard.dev\/pools/,
    );
  });

  test('a pod that follows the pool reads it with its keys', () => {
    assert.deepEqual(streamAccess({ name: 'app-1', follows: new Set(['chat']) }, 'chat'), {
      kind: 'with-keys',
    });
  });

  test('a pod that follows another pool, or none, is refused, and told why and what to do', () => {
    const other = streamAccess({ name: 'app-1', follows: new Set(['embed']) }, 'chat');
    assert.equal(other.kind, 'refused');
    assert.match(
      other.kind === 'refused' ? other.message : '',
      /Pod app-1 does not follow pool chat \(it follows embed\).*switchyard.dev\/pool=chat/,
    );
    const none = streamAccess({ name: 'app-2', follows: new Set() }, 'chat');
    assert.match(
      none.kind === 'refused' ? none.message : '',
      /it has no switchyard.dev\/pool label/,
    );
  });

  test('a token bound to no pod reads the pool without keys', () => {
    assert.deepEqual(streamAccess(undefined, 'chat'), { kind: 'without-keys' });
  });

  test('withoutApiKeys drops every key and nothing else', () => {
    const keyed = snapshot([endpoint('a', 'sk-1'), endpoint('b')]);
    assert.equal(holdsApiKeys(keyed), true);
    const keyless = withoutApiKeys(keyed);
    assert.equal(holdsApiKeys(keyless), false);
    assert.equal(JSON.stringify(keyless).includes('sk-1'), false);
    assert.deepEqual(keyless.endpoints[0], { ...endpoint('a'), apiKeyHeader: 'x-api-key' });
    assert.equal(
      keyless.endpoints[1],
      keyed.endpoints[1],
      'an endpoint without a key is kept as is',
    );
    assert.equal(keyless.hash, keyed.hash);
    const plain = snapshot([endpoint('b')]);
    assert.equal(withoutApiKeys(plain), plain, 'a snapshot without keys is served as is');
  });

  test('workloadOf names a sidecar by its pod: service account or a label', () => {
    const pod = {
      name: 'app-1',
      follows: new Set(['chat']),
      serviceAccount: 'apps/billing',
      labels: { team: 'search', empty: '' },
    };
    assert.equal(workloadOf(pod, { kind: 'ServiceAccount' }), 'apps/billing');
    assert.equal(workloadOf(pod, { kind: 'PodLabel', label: 'team' }), 'search');
    assert.equal(workloadOf(pod, { kind: 'PodLabel', label: 'empty' }), undefined);
    assert.equal(workloadOf(pod, { kind: 'PodLabel', label: 'absent' }), undefined);
    assert.equal(workloadOf(pod, { kind: 'Header', header: 'x-team' }), undefined);
    assert.equal(workloadOf(undefined, { kind: 'ServiceAccount' }), undefined);
    assert.equal(
      workloadOf({ name: 'p', follows: new Set() }, { kind: 'PodLabel', label: 't' }),
      undefined,
    );
  });
});
