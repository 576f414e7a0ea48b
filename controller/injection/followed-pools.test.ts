import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  followedPools,
  MAX_FOLLOWED_POOLS,
  POOL_LABEL,
  POOLS_ANNOTATION,
  type PoolMetadata,
} from './followed-pools.ts';

const meta = (label: string | undefined, annotation?: string): PoolMetadata => ({
  labels: label === undefined ? {} : { [POOL_LABEL]: label },
  ...(annotation === undefined ? {} : { annotations: { [POOLS_ANNOTATION]: annotation } }),
});

describe('followedPools', () => {
  it('is the label’s pool alone without the annotation', () => {
    assert.deepEqual(followedPools(meta('chat')), { pools: ['chat'] });
  });

  it('adds the annotation’s pools after the label’s, each once, blanks skipped', () => {
    assert.deepEqual(followedPools(meta('chat', ' embed,,chat , rerank,embed ')), {
      pools: ['chat', 'embed', 'rerank'],
    });
  });

  it('is nothing without the label: the label selects the pod', () => {
    assert.deepEqual(followedPools(meta(undefined, 'embed')), { pools: [] });
    assert.deepEqual(followedPools(meta('', 'embed')), { pools: [] });
    assert.deepEqual(followedPools(undefined), { pools: [] });
  });

  it('names an invalid name and where it came from', () => {
    assert.match(
      followedPools(meta('Chat')).problem ?? '',
      /^label switchyard.dev\/pool="Chat" is not a valid InferencePool name/,
    );
    assert.match(
      followedPools(meta('chat', 'embed,-x')).problem ?? '',
      /^annotation switchyard.dev\/pools names "-x", which is not a valid/,
    );
    assert.match(
      followedPools(meta('chat', 'a'.repeat(254))).problem ?? '',
      /is not a valid InferencePool name/,
    );
  });

  it('refuses more pools than a sidecar follows', () => {
    const many = Array.from({ length: MAX_FOLLOWED_POOLS }, (_, i) => `p${i}`).join(',');
    const result = followedPools(meta('chat', many));
    assert.equal(result.pools.length, MAX_FOLLOWED_POOLS + 1);
    assert.match(result.problem ?? '', /follows 17 pools .* at most 16/);
  });
});
