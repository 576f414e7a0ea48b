/**
 * docs/architecture.md's "Layout" table is the map a newcomer starts from, so it must not fall
 * behind the repository: every top-level folder has a row of its own (a row `` `bench/` ``, not
 * only `` `bench/common/` ``), and every path the table names exists.
 *
 * The folders come from the file system, not from a list kept here: dot-folders, `node_modules`,
 * build and coverage output, and anything git ignores are left out.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const DOC = 'docs/architecture.md';
/** Never part of the layout, whether git ignores them here or not. */
const SKIPPED = new Set(['node_modules', 'dist', 'coverage']);

/** Those of `paths` git ignores; none when there is no git. */
function gitIgnored(paths: readonly string[]): Set<string> {
  const result = spawnSync('git', ['check-ignore', '--', ...paths], {
    cwd: ROOT,
    encoding: 'utf8',
  });
  // 0: some are ignored, 1: none is, 128 or no git at all: nothing to go by.
  return new Set(result.status === 0 ? result.stdout.split('\n').filter((l) => l !== '') : []);
}

/** The repository's top-level folders, as the table must list them. */
function topLevelFolders(): string[] {
  const folders = readdirSync(ROOT, { withFileTypes: true })
    .filter((e) => e.isDirectory() && !e.name.startsWith('.') && !SKIPPED.has(e.name))
    .map((e) => `${e.name}/`);
  const ignored = gitIgnored(folders);
  return folders.filter((f) => !ignored.has(f)).sort();
}

/** The paths in backticks in the first column of the Layout table, e.g. `controller/core/`. */
function layoutPaths(markdown: string): string[] {
  const section = /^## Layout\n([\s\S]*?)(?=^## |(?![\s\S]))/m.exec(markdown);
  assert.ok(section, `${DOC} has no "## Layout" section`);
  const paths: string[] = [];
  for (const line of section[1]!.split('\n')) {
    if (!line.startsWith('|')) continue;
    const firstCell = line.split('|')[1] ?? '';
    for (const m of firstCell.matchAll(/`([^`]+)`/g)) paths.push(m[1]!);
  }
  return paths;
}

describe(`the Layout table of ${DOC}`, () => {
  const paths = layoutPaths(readFileSync(join(ROOT, DOC), 'utf8'));

  test('is found (a sanity check of the parser)', () => {
    assert.ok(paths.length > 10, `only ${paths.length} paths found in the Layout table`);
    assert.ok(paths.includes('sidecar/'), 'the table has a row for sidecar/');
  });

  test('has a row for every top-level folder of the repository', () => {
    const listed = new Set(paths);
    const missing = topLevelFolders().filter((folder) => !listed.has(folder));
    assert.deepEqual(
      missing.map((folder) => `${folder} is missing from the Layout table of ${DOC}`),
      [],
    );
  });

  test('names only paths that exist', () => {
    // `controller/*.ts` stands for files of a folder: the folder must exist.
    const stale = paths.filter((p) => !existsSync(join(ROOT, p.replace(/\*[^/]*$/, ''))));
    assert.deepEqual(
      stale.map((p) => `${p} is in the Layout table of ${DOC} but not in the repository`),
      [],
    );
  });
});
