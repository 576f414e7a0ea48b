/**
 * `switchyard status --admin` through real processes: two simulators, a sidecar on a pool file
 * (one backend with an API key from the environment), and the real CLI, before and after one
 * simulator starts failing. The table shows the breaker that opened, the exit code goes 0 → 1,
 * and the key appears nowhere: not in the table, the JSON, or /debug/backends itself.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { balancePool, scratchDir } from '../harness/pool-file.ts';
import {
  SWITCHYARD_BIN,
  stopAll,
  type RunningProcess,
  startSidecar,
  startSim,
} from '../harness/processes.ts';
import { debugBackends, eventually, hello, rawChat, simConfig } from './helpers.ts';

const API_KEY = 'sk-status-test-0123456789abcdef';

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `switchyard status ...args`; resolves with the exit code and both streams. */
function status(...args: string[]): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [SWITCHYARD_BIN, 'status', ...args],
      { timeout: 15_000 },
      (error, stdout, stderr) => {
        const code = error === null ? 0 : typeof error.code === 'number' ? error.code : -1;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

/** The table's lines: from the header (starting with ID) to the line before the first blank. */
function tableOf(stdout: string): string[] {
  const lines = stdout.split('\n');
  const start = lines.findIndex((l) => l.startsWith('ID '));
  assert.ok(start >= 0, stdout);
  const end = lines.findIndex((l, i) => i > start && !/^[a-z]\//.test(l));
  return lines.slice(start, end);
}

/** Asserts each left-aligned column's cells start exactly under its header name. */
function assertAligned(table: string[], columns: string[]): void {
  const header = table[0]!;
  for (const name of columns) {
    const at = header.indexOf(name);
    assert.ok(at > 0, `${name} in ${header}`);
    for (const row of table.slice(1))
      assert.match(
        row.slice(at - 2, at + 1),
        /^ {2}\S$/,
        `${name} lines up in:\n${table.join('\n')}`,
      );
  }
}

describe('switchyard status --admin, through a real sidecar', () => {
  let sims: RunningProcess[] = [];
  let sidecar: RunningProcess | undefined;
  let cleanup: (() => Promise<void>) | undefined;
  let admin: string;

  before(async () => {
    const scratch = await scratchDir();
    cleanup = scratch.cleanup;
    const flags = ['--model', 'llama', '--fingerprint', 'fp_a'];
    sims = await Promise.all([startSim('a', flags), startSim('b', flags)]);
    const poolFile = join(scratch.dir, 'pool.yaml');
    await writeFile(
      poolFile,
      balancePool(
        sims.map((s) => s.url),
        [
          '  drift: {probeEvery: 1s, action: Warn}',
          '  affinity: {key: None}',
          '  health: {minRequests: 5}',
        ].join('\n'),
      ).replace('name: a, url:', 'name: a, apiKeyEnv: STATUS_TEST_KEY, url:'),
    );
    sidecar = await startSidecar(poolFile, [], { STATUS_TEST_KEY: API_KEY });
    admin = sidecar.adminUrl!;
    // Both endpoints probed, so the table has their fingerprints.
    await eventually(
      async () =>
        (await debugBackends(sidecar!)).endpoints.every(
          (e) => (e as unknown as { fingerprint: string | null }).fingerprint !== null,
        ),
      10_000,
      'both endpoints probed',
    );
  });

  after(async () => {
    await stopAll([sidecar, ...sims]);
    await cleanup?.();
  });

  it('healthy: every endpoint closed with its fingerprint, exit code 0', async () => {
    for (let i = 0; i < 4; i++)
      assert.equal((await rawChat(sidecar!.url, hello('llama'))).status, 200);
    const run = await status('--admin', admin);
    assert.equal(run.code, 0, run.stdout + run.stderr);
    assert.match(run.stdout, new RegExp(`^Sidecar +${admin.replace(/[.:/]/g, '\\$&')}$`, 'm'));
    assert.match(run.stdout, /^Ready +yes$/m);
    assert.match(run.stdout, /^Pool +test \(mode Balance\)$/m);
    assert.match(run.stdout, /^Endpoints +2: 0 open, 0 half-open, 0 drifted$/m);
    const table = tableOf(run.stdout);
    assert.equal(table.length, 3, table.join('\n'));
    assert.match(
      table[0]!,
      /^ID +BREAKER +IN-FLIGHT +ERRORS\/REQS +429S +EWMA TTFT +DRIFT +FINGERPRINT$/,
    );
    for (const row of table.slice(1))
      assert.match(row, /^[ab]\/127\.0\.0\.1:\d+ +closed +0 +\S.* +ok +llama\/fp_a\/[0-9a-f]{12}$/);
    assertAligned(table, ['BREAKER', 'DRIFT', 'FINGERPRINT']);
    assert.match(run.stdout, /\nOK\n$/);
    assert.equal(run.stderr, '');
  });

  it('one simulator failing: its breaker open in the table, first, and exit code 1', async () => {
    await simConfig(sims[0]!, { errorRate: 1 });
    await eventually(
      async () => {
        // Failed attempts are retried on b, so clients still get 200s.
        await Promise.all(Array.from({ length: 4 }, () => rawChat(sidecar!.url, hello('llama'))));
        return (await debugBackends(sidecar!)).endpoints.some(
          (e) => e.id.startsWith('a/') && e.breaker === 'open',
        );
      },
      10_000,
      "a's breaker to open",
    );
    const run = await status('--admin', admin);
    assert.equal(run.code, 1, run.stdout + run.stderr);
    assert.match(run.stdout, /^Endpoints +2: 1 open, 0 half-open, 0 drifted$/m);
    const table = tableOf(run.stdout);
    assert.match(
      table[1]!,
      // The window also holds the successes of the test before: at least half are errors.
      /^a\/127\.0\.0\.1:\d+ +open +0 +\d+\/\d+ \((5\d|[6-9]\d|100)%\) +0 /,
      table.join('\n'),
    );
    assert.match(table[2]!, /^b\/127\.0\.0\.1:\d+ +closed /);
    assertAligned(table, ['BREAKER', 'DRIFT', 'FINGERPRINT']);
    assert.match(
      run.stdout,
      /^UNHEALTHY \(exit code 1\):\n {2}- a\/127\.0\.0\.1:\d+: breaker open$/m,
    );

    const json = await status('--admin', admin, '--output', 'json');
    assert.equal(json.code, 1);
    const view = JSON.parse(json.stdout) as {
      source: string;
      ready: boolean;
      exitCode: number;
      problems: string[];
      rows: { id: string; breaker: string; window: { errors: number; requests: number } }[];
    };
    assert.equal(view.source, 'sidecar');
    assert.equal(view.ready, true);
    assert.equal(view.exitCode, 1);
    assert.equal(view.rows[0]!.breaker, 'open');
    const { window } = view.rows[0]!;
    assert.ok(window.requests >= 5 && window.errors * 2 >= window.requests, JSON.stringify(window));
    assert.match(view.problems[0]!, /^a\/127\.0\.0\.1:\d+: breaker open$/);

    // The key the sidecar sends to backend a is nowhere to be seen.
    const raw = await (await fetch(`${admin}/debug/backends`)).text();
    for (const text of [raw, run.stdout, run.stderr, json.stdout])
      assert.ok(!text.includes(API_KEY) && !text.includes('sk-status-test'), 'no API key');
  });

  it('exit code 2 when it cannot read a sidecar, or on a usage error', async () => {
    const proxy = await status('--admin', sidecar!.url);
    assert.equal(proxy.code, 2);
    assert.match(proxy.stderr, /answered HTTP 404: not the admin API of a switchyard sidecar/);
    assert.equal(proxy.stdout, '');
    for (const args of [
      [],
      ['--pool', 'chat', '--admin', admin],
      ['--admin', admin, '-n', 'apps'],
    ]) {
      const run = await status(...args);
      assert.equal(run.code, 2, `${args.join(' ')}: ${run.stderr}`);
      assert.match(run.stderr, /--help for usage/);
    }
    const bad = await status('--admin', admin, '--output', 'yaml');
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--output/);
  });

  it('the CLI loads the Kubernetes client only for status --pool', async () => {
    // A resolve hook that reports every module of the client, of status/ and of the schema.
    const hook = `data:text/javascript,${encodeURIComponent(
      "import { registerHooks } from 'node:module'; import { writeSync } from 'node:fs';" +
        'registerHooks({ resolve(s, c, next) { const r = next(s, c);' +
        " if (/@kubernetes|\\/status\\//.test(r.url)) writeSync(2, 'LOADED ' + r.url + '\\n'); return r; } });",
    )}`;
    const loaded = (args: string[]): Promise<string> =>
      new Promise((resolve) => {
        execFile(process.execPath, ['--import', hook, SWITCHYARD_BIN, ...args], (_e, _o, stderr) =>
          resolve(stderr),
        );
      });
    const [sim, admin, pool] = await Promise.all([
      loaded(['sim', '--help']),
      loaded(['status', '--admin', '127.0.0.1:1']),
      loaded(['status', '--pool', 'chat', '--kubeconfig', '/nonexistent/kubeconfig']),
    ]);
    assert.doesNotMatch(sim, /LOADED/, 'nothing of status at start');
    assert.match(admin, /LOADED .*\/status\/collect\.ts/);
    assert.doesNotMatch(admin, /@kubernetes/, 'no Kubernetes client for --admin');
    assert.match(
      pool,
      /LOADED .*@kubernetes\/client-node/,
      'the hook sees the client when it loads',
    );
  });

  it('--help lists the flags, examples and exit codes', async () => {
    const run = await status('--help');
    assert.equal(run.code, 0);
    for (const text of [
      '--pool',
      '--namespace',
      '--kubeconfig',
      '--context',
      '--admin',
      '--output',
      'Examples:',
      'Exit codes:',
    ])
      assert.ok(run.stdout.includes(text), text);
  });
});
