/**
 * No container engine runs here, so the Dockerfile cannot be built in CI. This test runs what it
 * runs, outside a container: it reads the Dockerfile, copies the files its COPY lines name (minus
 * .dockerignore), runs its `npm ci` line, and starts the entrypoint from that copy: the CLI, a
 * simulator and a sidecar serving a request through it.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { spawnAndWait, type Spawned } from './spawn.ts';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../..', import.meta.url));

async function dockerfile(): Promise<{ npmCi: string[]; copies: string[]; entrypoint: string[] }> {
  const text = await readFile(join(ROOT, 'Dockerfile'), 'utf8');
  const npmCi = /^RUN (npm ci [^&\n]+)/m.exec(text)?.[1]?.trim().split(/\s+/);
  const copies = [...text.matchAll(/^COPY (?!--from)(\S+) \S+$/gm)]
    .map((m) => m[1]!)
    .filter((src) => !src.includes('*'));
  const entrypoint = JSON.parse(/^ENTRYPOINT (\[.*\])$/m.exec(text)?.[1] ?? '[]') as string[];
  assert.ok(
    npmCi !== undefined && copies.length > 0 && entrypoint.length > 0,
    'the Dockerfile has the expected shape',
  );
  return { npmCi, copies, entrypoint };
}

describe('the image’s commands, run outside a container', () => {
  let dir: string;
  let node: string;
  let entry: string[];
  const spawned: Spawned[] = [];

  before(async () => {
    const { npmCi, copies, entrypoint } = await dockerfile();
    dir = await mkdtemp(join(tmpdir(), 'switchyard-image-'));
    const ignored = (await readFile(join(ROOT, '.dockerignore'), 'utf8'))
      .split('\n')
      .filter(Boolean);
    for (const src of ['package.json', 'package-lock.json', ...copies]) {
      await cp(join(ROOT, src), join(dir, src), {
        recursive: true,
        filter: (path) =>
          !path.endsWith('.test.ts') &&
          !ignored.some((i) => !i.includes('*') && path.startsWith(join(ROOT, i))),
      });
    }
    await run(npmCi[0]!, npmCi.slice(1), { cwd: dir, timeout: 300_000 });
    // The image's entrypoint is `node /app/bin/switchyard.js`: here /app is the copy.
    node = process.execPath;
    entry = entrypoint.slice(1).map((a) => a.replace('/app', dir));
  });

  after(async () => {
    await Promise.all(spawned.map((s) => s.stop()));
    await rm(dir, { recursive: true, force: true });
  });

  it('installs production dependencies only', () => {
    assert.ok(existsSync(join(dir, 'node_modules/http-proxy-3')));
    assert.ok(existsSync(join(dir, 'node_modules/@kubernetes/client-node')));
    for (const dev of ['typescript', 'eslint', 'prettier', 'openai', 'fast-check']) {
      assert.ok(
        !existsSync(join(dir, 'node_modules', dev)),
        `${dev} is a dev dependency and must not be in the image`,
      );
    }
    assert.ok(
      !existsSync(join(dir, 'test')) && !existsSync(join(dir, 'bench')),
      'tests and benchmarks stay out',
    );
  });

  it('runs the CLI: --help of the sidecar and the controller', async () => {
    const { stdout } = await run(node, [...entry, '--help'], { cwd: dir });
    assert.match(stdout, /sidecar/);
    const controller = await run(node, [...entry, 'controller', '--help'], { cwd: dir });
    assert.match(controller.stdout, /--tls-cert-file/);
  });

  it('serves a request through a sidecar started from the copy', async () => {
    const sim = await spawnAndWait(
      node,
      [...entry, 'sim', '--port', '0', '--name', 'image'],
      /^http:\/\/\S+$/,
      dir,
    );
    spawned.push(sim);
    const pool = join(dir, 'pool.yaml');
    await writeFile(
      pool,
      `apiVersion: switchyard.dev/v1alpha1\nkind: InferencePool\nmetadata: {name: image}\nspec:\n  backends: [{name: a, url: '${sim.line}/v1'}]\n`,
    );
    const sidecar = await spawnAndWait(
      node,
      [
        ...entry,
        'sidecar',
        '--pool-file',
        pool,
        '--listen',
        '127.0.0.1:0',
        '--admin',
        '127.0.0.1:0',
      ],
      /"msg":"sidecar listening"/,
      dir,
    );
    spawned.push(sidecar);
    const url = (JSON.parse(sidecar.line) as { url: string }).url;
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'm',
        max_tokens: 2,
        messages: [{ role: 'user', content: 'hi' }],
      }),
    });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('x-switchyard-backend') ?? '', /^a\//);
  });
});
