import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { waitFor, type Cluster } from './cluster.ts';

export const CRD_FILE = fileURLToPath(
  new URL('../../crds/switchyard.dev_inferencepools.yaml', import.meta.url),
);
export const CRD_NAME = 'inferencepools.switchyard.dev';

/** Applies the generated InferencePool CRD and waits until the API server serves it. */
export async function installInferencePoolCrd(cluster: Cluster): Promise<void> {
  await cluster.applyYaml(readFileSync(CRD_FILE, 'utf8'));
  await waitFor(`CRD ${CRD_NAME} to be Established`, async () => {
    const res = await cluster.request<{
      status?: { conditions?: { type: string; status: string }[] };
    }>('GET', `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${CRD_NAME}`);
    return res.body.status?.conditions?.some(
      (c) => c.type === 'Established' && c.status === 'True',
    );
  });
}
