/**
 * The docs link to each other by heading (docs/policy.md's reasons point at the benchmark runs
 * that chose each rule in docs/benchmarks.md, result folders point back), and a renamed or moved
 * section breaks those links without a sound. Every relative link of every Markdown file in the
 * repository must reach a file that exists, and, when it names a heading (`file.md#heading`, or
 * `#heading` in the same file), a heading that exists, slugged the way GitHub slugs them.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const SKIPPED = new Set(['node_modules', 'dist', 'coverage', '.git']);

/** The Markdown files git tracks; without git, every one under the root but build output. */
function markdownFiles(): string[] {
  const listed = spawnSync('git', ['ls-files', '-z', '--', '*.md'], {
    cwd: ROOT,
    encoding: 'utf8',
  });
  if (listed.status === 0) return listed.stdout.split('\0').filter((f) => f !== '');
  const found: string[] = [];
  const walk = (dir: string): void => {
    for (const entry of readdirSync(join(ROOT, dir), { withFileTypes: true })) {
      if (SKIPPED.has(entry.name)) continue;
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.name.endsWith('.md')) found.push(path);
    }
  };
  walk('');
  return found;
}

/** Markdown without its fenced code blocks, where `[a](b)` and `# x` are not links or headings. */
function withoutCode(text: string): string {
  return text.replace(/^```[^\n]*\n[\s\S]*?^```[^\n]*$/gm, '');
}

/**
 * GitHub's anchors for a file's headings: lower case, everything but letters, digits, spaces,
 * `-` and `_` dropped, spaces as `-`; a repeated anchor gets `-1`, `-2`, … in order.
 */
function headingAnchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const anchors = new Set<string>();
  for (const line of withoutCode(markdown).split('\n')) {
    const heading = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (heading === null) continue;
    const base = (heading[1] ?? '')
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\- _]/gu, '')
      .replace(/ /g, '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    anchors.add(n === 0 ? base : `${base}-${n}`);
  }
  return anchors;
}

/** Every `[text](target)` target that is not a URL with a scheme (`https:`, `mailto:`). */
function relativeLinks(markdown: string): string[] {
  const links: string[] = [];
  for (const match of withoutCode(markdown).matchAll(/\]\(([^)\s]+)\)/g)) {
    const target = match[1] ?? '';
    if (!/^[a-z][a-z0-9+.-]*:/i.test(target)) links.push(target);
  }
  return links;
}

describe('links between the docs', () => {
  test('headings are slugged as GitHub does', () => {
    const anchors = headingAnchors(
      '# Routing\n## Rules tried after 12n (2026-12-04, `bench/results/x/`)\n```\n# not a heading\n```\n## Routing\n',
    );
    assert.deepEqual(
      [...anchors],
      ['routing', 'rules-tried-after-12n-2026-12-04-benchresultsx', 'routing-1'],
    );
    assert.deepEqual(relativeLinks('[a](b.md#c) [d](https://e) [f](#g) `[h](i)`'), [
      'b.md#c',
      '#g',
      'i',
    ]);
  });

  test('every relative link reaches a file and, when it names one, a heading', () => {
    const files = markdownFiles();
    assert.ok(files.length > 10, `found only ${files.length} Markdown files`);
    const anchorsOf = new Map<string, Set<string>>();
    const broken: string[] = [];
    for (const file of files) {
      const text = readFileSync(join(ROOT, file), 'utf8');
      for (const link of relativeLinks(text)) {
        const [path = '', anchor] = link.split('#', 2);
        const target = path === '' ? file : normalize(join(dirname(file), decodeURI(path)));
        if (!existsSync(join(ROOT, target))) {
          broken.push(`${file}: ${link} (no ${target})`);
          continue;
        }
        if (anchor === undefined || anchor === '' || !target.endsWith('.md')) continue;
        let anchors = anchorsOf.get(target);
        if (anchors === undefined) {
          anchors = headingAnchors(readFileSync(join(ROOT, target), 'utf8'));
          anchorsOf.set(target, anchors);
        }
        if (!anchors.has(anchor)) broken.push(`${file}: ${link} (no heading #${anchor})`);
      }
    }
    assert.deepEqual(broken, [], `broken links:\n${broken.join('\n')}`);
  });
});
