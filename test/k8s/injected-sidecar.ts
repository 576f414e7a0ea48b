import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startSwitchyard, type RunningProcess } from '../../harness/processes.ts';
import type { Cluster } from '../../harness/k8s/cluster.ts';

/** The parts of a stored, injected pod that running its sidecar needs. */
export interface InjectedPod {
  metadata: { name: string; namespace?: string; annotations?: Record<string, string> };
  spec: { initContainers?: { name: string; args?: string[] }[] };
}

/**
 * Runs the `switchyard-sidecar` container of an injected pod as the kubelet would: with the
 * pod's own arguments, a projected token bound to the pod (audience switchyard, of the
 * ServiceAccount `default`), and the CA from the pod's annotation (what the downward API mounts).
 * Only what needs a kubelet or cluster DNS changes: file paths into `dir`, ports to free ones, and
 * the controller's Service URL to `controllerUrl`.
 */
export async function runInjectedSidecar(
  cluster: Cluster,
  pod: InjectedPod,
  namespace: string,
  options: { dir: string; serviceUrl: string; controllerUrl: string },
): Promise<RunningProcess> {
  const container = pod.spec.initContainers?.find((c) => c.name === 'switchyard-sidecar');
  if (container?.args === undefined) throw new Error(`pod ${pod.metadata.name} has no sidecar`);
  const token = await cluster.createServiceAccountToken(namespace, 'default', {
    audience: 'switchyard',
    boundPod: pod.metadata.name,
  });
  const { dir } = options;
  writeFileSync(join(dir, 'token'), token.token);
  writeFileSync(join(dir, 'ca.crt'), pod.metadata.annotations?.['switchyard.dev/ca-bundle'] ?? '');
  const replace: Record<string, string> = {
    '/var/run/secrets/switchyard/token': join(dir, 'token'),
    '/var/run/secrets/switchyard/ca.crt': join(dir, 'ca.crt'),
    '/var/cache/switchyard/snapshot.json': join(dir, 'snapshot.json'),
    '127.0.0.1:8080': '127.0.0.1:0',
    '0.0.0.0:9090': '127.0.0.1:0',
    [options.serviceUrl]: options.controllerUrl,
  };
  return startSwitchyard(
    container.args.map((a) => replace[a] ?? a),
    { env: { POD_NAME: pod.metadata.name, POD_NAMESPACE: namespace } },
  );
}
