import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { KubeApiError, type KubeRaw } from '../kube/kube-raw.ts';
import { ReviewCache, tokenExpiryMs, type PodWatch, type WatchedPod } from './review-cache.ts';
import { TokenAuthenticator } from './token-auth.ts';

const MIN = 60_000;

/** An unsigned JWT-shaped token: the cache only reads its `exp` (the API server verified it). */
function jwt(claims: Record<string, unknown>, salt = ''): string {
  const part = (o: unknown): string => Buffer.from(JSON.stringify(o)).toString('base64url');
  return `${part({ alg: 'RS256' })}.${part({ ...claims, salt })}.sig`;
}

class Clock {
  ms = 1_000_000_000;
  now = (): number => this.ms;
}

class Pods implements PodWatch {
  hasSynced = true;
  readonly map = new Map<string, WatchedPod>();
  get(namespace: string, name: string): WatchedPod | undefined {
    return this.map.get(`${namespace}/${name}`);
  }
}

function cacheOf(clock: Clock, pods?: PodWatch, maxEntries = 100): ReviewCache<string> {
  return new ReviewCache<string>({
    now: clock.now,
    maxMs: 5 * MIN,
    unwatchedMs: MIN,
    negativeMs: 5_000,
    maxEntries,
    pods,
  });
}

describe('ReviewCache', () => {
  test('reads exp without trusting it; none, or not a JWT, is undefined', () => {
    assert.equal(tokenExpiryMs(jwt({ exp: 1_700_000_000 })), 1_700_000_000_000);
    assert.equal(tokenExpiryMs(jwt({})), undefined);
    assert.equal(tokenExpiryMs(jwt({ exp: 'soon' })), undefined);
    assert.equal(tokenExpiryMs('not-a-jwt'), undefined);
    assert.equal(tokenExpiryMs('a.%%%.c'), undefined);
  });

  test('a positive answer for a token bound to no pod: the flag, never past exp', () => {
    const clock = new Clock();
    const cache = cacheOf(clock);
    const late = jwt({ exp: (clock.ms + 3_600_000) / 1000 });
    cache.set('late', late, { ok: true, value: 'a' });
    const soon = jwt({ exp: (clock.ms + 2 * MIN) / 1000 });
    cache.set('soon', soon, { ok: true, value: 'b' });
    clock.ms += 2 * MIN - 1;
    assert.deepEqual(cache.get('soon'), { kind: 'hit', value: 'b' });
    clock.ms += 1;
    assert.deepEqual(cache.get('soon'), { kind: 'miss' }, 'expired with its token');
    clock.ms += 3 * MIN - 1;
    assert.deepEqual(cache.get('late'), { kind: 'hit', value: 'a' });
    clock.ms += 1;
    assert.deepEqual(cache.get('late'), { kind: 'miss' }, 'the flag bounds it');
  });

  test('no exp: the unwatched 60 s; a token already expired is not kept', () => {
    const clock = new Clock();
    const cache = cacheOf(clock);
    cache.set('k', 'opaque', { ok: true, value: 'a' });
    cache.set('old', jwt({ exp: (clock.ms - 1) / 1000 }), { ok: true, value: 'x' });
    assert.deepEqual(cache.get('old'), { kind: 'miss' });
    clock.ms += MIN - 1;
    assert.equal(cache.get('k').kind, 'hit');
    clock.ms += 1;
    assert.equal(cache.get('k').kind, 'miss');
  });

  test('a refusal is kept 5 s, even for an expired token (it stays refused)', () => {
    const clock = new Clock();
    const cache = cacheOf(clock);
    cache.set('k', jwt({ exp: (clock.ms - 3_600_000) / 1000 }), { ok: false, value: 'no' });
    clock.ms += 4_999;
    assert.deepEqual(cache.get('k'), { kind: 'hit', value: 'no' });
    clock.ms += 1;
    assert.equal(cache.get('k').kind, 'miss');
  });

  test('a pod-bound token: the flag while the watch holds its pod, a miss once it is gone', () => {
    const clock = new Clock();
    const pods = new Pods();
    const cache = cacheOf(clock, pods);
    const token = jwt({ exp: (clock.ms + 3_600_000) / 1000 });
    const pod: WatchedPod = { metadata: { uid: 'u1', labels: { a: '1' } } };
    pods.map.set('ns/app', pod);
    cache.set('k', token, {
      ok: true,
      value: 'a',
      pod: { namespace: 'ns', name: 'app', uid: 'u1' },
    });
    clock.ms += 4 * MIN;
    assert.deepEqual(cache.get('k'), { kind: 'hit', value: 'a' }, 'past the unwatched minute');
    const relabelled: WatchedPod = { metadata: { uid: 'u1', labels: { a: '2' } } };
    pods.map.set('ns/app', relabelled);
    assert.deepEqual(cache.get('k'), { kind: 'pod-changed', value: 'a', pod: relabelled });
    cache.refresh('k', 'a2', relabelled);
    assert.deepEqual(cache.get('k'), { kind: 'hit', value: 'a2' });
    pods.map.set('ns/app', { metadata: { uid: 'u2' } });
    assert.deepEqual(cache.get('k'), { kind: 'miss' }, 'another pod of the same name');
    cache.set('k', token, { ok: true, value: 'a', pod: { namespace: 'ns', name: 'app' } });
    pods.map.delete('ns/app');
    assert.deepEqual(cache.get('k'), { kind: 'miss' }, 'deleted: the very next request reviews');
  });

  test('a pod-bound token the watch does not hold (or no watch, or not synced): 60 s', () => {
    const clock = new Clock();
    const token = jwt({ exp: (clock.ms + 3_600_000) / 1000 });
    const bound = { namespace: 'ns', name: 'app', uid: 'u1' };
    const unsynced = new Pods();
    unsynced.hasSynced = false;
    unsynced.map.set('ns/app', { metadata: { uid: 'u1' } });
    for (const pods of [undefined, new Pods(), unsynced]) {
      const cache = cacheOf(clock, pods);
      cache.set('k', token, { ok: true, value: 'a', pod: bound });
      clock.ms += MIN - 1;
      assert.equal(cache.get('k').kind, 'hit');
      clock.ms += 1;
      assert.equal(cache.get('k').kind, 'miss');
    }
  });

  test('bounded: the oldest entry goes first', () => {
    const clock = new Clock();
    const cache = cacheOf(clock, undefined, 3);
    for (const k of ['a', 'b', 'c', 'd']) cache.set(k, 'opaque', { ok: true, value: k });
    assert.equal(cache.size, 3);
    assert.equal(cache.get('a').kind, 'miss');
    assert.equal(cache.get('d').kind, 'hit');
    cache.set('b', 'opaque', { ok: true, value: 'b2' }); // reviewed again: now the newest
    cache.set('e', 'opaque', { ok: true, value: 'e' });
    assert.equal(cache.get('c').kind, 'miss');
    assert.deepEqual(cache.get('b'), { kind: 'hit', value: 'b2' });
  });
});

describe('TokenAuthenticator', () => {
  /** The API server's side: TokenReviews and pod reads, counted. */
  function apiServer(options: { authenticated: (token: string) => boolean; pods: Pods }) {
    const calls = { reviews: 0, podGets: 0 };
    const answer = (method: string, path: string, body?: { spec: { token: string } }): unknown => {
      if (method === 'POST') {
        calls.reviews++;
        const token = body!.spec.token;
        if (!options.authenticated(token)) return { status: { authenticated: false } };
        const claims = JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()) as {
          bound?: boolean;
        };
        const bound = claims.bound === true;
        const pod = bound ? options.pods.map.get('ns/app') : undefined;
        return {
          status: {
            authenticated: true,
            audiences: ['switchyard'],
            user: {
              username: 'system:serviceaccount:ns:app',
              extra: bound
                ? {
                    'authentication.kubernetes.io/pod-name': ['app'],
                    'authentication.kubernetes.io/pod-uid': [pod?.metadata?.uid ?? 'gone'],
                  }
                : {},
            },
          },
        };
      }
      calls.podGets++;
      const pod = options.pods.map.get('ns/app');
      if (pod === undefined || !path.endsWith('/app'))
        throw new KubeApiError(404, method, path, '{"message":"not found"}');
      return pod;
    };
    const raw: Pick<KubeRaw, 'request'> = {
      // A throw in the executor rejects, as the real client's errors do.
      request: <T>(method: string, path: string, body?: unknown): Promise<T> =>
        new Promise<T>((resolve) =>
          resolve(answer(method, path, body as { spec: { token: string } }) as T),
        ),
    };
    return { raw, calls };
  }

  test('reuses a review 5 min, stops at once for a deleted pod, refreshes a relabelled one', async () => {
    const clock = new Clock();
    const pods = new Pods();
    pods.map.set('ns/app', { metadata: { uid: 'u1', labels: { 'switchyard.dev/pool': 'chat' } } });
    const { raw, calls } = apiServer({ authenticated: () => true, pods });
    const auth = new TokenAuthenticator(raw, { now: clock.now, pods });
    const exp = (clock.ms + 3_600_000) / 1000;
    const bearer = `Bearer ${jwt({ exp, bound: true })}`;
    const first = await auth.authenticate(bearer);
    assert.ok(first.ok);
    assert.deepEqual([...first.identity.pod!.follows], ['chat']);
    assert.equal(calls.podGets, 0, 'the watch had the pod: no GET');
    for (let i = 0; i < 29; i++) {
      clock.ms += 10_000; // a report every 10 s
      assert.ok((await auth.authenticate(bearer)).ok);
    }
    assert.equal(calls.reviews, 1, 'one review in 290 s');
    pods.map.set('ns/app', { metadata: { uid: 'u1', labels: { 'switchyard.dev/pool': 'code' } } });
    const relabelled = await auth.authenticate(bearer);
    assert.deepEqual([...(relabelled.ok ? relabelled.identity.pod!.follows : [])], ['code']);
    clock.ms += 10_000;
    assert.ok((await auth.authenticate(bearer)).ok);
    assert.equal(calls.reviews, 2, 'reviewed again after 5 min');
    pods.map.delete('ns/app');
    const gone = await auth.authenticate(bearer);
    assert.deepEqual(gone, { ok: false, reason: 'the pod app the token is bound to is gone' });
    assert.equal(calls.reviews, 3);
  });

  test('a refused token costs one review per 5 s, however often it is sent', async () => {
    const clock = new Clock();
    const { raw, calls } = apiServer({ authenticated: () => false, pods: new Pods() });
    const auth = new TokenAuthenticator(raw, { now: clock.now });
    const bearer = `Bearer ${jwt({ exp: (clock.ms + 3_600_000) / 1000 })}`;
    for (let i = 0; i < 100; i++) {
      clock.ms += 100;
      assert.equal((await auth.authenticate(bearer)).ok, false);
    }
    assert.equal(calls.reviews, 2, '10 s of requests: two reviews');
    assert.deepEqual(await auth.authenticate('Basic x'), {
      ok: false,
      reason: 'missing bearer token',
    });
  });

  test('sidecars sharing a token that arrive together cost one review', async () => {
    const { raw, calls } = apiServer({ authenticated: () => true, pods: new Pods() });
    const auth = new TokenAuthenticator(raw);
    const bearer = `Bearer ${jwt({ exp: Date.now() / 1000 + 3600 })}`;
    const all = await Promise.all(Array.from({ length: 10 }, () => auth.authenticate(bearer)));
    assert.ok(all.every((r) => r.ok));
    assert.equal(calls.reviews, 1);
  });
});
