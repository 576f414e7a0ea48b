/**
 * (d) Memory: each proxy's RSS idle, with N held-open streams and after closing them; and the
 * sidecar again under other node flags, as a what-if.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { rssMb } from '../../harness/proc.ts';
import { cpuMark, cpuShare, withCpu, type Target } from './cpu.ts';
import { closedLoop, holdStreams, probe } from './load.ts';
import { label, type ClosedRun, type Results, type RssReading } from './report.ts';
import { firstReason, log, startSidecar, type OverheadRun } from './setup.ts';

export async function measureMemory(run: OverheadRun): Promise<void> {
  const { flags, results, proxies } = run;
  if (flags.holdStreams <= 0) return;
  for (const t of proxies) {
    if (t.pid === undefined) continue;
    const reading = await memoryWithStreams(
      t.url,
      t.pid,
      flags.holdStreams,
      {
        afterStartMb: run.rssAfterStart.get(t.name),
        idleAfterWarmupMb: run.rssAfterWarmUp.get(t.name),
      },
      flags.quick,
    );
    results.rss[t.name] = reading;
    logRss(label(t.name), reading);
    if (reading.streams.failed > 0 && /EMFILE|ENFILE/.test(reading.streams.firstError ?? ''))
      results.notes.push(
        `${label(t.name)}: the file-descriptor limit (${String(results.machine.fdLimit)}) stopped some of the ${flags.holdStreams} streams`,
      );
  }
}

/** The same sidecar under other node flags (memory and throughput), as a what-if. */
export async function measureVariant(run: OverheadRun): Promise<void> {
  const { flags, results } = run;
  if (flags.sidecarVariant.length === 0 || results.targets.sidecar?.url === undefined) return;
  try {
    results.sidecarVariant = await variantOf(run);
    const v = results.sidecarVariant;
    log(`variant sidecar ${v.nodeArgs.join(' ')}: c=64 ${v.closed64.rps} req/s`);
    logRss(`variant sidecar ${v.nodeArgs.join(' ')}`, v.rss);
  } catch (err) {
    log(`skip the sidecar variant: ${firstReason((err as Error).message)}`);
  }
}

/** RSS idle, with `count` held-open streams through the proxy, and after closing them. */
async function memoryWithStreams(
  url: string,
  pid: number,
  count: number,
  before: { afterStartMb: number | undefined; idleAfterWarmupMb: number | undefined },
  quick: boolean,
): Promise<RssReading> {
  const idleAfterLoad = rssMb(pid);
  const held = await holdStreams(url, count);
  await sleep(quick ? 500 : 1500);
  let peak: number | undefined;
  for (let i = 0; i < 3; i++) {
    const now = rssMb(pid);
    if (now !== undefined && (peak === undefined || now > peak)) peak = now;
    await sleep(quick ? 200 : 500);
  }
  held.close();
  await sleep(quick ? 1000 : 2500);
  return {
    afterStartMb: round1(before.afterStartMb),
    idleAfterWarmupMb: round1(before.idleAfterWarmupMb),
    idleAfterLoadMb: round1(idleAfterLoad),
    withStreamsMb: round1(peak),
    streams: {
      requested: held.requested,
      open: held.open,
      failed: held.failed,
      openSeconds: held.openSeconds,
      ...(held.firstError !== undefined ? { firstError: held.firstError } : {}),
    },
    afterCloseMb: round1(rssMb(pid)),
  };
}

function logRss(name: string, r: RssReading): void {
  log(
    `rss ${name}: start ${r.afterStartMb} MB, warm ${r.idleAfterWarmupMb} MB, after load ${r.idleAfterLoadMb} MB, ` +
      `${r.streams.open}/${r.streams.requested} streams ${r.withStreamsMb} MB, after close ${r.afterCloseMb} MB` +
      (r.streams.failed > 0 ? ` (${r.streams.failed} failed: ${r.streams.firstError ?? ''})` : ''),
  );
}

/**
 * A second sidecar under other node flags: start, warm-up, closed loop at c=64 and c=256 (as
 * in the main run, shorter history), then the same memory protocol.
 */
async function variantOf(run: OverheadRun): Promise<NonNullable<Results['sidecarVariant']>> {
  const { flags, poolFile } = run;
  const backendPid = run.backend.pid;
  const sidecar = await startSidecar(poolFile, flags.sidecarVariant);
  try {
    await probe(sidecar.url);
    const afterStartMb = rssMb(sidecar.pid);
    await closedLoop(sidecar.url, 16, Math.max(500, flags.warmupSeconds * 1000));
    await sleep(500);
    const idleAfterWarmupMb = rssMb(sidecar.pid);
    const target: Target = { name: 'sidecar', url: sidecar.url, pid: sidecar.pid };
    await closedLoop(sidecar.url, 64, Math.max(300, flags.warmupSeconds * 1000));
    const mark = cpuMark(target, backendPid);
    const run = await closedLoop(sidecar.url, 64, flags.closedSeconds * 1000);
    const closed64: ClosedRun = withCpu(run, cpuShare(mark, target, backendPid));
    await closedLoop(sidecar.url, 256, flags.closedSeconds * 1000);
    const rss = await memoryWithStreams(
      sidecar.url,
      sidecar.pid,
      flags.holdStreams,
      { afterStartMb, idleAfterWarmupMb },
      flags.quick,
    );
    return { nodeArgs: flags.sidecarVariant, closed64, rss };
  } finally {
    await sidecar.stop();
  }
}

function round1(x: number | undefined): number | undefined {
  return x === undefined ? undefined : Math.round(x * 10) / 10;
}
