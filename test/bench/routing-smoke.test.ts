/**
 * A short run of the routing benchmark through the real command (`switchyard bench`): two
 * policies, real simulators and sidecars, a few seconds, both trace formats. It checks the
 * harness works and writes what it promises, not how good any policy is.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { SWITCHYARD_BIN } from '../../harness/processes.ts';

const run = promisify(execFile);
const FIXTURES = fileURLToPath(new URL('../fixtures/', import.meta.url));
const out = mkdtempSync(join(tmpdir(), 'switchyard-bench-smoke-'));

interface Figures {
  seed: number;
  ttftMs: { p50: number; p90: number; p99: number };
  cacheHitRate: number;
  errorRate: number;
}

interface Affinity {
  conversations: number;
  laterTurns: number;
  laterTurnsHome: number;
  maxHomeShare: number;
  unknownBackend: number;
}

interface Results {
  settings: { routers: number; backends: number; seeds: number; loadSource?: string };
  trace: {
    format: string;
    requestsReplayed: number;
    idealHitRate: number | null;
    laterTurns: number | null;
  };
  scenarios: Record<
    string,
    Record<
      string,
      {
        requests: number;
        errors: number;
        errorRate: number;
        ttftMs: { p50: number; p90: number; p99: number };
        e2eMs: { p50: number; p90: number; p99: number };
        cacheHitRate: number;
        throughputRps: number;
        costPer1k: number;
        share: Record<string, number>;
        seeds: Figures[];
        conversations?: Affinity;
      }
    >
  >;
  targets: { checks: unknown[] };
}

const bench = (args: string[]) =>
  run(
    process.execPath,
    [SWITCHYARD_BIN, 'bench', '--quiet', '--backends', '3', '--routers', '2', ...args],
    {
      timeout: 120_000,
      maxBuffer: 16 * 1024 * 1024,
    },
  );

describe('switchyard bench (smoke)', () => {
  after(() => rmSync(out, { recursive: true, force: true }));

  it('replays a Mooncake excerpt through two policies, twice, and writes results, report and plots', async () => {
    const dir = join(out, 'mooncake');
    await bench([
      '--trace',
      join(FIXTURES, 'mooncake-sample.jsonl'),
      '--policies',
      'switchyard,round-robin',
      '--scenario',
      'steady',
      '--max-requests',
      '30',
      '--time-scale',
      '0.002',
      '--speed',
      '50',
      '--seeds',
      '2',
      '--out',
      dir,
    ]);
    const results = JSON.parse(readFileSync(join(dir, 'results.json'), 'utf8')) as Results;
    assert.equal(results.trace.format, 'jsonl');
    assert.equal(results.trace.requestsReplayed, 30);
    assert.ok(results.trace.idealHitRate !== null);
    // Chat-shaped by default: the excerpt's hash-id chains make some requests later turns.
    assert.ok((results.trace.laterTurns ?? 0) > 0);
    assert.equal(results.settings.seeds, 2);
    for (const policy of ['switchyard', 'round-robin']) {
      const r = results.scenarios['steady']?.[policy];
      assert.ok(r !== undefined, policy);
      assert.equal(r.requests, 30);
      assert.equal(r.errors, 0, `${policy}: no errors on healthy backends`);
      assert.ok(r.ttftMs.p50 > 0 && r.ttftMs.p50 <= r.ttftMs.p99);
      assert.ok(r.e2eMs.p99 >= r.ttftMs.p99);
      assert.ok(r.throughputRps > 0);
      assert.ok(r.costPer1k > 0);
      assert.ok(Math.abs(Object.values(r.share).reduce((a, b) => a + b, 0) - 1) < 1e-9);
      assert.deepEqual(Object.keys(r.share), ['b0', 'b1', 'b2']);
      // The medians of the two runs, each run's own figures beside them.
      assert.deepEqual(
        r.seeds.map((s) => s.seed),
        [1, 2],
      );
      const [a, b] = r.seeds.map((s) => s.ttftMs.p99) as [number, number];
      assert.equal(r.ttftMs.p99, (a + b) / 2);
      // Every response named its backend, so every later turn is counted.
      assert.ok(r.conversations !== undefined, policy);
      assert.equal(r.conversations.unknownBackend, 0);
      assert.ok(r.conversations.laterTurnsHome >= 0 && r.conversations.laterTurnsHome <= 1);
    }
    assert.ok(results.targets.checks.length > 0);
    const report = readFileSync(join(dir, 'report.md'), 'utf8');
    assert.match(report, /^# Routing benchmark report/);
    assert.match(report, /\| switchyard \| [\d,]+ \([\d,]+–[\d,]+\) \|/);
    assert.match(report, /later turns at home/);
    for (const plot of [
      'steady-ttft-cdf',
      'steady-ttft-p99',
      'steady-hit-rate',
      'steady-share-over-time',
    ]) {
      assert.ok(existsSync(join(dir, `${plot}.svg`)), `${plot}.svg`);
      const png = readFileSync(join(dir, `${plot}.png`));
      assert.equal(png.subarray(1, 4).toString('latin1'), 'PNG');
    }
  });

  it('--replot redraws the plots and the report of that run without running anything', async () => {
    const dir = join(out, 'mooncake');
    const png = join(dir, 'steady-ttft-cdf.png');
    rmSync(png);
    rmSync(join(dir, 'report.md'));
    const { stderr } = await run(process.execPath, [
      SWITCHYARD_BIN,
      'bench',
      '--replot',
      '--out',
      dir,
    ]);
    assert.match(stderr, /wrote .*report\.md and 8 plots/);
    assert.equal(readFileSync(png).subarray(1, 4).toString('latin1'), 'PNG');
    assert.match(readFileSync(join(dir, 'report.md'), 'utf8'), /\| switchyard \|/);
    await assert.rejects(
      run(process.execPath, [SWITCHYARD_BIN, 'bench', '--replot', '--out', join(out, 'none')]),
      (err: { stderr?: string; code?: number }) =>
        err.code === 2 && /--replot needs a directory an earlier run wrote/.test(err.stderr ?? ''),
    );
  });

  it('runs the conversations scenario and reports how many later turns stayed home', async () => {
    const dir = join(out, 'conversations');
    await bench([
      '--trace',
      join(FIXTURES, 'mooncake-sample.jsonl'),
      '--policies',
      'switchyard,oracle',
      '--scenario',
      'conversations',
      '--seeds',
      '1',
      '--speed',
      '50',
      '--no-plots',
      '--dump-requests',
      '--out',
      dir,
    ]);
    const results = JSON.parse(readFileSync(join(dir, 'results.json'), 'utf8')) as Results;
    for (const policy of ['switchyard', 'oracle']) {
      // --dump-requests: every request of the run, with the backend that answered it.
      const rows = JSON.parse(
        readFileSync(join(dir, 'requests', 'conversations', `${policy}-seed1.json`), 'utf8'),
      ) as { ok: boolean; backend?: string }[];
      assert.equal(rows.length, 3 * 12 * 6, policy);
      assert.ok(
        rows.every((row) => row.ok && row.backend !== undefined),
        policy,
      );
      const r = results.scenarios['conversations']?.[policy];
      assert.ok(r !== undefined, policy);
      // 12 conversations of 6 turns per backend.
      assert.equal(r.requests, 3 * 12 * 6);
      assert.equal(r.errors, 0, policy);
      assert.equal(r.conversations?.conversations, 3 * 12);
      assert.equal(r.conversations.laterTurns, 3 * 12 * 5);
      assert.ok(r.conversations.maxHomeShare >= 1 / 3 && r.conversations.maxHomeShare <= 1);
    }
    assert.match(readFileSync(join(dir, 'report.md'), 'utf8'), /\| switchyard \| [\d.]+ % \|/);
  });

  it('--load-source controller feeds the sidecars from one controller stream, as in Kubernetes', async () => {
    const dir = join(out, 'controller');
    await bench([
      '--trace',
      join(FIXTURES, 'mooncake-sample.jsonl'),
      '--policies',
      'switchyard',
      '--scenario',
      'steady',
      '--max-requests',
      '20',
      '--time-scale',
      '0.002',
      '--speed',
      '50',
      '--seeds',
      '1',
      '--no-plots',
      '--load-source',
      'controller',
      '--out',
      dir,
    ]);
    const results = JSON.parse(readFileSync(join(dir, 'results.json'), 'utf8')) as Results;
    assert.equal(results.settings.loadSource, 'controller');
    assert.equal(results.scenarios['steady']?.['switchyard']?.errors, 0);
    assert.match(readFileSync(join(dir, 'report.md'), 'utf8'), /from one controller stream/);
  });

  it('runs the moderate scenario at the rate that keeps the servers half busy', async () => {
    const dir = join(out, 'moderate');
    await bench([
      ...['--trace', join(FIXTURES, 'mooncake-sample.jsonl'), '--policies', 'switchyard'],
      ...['--scenario', 'moderate', '--max-requests', '30', '--speed', '50', '--seeds', '1'],
      ...['--out', dir],
    ]);
    const results = JSON.parse(readFileSync(join(dir, 'results.json'), 'utf8')) as Results & {
      settings: { timeScale: number };
      scenarioRates: Record<string, { timeScale: number; offeredUtilisation: number }>;
      loadAverage: { start: number[]; end: number[] };
    };
    const rate = results.scenarioRates['moderate'];
    assert.ok(rate !== undefined);
    assert.ok(Math.abs(rate.offeredUtilisation - 0.5) < 1e-9);
    // Derived from the servers' capacity, not --time-scale.
    assert.notEqual(rate.timeScale, results.settings.timeScale);
    assert.equal(results.scenarios['moderate']?.['switchyard']?.errors, 0);
    assert.equal(results.loadAverage.start.length, 3);
    assert.match(
      readFileSync(join(dir, 'report.md'), 'utf8'),
      /keeps 50 % of the servers' slots busy/,
    );
  });

  it('reads an Azure CSV excerpt by its content', async () => {
    const dir = join(out, 'azure');
    await bench([
      '--trace',
      join(FIXTURES, 'azure-conv-sample.csv'),
      '--policies',
      'least-connections',
      '--scenario',
      'steady',
      '--max-requests',
      '20',
      '--time-scale',
      '0.005',
      '--speed',
      '50',
      '--seeds',
      '1',
      '--no-plots',
      '--out',
      dir,
    ]);
    const results = JSON.parse(readFileSync(join(dir, 'results.json'), 'utf8')) as Results;
    assert.equal(results.trace.format, 'azure-csv');
    // No hash ids: nothing to chain, each prompt one message.
    assert.equal(results.trace.laterTurns, null);
    assert.equal(results.trace.idealHitRate, null);
    assert.equal(results.scenarios['steady']?.['least-connections']?.errors, 0);
  });

  it('a bad trace is refused with its line number', async () => {
    await assert.rejects(
      bench(['--trace', join(FIXTURES, 'README.md'), '--out', join(out, 'bad')]),
      (err: { stderr?: string; code?: number }) =>
        err.code === 2 && /README\.md: line 1: neither JSON lines/.test(err.stderr ?? ''),
    );
  });
});
