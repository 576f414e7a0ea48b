/**
 * The routing benchmark's wrapper of `switchyard relay` (bench/routing/load-relay.ts, what feeds
 * the sidecars of `switchyard bench --load-source controller`): the pool in namespace `bench`, the
 * placements rate it is given (0 for `switchyard-local`), a bad pool file refused. What the relay
 * itself serves is tested in test/relay.test.ts.
 */
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { balancePool, scratchDir } from '../../harness/pool-file.ts';
import { startNodeScript, stopAll, type RunningProcess } from '../../harness/processes.ts';

const RELAY = join(import.meta.dirname, '../../bench/routing/load-relay.ts');

describe('bench load relay', () => {
  // What the relay serves is test/relay.test.ts's; here only what the bench's wrapper adds.
  it('serves the pool file in namespace bench, sharing placements unless told 0', async () => {
    const { dir, cleanup } = await scratchDir();
    const started: RunningProcess[] = [];
    try {
      const poolFile = join(dir, 'pool.yaml');
      await writeFile(poolFile, balancePool(['http://127.0.0.1:9']));
      const stream = async (url: string): Promise<Response> => {
        const ac = new AbortController();
        const res = await fetch(`${url}/v1/namespaces/bench/pools/test/snapshots`, {
          headers: { authorization: 'Bearer any' },
          signal: ac.signal,
        });
        ac.abort();
        return res;
      };
      const shared = await startNodeScript(RELAY, [poolFile, '100']);
      started.push(shared);
      const withView = await stream(shared.url);
      assert.equal(withView.status, 200);
      assert.equal(withView.headers.get('x-switchyard-placements'), '8192');
      const local = await startNodeScript(RELAY, [poolFile, '100', '0']);
      started.push(local);
      const withoutView = await stream(local.url);
      assert.equal(withoutView.status, 200);
      assert.equal(withoutView.headers.get('x-switchyard-placements'), null);
    } finally {
      await stopAll(started);
      await cleanup();
    }
  });

  it('refuses a pool file with a problem, naming the field', async () => {
    const { dir, cleanup } = await scratchDir();
    try {
      const poolFile = join(dir, 'pool.yaml');
      await writeFile(poolFile, balancePool(['ftp://10.0.0.1']));
      await assert.rejects(startNodeScript(RELAY, [poolFile, '100']), (err: Error) => {
        assert.match(err.message, /exited \(2\) before it was ready/);
        assert.match(err.message, /spec\.backends\[0\]\.url/);
        return true;
      });
    } finally {
      await cleanup();
    }
  });
});
