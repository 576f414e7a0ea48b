/**
 * `npm run generate`: writes the InferencePool CRD rendered from the TypeBox schema to
 * `crds/switchyard.dev_inferencepools.yaml` and the Helm chart's copy, and the snapshot stream's
 * compiled checks to `crds/snapshot-checks.generated.ts`. Run it after every change to
 * `crds/inference-pool.schema.ts`, `crds/policy-types.ts`, `crds/snapshot.schema.ts` or
 * `crds/semantic.ts`; `crds/generated.test.ts` fails until the committed files match.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CRD_FILE, renderInferencePoolCrd } from './crd.ts';
import { renderSnapshotChecks, SNAPSHOT_CHECKS_FILE } from './snapshot-checks.ts';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const crd = renderInferencePoolCrd();
// The Helm chart ships its own copy (Helm installs CRDs from the chart's crds/ folder);
// test/chart checks that it stays byte-identical.
const outputs: [string, string][] = [
  [CRD_FILE, crd],
  ['charts/switchyard/crds/switchyard.dev_inferencepools.yaml', crd],
  [SNAPSHOT_CHECKS_FILE, renderSnapshotChecks()],
];
for (const [file, content] of outputs) {
  const target = join(root, file);
  let previous: string | undefined;
  try {
    previous = readFileSync(target, 'utf8');
  } catch {
    previous = undefined;
  }
  if (previous === content) {
    console.log(`${file} is up to date`);
  } else {
    writeFileSync(target, content);
    console.log(`wrote ${file}`);
  }
}
