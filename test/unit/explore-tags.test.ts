import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { test } from 'node:test';
import { entriesFor, parseTagTable } from '../../scripts/explore-tags.ts';

const DOCS = new URL('../../docs/', import.meta.url);
const history = readFileSync(new URL('routing-history.md', DOCS), 'utf8');

test('every explore tag the docs name is in the routing history table, with its commit', () => {
  const table = new Set(parseTagTable(history).map((tag) => tag.name));
  const named = new Set<string>();
  for (const file of readdirSync(DOCS).filter((name) => name.endsWith('.md'))) {
    const text = readFileSync(new URL(file, DOCS), 'utf8');
    for (const match of text.matchAll(/`(explore\/[\w.-]+)`/g)) named.add(match[1]!);
  }
  assert.ok(named.size > 0);
  assert.deepEqual(
    [...named].filter((name) => !table.has(name)),
    [],
  );
});

test('a tag message is the history entry that names the tag', () => {
  const [entry, ...more] = entriesFor(history, 'explore/2026-12-05-tail-guard');
  assert.equal(more.length, 0);
  assert.match(entry!, /^### 2026-12-05, 12v/);
  assert.doesNotMatch(entry!, /\n## /);
});

test('rows that are not tags are skipped', () => {
  const doc =
    '# x\n\n## Tags\n\n| tag | commit | folders |\n| --- | --- | --- |\n| `explore/a` | abc1234 | `r/` |\n| `explore/b` | not-a-hash | `s/` |\n';
  assert.deepEqual(parseTagTable(doc), [{ name: 'explore/a', commit: 'abc1234', folders: '`r/`' }]);
  assert.throws(() => parseTagTable('# no table'), /no "## Tags" section/);
});
