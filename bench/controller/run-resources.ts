/**
 * What one controller bench run holds (a temp dir, the API server, the controller, streams and
 * connections), released in reverse order at the end. On exit or a signal before that, the
 * controller is killed and the temp dir removed: the harness kills its children on a normal
 * exit only, and the cluster cleans up after itself.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { onExit } from '../../harness/exit-hooks.ts';

export class RunResources {
  readonly dir = mkdtempSync(join(os.tmpdir(), 'switchyard-bench-controller-'));
  /** Set once the controller runs, so an interrupted run can kill it. */
  controllerPid: number | undefined;
  private readonly releases: (() => unknown)[] = [];
  private readonly removeHook = onExit(() => {
    if (this.controllerPid !== undefined) {
      try {
        process.kill(this.controllerPid, 'SIGKILL');
      } catch {
        // gone already
      }
    }
    rmSync(this.dir, { recursive: true, force: true });
  });

  /** `release` runs at the end, before everything held earlier. */
  hold(release: () => unknown): void {
    this.releases.push(release);
  }

  /** Releases everything, latest first; the first failure is thrown after all ran. */
  async releaseAll(): Promise<void> {
    let failure: Error | undefined;
    for (const release of this.releases.reverse()) {
      try {
        await release();
      } catch (err) {
        failure ??= err instanceof Error ? err : new Error(String(err));
      }
    }
    this.releases.length = 0;
    this.removeHook();
    rmSync(this.dir, { recursive: true, force: true });
    if (failure !== undefined) throw failure;
  }
}
