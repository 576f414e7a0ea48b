/**
 * A short run of the lora scenario through the real command (`switchyard bench --scenario lora`):
 * simulators serving adapters, two policies, a few seconds. It checks the harness sends adapter
 * requests, reads the simulators' load counter and reports it, not how good any policy is.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { SWITCHYARD_BIN } from '../../harness/processes.ts';

const run = promisify(execFile);
const FIXTURES = fileURLToPath(new URL('../fixtures/', import.meta.url));
const out = mkdtempSync(join(tmpdir(), 'switchyard-bench-lora-'));

interface Results {
  scenarios: Record<
    string,
    Record<string, { requests: number; errors: number; adapterLoadsPer1k?: number }>
  >;
  targets: { checks: { scenario: string; target: string }[] };
}

describe('switchyard bench --scenario lora (smoke)', () => {
  after(() => rmSync(out, { recursive: true, force: true }));

  it('sends adapter requests and reports adapter loads per 1,000 requests', async () => {
    await run(
      process.execPath,
      [
        SWITCHYARD_BIN,
        'bench',
        '--quiet',
        '--backends',
        '3',
        '--routers',
        '2',
        '--trace',
        join(FIXTURES, 'mooncake-sample.jsonl'),
        '--policies',
        'switchyard,least-connections',
        '--scenario',
        'lora',
        '--max-requests',
        '30',
        '--time-scale',
        '0.002',
        '--speed',
        '50',
        '--seeds',
        '1',
        '--no-plots',
        '--out',
        out,
      ],
      { timeout: 120_000, maxBuffer: 16 * 1024 * 1024 },
    );
    const results = JSON.parse(readFileSync(join(out, 'results.json'), 'utf8')) as Results;
    for (const policy of ['switchyard', 'least-connections']) {
      const r = results.scenarios['lora']?.[policy];
      assert.ok(r !== undefined, policy);
      assert.equal(r.requests, 30);
      assert.equal(r.errors, 0, `${policy}: every adapter is served by every backend`);
      // 16 adapters, 4 resident per backend, 3 backends: some requests must load one.
      assert.ok((r.adapterLoadsPer1k ?? 0) > 0, `${policy}: adapter loads counted`);
      assert.ok((r.adapterLoadsPer1k ?? 0) <= 1000);
    }
    assert.ok(
      results.targets.checks.some(
        (c) => c.scenario === 'lora' && c.target.includes('least-connections'),
      ),
    );
    const report = readFileSync(join(out, 'report.md'), 'utf8');
    assert.match(report, /\| switchyard \| [\d.]+ \|/);
  });
});
