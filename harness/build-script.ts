/**
 * Runs one of the project's build or install scripts (scripts/k8s/, scripts/node/, scripts/helm/,
 * scripts/kube-score/, scripts/engine/):
 * they print progress lines with a tag on stderr and their result (a folder) as the last line on
 * stdout. Only the tagged lines are passed on: the tools' own output (go's "downloading" lines,
 * pip's) is too much to be useful, but its tail is in the error when the script fails.
 */
import { spawn } from 'node:child_process';

/** Resolves with the last stdout line; rejects with the last 60 lines of stderr. */
export function runBuildScript(
  command: string,
  args: readonly string[],
  /** Which stderr lines are progress: those starting with this tag, or matching this pattern. */
  progress: string | RegExp,
): Promise<string> {
  const isProgress = (line: string): boolean =>
    typeof progress === 'string' ? line.startsWith(progress) : progress.test(line);
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (text: string) => (stdout += text));
    child.stderr.setEncoding('utf8').on('data', (text: string) => {
      stderr += text;
      if (stderr.length > 200_000) stderr = stderr.slice(-100_000);
      for (const line of text.split('\n')) {
        if (isProgress(line)) process.stderr.write(line + '\n');
      }
    });
    child.once('error', reject);
    child.once('close', (code) => {
      const result = stdout.trim().split('\n').pop() ?? '';
      if (code !== 0 || result === '') {
        const script = args.find((a) => a.endsWith('.sh') || a.endsWith('.py')) ?? command;
        reject(
          new Error(
            `${script} failed (exit ${code}):\n${stderr.split('\n').slice(-60).join('\n')}`,
          ),
        );
        return;
      }
      resolve(result);
    });
  });
}
