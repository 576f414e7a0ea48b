import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { balancePool } from '../../harness/pool-file.ts';
import { debugBackends, eventually, hello, rawChat, startPool } from '../helpers.ts';

/**
 * Server-reported load on a standalone sidecar (docs/policy.md §4): the ORCA header of its own
 * non-streamed answers, and its own scrape of each endpoint's /metrics.
 */
describe('server-reported load, standalone', () => {
  test('asks each server for its ORCA load report, uses it, and keeps the header from clients that did not ask', async () => {
    const pool = await startPool([{ name: 'a' }], (urls) => balancePool(urls), [
      '--load-scrape-every',
      '0',
    ]);
    try {
      const before = await debugBackends(pool.sidecar);
      assert.equal(before.endpoints[0]!.reported, null, 'nothing reported before any answer');

      const plain = await rawChat(pool.sidecar.url, hello());
      assert.equal(plain.status, 200);
      assert.equal(plain.headers.get('endpoint-load-metrics'), null, 'not asked: not shown');
      const after = await debugBackends(pool.sidecar);
      const reported = after.endpoints[0]!.reported;
      assert.ok(reported !== null, 'the answer carried a load report');
      assert.equal(typeof reported.kvCacheUsage, 'number');
      assert.equal(reported.running, undefined, "vLLM's ORCA header has no running count");

      const asked = await rawChat(pool.sidecar.url, hello(), {
        'endpoint-load-metrics-format': 'TEXT',
      });
      assert.match(asked.headers.get('endpoint-load-metrics') ?? '', /^TEXT /);
    } finally {
      await pool.stop();
    }
  });

  test("scrapes each endpoint's /metrics on its own, with no traffic at all", async () => {
    const pool = await startPool([{ name: 'a' }, { name: 'b' }], (urls) => balancePool(urls), [
      '--load-scrape-every',
      '200ms',
    ]);
    try {
      await eventually(
        async () =>
          (await debugBackends(pool.sidecar)).endpoints.every(
            (e) => e.reported !== null && e.reported.running === 0 && e.reported.waiting === 0,
          ),
        10_000,
        'every endpoint to report its queue from a scrape',
      );
    } finally {
      await pool.stop();
    }
  });

  test('refuses a scrape period under 25 ms, naming the flag', async () => {
    await assert.rejects(
      startPool([{ name: 'a' }], (urls) => balancePool(urls), ['--load-scrape-every', '10ms']),
      /--load-scrape-every must be 0 \(off\) or at least 25ms/,
    );
  });
});
