import { it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { CRD_FILE, renderInferencePoolCrd } from './crd.ts';
import { renderSnapshotChecks, SNAPSHOT_CHECKS_FILE } from './snapshot-checks.ts';

it(`${CRD_FILE} is what the schema renders (run npm run generate)`, () => {
  const committed = readFileSync(new URL(`../${CRD_FILE}`, import.meta.url), 'utf8');
  if (committed !== renderInferencePoolCrd()) {
    assert.fail(
      `${CRD_FILE} is out of date with crds/inference-pool.schema.ts: run npm run generate`,
    );
  }
});

it(`${SNAPSHOT_CHECKS_FILE} is what the snapshot schemas compile to (run npm run generate)`, () => {
  const committed = readFileSync(new URL(`../${SNAPSHOT_CHECKS_FILE}`, import.meta.url), 'utf8');
  if (committed !== renderSnapshotChecks()) {
    assert.fail(
      `${SNAPSHOT_CHECKS_FILE} is out of date with crds/snapshot.schema.ts: run npm run generate`,
    );
  }
});
