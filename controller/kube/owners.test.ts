import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ownersOf, serviceAccountOf, withOwners } from './owners.ts';

const jwt = (claims: unknown): string =>
  `eyJhbGciOiJSUzI1NiJ9.${Buffer.from(JSON.stringify(claims)).toString('base64url')}.sig`;

const bound = jwt({
  sub: 'system:serviceaccount:switchyard-system:switchyard',
  'kubernetes.io': {
    namespace: 'switchyard-system',
    pod: { name: 'switchyard-abc', uid: 'pod-uid' },
    serviceaccount: { name: 'switchyard', uid: 'sa-uid' },
  },
});

describe('owners', () => {
  it('owns release objects by the service account and the replica Lease by the pod', () => {
    const { owners, notes } = ownersOf({
      token: bound,
      namespace: 'switchyard-system',
      pod: { name: 'switchyard-abc', uid: 'pod-uid' },
    });
    assert.deepEqual(owners, {
      release: [{ apiVersion: 'v1', kind: 'ServiceAccount', name: 'switchyard', uid: 'sa-uid' }],
      replica: [{ apiVersion: 'v1', kind: 'Pod', name: 'switchyard-abc', uid: 'pod-uid' }],
    });
    assert.deepEqual(notes, []);
  });

  it('says what outlives the release when it cannot tell its owners', () => {
    const outside = ownersOf({ token: undefined, namespace: 'ns', pod: undefined });
    assert.deepEqual(outside.owners, { release: [], replica: [] });
    assert.equal(outside.notes.length, 2);
    const elsewhere = ownersOf({ token: bound, namespace: 'other', pod: { name: 'p', uid: '' } });
    assert.deepEqual(elsewhere.owners, { release: [], replica: [] });
    assert.match(elsewhere.notes.join('\n'), /in switchyard-system, not other/);
  });

  it('reads legacy Secret tokens and rejects what is not a token', () => {
    assert.deepEqual(
      serviceAccountOf(
        jwt({
          'kubernetes.io/serviceaccount/namespace': 'ns',
          'kubernetes.io/serviceaccount/service-account.name': 'sa',
          'kubernetes.io/serviceaccount/service-account.uid': 'u',
        }),
      ),
      { namespace: 'ns', name: 'sa', uid: 'u' },
    );
    assert.equal(serviceAccountOf('not a token'), undefined);
    assert.equal(serviceAccountOf('a.!!!.c'), undefined);
    assert.equal(serviceAccountOf(jwt({ 'kubernetes.io': { namespace: 'ns' } })), undefined);
    assert.equal(
      serviceAccountOf(
        jwt({ 'kubernetes.io': { namespace: '', serviceaccount: { name: 'a', uid: 'b' } } }),
      ),
      undefined,
    );
  });

  it('adds missing owners and keeps others', () => {
    const sa = { apiVersion: 'v1', kind: 'ServiceAccount', name: 'sa', uid: 'u1' };
    const other = { apiVersion: 'v1', kind: 'ConfigMap', name: 'c', uid: 'u2' };
    assert.deepEqual(withOwners(undefined, [sa]), [sa]);
    assert.deepEqual(withOwners([other], [sa]), [other, sa]);
    assert.equal(withOwners([sa], [sa]), undefined);
    assert.equal(withOwners(undefined, []), undefined);
  });
});
