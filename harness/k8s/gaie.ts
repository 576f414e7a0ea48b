/**
 * The Gateway API inference extension's CRDs (GAIE, `inference.networking.k8s.io/v1`) for the
 * tests and benches that run beside them: read from the module
 * `sigs.k8s.io/gateway-api-inference-extension` at a pinned version, which the Go module proxy
 * serves and Go's module cache keeps (module-crds.ts). The benches' endpoint picker comes from
 * the same module (scripts/gaie/build-epp.sh).
 */
import { join } from 'node:path';
import type { Cluster } from './cluster.ts';
import { goModuleDir, installCrdFiles } from './module-crds.ts';

export const GAIE_MODULE = 'sigs.k8s.io/gateway-api-inference-extension';
/** Pinned: the CRDs the tests install and the EPP the benches build come from this version. */
export const GAIE_MODULE_VERSION = process.env['SWITCHYARD_GAIE_VERSION'] ?? 'v1.6.2';
export const GAIE_CRD_NAME = 'inferencepools.inference.networking.k8s.io';

/** The module's folder in Go's module cache, downloaded on first use. */
export function gaieModuleDir(): Promise<string> {
  return goModuleDir(GAIE_MODULE, GAIE_MODULE_VERSION);
}

/** The YAML of GAIE's InferencePool CRD (v1) at the pinned version. */
export async function gaieInferencePoolCrdFile(): Promise<string> {
  return join(
    await gaieModuleDir(),
    'config/crd/bases/inference.networking.k8s.io_inferencepools.yaml',
  );
}

/** Applies GAIE's InferencePool CRD and waits until the API server serves it. */
export async function installGaieInferencePoolCrd(cluster: Cluster): Promise<void> {
  await installCrdFiles(cluster, [await gaieInferencePoolCrdFile()]);
}
