import assert from 'node:assert/strict';
import type http from 'node:http';
import { afterEach, beforeEach, describe, test } from 'node:test';
import { waitFor } from '../../harness/k8s/cluster.ts';
import { LineSplitter, ListWatch, WatchEventError } from './list-watch.ts';
import type { KubeList } from './object-cache.ts';
import { fakeApiServer, type FakeApiServer } from './testing.ts';

interface Cm {
  metadata: { name: string; namespace: string; resourceVersion: string };
  data?: { value: string };
}

const cm = (name: string, resourceVersion: string, value = name): Cm => ({
  metadata: { name, namespace: 'ns', resourceVersion },
  data: { value },
});

const line = (type: string, object: unknown): string => `${JSON.stringify({ type, object })}\n`;

describe('LineSplitter', () => {
  test('keeps a line cut across chunks until its end comes', () => {
    const lines = new LineSplitter();
    assert.deepEqual(lines.push('{"a":1}\n{"b"'), ['{"a":1}']);
    assert.deepEqual(lines.push(':2}'), []);
    assert.deepEqual(lines.push('\n\n{"c":3}\n{"d":'), ['{"b":2}', '{"c":3}']);
    assert.deepEqual(lines.end(), ['{"d":']);
    assert.deepEqual(lines.end(), []);
  });
});

/**
 * An API server of ConfigMaps: lists answer `state.list`; each watch is held open and kept in
 * `watches` for the test to write events to (or to answer `watchStatus` instead).
 */
function scriptedServer() {
  const state: {
    list: KubeList<Cm>;
    lists: number;
    listStatus: number;
    watchStatus: number;
    watches: { url: URL; res: http.ServerResponse }[];
  } = {
    list: { metadata: { resourceVersion: '10' }, items: [] },
    lists: 0,
    listStatus: 200,
    watchStatus: 200,
    watches: [],
  };
  const server = fakeApiServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    if (url.searchParams.get('watch') === 'true') {
      if (state.watchStatus !== 200) {
        res.writeHead(state.watchStatus, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ kind: 'Status', code: state.watchStatus, message: 'too old' }));
        state.watchStatus = 200;
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      res.flushHeaders();
      state.watches.push({ url, res });
      return;
    }
    state.lists += 1;
    res.writeHead(state.listStatus, { 'content-type': 'application/json' });
    res.end(JSON.stringify(state.list));
  });
  return { state, server };
}

describe('a list-watch', () => {
  let api: FakeApiServer;
  let state: ReturnType<typeof scriptedServer>['state'];
  let changes: string[];
  let errors: unknown[];
  let informer: ListWatch<Cm> | undefined;

  beforeEach(async () => {
    const scripted = scriptedServer();
    state = scripted.state;
    api = await scripted.server;
    changes = [];
    errors = [];
  });
  afterEach(async () => {
    informer?.stop();
    await api.close();
  });

  const start = async (options: { idleTimeoutMs?: number } = {}): Promise<ListWatch<Cm>> => {
    informer = new ListWatch<Cm>({
      api: api.raw,
      path: '/api/v1/namespaces/ns/configmaps',
      list: () =>
        api.raw.request<KubeList<Cm>>(
          'GET',
          '/api/v1/namespaces/ns/configmaps?labelSelector=app%3Dchat',
        ),
      labelSelector: 'app=chat',
      fieldSelector: 'metadata.name!=skip',
      watchTimeoutSeconds: () => 300,
      ...options,
      handlers: {
        onChange: (o, kind) =>
          changes.push(`${kind} ${o.metadata.name}@${o.metadata.resourceVersion}`),
        onConnect: () => undefined,
        onHeard: () => undefined,
        onError: (err) => errors.push(err),
      },
    });
    await informer.start();
    return informer;
  };
  const watch = (n: number) => waitFor(`watch ${n}`, () => state.watches[n - 1], { intervalMs: 5 });

  test('lists, then watches from the list resourceVersion with bookmarks, a timeout and the selectors', async () => {
    state.list = { metadata: { resourceVersion: '10' }, items: [cm('a', '5'), cm('b', '6')] };
    const lw = await start();
    assert.deepEqual(changes, ['add a@5', 'add b@6']);
    const { url } = await watch(1);
    assert.equal(url.pathname, '/api/v1/namespaces/ns/configmaps');
    assert.deepEqual(Object.fromEntries(url.searchParams), {
      watch: 'true',
      resourceVersion: '10',
      allowWatchBookmarks: 'true',
      timeoutSeconds: '300',
      labelSelector: 'app=chat',
      fieldSelector: 'metadata.name!=skip',
    });
    assert.equal(lw.get('a', 'ns')?.data?.value, 'a');
    assert.equal(lw.list('ns').length, 2);
    assert.equal(lw.list().length, 2);
    assert.deepEqual(lw.list('other'), []);
  });

  test('applies events cut anywhere across chunks, a multi-byte character included', async () => {
    const lw = await start();
    const { res } = await watch(1);
    const text =
      line('ADDED', cm('a', '11', 'é✓')) +
      line('MODIFIED', cm('a', '12', 'second')) +
      line('MODIFIED', cm('a', '12', 'second')) + // the same version again: no update
      line('ADDED', cm('b', '13')) +
      line('DELETED', cm('b', '14')) +
      line('DELETED', cm('never-held', '15'));
    const bytes = Buffer.from(text);
    // Cut inside the two-byte é of the first object, then in small pieces.
    const cut = bytes.indexOf(Buffer.from('é')) + 1;
    res.write(bytes.subarray(0, cut));
    await new Promise((resolve) => setTimeout(resolve, 20));
    for (let at = cut; at < bytes.length; at += 7) res.write(bytes.subarray(at, at + 7));
    await waitFor('the events', () => changes.length === 4, { intervalMs: 5 });
    assert.deepEqual(changes, ['add a@11', 'update a@12', 'add b@13', 'delete b@14']);
    assert.equal(lw.get('a', 'ns')?.data?.value, 'second');
    assert.equal(lw.get('b', 'ns'), undefined);
  });

  test('watches again from the last resourceVersion (a bookmark too) when a watch ends', async () => {
    await start();
    const first = await watch(1);
    first.res.write(line('ADDED', cm('a', '11')));
    first.res.end(line('BOOKMARK', { metadata: { resourceVersion: '42' } }));
    const second = await watch(2);
    assert.equal(second.url.searchParams.get('resourceVersion'), '42');
    assert.equal(state.lists, 1, 'no re-list');
    assert.deepEqual(errors, []);
  });

  test('re-lists in place on a 410 ERROR event: deletes what went, updates what changed', async () => {
    state.list = { metadata: { resourceVersion: '10' }, items: [cm('a', '5'), cm('b', '6')] };
    const lw = await start();
    const first = await watch(1);
    state.list = { metadata: { resourceVersion: '99' }, items: [cm('b', '6'), cm('c', '90')] };
    changes.length = 0;
    first.res.write(line('ERROR', { kind: 'Status', code: 410, reason: 'Expired' }));
    const second = await watch(2);
    assert.equal(second.url.searchParams.get('resourceVersion'), '99');
    assert.deepEqual(changes, ['delete a@5', 'add c@90']);
    assert.deepEqual(
      lw.list('ns').map((o) => o.metadata.name),
      ['b', 'c'],
    );
    assert.deepEqual(errors, []);
  });

  test('re-lists in place when the watch request itself answers 410 Gone', async () => {
    state.watchStatus = 410;
    await start();
    await watch(1);
    assert.equal(state.lists, 2);
    assert.deepEqual(errors, []);
  });

  test('stops and reports any other ERROR event, a broken connection or a line that is not JSON', async () => {
    await start();
    (await watch(1)).res.write(line('ERROR', { kind: 'Status', code: 500, message: 'boom' }));
    await waitFor('the error', () => errors.length === 1, { intervalMs: 5 });
    assert.ok(errors[0] instanceof WatchEventError);
    assert.equal(errors[0].status, 500);
    informer?.stop();

    errors.length = 0;
    await start();
    (await watch(2)).res.write('{"type":"ADDED","object":\n');
    await waitFor('the error', () => errors.length === 1, { intervalMs: 5 });
    assert.match((errors[0] as Error).message, /not a JSON event/);
    informer?.stop();

    errors.length = 0;
    await start();
    await watch(3);
    api.cutConnections();
    await waitFor('the error', () => errors.length === 1, { intervalMs: 5 });
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(state.watches.length, 3, 'no watch after an error: the supervisor restarts');
  });

  test('rejects start when the list fails', async () => {
    state.listStatus = 503;
    await assert.rejects(start(), /503/);
    assert.equal(state.watches.length, 0);
  });

  test('makes a watch that went silent again, from the last resourceVersion', async () => {
    await start({ idleTimeoutMs: 100 });
    (await watch(1)).res.write(line('BOOKMARK', { metadata: { resourceVersion: '20' } }));
    const second = await watch(2);
    assert.equal(second.url.searchParams.get('resourceVersion'), '20');
    assert.deepEqual(errors, []);
  });
});
