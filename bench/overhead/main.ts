/**
 * `npm run bench:overhead`: what the sidecar costs on the request path, side by side with no
 * proxy, a bare http-proxy-3 passthrough (the floor our proxy library sets) and, when installed,
 * HAProxy and nginx (references). All against one zero-latency backend, all on 127.0.0.1, in
 * one run:
 *
 *   (a) closed-loop throughput at each concurrency;
 *   (b) latency added over direct at fixed offered rates (open loop, sub-ms resolution);
 *   (c) delay added to each SSE chunk of a stream;
 *   (d) RSS idle and with N held-open streams;
 *   (e) a CPU profile of the sidecar's hot path (and of the bare passthrough, for contrast).
 *
 * Writes bench/results/overhead.json and the overhead section of docs/benchmarks.md; prints the
 * same tables. `--quick` for a ~1 minute run; `--help` for the flags.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { writeDocsSection } from '../common/markdown.ts';
import { REPO } from '../common/repo.ts';
import { crossCheckWithWrk, measureClosedLoop, measureLargePrompt } from './closed-loop.ts';
import { parseFlags } from './flags.ts';
import { goals, noteNoise } from './goals.ts';
import { measureMemory, measureVariant } from './memory.ts';
import { measureOpenLoop } from './open-loop.ts';
import { profileProxies } from './profile.ts';
import { renderMarkdown } from './report.ts';
import {
  findBinaries,
  log,
  newResults,
  startTargets,
  stopProxies,
  warmUp,
  type OverheadRun,
} from './setup.ts';
import { measureSse } from './sse.ts';

async function main(): Promise<void> {
  const flags = parseFlags();
  const startedAt = Date.now();
  const binaries = findBinaries(flags);
  const results = await newResults(flags, binaries, startedAt);
  const run = await startTargets(flags, binaries, results);
  await warmUp(run);
  await measureClosedLoop(run); // (a)
  await measureLargePrompt(run);
  await crossCheckWithWrk(run);
  await measureOpenLoop(run); // (b)
  await measureSse(run); // (c)
  await measureMemory(run); // (d)
  await stopProxies(run);
  await measureVariant(run);
  await profileProxies(run); // (e)
  await run.backend.stop();
  await report(run, startedAt);
}

/** Goals and notes, then the results JSON, the tables on stdout and in docs/benchmarks.md. */
async function report(run: OverheadRun, startedAt: number): Promise<void> {
  const { flags, results } = run;
  results.machine.loadAvgAfter = os
    .loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');
  noteNoise(results);
  results.goals = goals(results, flags);
  results.durationSeconds = Math.round((Date.now() - startedAt) / 100) / 10;
  mkdirSync(dirname(flags.out), { recursive: true });
  writeFileSync(flags.out, JSON.stringify(results, null, 2) + '\n');
  const markdown = renderMarkdown(results);
  process.stdout.write(`\n${markdown}\n`);
  if (flags.docs)
    await writeDocsSection(
      join(REPO, 'docs/benchmarks.md'),
      'overhead',
      markdown,
      'Sidecar overhead',
    );
  log(
    `wrote ${flags.out}${flags.docs ? ' and docs/benchmarks.md' : ''} (${results.durationSeconds} s)`,
  );
}

process.once('SIGINT', () => process.exit(130));
process.once('SIGTERM', () => process.exit(143));
await main();
