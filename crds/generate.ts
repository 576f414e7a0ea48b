/**
 * `npm run generate`: writes the InferencePool CRD rendered from the TypeBox schema to
 * `crds/switchyard.dev_inferencepools.yaml` and the Helm chart's copy. Run it after every change to
 * `crds/inference-pool.schema.ts` or `crds/semantic.ts`; `crds/generated.test.ts` fails until the
 * committed file matches.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CRD_FILE, renderInferencePoolCrd } from './crd.ts';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const content = renderInferencePoolCrd();
// The Helm chart ships its own copy (Helm installs CRDs from the chart's crds/ folder);
// test/chart checks that it stays byte-identical.
for (const file of [CRD_FILE, 'charts/switchyard/crds/switchyard.dev_inferencepools.yaml']) {
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
