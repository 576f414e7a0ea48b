/**
 * What operators do to a standalone sidecar's pool file while it serves: replace it with
 * something that is not a file, or with a huge file, edit it through symlinks (a ConfigMap mount),
 * write it continuously, rename the pool, send SIGHUP. A bad change is rejected with a clear
 * reason and the last good configuration stays; a good one is applied within a second.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdir, rename, rm, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { balancePool, scratchDir } from '../../harness/pool-file.ts';
import { startSidecar, startSim, type RunningProcess } from '../../harness/processes.ts';
import { debugBackends, eventually, getJson, hello, rawChat } from '../helpers.ts';

describe('pool file changes', () => {
  let simA: RunningProcess;
  let simB: RunningProcess;
  before(async () => {
    simA = await startSim('a', ['--decode-ms-per-token', '20']);
    simB = await startSim('b');
  });
  after(async () => {
    await simA?.stop();
    await simB?.stop();
  });

  const one = (): string => balancePool([simA.url], '', ['a']);
  const two = (): string => balancePool([simA.url, simB.url], '', ['a', 'b']);
  const endpointCount = async (sidecar: RunningProcess): Promise<number> =>
    (await debugBackends(sidecar)).endpoints.length;

  /** A sidecar started on `path` (written with `one()` unless it exists), stopped after `body`. */
  async function withSidecar(
    body: (sidecar: RunningProcess, dir: string) => Promise<void>,
    layout?: (dir: string) => Promise<string>,
  ): Promise<void> {
    const { dir, cleanup } = await scratchDir();
    let sidecar: RunningProcess | undefined;
    try {
      let file = join(dir, 'pool.yaml');
      if (layout === undefined) await writeFile(file, one());
      else file = await layout(dir);
      sidecar = await startSidecar(file);
      await body(sidecar, dir);
    } finally {
      await sidecar?.stop();
      await cleanup();
    }
  }

  test('a FIFO in place of the pool file is rejected without blocking; the next good file applies', async () => {
    await withSidecar(async (sidecar, dir) => {
      const file = join(dir, 'pool.yaml');
      await rm(file);
      execFileSync('mkfifo', [file]);
      await eventually(
        () => /not a regular file \(a FIFO\)/.test(sidecar.output()),
        5_000,
        'the FIFO to be rejected',
      );
      assert.equal((await rawChat(sidecar.url, hello())).status, 200);
      await rm(file);
      await writeFile(file, two());
      await eventually(async () => (await endpointCount(sidecar)) === 2, 5_000, 'the new file');
    });
  });

  test('a file over the size limit is rejected naming the limit, before it is parsed', async () => {
    await withSidecar(async (sidecar, dir) => {
      const file = join(dir, 'pool.yaml');
      // Valid YAML, 2 MiB of it: parsed, this used to stall the proxy for seconds.
      await writeFile(join(dir, 'big.tmp'), two() + `# ${'x'.repeat(2 << 20)}\n`);
      await rename(join(dir, 'big.tmp'), file);
      await eventually(
        () => /over the limit of 1048576 bytes \(1 MiB\)/.test(sidecar.output()),
        5_000,
        'the big file to be rejected',
      );
      assert.equal(await endpointCount(sidecar), 1, 'the last good configuration stays');
      assert.equal((await rawChat(sidecar.url, hello())).status, 200);
    });
  });

  test('an edit of a symlinked pool file in another directory is applied', async () => {
    await withSidecar(
      async (sidecar, dir) => {
        await writeFile(join(dir, 'elsewhere', 'real.yaml'), two());
        await eventually(async () => (await endpointCount(sidecar)) === 2, 5_000, 'the edit');
      },
      async (dir) => {
        await mkdir(join(dir, 'elsewhere'));
        await mkdir(join(dir, 'mount'));
        await writeFile(join(dir, 'elsewhere', 'real.yaml'), one());
        await symlink(join(dir, 'elsewhere', 'real.yaml'), join(dir, 'mount', 'pool.yaml'));
        return join(dir, 'mount', 'pool.yaml');
      },
    );
  });

  test('a symlink re-pointed to another file of a watched directory: its later edits apply', async () => {
    await withSidecar(
      async (sidecar, dir) => {
        // Re-point the link (atomically, as `ln -sfn` through a rename) to b.yaml beside a.yaml:
        // the directory is watched already, for a.yaml's sake.
        await writeFile(join(dir, 'files', 'b.yaml'), two());
        await symlink('b.yaml', join(dir, 'files', 'pool.tmp'));
        await rename(join(dir, 'files', 'pool.tmp'), join(dir, 'files', 'pool.yaml'));
        await eventually(async () => (await endpointCount(sidecar)) === 2, 5_000, 'the swap');
        // The edit of the new target: this one was ignored until SIGHUP.
        await writeFile(join(dir, 'files', 'b.yaml'), one());
        await eventually(async () => (await endpointCount(sidecar)) === 1, 5_000, 'the edit');
        // And the old target is no longer followed.
        await writeFile(join(dir, 'files', 'a.yaml'), two());
        await sleep(1_000);
        assert.equal(await endpointCount(sidecar), 1, 'an edit of the old target is not applied');
      },
      async (dir) => {
        await mkdir(join(dir, 'files'));
        await writeFile(join(dir, 'files', 'a.yaml'), one());
        await symlink('a.yaml', join(dir, 'files', 'pool.yaml'));
        return join(dir, 'files', 'pool.yaml');
      },
    );
  });

  test('a ConfigMap-style update (the ..data symlink swapped) is applied, and so is the next one', async () => {
    const version = async (dir: string, name: string, text: string): Promise<void> => {
      await mkdir(join(dir, 'mount', name));
      await writeFile(join(dir, 'mount', name, 'pool.yaml'), text);
      // The kubelet's atomic writer: a new link, renamed over ..data.
      await symlink(name, join(dir, 'mount', '..data_tmp'));
      await rename(join(dir, 'mount', '..data_tmp'), join(dir, 'mount', '..data'));
    };
    await withSidecar(
      async (sidecar, dir) => {
        await version(dir, '..v2', two());
        await eventually(async () => (await endpointCount(sidecar)) === 2, 5_000, 'update 1');
        await version(dir, '..v3', one());
        await eventually(async () => (await endpointCount(sidecar)) === 1, 5_000, 'update 2');
      },
      async (dir) => {
        await mkdir(join(dir, 'mount'));
        await version(dir, '..v1', one());
        await symlink('..data/pool.yaml', join(dir, 'mount', 'pool.yaml'));
        return join(dir, 'mount', 'pool.yaml');
      },
    );
  });

  test('under continuous writes a change is still applied while the writes go on', async () => {
    await withSidecar(async (sidecar, dir) => {
      const file = join(dir, 'pool.yaml');
      const versionBefore = (await debugBackends(sidecar)).snapshotVersion;
      let appliedDuringWrites = false;
      // 50 writes a second for 3 s, each a change: a plain debounce would never fire. Every write
      // differs from the pool in force and from the others (alternating two files let a reload
      // that read the one in force apply nothing, and the test failed one run in three).
      for (let i = 0; i < 150; i++) {
        await writeFile(
          file,
          balancePool([simA.url, simB.url], `  defaultTtft: ${200 + i}ms`, ['a', 'b']),
        );
        await sleep(20);
        if (i % 10 === 0 && (await debugBackends(sidecar)).snapshotVersion > versionBefore) {
          appliedDuringWrites = true;
          break;
        }
      }
      assert.ok(appliedDuringWrites, 'a change was applied before the writes stopped');
    });
  });

  test('a renamed pool is applied: /readyz shows the new name', async () => {
    await withSidecar(async (sidecar, dir) => {
      await writeFile(
        join(dir, 'pool.yaml'),
        one().replace('metadata: {name: test}', 'metadata: {name: renamed}'),
      );
      await eventually(
        async () =>
          (await getJson<{ pool?: string }>(`${sidecar.adminUrl}/readyz`)).pool === 'renamed',
        5_000,
        'the new name',
      );
    });
  });

  test('SIGHUP re-reads the pool file and cuts nothing', async () => {
    await withSidecar(async (sidecar) => {
      const streaming = rawChat(sidecar.url, { ...hello(), stream: true, max_tokens: 40 });
      await eventually(
        async () => (await debugBackends(sidecar)).endpoints[0]!.inFlight === 1,
        5_000,
        'the stream to start',
      );
      process.kill(sidecar.pid, 'SIGHUP');
      const stream = await streaming;
      assert.equal(stream.status, 200);
      assert.match(stream.text, /\[DONE\]/);
      assert.match(sidecar.output(), /reloading the pool file/);
      assert.equal((await rawChat(sidecar.url, hello())).status, 200, 'still serving');
    });
  });
});
