/**
 * (c) Delay added to each SSE chunk of a stream: backend hrtime just before the write against
 * client hrtime at arrival (one monotonic clock), per target, re-run once when noisy.
 */
import { cpuMark, cpuShare, isNoisy } from './cpu.ts';
import { sseRun } from './load.ts';
import { added, label, type Results } from './report.ts';
import { log, type OverheadRun } from './setup.ts';

export async function measureSse(run: OverheadRun): Promise<void> {
  const { flags, results, targets, proxies, backend } = run;
  // --- (c) SSE chunk delay --------------------------------------------------------------------
  for (const t of targets) {
    await sseRun(t.url, 1, 20, 1);
    const measure = async (): Promise<Results['sse'][string]> => {
      const mark = cpuMark(t, backend.pid);
      const result = await sseRun(t.url, flags.sseStreams, flags.sseChunks, flags.sseIntervalMs);
      return { ...result, cpu: cpuShare(mark, t, backend.pid) };
    };
    let cell = await measure();
    for (let retry = 0; retry < flags.retries && isNoisy(cell); retry++) {
      log(`sse ${label(t.name)}: noisy, once more`);
      cell = await measure();
    }
    results.sse[t.name] = cell;
    log(
      `sse ${label(t.name)}: chunk delay p50 ${cell.delayMs.p50} p99 ${cell.delayMs.p99} ms (${cell.chunks} chunks)`,
    );
  }
  for (const t of proxies) {
    const s = results.sse[t.name];
    if (s !== undefined && results.sse.direct !== undefined)
      results.sseAdded[t.name] = added(s.delayMs, results.sse.direct.delayMs);
  }
}
