/**
 * Where the benches write (bench/results/, docs/benchmarks.md), and which commit they measured.
 */
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/** The repository's root, with a trailing slash. */
export const REPO = fileURLToPath(new URL('../../', import.meta.url));

/** The checked-out commit, `abc1234 (with uncommitted changes)` when dirty, or `unknown`. */
export function gitCommit(): string {
  try {
    const sha = execFileSync('git', ['rev-parse', '--short', 'HEAD'], {
      cwd: REPO,
      encoding: 'utf8',
    }).trim();
    const dirty =
      execFileSync('git', ['status', '--porcelain'], { cwd: REPO, encoding: 'utf8' }).trim() !== '';
    return dirty ? `${sha} (with uncommitted changes)` : sha;
  } catch {
    return 'unknown';
  }
}
