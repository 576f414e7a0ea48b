/**
 * The project's commit subject rule, as linkerd2-proxy and Envoy write theirs: "area: what
 * changed", at most 72 characters, so `git log --oneline` reads whole; the why, the figures and
 * the validation go in the body. `npm run verify` applies it to every commit after
 * `FIRST_CHECKED_PARENT` (the history before it is not rewritten), and `.githooks/commit-msg`
 * (installed by `npm ci`'s prepare step) to each new commit.
 */

/** The last commit before the rule; every later commit is checked. */
export const FIRST_CHECKED_PARENT = '850903ebbea27fd6abed3cced26f8c3ff19de894';

export const MAX_SUBJECT_CHARS = 72;

/**
 * Commits made on branches the day the rule came in, before those branches had it, merged as
 * they were: history is not rewritten, so they are let be, by hash.
 */
const MADE_BEFORE_THE_RULE: ReadonlySet<string> = new Set([
  'cdd544817a993212557c8be077ff3f173a6fbac0',
  '524be2e20b00f545a193c5d1c20b4bebdffbf4ad',
]);

/** "area: what changed": a lower-case area (paths, words, `test:k8s`), a colon, a space. */
const AREA_PREFIX = /^[a-z0-9][a-z0-9./_: -]*: \S/;

export interface CommitSubject {
  hash: string;
  subject: string;
}

/** One line per commit that breaks the rule, saying what to fix; empty when all keep it. */
export function subjectProblems(commits: readonly CommitSubject[]): string[] {
  const problems: string[] = [];
  for (const { hash, subject } of commits) {
    if (MADE_BEFORE_THE_RULE.has(hash)) continue;
    const short = hash.slice(0, 7);
    const chars = [...subject].length;
    if (chars > MAX_SUBJECT_CHARS)
      problems.push(
        `${short}: the subject has ${chars} characters, at most ${MAX_SUBJECT_CHARS}: move the detail into the body`,
      );
    if (!AREA_PREFIX.test(subject))
      problems.push(
        `${short}: the subject does not start with "area: " (e.g. "sidecar: …", "docs: …")`,
      );
  }
  return problems;
}
