import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { PoolIndex, objectKey, splitKey } from './pool-index.ts';
import { SERVICE_NAME_LABEL } from './objects.ts';
import { pool } from './testing.ts';

const chat = pool({
  backends: [
    { name: 'in-cluster', service: { name: 'vllm', port: 8000 } },
    { name: 'spare', service: { name: 'vllm', port: 'http' } },
    {
      name: 'provider',
      url: 'https://api.example.com/v1',
      apiKeySecretRef: { name: 'provider-key', key: 'apiKey' },
    },
  ],
});
const embed = pool(
  {
    backends: [
      {
        name: 'tei',
        service: { name: 'tei', port: 80 },
        apiKeySecretRef: { name: 'provider-key', key: 'other' },
        allowInsecureApiKey: true,
      },
    ],
  },
  'embed',
);

describe('PoolIndex', () => {
  test('routes a Service, an EndpointSlice or a Secret to the pools that use it', () => {
    const index = new PoolIndex();
    index.setPool('apps/chat', chat);
    index.setPool('apps/embed', embed);
    assert.deepEqual(index.poolsForService('apps', 'vllm'), ['apps/chat']);
    assert.deepEqual(index.poolsForService('apps', 'tei'), ['apps/embed']);
    assert.deepEqual(index.poolsForSecret('apps', 'provider-key'), ['apps/chat', 'apps/embed']);
    assert.deepEqual(
      index.poolsForSlice({
        metadata: { namespace: 'apps', labels: { [SERVICE_NAME_LABEL]: 'vllm' } },
      }),
      ['apps/chat'],
    );
  });

  test('never crosses namespaces', () => {
    const index = new PoolIndex();
    index.setPool('apps/chat', chat);
    assert.deepEqual(index.poolsForService('other', 'vllm'), []);
    assert.deepEqual(index.poolsForSecret('other', 'provider-key'), []);
  });

  test('follows a pool that stops referencing an object', () => {
    const index = new PoolIndex();
    index.setPool('apps/chat', chat);
    index.setPool('apps/chat', pool({ backends: [{ name: 'a', url: 'https://a.example/v1' }] }));
    assert.deepEqual(index.poolsForService('apps', 'vllm'), []);
    assert.deepEqual(index.poolsForSecret('apps', 'provider-key'), []);
    assert.deepEqual(index.referencedSecrets(), []);
    assert.deepEqual(index.pools(), ['apps/chat']);
  });

  test('forgets a deleted pool, and ignores deleting one it does not know', () => {
    const index = new PoolIndex();
    index.setPool('apps/chat', chat);
    index.setPool('apps/embed', embed);
    index.deletePool('apps/chat');
    index.deletePool('apps/unknown');
    assert.deepEqual(index.poolsForService('apps', 'vllm'), []);
    assert.deepEqual(index.poolsForSecret('apps', 'provider-key'), ['apps/embed']);
    assert.deepEqual(index.pools(), ['apps/embed']);
  });

  test('lists what one pool references, by name, and what all pools reference, by key', () => {
    const index = new PoolIndex();
    index.setPool('apps/chat', chat);
    index.setPool('apps/embed', embed);
    assert.deepEqual(index.serviceNamesOf('apps/chat'), ['vllm']);
    assert.deepEqual(index.secretNamesOf('apps/chat'), ['provider-key']);
    assert.deepEqual(index.serviceNamesOf('apps/none'), []);
    assert.deepEqual(index.secretNamesOf('apps/none'), []);
    assert.deepEqual(index.referencedServices(), ['apps/tei', 'apps/vllm']);
    assert.deepEqual(index.referencedSecrets(), ['apps/provider-key']);
  });

  test('indexes an invalid pool as far as it names objects', () => {
    const index = new PoolIndex();
    index.setPool('apps/broken', {
      metadata: {},
      spec: {
        backends: [
          null,
          { service: { name: 42 } },
          { service: { name: '' }, apiKeySecretRef: null },
          { service: { name: 'vllm' }, apiKeySecretRef: { name: 'k' } },
        ],
      },
    });
    index.setPool('apps/empty', { metadata: null, spec: null });
    index.setPool('nospec', {});
    assert.deepEqual(index.poolsForService('apps', 'vllm'), ['apps/broken']);
    assert.deepEqual(index.poolsForSecret('apps', 'k'), ['apps/broken']);
    assert.deepEqual(index.pools(), ['apps/broken', 'apps/empty', 'nospec']);
  });

  test('finds no pools for a slice without a service-name label', () => {
    const index = new PoolIndex();
    index.setPool('apps/chat', chat);
    assert.deepEqual(index.poolsForSlice({ metadata: { namespace: 'apps' } }), []);
    assert.deepEqual(
      index.poolsForSlice({ metadata: { labels: { [SERVICE_NAME_LABEL]: '' } } }),
      [],
    );
    assert.deepEqual(index.poolsForSlice({}), []);
    assert.deepEqual(
      index.poolsForSlice({ metadata: { labels: { [SERVICE_NAME_LABEL]: 'vllm' } } }),
      [],
    );
  });
});

describe('object keys', () => {
  test('are namespace/name, and split back', () => {
    assert.equal(objectKey('apps', 'chat'), 'apps/chat');
    assert.deepEqual(splitKey('apps/chat'), { namespace: 'apps', name: 'chat' });
    assert.deepEqual(splitKey('cluster-scoped'), { namespace: '', name: 'cluster-scoped' });
  });
});

describe('PoolIndex: CA Secrets', () => {
  test('indexes the Secret of tls.caSecretRef like that of an API key', () => {
    const index = new PoolIndex();
    index.setPool('ns/chat', {
      metadata: { namespace: 'ns' },
      spec: { backends: [{ tls: { caSecretRef: { name: 'ca' } } }, { tls: null }] },
    });
    assert.deepEqual(index.secretNamesOf('ns/chat'), ['ca']);
    assert.deepEqual(index.poolsForSecret('ns', 'ca'), ['ns/chat']);
  });
});

describe('PoolIndex: GAIE pools', () => {
  test('routes a GAIE InferencePool to the pools whose inferencePoolRef names it, and forgets them', () => {
    const index = new PoolIndex();
    const gaie = (name: string) =>
      pool({ backends: [{ name: 'gaie', inferencePoolRef: { name: 'llama' } }] }, name);
    index.setPool('apps/chat', gaie('chat'));
    index.setPool('apps/chat-2', gaie('chat-2'));
    index.setPool('apps/bad', { spec: { backends: [{ inferencePoolRef: { name: 7 } }] } });
    assert.deepEqual(index.poolsForGaiePool('apps', 'llama'), ['apps/chat', 'apps/chat-2']);
    assert.deepEqual(index.poolsForGaiePool('other', 'llama'), []);
    assert.deepEqual(index.gaiePoolNamesOf('apps/chat'), ['llama']);
    assert.deepEqual(index.gaiePoolNamesOf('apps/none'), []);
    assert.deepEqual(index.referencedGaiePools(), ['apps/llama']);
    index.deletePool('apps/chat');
    index.deletePool('apps/chat-2');
    assert.deepEqual(index.referencedGaiePools(), []);
  });
});
