/**
 * Small set-ups shared by the end-to-end tests: namespaces, and a controller on plain HTTP for the
 * tests where TLS is not what is under test.
 */
import { startSwitchyard, type RunningProcess } from '../../harness/processes.ts';
import type { Cluster } from '../../harness/k8s/cluster.ts';

/** Creates each namespace (there is no controller manager: nothing else would). */
export async function createNamespaces(cluster: Cluster, names: readonly string[]): Promise<void> {
  for (const name of names)
    await cluster.request('POST', '/api/v1/namespaces', {
      apiVersion: 'v1',
      kind: 'Namespace',
      metadata: { name },
    });
}

/**
 * `switchyard controller --insecure-http` on `listen` as admin, its Lease in namespace
 * `switchyard` (which must exist), with `extra` flags appended.
 */
export function startPlainController(
  cluster: Cluster,
  listen = '127.0.0.1:0',
  extra: string[] = [],
): Promise<RunningProcess> {
  return startSwitchyard([
    'controller',
    '--kubeconfig',
    cluster.kubeconfigPath,
    '--insecure-http',
    '--listen',
    listen,
    '--admin',
    '127.0.0.1:0',
    '--lease-namespace',
    'switchyard',
    '--identity',
    'controller-0',
    ...extra,
  ]);
}

export interface ControllerSidecar {
  controllerUrl: string;
  pool: string;
  namespace: string;
  tokenFile: string;
  caFile?: string | undefined;
  cacheFile: string;
  sidecarId: string;
  listen?: string;
  admin?: string;
}

/** The arguments of `switchyard sidecar` fed by the controller (after the subcommand name). */
export function controllerSidecarArgs(o: ControllerSidecar): string[] {
  return [
    'sidecar',
    '--controller',
    o.controllerUrl,
    '--pool',
    o.pool,
    '--namespace',
    o.namespace,
    '--token-file',
    o.tokenFile,
    ...(o.caFile === undefined ? [] : ['--ca-file', o.caFile]),
    '--cache-file',
    o.cacheFile,
    '--sidecar-id',
    o.sidecarId,
    '--listen',
    o.listen ?? '127.0.0.1:0',
    '--admin',
    o.admin ?? '127.0.0.1:0',
  ];
}
