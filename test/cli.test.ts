import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { describe, test } from 'node:test';
import { promisify } from 'node:util';
import { SWITCHYARD_BIN } from '../harness/processes.ts';
import { SERVICE_ACCOUNT_TOKEN } from '../status/collect.ts';

const run = promisify(execFile);

describe('switchyard command line', () => {
  test('prints an overview with every subcommand', async () => {
    const { stdout } = await run(process.execPath, [SWITCHYARD_BIN, '--help']);
    for (const sub of ['sidecar', 'sim', 'demo'])
      assert.match(stdout, new RegExp(`^\\s+${sub}\\b`, 'm'), sub);
  });

  for (const [sub, flags] of [
    [
      'sidecar',
      ['--pool-file', '--listen', '--admin', '--max-body-bytes', '--shutdown-grace', '--log-level'],
    ],
    [
      'sim',
      [
        '--port',
        '--name',
        '--slots',
        '--error-rate',
        '--rate-limit-rate',
        '--stall-rate',
        '--cold-start-ms',
        '--fingerprint',
        '--speed',
        '--model',
      ],
    ],
    ['demo', ['--duration', '--rate', '--seed', '--plain']],
  ] as const) {
    test(`${sub} --help lists its flags`, async () => {
      const { stdout } = await run(process.execPath, [SWITCHYARD_BIN, sub, '--help']);
      for (const flag of flags) assert.ok(stdout.includes(flag), `${sub} --help mentions ${flag}`);
    });
  }

  test(
    'the controller without any kubeconfig says so, instead of dialling localhost:8080',
    {
      // In a pod the service account is a configuration: nothing would be missing.
      skip: existsSync(SERVICE_ACCOUNT_TOKEN) ? 'running in a pod with a service account' : false,
    },
    async () => {
      const env = { ...process.env, HOME: '/nonexistent-switchyard-home', KUBECONFIG: '' };
      await assert.rejects(
        run(process.execPath, [SWITCHYARD_BIN, 'controller'], { env }),
        (err: { stderr: string; code: number }) => {
          assert.equal(err.code, 2);
          assert.match(err.stderr, /^switchyard controller: no kubeconfig: .*give --kubeconfig/);
          return true;
        },
      );
    },
  );

  test('the controller refuses a load scrape period under 25 ms (0 is off)', async () => {
    await assert.rejects(
      run(process.execPath, [SWITCHYARD_BIN, 'controller', '--load-scrape-every', '10ms']),
      (err: { stderr: string; code: number }) => {
        assert.equal(err.code, 2);
        assert.match(err.stderr, /--load-scrape-every must be 0 \(off\) or at least 25ms/);
        return true;
      },
    );
  });

  test('the controller refuses a placement budget too small to hold a placement (0 is off)', async () => {
    await assert.rejects(
      run(process.execPath, [SWITCHYARD_BIN, 'controller', '--placement-bytes-per-second', '500']),
      (err: { stderr: string; code: number }) => {
        assert.equal(err.code, 2);
        assert.match(
          err.stderr,
          /--placement-bytes-per-second 500: give 0 \(off\) or a whole number/,
        );
        return true;
      },
    );
  });

  test('rejects a malformed flag value with a message naming the flag', async () => {
    await assert.rejects(
      run(process.execPath, [
        SWITCHYARD_BIN,
        'sidecar',
        '--pool-file',
        'x.yaml',
        '--listen',
        'nonsense:port',
      ]),
      (err: { stderr: string; code: number }) => {
        assert.match(err.stderr, /--listen/);
        assert.notEqual(err.code, 0);
        return true;
      },
    );
  });
});
