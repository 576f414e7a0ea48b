import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ObjectCache, type KubeObject } from './object-cache.ts';

const obj = (namespace: string, name: string, resourceVersion?: string): KubeObject => ({
  metadata: { namespace, name, ...(resourceVersion === undefined ? {} : { resourceVersion }) },
});

const said = (changes: { kind: string; object: KubeObject }[]): string[] =>
  changes.map(
    ({ kind, object: o }) =>
      `${kind} ${o.metadata?.namespace}/${o.metadata?.name}@${o.metadata?.resourceVersion}`,
  );

describe('an object cache', () => {
  test('keys objects by namespace and name; a cluster-scoped one has the empty namespace', () => {
    const cache = new ObjectCache();
    assert.equal(cache.upsert(obj('a', 'x', '1')), 'add');
    assert.equal(cache.upsert(obj('b', 'x', '1')), 'add');
    assert.equal(cache.upsert({ metadata: { name: 'node', resourceVersion: '1' } }), 'add');
    assert.equal(cache.get('x', 'a')?.metadata?.namespace, 'a');
    assert.equal(cache.get('node')?.metadata?.name, 'node');
    assert.equal(cache.list('a').length, 1);
    assert.equal(cache.list().length, 3);
    assert.equal(cache.list('').length, 3, 'the empty namespace: all of them');
  });

  test('says update only when the resourceVersion differs or is unknown', () => {
    const cache = new ObjectCache();
    cache.upsert(obj('a', 'x', '1'));
    assert.equal(cache.upsert(obj('a', 'x', '1')), undefined);
    assert.equal(cache.upsert(obj('a', 'x', '2')), 'update');
    assert.equal(cache.upsert(obj('a', 'y')), 'add');
    assert.equal(cache.upsert(obj('a', 'y')), 'update');
  });

  test('keeps no managedFields (server-side apply bookkeeping nothing reads)', () => {
    const cache = new ObjectCache<KubeObject & { spec?: unknown }>();
    const managedFields = [{ manager: 'kubectl', fieldsV1: { 'f:spec': {} } }];
    cache.upsert({ metadata: { name: 'a', resourceVersion: '1', managedFields }, spec: 1 });
    cache.replace([{ metadata: { name: 'b', resourceVersion: '1', managedFields }, spec: 2 }]);
    assert.deepEqual(cache.get('b'), { metadata: { name: 'b', resourceVersion: '1' }, spec: 2 });
    assert.equal(cache.get('a'), undefined, 'replaced by the list');
  });

  test('removes what it holds, and drops an emptied namespace', () => {
    const cache = new ObjectCache();
    cache.upsert(obj('a', 'x', '1'));
    assert.equal(cache.remove(obj('a', 'missing'))?.metadata, undefined);
    assert.equal(cache.remove(obj('other', 'x')), undefined);
    assert.equal(cache.remove(obj('a', 'x', '9'))?.metadata?.resourceVersion, '1');
    assert.deepEqual(cache.list(), []);
  });

  test('replaces its contents with a list: deletes first, then adds and updates', () => {
    const cache = new ObjectCache();
    cache.replace([obj('a', 'x', '1'), obj('a', 'y', '1'), obj('b', 'z', '1')]);
    const changes = cache.replace([obj('a', 'y', '2'), obj('a', 'x', '1'), obj('c', 'w', '1')]);
    assert.deepEqual(said(changes), ['delete b/z@1', 'update a/y@2', 'add c/w@1']);
    assert.deepEqual(
      cache
        .list()
        .map((o) => o.metadata?.name)
        .sort(),
      ['w', 'x', 'y'],
    );
    assert.deepEqual(said(cache.replace([])), ['delete a/x@1', 'delete a/y@2', 'delete c/w@1']);
    assert.deepEqual(cache.list(), []);
  });
});
