/**
 * Other projects' CRDs for the tests that check our objects against them: the Prometheus
 * operator's (ServiceMonitor, PodMonitor: the chart's monitors) and KEDA's (ScaledObject:
 * docs/autoscaling.md's example), each read from its Go module at a pinned version, which the Go
 * module proxy serves and Go's module cache keeps (`go mod download`, a no-op once cached), as
 * harness/k8s/gaie.ts uses it for GAIE's.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { parse } from 'yaml';
import { waitFor, type Cluster } from './cluster.ts';

export const PROMETHEUS_OPERATOR = {
  module: 'github.com/prometheus-operator/prometheus-operator',
  version: process.env['SWITCHYARD_PROMETHEUS_OPERATOR_VERSION'] ?? 'v0.85.0',
  dir: 'example/prometheus-operator-crd',
};
export const KEDA = {
  module: 'github.com/kedacore/keda/v2',
  // v2.21.1 declares go 1.27.4, newer than the Go the tools are built with; v2.21.0 declares 1.26.
  version: process.env['SWITCHYARD_KEDA_VERSION'] ?? 'v2.21.0',
  dir: 'config/crd/bases',
};

const downloads = new Map<string, Promise<string>>();

/** The folder of `module@version` in Go's module cache, downloaded on first use. */
export function goModuleDir(module: string, version: string): Promise<string> {
  const key = `${module}@${version}`;
  let dir = downloads.get(key);
  if (dir === undefined) {
    dir = download(key);
    downloads.set(key, dir);
    dir.catch(() => downloads.delete(key));
  }
  return dir;
}

async function download(key: string): Promise<string> {
  const { stdout } = await promisify(execFile)('go', ['mod', 'download', '-json', key], {
    // Module mode regardless of the caller's environment; never fetch another toolchain.
    env: { ...process.env, GOTOOLCHAIN: 'local', GOFLAGS: '-mod=mod', GO111MODULE: 'on' },
    maxBuffer: 1 << 20,
  }).catch((err: unknown) => {
    // `go mod download -json` prints the error as JSON and exits 1.
    const out = (err as { stdout?: string }).stdout ?? '';
    throw new Error(
      `go mod download ${key} failed (the CRDs come from the Go module proxy): ` +
        (/"Error": "([^"]*)"/.exec(out)?.[1] ?? (err instanceof Error ? err.message : String(err))),
    );
  });
  const info = JSON.parse(stdout) as { Dir?: string; Error?: string };
  if (info.Dir === undefined) throw new Error(`go mod download ${key}: ${info.Error ?? stdout}`);
  return info.Dir;
}

/** The path of `file` in the CRD folder of `source` (PROMETHEUS_OPERATOR or KEDA). */
export async function moduleCrdFile(source: typeof KEDA, file: string): Promise<string> {
  return join(await goModuleDir(source.module, source.version), source.dir, file);
}

/** Applies CRD files and waits until the API server serves each of them. */
export async function installCrdFiles(cluster: Cluster, files: string[]): Promise<void> {
  for (const file of files) {
    const text = readFileSync(file, 'utf8');
    const name = (parse(text) as { metadata: { name: string } }).metadata.name;
    await cluster.applyYaml(text);
    await waitFor(`CRD ${name} to be Established`, async () => {
      const res = await cluster.request<{
        status?: { conditions?: { type: string; status: string }[] };
      }>('GET', `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${name}`);
      return res.body.status?.conditions?.some(
        (c) => c.type === 'Established' && c.status === 'True',
      );
    });
  }
}
