/**
 * A controller-fed sidecar that follows two pools (`--pool chat --pool embed`, as the injection
 * writes them): one cache file per pool beside `--cache-file`, readiness that waits for every
 * pool, and routing by model while one pool has no configuration yet. The controller is down
 * (port 1 refuses): the pools come from their cache files, as after a restart.
 */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import OpenAI from 'openai';
import pino from 'pino';
import type { PoolSnapshot } from '../../crds/snapshot.ts';
import { balancePool } from '../../harness/pool-file.ts';
import { startSim, stopAll, type RunningProcess } from '../../harness/processes.ts';
import { loadPoolText } from '../../sidecar/config/pool-file.ts';
import { cacheFileFor, startSidecar, type RunningSidecar } from '../../sidecar/sidecar.ts';

const NS = 'apps';
let dir: string;
let sims: RunningProcess[] = [];

/** A snapshot of pool `name` (as the controller sends one) with `url` as its one backend. */
function snapshotOf(name: string, url: string, models: string): PoolSnapshot {
  const yaml = balancePool([url], `  models: [${models}]`, [`${name}-backend`]).replace(
    'metadata: {name: test}',
    `metadata: {name: ${name}}`,
  );
  const loaded = loadPoolText(yaml, {});
  if (!loaded.ok) throw new Error(JSON.stringify(loaded.problems));
  const { policy, timeouts, endpoints, hash } = loaded.pool;
  return { version: 1, hash, pool: { namespace: NS, name }, policy, timeouts, endpoints };
}

async function sidecarOf(cacheFile: string): Promise<RunningSidecar> {
  const tokenFile = join(dir, 'token');
  await writeFile(tokenFile, 'token');
  return startSidecar({
    source: {
      kind: 'controller',
      controllerUrl: 'http://127.0.0.1:1',
      namespace: NS,
      pool: ['chat', 'embed'],
      tokenFile,
      cacheFile,
      sidecarId: 'app-1',
    },
    listen: { host: '127.0.0.1', port: 0 },
    admin: { host: '127.0.0.1', port: 0 },
    logger: pino({ level: 'silent' }),
    maxBodyBytes: 1024 * 1024,
    shutdownGraceMs: 100,
    startupGraceMs: 60_000,
    env: {},
  });
}

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'switchyard-pools-'));
  sims = [
    await startSim('chat-sim', ['--model', 'chat-model']),
    await startSim('embed-sim', ['--model', 'embed-model']),
  ];
});
after(async () => {
  await stopAll(sims);
  await rm(dir, { recursive: true, force: true });
});

test('one cache file per pool beside --cache-file; with one pool, the file itself', () => {
  assert.equal(cacheFileFor('/c/snapshot.json', 'chat', 2), '/c/snapshot.chat.json');
  assert.equal(cacheFileFor('/c/snapshot', 'chat', 2), '/c/snapshot.chat');
  assert.equal(cacheFileFor('/c/snapshot.json', 'chat', 1), '/c/snapshot.json');
  assert.equal(cacheFileFor(undefined, 'chat', 2), undefined);
});

test('two pools restored from their cache files route by model', async () => {
  const cacheFile = join(dir, 'both', 'snapshot.json');
  await mkdir(join(dir, 'both'));
  await writeFile(
    join(dir, 'both', 'snapshot.chat.json'),
    JSON.stringify(snapshotOf('chat', sims[0]!.url, 'chat-model')),
  );
  await writeFile(
    join(dir, 'both', 'snapshot.embed.json'),
    JSON.stringify(snapshotOf('embed', sims[1]!.url, 'embed-model')),
  );
  const sidecar = await sidecarOf(cacheFile);
  try {
    assert.deepEqual(
      sidecar.pools().map((p) => [p.name, p.current()?.name]),
      [
        ['chat', 'chat'],
        ['embed', 'embed'],
      ],
    );
    assert.deepEqual(
      sidecar.activePools().map((p) => p.name),
      ['chat', 'embed'],
    );
    const ready = await fetch(`${sidecar.adminUrl}/readyz`);
    assert.equal(ready.status, 200);
    assert.equal((await fetch(`${sidecar.adminUrl}/startupz`)).status, 200);
    const client = new OpenAI({ baseURL: `${sidecar.proxyUrl}/v1`, apiKey: 'k', maxRetries: 0 });
    const embed = await client.embeddings
      .create({ model: 'embed-model', input: 'x' })
      .withResponse();
    assert.match(embed.response.headers.get('x-switchyard-backend') ?? '', /^embed-backend\//);
    const chat = await client.chat.completions
      .create({ model: 'chat-model', max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] })
      .withResponse();
    assert.match(chat.response.headers.get('x-switchyard-backend') ?? '', /^chat-backend\//);
  } finally {
    await sidecar.shutdown();
  }
});

test('while one pool has no configuration: not ready, its models wait, the other routes', async () => {
  await mkdir(join(dir, 'one'));
  await writeFile(
    join(dir, 'one', 'snapshot.chat.json'),
    JSON.stringify(snapshotOf('chat', sims[0]!.url, 'chat-model')),
  );
  const sidecar = await sidecarOf(join(dir, 'one', 'snapshot.json'));
  try {
    assert.deepEqual(
      sidecar.activePools().map((p) => p.name),
      ['chat'],
    );
    const ready = await fetch(`${sidecar.adminUrl}/readyz`);
    assert.equal(ready.status, 503);
    assert.deepEqual(((await ready.json()) as { waiting: string[] }).waiting, ['embed']);
    assert.equal((await fetch(`${sidecar.adminUrl}/startupz`)).status, 503);
    const post = (model: string | undefined): Promise<Response> =>
      fetch(`${sidecar.proxyUrl}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model, max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] }),
      });
    assert.equal((await post('chat-model')).status, 200);
    // Perhaps the embedding pool's: it waits for that pool's configuration, as one pool would.
    const waiting = await post('embed-model');
    assert.equal(waiting.status, 503);
    const body = (await waiting.json()) as { error: { code: string; message: string } };
    assert.equal(body.error.code, 'no_configuration');
    assert.match(body.error.message, /pool embed/);
  } finally {
    await sidecar.shutdown();
  }
});
