import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { V1ConfigMap } from '@kubernetes/client-node';
import pino from 'pino';
import { waitFor } from '../../harness/k8s/cluster.ts';
import type { KubeList } from './object-cache.ts';
import { SupervisedInformer } from './supervised-informer.ts';
import { fakeApiServer } from './testing.ts';

/**
 * A stand-in API server for the watch half (the list half is the injected `list`): it holds
 * every watch open until `cutWatches()`, as a real one does until it shuts down.
 */
async function watchServer() {
  let watches = 0;
  const server = await fakeApiServer((_req, res) => {
    watches += 1;
    res.writeHead(200, { 'content-type': 'application/json' });
    res.flushHeaders();
  });
  return {
    api: server.raw,
    watches: () => watches,
    cutWatches: () => server.cutConnections(),
    close: () => server.close(),
  };
}

const configMap = (name: string, value: string): V1ConfigMap => ({
  metadata: { name, namespace: 'ns', resourceVersion: '1' },
  data: { value },
});

describe('a supervised informer', () => {
  let api: Awaited<ReturnType<typeof watchServer>>;
  before(async () => (api = await watchServer()));
  after(() => api.close());

  test('keeps serving its last good cache while restarted lists fail, then moves to a listed one', async () => {
    const state = { failing: false, value: 'first', lists: 0, failedLists: 0 };
    const informer = new SupervisedInformer<V1ConfigMap>({
      name: 'configmaps',
      api: api.api,
      path: '/api/v1/configmaps',
      list: () => {
        state.lists += 1;
        if (state.failing) {
          state.failedLists += 1;
          return Promise.reject(new Error('connect ECONNREFUSED (the API server is restarting)'));
        }
        const list: KubeList<V1ConfigMap> = {
          metadata: { resourceVersion: '1' },
          items: [configMap('cm', state.value)],
        };
        return Promise.resolve(list);
      },
      logger: pino({ level: 'silent' }),
      onChange: () => undefined,
      backoff: { initialMs: 5, maxMs: 20 },
    });
    await informer.start();
    try {
      await informer.waitForSync();
      assert.equal(informer.get('cm', 'ns')?.data?.['value'], 'first');
      await waitFor('the watch', () => api.watches() > 0, { timeoutMs: 5_000, intervalMs: 5 });

      // The API server goes away: the watch breaks, and every re-list fails for a while.
      state.failing = true;
      api.cutWatches();
      await waitFor('three failed re-lists', () => state.failedLists >= 3, {
        timeoutMs: 10_000,
        intervalMs: 5,
      });
      assert.equal(informer.get('cm', 'ns')?.data?.['value'], 'first', 'the last good cache');
      assert.equal(informer.list('ns').length, 1);

      // It is back: the next list is served from.
      state.value = 'second';
      state.failing = false;
      await waitFor(
        'the re-listed cache',
        () => informer.get('cm', 'ns')?.data?.['value'] === 'second',
        {
          timeoutMs: 10_000,
          intervalMs: 5,
        },
      );
    } finally {
      await informer.stop();
    }
  });

  test('does not count as synced while its first list fails', async () => {
    let failing = true;
    const informer = new SupervisedInformer<V1ConfigMap>({
      name: 'configmaps',
      api: api.api,
      path: '/api/v1/configmaps',
      list: () =>
        failing
          ? Promise.reject(new Error('storage is (re)initializing'))
          : Promise.resolve({ metadata: { resourceVersion: '1' }, items: [configMap('cm', 'v')] }),
      logger: pino({ level: 'silent' }),
      onChange: () => undefined,
      backoff: { initialMs: 5, maxMs: 20 },
    });
    await informer.start();
    try {
      await new Promise((resolve) => setTimeout(resolve, 100));
      assert.equal(informer.hasSynced, false);
      failing = false;
      await informer.waitForSync();
      assert.equal(informer.get('cm', 'ns')?.data?.['value'], 'v');
    } finally {
      await informer.stop();
    }
  });
});
