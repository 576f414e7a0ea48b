/**
 * The images test/node/ runs, as docker-archives for `ctr images import`: switchyard's (the
 * Dockerfile, built with podman by scripts/image/build.sh) and the test application's
 * (node:24-bookworm-slim, the official `openai` client and test/node/app/app.ts). Archives are
 * cached per image ID under ~/.cache/switchyard/image/archives/.
 */
import { execFile } from 'node:child_process';
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { ROOT, buildTool } from '../chart/tools.ts';

const run = promisify(execFile);
const PODMAN = ['--runtime', 'runc', '--cgroup-manager', 'cgroupfs'];
const ARCHIVES = join(
  process.env.SWITCHYARD_CACHE_DIR ?? join(homedir(), '.cache/switchyard'),
  'image',
  'archives',
);
export const APP_IMAGE = 'localhost/switchyard-test-app:dev';

export interface BuiltImage {
  name: string;
  id: string;
  archive: string;
}

async function podman(args: string[]): Promise<string> {
  return (await run('podman', [...PODMAN, ...args], { maxBuffer: 64 * 1024 * 1024 })).stdout.trim();
}

/** podman save --format docker-archive of `name`, once per image ID; older archives of it go. */
async function archiveOf(name: string, prefix: string): Promise<BuiltImage> {
  const id = (await podman(['image', 'inspect', '--format', '{{.Id}}', name])).slice(0, 16);
  mkdirSync(ARCHIVES, { recursive: true });
  const archive = join(ARCHIVES, `${prefix}-${id}.tar`);
  if (!existsSync(archive)) {
    for (const old of readdirSync(ARCHIVES))
      if (old.startsWith(`${prefix}-`)) rmSync(join(ARCHIVES, old), { force: true });
    const partial = `${archive}.partial`;
    rmSync(partial, { force: true });
    await podman(['save', '--format', 'docker-archive', '-o', partial, name]);
    renameSync(partial, archive);
  }
  return { name, id, archive };
}

/** Builds (or finds cached) switchyard's image. */
export async function switchyardImage(): Promise<BuiltImage> {
  const name = await buildTool('scripts/image/build.sh', '[image-build]');
  return archiveOf(name, 'switchyard');
}

/** Builds the test application's image on the node:24-bookworm-slim stand-in. */
export async function appImage(): Promise<BuiltImage> {
  const { stdout } = await run('bash', [join(ROOT, 'scripts/image/build.sh'), '--base-only']);
  const base = stdout.trim().split('\n').pop()!;
  const context = mkdtempSync(join(tmpdir(), 'switchyard-app-image-'));
  try {
    cpSync(join(ROOT, 'node_modules/openai'), join(context, 'node_modules/openai'), {
      recursive: true,
    });
    cpSync(join(ROOT, 'test/node/app/app.ts'), join(context, 'app.ts'));
    writeFileSync(join(context, 'package.json'), '{ "type": "module", "private": true }\n');
    writeFileSync(
      join(context, 'Containerfile'),
      [
        `FROM ${base}`,
        'WORKDIR /app',
        'COPY package.json app.ts ./',
        'COPY node_modules ./node_modules',
        'USER 65532:65532',
        'ENTRYPOINT ["node", "/app/app.ts"]',
        '',
      ].join('\n'),
    );
    await podman([
      'build',
      '--pull=never',
      '-q',
      '-t',
      APP_IMAGE,
      '-f',
      join(context, 'Containerfile'),
      context,
    ]);
  } finally {
    rmSync(context, { recursive: true, force: true });
  }
  return archiveOf(APP_IMAGE, 'test-app');
}
