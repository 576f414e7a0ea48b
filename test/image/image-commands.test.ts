/**
 * Replays the Dockerfile outside a container, stage by stage: each stage gets a folder that stands
 * for its /app, its COPY lines copy from the checkout (minus .dockerignore) or from an earlier
 * stage's folder, its RUN lines run there. The one departure: the build stage's full `npm ci`
 * links the checkout's node_modules instead (the same lock file; it only needs typescript), so
 * this stays cheap. Then the runtime stage's entrypoint starts from its folder: the CLI, a
 * simulator and a sidecar serving a request through it. The image itself is built with podman by
 * scripts/image/build.sh (test/node/).
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { cp, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { IMAGE_JEMALLOC } from '../../harness/allocator.ts';
import { spawnAndWait, type Spawned } from './spawn.ts';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const WORKDIR = '/app';

type Step =
  | { kind: 'copy'; from: string | undefined; src: string; dest: string }
  | { kind: 'run'; command: string };

interface Stage {
  name: string | undefined;
  base: string;
  steps: Step[];
  entrypoint: string[] | undefined;
}

function parseDockerfile(text: string): Stage[] {
  const stages: Stage[] = [];
  for (const line of text.split('\n')) {
    const from = /^FROM (\S+)(?: AS (\S+))?$/.exec(line);
    if (from !== null) {
      stages.push({ base: from[1]!, name: from[2], steps: [], entrypoint: undefined });
      continue;
    }
    const stage = stages.at(-1);
    if (stage === undefined) continue;
    const copy = /^COPY (?:--from=(\S+) )?(.+)$/.exec(line);
    if (copy !== null) {
      const paths = copy[2]!.split(/\s+/);
      const dest = paths.pop()!;
      for (const src of paths) stage.steps.push({ kind: 'copy', from: copy[1], src, dest });
    }
    const runLine = /^RUN (.+)$/.exec(line);
    if (runLine !== null) stage.steps.push({ kind: 'run', command: runLine[1]! });
    const entry = /^ENTRYPOINT (\[.*\])$/.exec(line);
    if (entry !== null) stage.entrypoint = JSON.parse(entry[1]!) as string[];
    if (/^WORKDIR /.test(line)) assert.equal(line, `WORKDIR ${WORKDIR}`, 'one WORKDIR, /app');
  }
  return stages;
}

/** A path of the image (absolute, or relative to WORKDIR) inside a stage's folder. */
const inStage = (dir: string, path: string): string =>
  join(dir, path.startsWith('/') ? path.slice(WORKDIR.length) : path);

describe('the image’s commands, run outside a container', () => {
  let stages: Stage[];
  let app: string;
  let node: string;
  let entry: string[];
  const spawned: Spawned[] = [];
  let tmp: string;
  const systemSteps: string[] = [];

  before(async () => {
    stages = parseDockerfile(await readFile(join(ROOT, 'Dockerfile'), 'utf8'));
    assert.ok(stages.length >= 2, 'the Dockerfile has a build stage and a runtime stage');
    tmp = await mkdtemp(join(tmpdir(), 'switchyard-image-'));
    const ignored = (await readFile(join(ROOT, '.dockerignore'), 'utf8'))
      .split('\n')
      .filter(Boolean);
    const dirs = new Map<string, string>();
    for (const [i, stage] of stages.entries()) {
      const dir = join(tmp, stage.name ?? `stage-${i}`);
      await mkdir(dir);
      for (const step of stage.steps) {
        if (step.kind === 'copy') {
          const source =
            step.from === undefined ? ROOT : (dirs.get(step.from) ?? assert.fail(step.from));
          const srcPath =
            step.from === undefined ? join(ROOT, step.src) : inStage(source, step.src);
          // `COPY a b ./`: into a folder; `COPY bin ./bin`: to that path.
          const target = step.dest.endsWith('/')
            ? join(inStage(dir, step.dest), step.src.split('/').pop()!)
            : inStage(dir, step.dest);
          await mkdir(dirname(target), { recursive: true });
          await cp(srcPath, target, {
            recursive: true,
            filter: (path) =>
              step.from !== undefined ||
              (!ignored.some((i) => !i.includes('*') && path.startsWith(join(ROOT, i))) &&
                !path.endsWith('.test.ts')),
          });
        } else if (/^npm ci --ignore-scripts$/.test(step.command)) {
          await symlink(join(ROOT, 'node_modules'), join(dir, 'node_modules'));
        } else if (step.command.startsWith('apt-get ')) {
          // Debian packages go to the system, not /app: podman's build installs them (test/node/
          // runs that image); here they would change this machine. Checked below instead.
          systemSteps.push(step.command);
        } else {
          await run('sh', ['-c', step.command], { cwd: dir, timeout: 300_000 });
        }
      }
      if (stage.name !== undefined) dirs.set(stage.name, dir);
      app = dir;
    }
    const entrypoint = stages.at(-1)!.entrypoint;
    assert.ok(entrypoint !== undefined && entrypoint[0] === 'node', 'ENTRYPOINT ["node", ...]');
    node = process.execPath;
    entry = entrypoint.slice(1).map((a) => inStage(app, a));
  });

  after(async () => {
    await Promise.all(spawned.map((s) => s.stop()));
    await rm(tmp, { recursive: true, force: true });
  });

  it('ships production dependencies and compiled JavaScript only', async () => {
    assert.ok(existsSync(join(app, 'node_modules/pino')));
    assert.ok(existsSync(join(app, 'node_modules/@kubernetes/client-node')));
    // http-proxy-3 is only the overhead benchmark's bare-proxy floor now.
    for (const dev of [
      'typescript',
      'eslint',
      'prettier',
      'openai',
      'fast-check',
      'http-proxy-3',
    ]) {
      assert.ok(
        !existsSync(join(app, 'node_modules', dev)),
        `${dev} is a dev dependency and must not be in the image`,
      );
    }
    const { stdout } = await run('find', [
      app,
      '-path',
      join(app, 'node_modules'),
      '-prune',
      '-o',
      '-type',
      'f',
      '-print',
    ]);
    const files = stdout
      .trim()
      .split('\n')
      .map((f) => f.slice(app.length + 1));
    assert.deepEqual(
      files.filter((f) => f !== 'package.json' && !/^dist\/.*\.js$/.test(f)),
      [],
      'only package.json and dist/**/*.js besides node_modules',
    );
    for (const left of ['dist/bench', 'dist/demo', 'dist/harness', 'dist/test'])
      assert.ok(!existsSync(join(app, left)), `${left} stays out`);
  });

  it('installs jemalloc where the chart preloads it from, and nothing else from Debian', () => {
    assert.equal(systemSteps.length, 1, systemSteps.join('\n'));
    const [step] = systemSteps;
    assert.match(step ?? '', /apt-get install -y --no-install-recommends libjemalloc2=\S+ &&/);
    assert.ok(step?.includes(IMAGE_JEMALLOC), step);
  });

  it('runs the CLI: --help of the sidecar and the controller', async () => {
    const { stdout } = await run(node, [...entry, '--help'], { cwd: app });
    assert.match(stdout, /sidecar/);
    const controller = await run(node, [...entry, 'controller', '--help'], { cwd: app });
    assert.match(controller.stdout, /--tls-cert-file/);
  });

  it('serves a request through a sidecar started from the copy', async () => {
    const sim = await spawnAndWait(
      node,
      [...entry, 'sim', '--port', '0', '--name', 'image'],
      /^http:\/\/\S+$/,
      app,
    );
    spawned.push(sim);
    const pool = join(tmp, 'pool.yaml');
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
      app,
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
