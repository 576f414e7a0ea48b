/**
 * Synchronous clean-up that runs when the test or bench process ends: normally, through
 * process.exit, or on SIGINT/SIGTERM/SIGHUP (node's test runner sends SIGTERM to a test file it
 * cancels). Used by the cluster (kill etcd and kube-apiserver), the test hosts (delete namespaces
 * and veths) and the controller bench, so an interrupted run leaves nothing behind. A SIGKILLed
 * run cannot clean up: the next run removes what is left (see `reapStale*` in k8s/cluster.ts and
 * test/k8s/test-hosts.ts).
 */

const hooks = new Set<() => void>();
let installed = false;

function runAll(): void {
  for (const hook of [...hooks]) {
    hooks.delete(hook);
    try {
      hook();
    } catch {
      // best effort: the process is going away
    }
  }
}

function install(): void {
  if (installed) return;
  installed = true;
  process.once('exit', runAll);
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.once(signal, () => {
      runAll();
      // Die of the same signal, as without the handler.
      process.kill(process.pid, signal);
    });
  }
}

/** Registers `hook` to run (once) at exit; returns a function that unregisters it. */
export function onExit(hook: () => void): () => void {
  install();
  hooks.add(hook);
  return () => {
    hooks.delete(hook);
  };
}
