/**
 * Security of a standalone sidecar: with no flags it listens on loopback only (checked inside a
 * network namespace, where the defaults cannot clash with anything), and the API keys it is
 * given reach their backends and nothing else: not its logs (at debug level), metrics, admin API,
 * or any answer a client got, across successes, failures, timeouts, aborts, bad requests, a
 * reload and a shutdown. The controller's side of the same scan is in test/k8s/controller-e2e.
 */
import assert from 'node:assert/strict';
import { readFile, writeFile } from 'node:fs/promises';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';
import { ask, STREAM_BODY, type Answer } from '../../harness/ask.ts';
import { scratchDir, sidecarOn, type SidecarOnPool } from '../../harness/pool-file.ts';
import { SWITCHYARD_BIN } from '../../harness/processes.ts';
import { eventually } from '../helpers.ts';
import { assertTestAddress, createTestHost, type TestHost } from '../k8s/test-hosts.ts';
import { pool } from './client.ts';
import { FAULTS, startFaultBackend, type FaultBackend } from './fault-backend.ts';
import { recordFigure } from './figures.ts';
import { poolYaml } from './fixtures.ts';
import { recorder, type Recorder } from './recorder.ts';
import { findSecrets } from './secrets.ts';

const netnsEnabled = process.getuid?.() === 0 && process.env['SWITCHYARD_K8S_TESTS'] !== '0';

describe('a sidecar with default flags', { skip: !netnsEnabled && 'needs root (netns)' }, () => {
  let host: TestHost;
  before(async () => {
    host = await createTestHost('defaults');
  });
  after(async () => {
    await host?.remove();
  });

  test('binds its proxy and admin ports to loopback only', async () => {
    const { dir, cleanup } = await scratchDir();
    try {
      const file = `${dir}/pool.yaml`;
      await writeFile(file, poolYaml(["{name: a, url: 'http://127.0.0.1:9/v1'}"]));
      const sidecar = host.spawn(process.execPath, [
        SWITCHYARD_BIN,
        'sidecar',
        '--pool-file',
        file,
      ]);
      const announced = await sidecar.waitForLine(/"msg":"sidecar listening"/);
      const { url, admin } = JSON.parse(announced) as { url: string; admin: string };
      assert.equal(url, 'http://127.0.0.1:8080');
      assert.equal(admin, 'http://127.0.0.1:9090');
      const listening = (await host.exec('ss', ['-ltnH'])).stdout
        .trim()
        .split('\n')
        .map((line) => line.trim().split(/\s+/)[3]);
      assert.deepEqual(listening.sort(), ['127.0.0.1:8080', '127.0.0.1:9090']);
      // From another machine (the root namespace), the host's address refuses both ports.
      assertTestAddress(host.ip);
      for (const port of [8080, 9090]) {
        const refused = await new Promise<string>((resolve) => {
          const s = net.connect(port, host.ip);
          s.once('connect', () => {
            s.destroy();
            resolve('connected');
          });
          s.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
        });
        assert.equal(refused, 'ECONNREFUSED', `port ${port} from outside`);
      }
      const inside = await host.exec(process.execPath, [
        '-e',
        "fetch('http://127.0.0.1:9090/readyz').then((r) => r.text()).then(console.log)",
      ]);
      assert.match(inside.stdout, /"status": "ready"/);
      await sidecar.stop();
    } finally {
      await cleanup();
    }
  });
});

describe('API keys given to a sidecar', () => {
  const KEYS = {
    ok: 'sk-reliability-ok-51c0ffee',
    down: 'sk-reliability-down-9ad1e4',
    stall: 'sk-reliability-stall-7b3e22',
  };
  let served: Recorder;
  let stalled: FaultBackend;
  let fixture: SidecarOnPool;

  before(async () => {
    served = await recorder();
    stalled = await startFaultBackend(FAULTS.headersThenStall);
    fixture = await sidecarOn(
      poolYaml(
        [
          `{name: ok, url: '${served.url}/v1', apiKeyEnv: KEY_OK}`,
          `{name: down, url: 'http://127.0.0.1:9/v1', apiKeyEnv: KEY_DOWN}`,
          `{name: stall, url: '${stalled.url}/v1', apiKeyEnv: KEY_STALL}`,
        ],
        [
          'health: {minRequests: 3, openFor: 1s}',
          'retry: {maxAttempts: 3, budgetPercent: 100}',
          'timeouts: {firstByte: 300ms}',
        ],
      ),
      ['--log-level', 'debug', '--max-body-bytes', '4096'],
      { KEY_OK: KEYS.ok, KEY_DOWN: KEYS.down, KEY_STALL: KEYS.stall },
    );
  });
  after(async () => {
    await fixture?.stop();
    await served?.close();
    await stalled?.close();
  });

  test('reach their backends, and no log, metric, admin answer or client answer', async (t) => {
    const { sidecar, poolFile } = fixture;
    const answers: Answer[] = [];
    const send = async (body: unknown, options: Parameters<typeof ask>[2] = {}): Promise<void> => {
      answers.push(await ask(sidecar.url, body, options));
    };
    answers.push(...(await pool(30, 3, () => ask(sidecar.url))));
    answers.push(...(await pool(10, 3, () => ask(sidecar.url, { ...STREAM_BODY, stream: false }))));
    await send(STREAM_BODY, { abortAfterBytes: 10 });
    await send('{"model":');
    await send({ model: 'm', pad: 'x'.repeat(5000) });
    await send('', { method: 'GET', path: '/v1/models' });
    await send('', { method: 'GET', path: '/nowhere' });
    await send(STREAM_BODY, { headers: { authorization: `Bearer ${KEYS.ok}-client` } });
    // The backends that fail also get their keys: break the good one so every endpoint is tried.
    await served.close();
    answers.push(...(await pool(6, 2, () => ask(sidecar.url))));
    // A valid reload and a rejected one, then a shutdown: all logged.
    await writeFile(poolFile, `${await readFile(poolFile, 'utf8')}\n`);
    await writeFile(poolFile, 'spec: {backends: 1}\n');
    await eventually(
      () => sidecar.output().includes('pool file change rejected'),
      10_000,
      'the rejected reload to be logged',
    );

    const admin = async (path: string): Promise<string> =>
      (await fetch(`${sidecar.adminUrl}${path}`)).text();
    const sources: Record<string, string> = {
      metrics: await admin('/metrics'),
      debugBackends: await admin('/debug/backends'),
      readyz: await admin('/readyz'),
      healthz: await admin('/healthz'),
      clientAnswers: answers.map((a) => `${JSON.stringify(a.headers)}\n${a.body}`).join('\n'),
    };
    await sidecar.stop();
    sources['logs'] = sidecar.output();
    for (const line of ['pool file change rejected', 'circuit breaker open', 'sidecar stopped'])
      assert.ok(sidecar.output().includes(line), `the run logged "${line}"`);

    assert.ok(
      served.seen.some((s) => s.headers.authorization === `Bearer ${KEYS.ok}`),
      'the key reached its backend (the scan is not vacuous)',
    );
    assert.ok(stalled.requests > 0, 'the stalling backend was tried');
    assert.ok(
      answers.some((a) => a.status >= 500),
      'failures were part of the run',
    );
    const leaks = findSecrets(sources, Object.values(KEYS));
    assert.deepEqual(leaks, []);
    recordFigure(t, {
      fault: 'security: API keys in sidecar logs, metrics, admin API, client answers',
      load: `${answers.length} requests (successes, 5xx, timeouts, aborts, 400/404/413), a reload, a shutdown`,
      lost: 0,
      requests: answers.length,
      leaks: leaks.length,
      scannedBytes: Object.values(sources).reduce((n, s) => n + s.length, 0),
    });
  });
});
