import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import pino from 'pino';
import { waitFor } from '../../harness/k8s/cluster.ts';
import { GaieWatches } from './gaie-cache.ts';
import { fakeApiServer } from './testing.ts';

/**
 * A stand-in API server for GAIE's pool list: it answers `status` to lists (an empty list once
 * it is 200) and holds watches open, as a real one does.
 */
async function apiServer() {
  const state = { status: 503, lists: 0 };
  const server = await fakeApiServer((req, res) => {
    if (req.url?.includes('watch=true') === true) {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.flushHeaders();
      return;
    }
    state.lists += 1;
    res.writeHead(state.status, { 'content-type': 'application/json' });
    res.end(
      state.status === 200
        ? JSON.stringify({ metadata: { resourceVersion: '1' }, items: [] })
        : JSON.stringify({
            kind: 'Status',
            code: state.status,
            message: 'etcdserver: request timed out',
          }),
    );
  });
  return { api: server.raw, state, close: () => server.close() };
}

describe('GAIE watches', () => {
  test('a list failing with a 5xx is said in the lookup (not pending forever), then clears', async () => {
    const api = await apiServer();
    const enqueued: string[] = [];
    const watches = new GaieWatches({
      api: api.api,
      logger: pino({ level: 'silent' }),
      index: { poolsForGaiePool: () => ['apps/chat'] },
      queue: { add: (key) => enqueued.push(key) },
      onRestart: () => undefined,
    });
    try {
      watches.watchOnly(['apps/gaie-chat']);
      await waitFor('the failing list to be reported', () => {
        const found = watches.lookup('apps', 'gaie-chat');
        return found !== 'pending' && found.kind === 'unreadable';
      });
      const failing = watches.lookup('apps', 'gaie-chat');
      assert.ok(failing !== 'pending' && failing.kind === 'unreadable');
      assert.match(
        failing.why,
        /listing inferencepools\.inference\.networking\.k8s\.io failed \(HTTP 503\); the controller retries/,
      );
      // The referencing pool was queued to say so, not left to poll.
      assert.deepEqual([...new Set(enqueued)], ['apps/chat']);
      api.state.status = 200;
      await waitFor(
        'the next list to succeed',
        () => {
          const found = watches.lookup('apps', 'gaie-chat');
          return found !== 'pending' && found.kind === 'not-found';
        },
        { timeoutMs: 40_000, intervalMs: 50 },
      );
    } finally {
      await watches.stop();
      await api.close();
    }
  });
});
