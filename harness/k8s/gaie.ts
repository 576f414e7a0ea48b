/**
 * The Gateway API inference extension's CRDs (GAIE, `inference.networking.k8s.io/v1`) for the
 * tests and benches that run beside them: read from the module
 * `sigs.k8s.io/gateway-api-inference-extension` at a pinned version, which the Go module proxy
 * serves and Go's module cache keeps (`go mod download`, a no-op once cached). The same module
 * holds the endpoint picker the benches build (`cmd/epp`).
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { waitFor, type Cluster } from './cluster.ts';

export const GAIE_MODULE = 'sigs.k8s.io/gateway-api-inference-extension';
/** Pinned: the CRDs the tests install and the EPP the benches build come from this version. */
export const GAIE_MODULE_VERSION = process.env['SWITCHYARD_GAIE_VERSION'] ?? 'v1.6.2';
export const GAIE_CRD_NAME = 'inferencepools.inference.networking.k8s.io';

let moduleDir: Promise<string> | undefined;

/** The module's folder in Go's module cache, downloaded on first use. */
export function gaieModuleDir(): Promise<string> {
  moduleDir ??= download().catch((err: unknown) => {
    moduleDir = undefined;
    throw err;
  });
  return moduleDir;
}

async function download(): Promise<string> {
  const { stdout } = await promisify(execFile)(
    'go',
    ['mod', 'download', '-json', `${GAIE_MODULE}@${GAIE_MODULE_VERSION}`],
    {
      // Module mode regardless of the caller's environment; never fetch another toolchain.
      env: { ...process.env, GOTOOLCHAIN: 'local', GOFLAGS: '-mod=mod', GO111MODULE: 'on' },
      maxBuffer: 1 << 20,
    },
  ).catch((err: unknown) => {
    throw new Error(
      `go mod download ${GAIE_MODULE}@${GAIE_MODULE_VERSION} failed (the GAIE CRDs come from ` +
        `the Go module proxy): ${err instanceof Error ? err.message : String(err)}`,
    );
  });
  const info = JSON.parse(stdout) as { Dir?: string; Error?: string };
  if (info.Dir === undefined) throw new Error(`go mod download: ${info.Error ?? stdout}`);
  return info.Dir;
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
  await cluster.applyYaml(readFileSync(await gaieInferencePoolCrdFile(), 'utf8'));
  await waitFor(`CRD ${GAIE_CRD_NAME} to be Established`, async () => {
    const res = await cluster.request<{
      status?: { conditions?: { type: string; status: string }[] };
    }>('GET', `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${GAIE_CRD_NAME}`);
    return res.body.status?.conditions?.some(
      (c) => c.type === 'Established' && c.status === 'True',
    );
  });
}
