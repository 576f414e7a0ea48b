import assert from 'node:assert/strict';
import { writeFile, rename } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import {
  BALANCE_EXAMPLE as EXAMPLE_BALANCE,
  FAILOVER_EXAMPLE as EXAMPLE_FAILOVER,
} from '../../crds/examples.ts';
import { balancePool, scratchDir } from '../../harness/pool-file.ts';
import { startSwitchyard, startSim } from '../../harness/processes.ts';
import { debugBackends, eventually, hello, rawChat, startPool } from '../helpers.ts';

describe('standalone pool file', () => {
  for (const [name, text] of [
    ['Balance', EXAMPLE_BALANCE],
    ['Failover', EXAMPLE_FAILOVER],
  ] as const) {
    test(`accepts the ${name} example exactly as written`, async () => {
      const { dir, cleanup } = await scratchDir();
      const file = join(dir, 'pool.yaml');
      await writeFile(file, text);
      const sidecar = await startSwitchyard([
        'sidecar',
        '--pool-file',
        file,
        '--listen',
        '127.0.0.1:0',
        '--admin',
        '127.0.0.1:0',
      ]);
      try {
        const debug = await debugBackends(sidecar);
        assert.equal(debug.pool, 'chat');
        assert.equal(debug.mode, name);
      } finally {
        await sidecar.stop();
        await cleanup();
      }
    });
  }

  test('refuses to start on an invalid file and lists every problem with its field', async () => {
    const { dir, cleanup } = await scratchDir();
    const file = join(dir, 'pool.yaml');
    await writeFile(
      file,
      `apiVersion: switchyard.dev/v1alpha1
kind: InferencePool
metadata: {name: chat}
spec:
  mode: Sideways
  backends:
  - {name: a, url: http://127.0.0.1:9101/v1, service: {name: vllm, port: 8000}}
  - {name: b}
  helth: {window: 5s}
`,
    );
    try {
      await assert.rejects(
        startSwitchyard([
          'sidecar',
          '--pool-file',
          file,
          '--listen',
          '127.0.0.1:0',
          '--admin',
          '127.0.0.1:0',
        ]),
        (err: Error) => {
          assert.match(err.message, /exited \(2\)/);
          assert.match(err.message, /spec\.mode/);
          assert.match(err.message, /spec\.backends\[0\]/);
          assert.match(err.message, /spec\.backends\[1\]/);
          assert.match(err.message, /helth/);
          return true;
        },
      );
    } finally {
      await cleanup();
    }
  });

  test('applies a valid change live without dropping a stream, and keeps the last good config on an invalid one', async () => {
    const pool = await startPool([{ name: 'a', flags: ['--decode-ms-per-token', '20'] }], (urls) =>
      balancePool(urls, '', ['a']),
    );
    const extra = await startSim('b');
    try {
      const streaming = rawChat(pool.sidecar.url, { ...hello(), stream: true, max_tokens: 60 });
      const next = balancePool([pool.sims[0]!.url, extra.url], '', ['a', 'b']);
      // Replace atomically, as editors and ConfigMap mounts do.
      await writeFile(join(pool.dir, 'pool.yaml.tmp'), next);
      await rename(join(pool.dir, 'pool.yaml.tmp'), pool.poolFile);
      await eventually(
        async () => (await debugBackends(pool.sidecar)).endpoints.length === 2,
        5_000,
        'the new backend to appear',
      );
      const stream = await streaming;
      assert.equal(stream.status, 200);
      assert.match(stream.text, /\[DONE\]/, 'the stream in progress finished');
      assert.equal((await debugBackends(pool.sidecar)).snapshotVersion, 2);

      await writeFile(pool.poolFile, 'spec: [this is not a pool');
      await eventually(
        () => /pool file change rejected/.test(pool.sidecar.output()),
        5_000,
        'the rejection to be logged',
      );
      const debug = await debugBackends(pool.sidecar);
      assert.equal(debug.snapshotVersion, 2);
      assert.equal(debug.endpoints.length, 2);
      assert.equal((await rawChat(pool.sidecar.url, hello())).status, 200);
    } finally {
      await extra.stop();
      await pool.stop();
    }
  });

  test('on SIGTERM stops accepting and lets a stream in progress finish', async () => {
    const pool = await startPool([{ name: 'a', flags: ['--decode-ms-per-token', '20'] }], (urls) =>
      balancePool(urls, '', ['a']),
    );
    try {
      const streaming = rawChat(pool.sidecar.url, { ...hello(), stream: true, max_tokens: 50 });
      await eventually(
        async () => (await debugBackends(pool.sidecar)).endpoints[0]!.inFlight === 1,
        5_000,
        'the stream to start',
      );
      process.kill(pool.sidecar.pid, 'SIGTERM');
      const stream = await streaming;
      assert.equal(stream.status, 200);
      assert.match(stream.text, /\[DONE\]/);
      assert.equal(await pool.sidecar.exited, 0);
    } finally {
      await pool.stop();
    }
  });
});
