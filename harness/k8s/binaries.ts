/**
 * Finds (and on first use builds) the kube-apiserver and etcd binaries the test cluster runs, and
 * a kubectl of the same version. The build is scripts/k8s/build.sh: from the Go module proxy,
 * cached per version under ~/.cache/switchyard/k8s/<version>/, or taken from $KUBEBUILDER_ASSETS
 * when that is set (it must hold all three, as envtest's assets do).
 */
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runBuildScript } from '../build-script.ts';

export const BUILD_SCRIPT = fileURLToPath(new URL('../../scripts/k8s/build.sh', import.meta.url));

export interface K8sBinaries {
  /** The folder that holds the three binaries. */
  dir: string;
  kubeApiserver: string;
  /** kubectl of the same Kubernetes version as kubeApiserver. */
  kubectl: string;
  etcd: string;
}

const pending = new Map<string, Promise<K8sBinaries>>();

/**
 * Runs scripts/k8s/build.sh (a no-op once built; it takes a lock, so concurrent test files wait
 * for one build) and returns the binaries' paths. Its progress goes to this process's stderr.
 * `version` defaults to $SWITCHYARD_K8S_VERSION, then to the version pinned in build.sh.
 */
export function k8sBinaries(version?: string): Promise<K8sBinaries> {
  const key = version ?? '';
  let result = pending.get(key);
  if (result === undefined) {
    result = runBuild(version);
    pending.set(key, result);
    result.catch(() => pending.delete(key));
  }
  return result;
}

async function runBuild(version: string | undefined): Promise<K8sBinaries> {
  const dir = await runBuildScript(
    'bash',
    [BUILD_SCRIPT, ...(version === undefined ? [] : [version])],
    '[k8s-build]',
  );
  return {
    dir,
    kubeApiserver: join(dir, 'kube-apiserver'),
    kubectl: join(dir, 'kubectl'),
    etcd: join(dir, 'etcd'),
  };
}
