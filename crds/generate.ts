/**
 * `npm run generate`: writes the InferencePool CRD rendered from the TypeBox schema to
 * `crds/switchyard.dev_inferencepools.yaml`. Run it after every change to
 * `crds/inference-pool.schema.ts` or `crds/semantic.ts`; `crds/generated.test.ts` fails until the
 * committed file matches.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CRD_FILE, renderInferencePoolCrd } from './crd.ts';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const target = join(root, CRD_FILE);
const content = renderInferencePoolCrd();
let previous: string | undefined;
try {
  previous = readFileSync(target, 'utf8');
} catch {
  previous = undefined;
}
if (previous === content) {
  console.log(`${CRD_FILE} is up to date`);
} else {
  writeFileSync(target, content);
  console.log(`wrote ${CRD_FILE}`);
}
