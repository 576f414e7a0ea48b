/**
 * `/startupz`, the injected sidecar's startup probe: it fails while the sidecar has no
 * configuration, so the kubelet holds the app back until its sidecar can route, and passes once
 * the startup grace is over anyway, so a controller that is down does not block the app forever.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { startSidecar } from '../../sidecar/sidecar.ts';

const dir = mkdtempSync(join(tmpdir(), 'switchyard-startup-'));
after(() => rmSync(dir, { recursive: true, force: true }));

test('/startupz waits for a configuration, but no longer than the startup grace', async () => {
  const tokenFile = join(dir, 'token');
  writeFileSync(tokenFile, 'token');
  const graceMs = 1_500;
  const sidecar = await startSidecar({
    // Port 1 refuses: the controller is down, no configuration arrives.
    source: {
      kind: 'controller',
      controllerUrl: 'http://127.0.0.1:1',
      namespace: 'chat',
      pool: 'chat',
      tokenFile,
      sidecarId: 'app-1',
    },
    listen: { host: '127.0.0.1', port: 0 },
    admin: { host: '127.0.0.1', port: 0 },
    logger: pino({ level: 'silent' }),
    maxBodyBytes: 1024,
    shutdownGraceMs: 100,
    startupGraceMs: graceMs,
    env: {},
  });
  try {
    const startupz = async (): Promise<[number, unknown]> => {
      const res = await fetch(`${sidecar.adminUrl}/startupz`);
      return [res.status, await res.json()];
    };
    assert.deepEqual(await startupz(), [503, { status: 'no configuration applied yet' }]);
    await sleep(graceMs + 200);
    assert.deepEqual(await startupz(), [200, { status: 'started', reason: 'grace over' }]);
    // Started is not ready: the pod stays out of Services until a configuration arrives.
    assert.equal((await fetch(`${sidecar.adminUrl}/readyz`)).status, 503);
  } finally {
    await sidecar.shutdown();
  }
});
