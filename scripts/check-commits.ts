/**
 * `npm run verify`'s commit check: every commit after the rule began keeps it (commit-subjects.ts).
 * Merge commits are git's own and are not checked. A clone without that history (shallow) is
 * skipped with a note, not failed.
 */
import { execFileSync } from 'node:child_process';
import { FIRST_CHECKED_PARENT, subjectProblems } from './commit-subjects.ts';

const git = (...args: string[]): string =>
  execFileSync('git', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });

let log: string;
try {
  git('cat-file', '-e', `${FIRST_CHECKED_PARENT}^{commit}`);
  log = git('log', '--no-merges', '--format=%H%x00%s', `${FIRST_CHECKED_PARENT}..HEAD`);
} catch {
  process.stdout.write('commit subjects: not checked (no git history here, or a shallow clone)\n');
  process.exit(0);
}
const commits = log
  .split('\n')
  .filter((line) => line !== '')
  .map((line) => {
    const [hash = '', subject = ''] = line.split('\0');
    return { hash, subject };
  });
const problems = subjectProblems(commits);
if (problems.length > 0) {
  process.stderr.write(
    `commit subjects: ${problems.length} problem(s); reword with \`git rebase -i\` before pushing:\n` +
      problems.map((p) => `  ${p}\n`).join(''),
  );
  process.exit(1);
}
process.stdout.write(`commit subjects: ${commits.length} checked, all "area: …" within 72\n`);
