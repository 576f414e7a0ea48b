/**
 * (a) Closed-loop throughput: every target at every concurrency, in rounds, re-running cells
 * that had no quiet round; the same with a realistic prompt; and a `wrk` cross-check.
 */
import { cpuMark, cpuShare, isNoisy, withCpu, type Target } from './cpu.ts';
import { CHAT_BODY, chatBodyOfSize, closedLoop } from './load.ts';
import { runWrk } from './peers.ts';
import { label, type ClosedRun } from './report.ts';
import { log, type OverheadRun } from './setup.ts';

export async function measureClosedLoop(run: OverheadRun): Promise<void> {
  const { flags, results, targets, backend } = run;
  // Rounds pass over every cell in turn, so a burst of other work on the machine hits one
  // round of one cell, not a whole target. A round during which other processes used more than
  // NOISY_OTHER_PCT of a core is noisy; a cell without a quiet round is re-run (--retries) at the
  // end, and reports the median of its quiet rounds (of all of them if none was quiet).
  const closedCell = async (t: Target, c: number, label_: string): Promise<ClosedRun> => {
    await closedLoop(t.url, c, Math.max(300, flags.warmupSeconds * 1000));
    const mark = cpuMark(t, backend.pid);
    const loop = await closedLoop(t.url, c, flags.closedSeconds * 1000);
    const result = withCpu(loop, cpuShare(mark, t, backend.pid));
    log(
      `closed c=${c} ${label(t.name)} (${label_}): ${loop.rps} req/s, p50 ${loop.latencyMs.p50} ms, p99 ${loop.latencyMs.p99} ms` +
        (result.proxyCpuUsPerRequest !== undefined
          ? `, proxy CPU ${result.proxyCpuUsPerRequest} µs/req`
          : '') +
        (isNoisy(result) ? `, noisy (other processes ${Math.round(result.cpu.other)} %)` : '') +
        (loop.errors > 0 ? `, ${loop.errors} errors (${loop.firstError ?? ''})` : ''),
    );
    return result;
  };
  const closedRounds = new Map<string, ClosedRun[]>();
  const closedKey = (t: Target, c: number): string => `${t.name} ${c}`;
  for (let round = 1; round <= flags.rounds; round++) {
    for (const c of flags.concurrency) {
      for (const t of targets) {
        const result = await closedCell(t, c, `round ${round}`);
        closedRounds.set(closedKey(t, c), [...(closedRounds.get(closedKey(t, c)) ?? []), result]);
      }
    }
  }
  for (let retry = 1; retry <= flags.retries; retry++) {
    for (const c of flags.concurrency) {
      for (const t of targets) {
        const rounds = closedRounds.get(closedKey(t, c)) ?? [];
        if (rounds.some((r) => !isNoisy(r))) continue;
        rounds.push(await closedCell(t, c, `retry ${retry}`));
      }
    }
  }
  for (const t of targets) {
    for (const c of flags.concurrency) {
      const rounds = closedRounds.get(closedKey(t, c)) ?? [];
      const quiet = rounds.filter((r) => !isNoisy(r));
      const chosen = quiet.length > 0 ? quiet : rounds;
      // The median round (the lower middle one for an even count).
      const sorted = [...chosen].sort((a, b) => a.rps - b.rps);
      const median = sorted[Math.floor((sorted.length - 1) / 2)];
      if (median === undefined) continue;
      (results.closedLoop[t.name] ??= {})[String(c)] = {
        ...median,
        rpsRounds: rounds.map((r) => r.rps),
        noisyRounds: rounds.length - quiet.length,
        errors: rounds.reduce((n, r) => n + r.errors, 0),
      };
    }
  }
}

/** Closed loop at c=64 with an n KiB prompt, for direct, the sidecar and the bare passthrough. */
export async function measureLargePrompt(run: OverheadRun): Promise<void> {
  const { flags, results, targets, backend } = run;
  if (flags.largeBodyKb > 0) {
    const body = chatBodyOfSize(flags.largeBodyKb);
    results.largeBody = { bytes: body.length, concurrency: 64, runs: {} };
    for (const t of targets.filter((x) => ['direct', 'sidecar', 'bare'].includes(x.name))) {
      const measure = async (): Promise<ClosedRun> => {
        await closedLoop(t.url, 64, Math.max(300, flags.warmupSeconds * 1000), body);
        const mark = cpuMark(t, backend.pid);
        const result = await closedLoop(t.url, 64, flags.closedSeconds * 1000, body);
        return withCpu(result, cpuShare(mark, t, backend.pid));
      };
      let cell = await measure();
      for (let retry = 0; retry < flags.retries && isNoisy(cell); retry++) {
        log(`closed c=64 ${flags.largeBodyKb} KiB prompt ${label(t.name)}: noisy, once more`);
        cell = await measure();
      }
      results.largeBody.runs[t.name] = cell;
      log(
        `closed c=64 ${flags.largeBodyKb} KiB prompt ${label(t.name)}: ${cell.rps} req/s` +
          (cell.proxyCpuUsPerRequest !== undefined
            ? `, proxy CPU ${cell.proxyCpuUsPerRequest} µs/req`
            : '') +
          (cell.errors > 0 ? `, ${cell.errors} errors (${cell.firstError ?? ''})` : ''),
      );
    }
  }
}

/** `wrk` (a C client, far cheaper per request than node:http) at c=64 against every target. */
export async function crossCheckWithWrk(run: OverheadRun): Promise<void> {
  const { flags, results, targets } = run;
  const wrkBin = run.binaries.wrk;
  if (wrkBin !== undefined) {
    results.wrk = {};
    for (const t of targets) {
      try {
        const w = await runWrk(
          wrkBin,
          `${t.url}/v1/chat/completions`,
          CHAT_BODY,
          64,
          Math.max(1, Math.round(flags.closedSeconds)),
        );
        results.wrk[t.name] = w;
        log(`wrk c=64 ${label(t.name)}: ${w.rps} req/s`);
      } catch (err) {
        log(`wrk ${label(t.name)} failed: ${(err as Error).message.split('\n')[0] ?? ''}`);
      }
    }
  } else if (flags.wrk) {
    log('skip wrk cross-check: wrk not installed');
  }
}
