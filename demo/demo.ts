import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { demoWorkload } from '../harness/demo-workload.ts';
import { mulberry32 } from '../lib/rng.ts';
import {
  startSidecar,
  startSwitchyard,
  stopAll,
  type RunningProcess,
} from '../harness/processes.ts';
import {
  closeClientAgent,
  sendChat,
  summarise,
  type RequestResult,
  type Summary,
} from '../harness/stream-client.ts';
import { renderLiveView, renderComparison, type EndpointRow } from './view.ts';

export interface DemoOptions {
  durationMs: number;
  ratePerSec: number;
  seed: number;
  /** Redraw a live table (a terminal) or print plain progress lines. */
  live: boolean;
}

/** The four simulated backends: what each one is there to show. */
const BACKENDS = [
  { name: 'steady', flags: [], role: 'a healthy backend' },
  {
    name: 'slow',
    flags: ['--prefill-ms-per-token', '0.4', '--decode-ms-per-token', '48'],
    role: '4x slower',
  },
  { name: 'flaky', flags: ['--error-rate', '0.3'], role: 'fails 30% of requests' },
  {
    name: 'cold',
    flags: ['--cold-start-ms', '4000', '--cold-idle-ms', '15000'],
    role: 'cold-starts (4 s)',
  },
] as const;

const COMMON_SIM_FLAGS = [
  '--slots',
  '4',
  '--prefill-ms-per-token',
  '0.1',
  '--decode-ms-per-token',
  '12',
  '--block-tokens',
  '16',
];

function poolYaml(urls: readonly string[]): string {
  return [
    'apiVersion: switchyard.dev/v1alpha1',
    'kind: InferencePool',
    'metadata: {name: demo}',
    'spec:',
    '  mode: Balance',
    '  backends:',
    ...BACKENDS.map((b, i) => `  - {name: ${b.name}, url: ${urls[i]}/v1}`),
    '  affinity: {key: Prefix, prefixChars: 4096, maxSlowdown: 2.5}',
    '  health: {window: 5s, minRequests: 5, maxErrorRate: 0.25, openFor: 5s}',
    '  retry: {budgetPercent: 20, minPerSecond: 2, maxAttempts: 3}',
    '  coldStart: {idleAfter: 15s}',
    '',
  ].join('\n');
}

async function startSims(): Promise<RunningProcess[]> {
  return Promise.all(
    BACKENDS.map((b) =>
      startSwitchyard(['sim', '--port', '0', '--name', b.name, ...COMMON_SIM_FLAGS, ...b.flags]),
    ),
  );
}

async function cacheHitRate(sims: readonly RunningProcess[]): Promise<number> {
  let hit = 0;
  let miss = 0;
  for (const sim of sims) {
    const stats = (await (await fetch(`${sim.url}/admin/stats`)).json()) as {
      cacheHitBlocks: number;
      cacheMissBlocks: number;
    };
    hit += stats.cacheHitBlocks;
    miss += stats.cacheMissBlocks;
  }
  return hit / Math.max(1, hit + miss);
}

interface PhaseResult extends Summary {
  cacheHitRate: number;
}

/**
 * Runs one phase: open-loop Poisson arrivals for `durationMs`, `send` decides where each request
 * goes. `rows` supplies the live view.
 */
async function runPhase(
  title: string,
  options: DemoOptions,
  durationMs: number,
  send: (body: unknown) => Promise<RequestResult>,
  rows: () => Promise<EndpointRow[]>,
): Promise<RequestResult[]> {
  const workload = demoWorkload(options.seed);
  const arrivals = mulberry32(options.seed + 1);
  const results: RequestResult[] = [];
  const pending = new Set<Promise<void>>();
  const started = performance.now();
  let lastFrame = '';
  let stopView = false;
  const view = (async () => {
    let lastPlain = 0;
    while (!stopView) {
      const elapsed = performance.now() - started;
      const frame = renderLiveView(
        title,
        elapsed,
        durationMs,
        results,
        pending.size,
        await rows().catch(() => []),
      );
      if (options.live) {
        process.stdout.write(
          (lastFrame ? `\x1b[${lastFrame.split('\n').length - 1}A\x1b[J` : '') + frame,
        );
        lastFrame = frame;
      } else if (elapsed < durationMs && elapsed - lastPlain >= 5_000) {
        lastPlain = elapsed;
        process.stdout.write(frame + '\n');
      }
      await new Promise((r) => setTimeout(r, options.live ? 500 : 1_000));
    }
  })();
  while (performance.now() - started < durationMs) {
    const request = workload.next();
    const p = send(request.body).then((r) => {
      results.push(r);
      pending.delete(p);
    });
    pending.add(p);
    const gapMs = (-Math.log(1 - arrivals()) / options.ratePerSec) * 1000;
    await new Promise((r) => setTimeout(r, gapMs));
  }
  await Promise.race([Promise.all(pending), new Promise((r) => setTimeout(r, 30_000))]);
  stopView = true;
  await view;
  if (!options.live)
    process.stdout.write(
      renderLiveView(
        title,
        durationMs,
        durationMs,
        results,
        pending.size,
        await rows().catch(() => []),
      ) + '\n',
    );
  return results;
}

export async function runDemo(options: DemoOptions): Promise<number> {
  const dir = await mkdtemp(join(tmpdir(), 'switchyard-demo-'));
  const processes: RunningProcess[] = [];
  const startedPids: number[] = [];
  const track = <T extends RunningProcess>(started: T[]): T[] => {
    startedPids.push(...started.map((p) => p.pid));
    processes.push(...started);
    return started;
  };
  const onSignal = (): void => {
    void stopAll(processes).then(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    const phaseMs = options.durationMs / 2;
    process.stdout.write(
      `switchyard demo: ${BACKENDS.map((b) => `${b.name} (${b.role})`).join(', ')}.\n` +
        `Workload: ${options.ratePerSec} req/s, 60% short classifications sharing 3 system prompts, 40% document questions.\n\n`,
    );

    // Phase 1: through the sidecar.
    const sims = track(await startSims());
    const poolFile = join(dir, 'pool.yaml');
    await writeFile(poolFile, poolYaml(sims.map((s) => s.url)));
    const sidecar = await startSidecar(poolFile, ['--log-level', 'warn']);
    track([sidecar]);
    const viaSidecar = await runPhase(
      '1/2 switchyard: P2C on in-flight x TTFT, prefix affinity, breakers, retries',
      options,
      phaseMs,
      (body) => sendChat(`${sidecar.url}/v1`, body),
      async () => {
        const debug = (await (await fetch(`${sidecar.adminUrl}/debug/backends`)).json()) as {
          endpoints: EndpointRow[];
        };
        return debug.endpoints;
      },
    );
    const switchyard: PhaseResult = {
      ...summarise(viaSidecar),
      cacheHitRate: await cacheHitRate(sims),
    };
    await stopAll(processes.splice(0));

    // Phase 2: the same workload, round-robin straight to fresh backends (what a plain Service does).
    const rrSims = track(await startSims());
    let next = 0;
    const inFlight = new Map<string, number>();
    const viaRoundRobin = await runPhase(
      '2/2 round-robin: no health, no affinity, no retries',
      options,
      phaseMs,
      async (body) => {
        const i = next++ % rrSims.length;
        const name = BACKENDS[i]!.name;
        inFlight.set(name, (inFlight.get(name) ?? 0) + 1);
        const result = await sendChat(`${rrSims[i]!.url}/v1`, body, { backendLabel: name });
        inFlight.set(name, (inFlight.get(name) ?? 1) - 1);
        return result;
      },
      () =>
        Promise.resolve(BACKENDS.map((b) => ({ id: b.name, inFlight: inFlight.get(b.name) ?? 0 }))),
    );
    const roundRobin: PhaseResult = {
      ...summarise(viaRoundRobin),
      cacheHitRate: await cacheHitRate(rrSims),
    };
    await stopAll(processes.splice(0));

    process.stdout.write('\n' + renderComparison({ switchyard, 'round-robin': roundRobin }) + '\n');
    if (!options.live)
      process.stdout.write(
        `\nstopped ${startedPids.length} child processes (pids ${startedPids.join(' ')})\n`,
      );
    return 0;
  } catch (err) {
    process.stderr.write(`switchyard demo failed: ${(err as Error).message}\n`);
    return 1;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await stopAll(processes);
    closeClientAgent();
    await rm(dir, { recursive: true, force: true });
  }
}
