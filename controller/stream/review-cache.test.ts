import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { KubeApiError, type KubeRaw } from '../kube/kube-raw.ts';
import {
  ReviewCache,
  tokenExpiryMs,
  type AccountWatch,
  type PodWatch,
  type ReviewedAccount,
  type WatchedPod,
} from './review-cache.ts';
import { ticketKey } from './review-ticket.ts';
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

class Accounts implements AccountWatch {
  hasSynced = true;
  readonly map = new Map<string, string>();
  uid(namespace: string, name: string): string | undefined {
    return this.map.get(`${namespace}/${name}`);
  }
}

/** A lookup without the entry's expiry (its own test reads that). */
function read<T>(cache: ReviewCache<T>, key: string): unknown {
  const hit = cache.get(key);
  if (hit.kind === 'miss') return hit;
  const { untilMs: _, ...rest } = hit;
  return rest;
}

/**
 * The API server's positive TokenReview of one of these tests' tokens (ServiceAccount ns/app):
 * bound to the pod ns/app, with the UID the pods hold now, when its claims say `bound: true`.
 */
function reviewOf(token: string, pods: Pods | undefined) {
  const claims = JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()) as {
    bound?: boolean;
  };
  const bound = claims.bound === true;
  return {
    status: {
      authenticated: true,
      audiences: ['switchyard'],
      user: {
        username: 'system:serviceaccount:ns:app',
        uid: 'sa-uid-1',
        extra: bound
          ? {
              'authentication.kubernetes.io/pod-name': ['app'],
              'authentication.kubernetes.io/pod-uid': [
                pods?.get('ns', 'app')?.metadata?.uid ?? 'gone',
              ],
            }
          : {},
      },
    },
  };
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

/** Every answer kept its whole lifetime: the tests below count exact minutes. */
const noJitter = (): number => 0;

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
    assert.deepEqual(read(cache, 'soon'), { kind: 'hit', value: 'b' });
    clock.ms += 1;
    assert.deepEqual(read(cache, 'soon'), { kind: 'miss' }, 'expired with its token');
    clock.ms += 3 * MIN - 1;
    assert.deepEqual(read(cache, 'late'), { kind: 'hit', value: 'a' });
    clock.ms += 1;
    assert.deepEqual(read(cache, 'late'), { kind: 'miss' }, 'the flag bounds it');
  });

  test('no exp: the unwatched 60 s; a token already expired is not kept', () => {
    const clock = new Clock();
    const cache = cacheOf(clock);
    cache.set('k', 'opaque', { ok: true, value: 'a' });
    cache.set('old', jwt({ exp: (clock.ms - 1) / 1000 }), { ok: true, value: 'x' });
    assert.deepEqual(read(cache, 'old'), { kind: 'miss' });
    clock.ms += MIN - 1;
    assert.equal(cache.get('k').kind, 'hit');
    clock.ms += 1;
    assert.equal(cache.get('k').kind, 'miss');
  });

  test('lifetime jitter: positive answers kept 80–100 % of their lifetime, refusals whole', () => {
    const clock = new Clock();
    const draws = [0, 0.5, 0.999, 0.7];
    const cache = new ReviewCache<string>({
      now: clock.now,
      maxMs: 5 * MIN,
      unwatchedMs: MIN,
      negativeMs: 5_000,
      maxEntries: 100,
      lifetimeJitter: 0.2,
      random: () => draws.shift()!,
    });
    const exp = (clock.ms + 3_600_000) / 1000;
    const kept = ['a', 'b', 'c'].map((k) => cache.set(k, jwt({ exp }, k), { ok: true, value: k }));
    assert.deepEqual(
      kept.map((untilMs) => (untilMs! - clock.ms) / 1000),
      [300, 270, 240.06],
      'the flag × (1 − 0.2 × draw): one draw per answer',
    );
    // The unwatched 60 s (no exp) shrinks the same way: every bound stays an upper bound.
    assert.equal(cache.set('opaque', 'opaque', { ok: true, value: 'o' })! - clock.ms, 51_600);
    cache.set('no', jwt({ exp }, 'no'), { ok: false, value: 'no' });
    assert.equal(draws.length, 0, 'a refusal draws nothing');
    clock.ms += 4_999;
    assert.equal(cache.get('no').kind, 'hit');
    clock.ms += 1;
    assert.equal(cache.get('no').kind, 'miss', 'a refusal keeps its 5 s');
  });

  test('a refusal is kept 5 s, even for an expired token (it stays refused)', () => {
    const clock = new Clock();
    const cache = cacheOf(clock);
    cache.set('k', jwt({ exp: (clock.ms - 3_600_000) / 1000 }), { ok: false, value: 'no' });
    clock.ms += 4_999;
    assert.deepEqual(read(cache, 'k'), { kind: 'hit', value: 'no' });
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
    assert.deepEqual(read(cache, 'k'), { kind: 'hit', value: 'a' }, 'past the unwatched minute');
    const relabelled: WatchedPod = { metadata: { uid: 'u1', labels: { a: '2' } } };
    pods.map.set('ns/app', relabelled);
    assert.deepEqual(read(cache, 'k'), { kind: 'pod-changed', value: 'a', pod: relabelled });
    cache.refresh('k', 'a2', relabelled);
    assert.deepEqual(read(cache, 'k'), { kind: 'hit', value: 'a2' });
    pods.map.set('ns/app', { metadata: { uid: 'u2' } });
    assert.deepEqual(read(cache, 'k'), { kind: 'miss' }, 'another pod of the same name');
    cache.set('k', token, { ok: true, value: 'a', pod: { namespace: 'ns', name: 'app' } });
    pods.map.delete('ns/app');
    assert.deepEqual(read(cache, 'k'), { kind: 'miss' }, 'deleted: the very next request reviews');
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
    assert.deepEqual(read(cache, 'b'), { kind: 'hit', value: 'b2' });
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
        return reviewOf(token, options.pods);
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
    const auth = new TokenAuthenticator(raw, { random: noJitter, now: clock.now, pods });
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
    assert.ok((await auth.authenticate(bearer)).ok, 'let in on its answer while renewed');
    assert.equal(calls.reviews, 2, 'reviewed again after 5 min');
    await new Promise(setImmediate); // the renewal lands
    pods.map.delete('ns/app');
    const gone = await auth.authenticate(bearer);
    assert.deepEqual(gone, { ok: false, reason: 'the pod app the token is bound to is gone' });
    assert.equal(calls.reviews, 3);
  });

  test('a refused token costs one review per 5 s, however often it is sent', async () => {
    const clock = new Clock();
    const { raw, calls } = apiServer({ authenticated: () => false, pods: new Pods() });
    const auth = new TokenAuthenticator(raw, { random: noJitter, now: clock.now });
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

  test('a connected sidecar whose answer ran out is let in at once and reviewed behind newcomers', async () => {
    const clock = new Clock();
    let valid = true;
    const { raw, calls } = apiServer({ authenticated: () => valid, pods: new Pods() });
    const auth = new TokenAuthenticator(raw, { random: noJitter, now: clock.now });
    const bearer = `Bearer ${jwt({ exp: (clock.ms + 3_600_000) / 1000 })}`;
    assert.ok((await auth.authenticate(bearer)).ok);
    clock.ms += 5 * MIN; // the answer ran out: within the renewal window
    valid = false; // its ServiceAccount was deleted meanwhile
    const renewing = await auth.authenticate(bearer);
    assert.ok(renewing.ok, 'served on its answer while the renewal runs');
    assert.equal(renewing.ticket, undefined, 'no ticket for an answer that ran out');
    assert.equal(calls.reviews, 2, 'the renewal went out');
    await new Promise(setImmediate);
    assert.deepEqual(await auth.authenticate(bearer), {
      ok: false,
      reason: 'token not authenticated',
    });
    assert.equal(calls.reviews, 2, 'the renewal’s refusal is kept');
  });

  test('never past the window: a request then waits for a review', async () => {
    const clock = new Clock();
    const { raw, calls } = apiServer({ authenticated: () => true, pods: new Pods() });
    const auth = new TokenAuthenticator(raw, { random: noJitter, now: clock.now });
    const bearer = `Bearer ${jwt({ exp: (clock.ms + 3_600_000) / 1000 })}`;
    assert.ok((await auth.authenticate(bearer)).ok);
    clock.ms += 6 * MIN + 1;
    const again = await auth.authenticate(bearer);
    assert.ok(again.ok && again.ticket === undefined);
    assert.equal(calls.reviews, 2);
  });

  test('sidecars sharing a token that arrive together cost one review', async () => {
    const { raw, calls } = apiServer({ authenticated: () => true, pods: new Pods() });
    const auth = new TokenAuthenticator(raw, { random: noJitter });
    const bearer = `Bearer ${jwt({ exp: Date.now() / 1000 + 3600 })}`;
    const all = await Promise.all(Array.from({ length: 10 }, () => auth.authenticate(bearer)));
    assert.ok(all.every((r) => r.ok));
    assert.equal(calls.reviews, 1);
  });
});

describe('TokenAuthenticator with a ServiceAccount watch', () => {
  test('a deleted account’s sidecar is refused at its next request; its ticket is not taken', async () => {
    const clock = new Clock();
    const accounts = new Accounts();
    accounts.map.set('ns/app', 'sa-uid-1');
    let alive = true;
    const reviews = { n: 0 };
    const raw: Pick<KubeRaw, 'request'> = {
      request: <T>(_method: string, _path: string, body?: unknown): Promise<T> => {
        reviews.n++;
        const token = (body as { spec: { token: string } }).spec.token;
        return Promise.resolve(
          (alive ? reviewOf(token, undefined) : { status: { authenticated: false } }) as T,
        );
      },
    };
    const key = ticketKey('serving key');
    const options = { random: noJitter, now: clock.now, accounts, ticketKeys: () => [key] };
    const first = new TokenAuthenticator(raw, { ...options, cacheMs: 30 * MIN });
    const other = new TokenAuthenticator(raw, { ...options, cacheMs: 30 * MIN });
    const bearer = `Bearer ${jwt({ exp: (clock.ms + 3_600_000) / 1000 })}`;
    const reviewed = await first.authenticate(bearer);
    assert.ok(reviewed.ok && reviewed.ticket !== undefined);
    assert.equal(reviewed.identity.serviceAccountUid, 'sa-uid-1');
    clock.ms += 20 * MIN;
    assert.ok((await first.authenticate(bearer)).ok, 'the whole 30 min from the cache');
    assert.equal(reviews.n, 1);
    // The account is deleted: the API server refuses its tokens, and the watch sees it go.
    alive = false;
    accounts.map.delete('ns/app');
    assert.deepEqual(await first.authenticate(bearer), {
      ok: false,
      reason: 'token not authenticated',
    });
    const taken = await other.authenticate(bearer, reviewed.ticket);
    assert.equal(taken.ok, false, 'the ticket names an account the watch does not hold');
    assert.equal(reviews.n, 3);
  });
});

describe('TokenAuthenticator with review tickets', () => {
  const key = ticketKey('serving key');
  const apiServer = (reviews: { n: number }, pods?: Pods): Pick<KubeRaw, 'request'> => ({
    request: <T>(_method: string, path: string, body?: unknown): Promise<T> => {
      if (path.includes('/pods/')) return Promise.resolve(pods?.map.get('ns/app') as T);
      reviews.n++;
      return Promise.resolve(reviewOf((body as { spec: { token: string } }).spec.token, pods) as T);
    },
  });

  test('a replica that never reviewed a token takes another replica’s ticket for it', async () => {
    const clock = new Clock();
    const reviews = { n: 0 };
    const vias: string[] = [];
    const options = {
      random: noJitter,
      now: clock.now,
      ticketKeys: () => [key],
      onAuthenticated: (via: string) => vias.push(via),
    };
    const first = new TokenAuthenticator(apiServer(reviews), options);
    const second = new TokenAuthenticator(apiServer(reviews), options);
    const token = jwt({ exp: (clock.ms + 3_600_000) / 1000 });
    const bearer = `Bearer ${token}`;
    const reviewed = await first.authenticate(bearer);
    assert.ok(reviewed.ok && reviewed.ticket !== undefined);
    assert.equal(reviews.n, 1);
    clock.ms += 4 * MIN; // the first replica dies; its sidecar reconnects to the second
    const taken = await second.authenticate(bearer, reviewed.ticket);
    assert.ok(taken.ok);
    assert.deepEqual(taken.identity, reviewed.identity);
    assert.equal(reviews.n, 1, 'no TokenReview on the second replica');
    assert.deepEqual(vias, ['review', 'ticket']);
    // Its reports hit the second replica's cache until the review's 5 min are over, then the
    // token is reviewed again: a ticket never makes the review last longer.
    clock.ms += MIN - 1;
    const cached = await second.authenticate(bearer, reviewed.ticket);
    assert.ok(cached.ok && cached.ticket !== undefined);
    assert.equal(reviews.n, 1);
    clock.ms += 1;
    assert.ok((await second.authenticate(bearer, reviewed.ticket)).ok);
    assert.equal(reviews.n, 2, 'expired with the first review');
    assert.deepEqual(vias, ['review', 'ticket', 'cache', 'review']);
  });

  test('a ticket is useless with another token, another key, or none configured', async () => {
    const clock = new Clock();
    const reviews = { n: 0 };
    const issuer = new TokenAuthenticator(apiServer(reviews), {
      random: noJitter,
      now: clock.now,
      ticketKeys: () => [key],
    });
    const exp = (clock.ms + 3_600_000) / 1000;
    const stolen = await issuer.authenticate(`Bearer ${jwt({ exp }, 'victim')}`);
    assert.ok(stolen.ok && stolen.ticket !== undefined);
    const same = new TokenAuthenticator(apiServer(reviews), {
      random: noJitter,
      now: clock.now,
      ticketKeys: () => [key],
    });
    await same.authenticate(`Bearer ${jwt({ exp }, 'thief')}`, stolen.ticket);
    assert.equal(reviews.n, 2, 'another token is reviewed, whatever ticket it brings');
    const rotated = new TokenAuthenticator(apiServer(reviews), {
      random: noJitter,
      now: clock.now,
      ticketKeys: () => [ticketKey('a newer serving key')],
    });
    await rotated.authenticate(`Bearer ${jwt({ exp }, 'victim')}`, stolen.ticket);
    assert.equal(reviews.n, 3, 'signed with a key this replica does not hold: reviewed');
    const plain = new TokenAuthenticator(apiServer(reviews), { random: noJitter, now: clock.now });
    const answer = await plain.authenticate(`Bearer ${jwt({ exp }, 'victim')}`, stolen.ticket);
    assert.ok(answer.ok && answer.ticket === undefined, 'no keys: none taken, none given');
    assert.equal(reviews.n, 4);
  });

  test('a pod-bound token’s ticket counts only while this replica’s pod watch holds the pod', async () => {
    const clock = new Clock();
    const pods = new Pods();
    pods.map.set('ns/app', { metadata: { uid: 'u1', labels: { 'switchyard.dev/pool': 'chat' } } });
    const reviews = { n: 0 };
    const options = { random: noJitter, now: clock.now, ticketKeys: () => [key], pods };
    const issuer = new TokenAuthenticator(apiServer(reviews, pods), options);
    const bearer = `Bearer ${jwt({ exp: (clock.ms + 3_600_000) / 1000, bound: true }, 'bound')}`;
    const first = await issuer.authenticate(bearer);
    assert.ok(first.ok && first.ticket !== undefined);
    const taker = new TokenAuthenticator(apiServer(reviews, pods), options);
    const taken = await taker.authenticate(bearer, first.ticket);
    assert.ok(taken.ok);
    assert.deepEqual([...taken.identity.pod!.follows], ['chat'], 'labels read from the watch');
    assert.equal(reviews.n, 1);
    // The pod was replaced by another of the same name: the ticket names the old UID.
    pods.map.set('ns/app', { metadata: { uid: 'u2', labels: { 'switchyard.dev/pool': 'chat' } } });
    const third = new TokenAuthenticator(apiServer(reviews, pods), options);
    await third.authenticate(bearer, first.ticket);
    assert.equal(reviews.n, 2, 'not the pod the ticket names: reviewed');
    // And a replica whose watch has not synced reviews too.
    pods.hasSynced = false;
    const unsynced = new TokenAuthenticator(apiServer(reviews, pods), options);
    await unsynced.authenticate(bearer, first.ticket);
    assert.equal(reviews.n, 3);
  });
});

describe('ReviewCache with a ServiceAccount watch', () => {
  const account = { namespace: 'ns', name: 'app', uid: 'sa1' };
  function cacheWith(clock: Clock, accounts: Accounts): ReviewCache<string> {
    return new ReviewCache<string>({
      now: clock.now,
      maxMs: 30 * MIN,
      unwatchedMs: MIN,
      negativeMs: 5_000,
      maxEntries: 100,
      accounts,
      unwatchedAccountMs: 5 * MIN,
      unseenAccountMs: 5_000,
    });
  }

  test('the flag while the watch holds the account; 5 min when it does not', () => {
    const clock = new Clock();
    const accounts = new Accounts();
    const cache = cacheWith(clock, accounts);
    const exp = (clock.ms + 3_600_000) / 1000;
    accounts.map.set('ns/app', 'sa1');
    assert.equal(
      cache.set('held', jwt({ exp }, 'a'), { ok: true, value: 'a', account }),
      clock.ms + 30 * MIN,
    );
    // Not (yet, or no longer) in the watch, or another UID: 5 s (the API server's own token
    // cache may call a just-deleted account's token valid for 10 s). No UID to check: 5 min.
    const others: [ReviewedAccount | undefined, number][] = [
      [{ ...account, name: 'new' }, 5_000],
      [{ ...account, uid: 'sa0' }, 5_000],
      [{ namespace: 'ns', name: 'app' }, 5 * MIN],
      [undefined, 5 * MIN],
    ];
    for (const [i, [other, ms]] of others.entries())
      assert.equal(
        cache.set(`k${i}`, jwt({ exp }, `k${i}`), { ok: true, value: 'b', account: other }),
        clock.ms + ms,
        JSON.stringify(other),
      );
    accounts.hasSynced = false;
    assert.equal(
      cache.set('unsynced', jwt({ exp }, 'u'), { ok: true, value: 'c', account }),
      clock.ms + 5 * MIN,
    );
    accounts.hasSynced = true;
    clock.ms += 29 * MIN;
    assert.equal(cache.get('held').kind, 'hit');
  });

  test('a deleted or recreated account ends its answers at the next request', () => {
    const clock = new Clock();
    const accounts = new Accounts();
    const cache = cacheWith(clock, accounts);
    const exp = (clock.ms + 3_600_000) / 1000;
    accounts.map.set('ns/app', 'sa1');
    cache.set('k', jwt({ exp }), { ok: true, value: 'a', account });
    assert.equal(cache.get('k').kind, 'hit');
    accounts.map.set('ns/app', 'sa2'); // deleted and created again: its old tokens are void
    assert.equal(cache.get('k').kind, 'miss');
    accounts.map.set('ns/app', 'sa1');
    cache.set('k', jwt({ exp }), { ok: true, value: 'a', account });
    accounts.map.delete('ns/app');
    assert.equal(cache.get('k').kind, 'miss');
    // Reviewed before the watch saw the new account: it counts from when the watch does.
    cache.set('new', jwt({ exp }, 'new'), { ok: true, value: 'n', account });
    assert.equal(cache.get('new').kind, 'hit', 'not seen yet is not gone');
    accounts.map.set('ns/app', 'sa1');
    assert.equal(cache.get('new').kind, 'hit');
    accounts.map.delete('ns/app');
    assert.equal(cache.get('new').kind, 'miss', 'seen, then gone');
  });

  test('another replica’s ticket: the flag only while the account is held, else 5 min', () => {
    const clock = new Clock();
    const accounts = new Accounts();
    const cache = cacheWith(clock, accounts);
    accounts.map.set('ns/app', 'sa1');
    cache.admit('held', 'a', clock.ms + 20 * MIN, undefined, account);
    cache.admit('loose', 'b', clock.ms + 20 * MIN, undefined, { ...account, uid: undefined });
    clock.ms += 5 * MIN;
    assert.equal(cache.get('held').kind, 'hit');
    assert.equal(cache.get('loose').kind, 'miss');
    accounts.map.delete('ns/app');
    assert.equal(cache.get('held').kind, 'miss');
  });
});

describe('ReviewCache renewal window', () => {
  const renewing = (clock: Clock, pods?: PodWatch): ReviewCache<string> =>
    new ReviewCache<string>({
      now: clock.now,
      maxMs: 5 * MIN,
      unwatchedMs: MIN,
      negativeMs: 5_000,
      maxEntries: 100,
      pods,
      renewMs: MIN,
    });

  test('a positive answer is stale for the window after it ran out, then gone', () => {
    const clock = new Clock();
    const cache = renewing(clock);
    const token = jwt({ exp: (clock.ms + 3_600_000) / 1000 });
    cache.set('k', token, { ok: true, value: 'app' });
    clock.ms += 5 * MIN - 1;
    assert.deepEqual(read(cache, 'k'), { kind: 'hit', value: 'app' });
    clock.ms += 1;
    assert.deepEqual(read(cache, 'k'), { kind: 'stale', value: 'app' });
    clock.ms += MIN - 1;
    assert.deepEqual(read(cache, 'k'), { kind: 'stale', value: 'app' });
    clock.ms += 1;
    assert.deepEqual(read(cache, 'k'), { kind: 'miss' });
  });

  test('never past the token’s exp; never for a refusal or another replica’s ticket', () => {
    const clock = new Clock();
    const cache = renewing(clock);
    cache.set('soon', jwt({ exp: (clock.ms + 5 * MIN + 10_000) / 1000 }), {
      ok: true,
      value: 'app',
    });
    cache.set('no', jwt({ exp: (clock.ms + 3_600_000) / 1000 }), { ok: false, value: 'no' });
    cache.admit('ticket', 'app', clock.ms + 2 * MIN);
    clock.ms += 2 * MIN;
    assert.deepEqual(read(cache, 'ticket'), { kind: 'miss' });
    assert.deepEqual(read(cache, 'no'), { kind: 'miss' });
    clock.ms += 3 * MIN;
    assert.deepEqual(read(cache, 'soon'), { kind: 'stale', value: 'app' });
    clock.ms += 10_000;
    assert.deepEqual(read(cache, 'soon'), { kind: 'miss' }, 'the token expired');
  });

  test('a pod-bound answer is stale only while the watch holds the same pod', () => {
    const clock = new Clock();
    const pods = new Pods();
    const pod = { metadata: { uid: 'u1' } };
    pods.map.set('ns/app', pod);
    const cache = renewing(clock, pods);
    const token = jwt({ exp: (clock.ms + 3_600_000) / 1000 });
    const bound = { namespace: 'ns', name: 'app', uid: 'u1' };
    cache.set('k', token, { ok: true, value: 'app', pod: bound });
    cache.set('unwatched', token, {
      ok: true,
      value: 'app',
      pod: { namespace: 'ns', name: 'other', uid: 'u9' },
    });
    clock.ms += 5 * MIN;
    assert.deepEqual(read(cache, 'k'), { kind: 'stale', value: 'app' });
    assert.deepEqual(read(cache, 'unwatched'), { kind: 'miss' }, 'its 60 s had no window');
    pods.map.set('ns/app', { metadata: { uid: 'u1', labels: { a: 'b' } } });
    assert.deepEqual(read(cache, 'k'), { kind: 'miss' }, 'relabelled: reviewed, not served');
  });
});
