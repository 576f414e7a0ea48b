/**
 * `npm test`: every test layer, in lanes that run side by side.
 *
 *   simulated  verify → test:unit → test:integration → test:chart → test:gaie (after gaie:build)
 *              → test:engine (after engine install)
 *   real       test:k8s → test:node → test:reliability (alone, once every other step is done)
 *   install    engine:prepare (vLLM and the tiny models; a no-op once cached)
 *   gaie       gaie:build (GAIE's endpoint picker and the ext_proc stand-in; a no-op once built)
 *
 * Why lanes: one after the other the layers took 16.8 minutes warm on the 2-core CI machine,
 * and the real ones (a kube-apiserver, a kubelet, vLLM) spend much of their time waiting on
 * processes that start, on timeouts and on the network namespace, not on the CPU the simulated
 * ones want. On a cold machine the vLLM install (~12 minutes of downloads and unpacking) runs
 * beside everything else instead of before test:engine. Every layer is still its own
 * `npm run test:*`, unchanged, and each stays serial inside (`--test-concurrency=1`).
 *
 * Output: the simulated lane streams as it runs; a step of another lane is printed whole when it
 * ends, between two lines of the streaming one, so blocks never interleave. When a step fails, no
 * further step starts; the ones running finish (they clean up what they made: network
 * namespaces, control planes, servers), then the exit code is 1.
 *
 * SWITCHYARD_TEST_SERIAL=1 runs every step one after the other, streaming (for a machine too
 * small for two lanes, or to read a failure in order).
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, openSync, closeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

interface Step {
  script: string;
  /** Steps (of any lane) that must have passed first. */
  after?: readonly string[];
}

interface Lane {
  name: string;
  /** Printed as it runs (one lane only); the others are printed a step at a time. */
  streams: boolean;
  steps: readonly Step[];
}

const LANES: readonly Lane[] = [
  {
    name: 'simulated',
    streams: true,
    // test:chart and test:engine came over from the real lane (issue 44): the real lane was the
    // longer one (k8s, node, engine, then reliability: about 850 s of a 15-minute budget), the
    // simulated one ended some 200 s earlier.
    steps: [
      { script: 'verify' },
      { script: 'test:unit' },
      { script: 'test:integration' },
      { script: 'test:chart' },
      // GAIE's full endpoint picker is a Go build (minutes cold, a stamp check warm): its own
      // install lane builds it while the layers above run.
      { script: 'test:gaie', after: ['gaie:build'] },
      { script: 'test:engine', after: ['engine:prepare'] },
    ],
  },
  {
    name: 'real',
    streams: false,
    steps: [
      { script: 'test:k8s' },
      { script: 'test:node' },
      // Alone at the end: its 10,000-abort test twice found a connection still open after 30 s
      // while the real lane ran beside it (never when run alone); until that is understood it
      // runs with the machine to itself.
      {
        script: 'test:reliability',
        after: ['test:integration', 'test:chart', 'test:gaie', 'test:engine'],
      },
    ],
  },
  { name: 'install', streams: false, steps: [{ script: 'engine:prepare' }] },
  { name: 'gaie', streams: false, steps: [{ script: 'gaie:build' }] },
];

const serial = process.env['SWITCHYARD_TEST_SERIAL'] === '1';
const logDir = mkdtempSync(join(tmpdir(), 'switchyard-test-'));

interface Outcome {
  script: string;
  lane: string;
  ok: boolean;
  seconds: number;
  /** Why it did not run, when it did not. */
  skipped?: string;
}

const outcomes: Outcome[] = [];
const done = new Map<string, Promise<boolean>>();
const settle = new Map<string, (ok: boolean) => void>();
for (const lane of LANES)
  for (const step of lane.steps)
    done.set(step.script, new Promise((resolve) => settle.set(step.script, resolve)));
let failed = false;

const say = (line: string): void => void process.stdout.write(`${line}\n`);

/** `npm run <script>` with the npm that runs this script (so Node 24 stays first on PATH). */
function npmRun(script: string): { command: string; args: string[] } {
  const npmCli = process.env['npm_execpath'];
  return npmCli !== undefined && npmCli.endsWith('.js')
    ? { command: process.execPath, args: [npmCli, 'run', script] }
    : { command: 'npm', args: ['run', script] };
}

/** Runs one step; streams its output or keeps it in a file printed when it ends. */
async function runStep(lane: Lane, step: Step, stream: boolean): Promise<boolean> {
  const started = performance.now();
  const { command, args } = npmRun(step.script);
  const logFile = join(logDir, `${step.script.replace(/[^a-z0-9]+/gi, '-')}.log`);
  say(`=== ${step.script} (${lane.name}) started`);
  const fd = stream ? undefined : openSync(logFile, 'w');
  const child = spawn(command, args, {
    stdio: ['ignore', fd ?? 'pipe', fd ?? 'pipe'],
  });
  if (stream) {
    for (const source of [child.stdout, child.stderr])
      if (source !== null) createInterface({ input: source }).on('line', say);
  }
  const code = await new Promise<number | string>((resolve) =>
    child.once('close', (exitCode, signal) => resolve(exitCode ?? signal ?? 1)),
  );
  if (fd !== undefined) {
    closeSync(fd);
    // One write, between two whole lines of the streaming lane.
    process.stdout.write(
      `=== ${step.script} (${lane.name}) output\n${readFileSync(logFile, 'utf8')}`,
    );
  }
  const seconds = Math.round((performance.now() - started) / 1000);
  const ok = code === 0;
  say(`=== ${step.script} (${lane.name}) ${ok ? 'passed' : `FAILED (exit ${code})`}: ${seconds} s`);
  outcomes.push({ script: step.script, lane: lane.name, ok, seconds });
  return ok;
}

async function runLane(lane: Lane, stream: boolean): Promise<void> {
  for (const step of lane.steps) {
    let ok = false;
    const missing: string[] = [];
    for (const before of step.after ?? []) if (!(await done.get(before))) missing.push(before);
    if (failed || missing.length > 0) {
      const skipped = failed ? 'an earlier step failed' : `${missing.join(', ')} did not pass`;
      say(`=== ${step.script} (${lane.name}) not run: ${skipped}`);
      outcomes.push({ script: step.script, lane: lane.name, ok: false, seconds: 0, skipped });
    } else {
      ok = await runStep(lane, step, stream);
      if (!ok) failed = true;
    }
    settle.get(step.script)!(ok);
  }
}

const started = performance.now();
if (serial) {
  // Dependencies first: the install before the lane that needs it.
  for (const lane of [...LANES].reverse()) await runLane(lane, true);
} else {
  await Promise.all(LANES.map((lane) => runLane(lane, lane.streams)));
}
const total = Math.round((performance.now() - started) / 1000);
rmSync(logDir, { recursive: true, force: true });

say('=== npm test: step times');
for (const o of outcomes)
  say(
    `  ${o.script.padEnd(18)} ${o.lane.padEnd(10)} ${String(o.seconds).padStart(5)} s  ` +
      (o.skipped !== undefined ? `not run (${o.skipped})` : o.ok ? 'passed' : 'FAILED'),
  );
say(
  `  ${'total'.padEnd(18)} ${(serial ? 'serial' : 'lanes').padEnd(10)} ${String(total).padStart(5)} s`,
);
process.exitCode = outcomes.every((o) => o.ok) ? 0 : 1;
