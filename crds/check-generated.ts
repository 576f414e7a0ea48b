/**
 * `node crds/check-generated.ts`: exits 1 when the committed CRD differs from what the schema
 * renders (the same check as `crds/generated.test.ts`, for scripts and CI steps).
 */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CRD_FILE, renderInferencePoolCrd } from './crd.ts';

const target = join(dirname(fileURLToPath(import.meta.url)), '..', CRD_FILE);
function readCommitted(): string | undefined {
  try {
    return readFileSync(target, 'utf8');
  } catch {
    return undefined;
  }
}
if (readCommitted() !== renderInferencePoolCrd()) {
  console.error(
    `${CRD_FILE} is out of date with crds/inference-pool.schema.ts: run npm run generate`,
  );
  process.exitCode = 1;
} else {
  console.log(`${CRD_FILE} is up to date`);
}
