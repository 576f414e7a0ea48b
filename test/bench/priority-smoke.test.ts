/**
 * A short run of the `priority` scenario through the real command (`switchyard bench --scenario
 * priority`): two variants, two simulators and two sidecars each, a few seconds. It checks the
 * harness runs both client classes and writes what it promises, not how good any router is.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { SWITCHYARD_BIN } from '../../harness/processes.ts';
import type { PriorityResults } from '../../bench/routing/priority.ts';

const run = promisify(execFile);
const out = mkdtempSync(join(tmpdir(), 'switchyard-bench-priority-smoke-'));

describe('switchyard bench --scenario priority (smoke)', () => {
  after(() => rmSync(out, { recursive: true, force: true }));

  it('runs interactive chat beside the batch flood and writes the figures', async () => {
    await run(
      process.execPath,
      [
        SWITCHYARD_BIN,
        'bench',
        '--scenario',
        'priority',
        '--variants',
        'switchyard,least-connections',
        '--backends',
        '2',
        '--routers',
        '2',
        '--window',
        '4',
        '--ramp',
        '1',
        '--quiet',
        '--out',
        out,
      ],
      { timeout: 180_000 },
    );
    const results = JSON.parse(
      readFileSync(join(out, 'results-2-routers.json'), 'utf8'),
    ) as PriorityResults;
    assert.equal(results.load.capacityTokensPerS, 800);
    assert.deepEqual(Object.keys(results.variants), ['switchyard', 'least-connections']);
    for (const v of Object.values(results.variants)) {
      assert.ok(v.interactive.requests > 0, `${v.variant}: interactive requests`);
      assert.ok(v.interactive.served > 0, `${v.variant}: interactive served`);
      assert.ok(v.batch.requests > 0, `${v.variant}: batch requests`);
      assert.ok(v.batch.shareOfServed > 0 && v.batch.shareOfServed < 1, v.variant);
      assert.ok(v.serverTokensPerS > 0, `${v.variant}: throughput`);
      assert.ok(Number.isFinite(v.interactive.ttftMs.p99), `${v.variant}: TTFT`);
    }
    // Without the flow-control variants the targets are not measured, and say so.
    assert.deepEqual(
      results.targets.map((t) => t.met),
      [null, null],
    );
  });
});
