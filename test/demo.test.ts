import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { SWITCHYARD_BIN } from '../harness/processes.ts';

const run = promisify(execFile);

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

test('the demo runs both phases, prints the comparison, exits 0 and leaves no process behind', async () => {
  const { stdout } = await run(
    process.execPath,
    [SWITCHYARD_BIN, 'demo', '--duration', '8s', '--rate', '4', '--plain'],
    { timeout: 120_000 },
  );
  assert.match(stdout, /phase 1\/2 switchyard/);
  assert.match(stdout, /phase 2\/2 round-robin/);
  for (const row of ['TTFT p50', 'TTFT p99', 'client errors', 'cache hit rate'])
    assert.match(stdout, new RegExp(row));
  assert.match(
    stdout,
    /^\s+steady\/127\.0\.0\.1:\d+\s+\d+%/m,
    'the live view shows per-endpoint traffic share',
  );
  const pids = /stopped (\d+) child processes \(pids ([\d ]+)\)/.exec(stdout);
  assert.ok(pids, 'the demo reports the processes it started');
  assert.equal(Number(pids[1]), 9, 'four simulators per phase and one sidecar');
  for (const pid of pids[2]!.split(' ').map(Number))
    assert.equal(alive(pid), false, `process ${pid} is gone`);
});
