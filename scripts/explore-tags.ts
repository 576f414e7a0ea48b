/**
 * Makes the `explore/*` tags of docs/routing-history.md in this clone. Each exploration round left
 * the tree as an annotated tag on the commit whose tree holds its result folders (issue 41), but a
 * tag does not travel with a landed submission: the table under "## Tags" in that doc is the
 * record, and this script turns it into tags. It is idempotent: a tag that exists is left as it is.
 *
 *   npm run explore-tags            # make the missing tags
 *   npm run explore-tags -- --check # exit 1 if a tag's commit is not in this clone
 *
 * A tag's message is the doc's entry for the round (the "###" section that names it) and where
 * the fuller account of that day is: `git show <commit>:docs/benchmarks.md`.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const HISTORY = fileURLToPath(new URL('../docs/routing-history.md', import.meta.url));

export interface ExploreTag {
  name: string;
  commit: string;
  folders: string;
}

/** The rows of the "## Tags" table: `| \`explore/…\` | <commit> | <folders> |`. */
export function parseTagTable(markdown: string): ExploreTag[] {
  const start = markdown.indexOf('\n## Tags');
  if (start < 0) throw new Error('docs/routing-history.md has no "## Tags" section');
  const tags: ExploreTag[] = [];
  for (const line of markdown.slice(start).split('\n')) {
    const cells = line.split('|').map((cell) => cell.trim());
    const name = /^`(explore\/[^`]+)`$/.exec(cells[1] ?? '')?.[1];
    const commit = cells[2] ?? '';
    if (name === undefined || !/^[0-9a-f]{7,40}$/.test(commit)) continue;
    tags.push({ name, commit, folders: cells[3] ?? '' });
  }
  return tags;
}

/** The "###" sections of the doc that name the tag, as the tag's message body. */
export function entriesFor(markdown: string, tag: string): string[] {
  const sections = markdown.split(/\n(?=### )/).slice(1);
  return sections
    .map((section) => section.split(/\n(?=## )/)[0]!.trim())
    .filter((section) => section.includes(`\`${tag}\``));
}

function git(args: string[], input?: string): string {
  return execFileSync('git', args, { encoding: 'utf8', input, stdio: ['pipe', 'pipe', 'pipe'] });
}

function exists(ref: string): boolean {
  try {
    git(['rev-parse', '--verify', '--quiet', ref]);
    return true;
  } catch {
    return false;
  }
}

function main(): void {
  const checkOnly = process.argv.includes('--check');
  const markdown = readFileSync(HISTORY, 'utf8');
  const tags = parseTagTable(markdown);
  let missingCommits = 0;
  let made = 0;
  for (const tag of tags) {
    if (!exists(`${tag.commit}^{commit}`)) {
      console.error(`${tag.name}: commit ${tag.commit} is not in this clone (a shallow clone?)`);
      missingCommits++;
      continue;
    }
    if (checkOnly || exists(`refs/tags/${tag.name}`)) continue;
    const entries = entriesFor(markdown, tag.name);
    const message = [
      `${tag.name}: result folders ${tag.folders.replaceAll('`', '')}`,
      '',
      ...(entries.length > 0 ? entries : ['(no entry of its own in docs/routing-history.md)']),
      '',
      `The fuller account of that day: git show ${tag.commit}:docs/benchmarks.md`,
      'Made by scripts/explore-tags.ts from the table in docs/routing-history.md.',
    ].join('\n');
    git(['tag', '-a', tag.name, tag.commit, '-F', '-'], message);
    made++;
  }
  if (!checkOnly) console.log(`${made} tag(s) made, ${tags.length - made - missingCommits} kept`);
  if (missingCommits > 0) process.exit(1);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) main();
