import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { subjectProblems } from '../../scripts/commit-subjects.ts';

const hash = '0123456789abcdef';

describe('commit subjects', () => {
  test('"area: what changed" within 72 characters passes', () => {
    assert.deepEqual(
      subjectProblems([{ hash, subject: 'sidecar: pipelined queue runs from a loop' }]),
      [],
    );
    assert.deepEqual(subjectProblems([{ hash, subject: `docs: ${'x'.repeat(66)}` }]), []);
    assert.deepEqual(subjectProblems([{ hash, subject: 'test:k8s: a mixed pool' }]), []);
  });

  test('a subject over 72 characters is refused, saying how long and what to do', () => {
    assert.deepEqual(subjectProblems([{ hash, subject: `docs: ${'x'.repeat(67)}` }]), [
      '0123456: the subject has 73 characters, at most 72: move the detail into the body',
    ]);
  });

  test('a subject without an area is refused', () => {
    assert.match(subjectProblems([{ hash, subject: 'Fix the thing' }])[0] ?? '', /"area: "/);
    assert.match(subjectProblems([{ hash, subject: 'sidecar:no space' }])[0] ?? '', /"area: "/);
  });

  test('the commit-msg hook applies the same rule', () => {
    const dir = mkdtempSync(join(tmpdir(), 'commit-msg-'));
    try {
      const hook = (message: string): boolean => {
        writeFileSync(join(dir, 'MSG'), message);
        try {
          execFileSync('.githooks/commit-msg', [join(dir, 'MSG')], { stdio: 'ignore' });
          return true;
        } catch {
          return false;
        }
      };
      assert.equal(hook('sidecar: a fix\n\nWhy.\n'), true);
      assert.equal(hook('test:k8s: a mixed pool\n'), true);
      assert.equal(hook(`docs: ${'x'.repeat(67)}\n`), false);
      assert.equal(hook('A subject without an area\n'), false);
      assert.equal(hook("Merge branch 'x'\n"), true);
      assert.equal(hook('# a comment git adds\nci: one\n'), true);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
