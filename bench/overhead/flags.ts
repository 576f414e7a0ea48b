/**
 * The overhead bench's command line.
 */
import { join } from 'node:path';
import { numberFlag, numberListFlag, readFlags, usageError } from '../common/flags.ts';
import { REPO } from '../common/repo.ts';
import type { Pacer } from './load.ts';

export const ALL_TARGETS = [
  'direct',
  'sidecar',
  'sidecar-traced',
  'sidecar-traced-1pct',
  'bare',
  'haproxy',
  'nginx',
] as const;
/**
 * The memory what-if: with V8's default limits on a machine with a lot of RAM, the old space
 * grows under load and is not given back; a capped heap keeps RSS down at the same CPU cost.
 */
const DEFAULT_VARIANT = '--max-old-space-size=96 --max-semi-space-size=4';

const HELP = `npm run bench:overhead -- [flags]

  --quick                   ~1 minute run: 1 round, short cells, no wrk, no sidecar variant;
                            the default run takes about 5 minutes
  --rounds <n>              passes over every closed- and open-loop cell (default 3; quick 1);
                            a cell reports its median round (closed loop) or the median over
                            rounds of each percentile (open loop)
  --retries <n>             extra rounds for a cell none of whose rounds was quiet (other
                            processes under 25 % of a core), and re-runs of a noisy SSE or
                            large-prompt cell (default 2; quick 0)
  --closed-seconds <s>      closed-loop cell length per round (default 1.5; quick 1)
  --open-seconds <s>        open-loop cell length per round (default 2; quick 1.5)
  --warmup-seconds <s>      warm-up before each closed-loop cell (default 0.4; quick 0.3)
  --concurrency <list>      closed-loop concurrencies (default 1,64,256)
  --rates <list>            open-loop offered rates, req/s (default 500,1000,2000)
  --pacer <worker|timer|spin>  open-loop pacing (default worker: a sleeping thread wakes the loop
                            when each send is due; spin keeps a core busy and disturbs the proxy)
  --sse-chunks <n>          chunks per SSE stream (default 500; quick 100)
  --sse-interval-ms <ms>    SSE chunk interval (default 5)
  --sse-streams <n>         concurrent SSE streams (default 1)
  --large-body-kb <n>       also a closed loop at c=64 with an n KiB prompt for direct, sidecar and
                            bare (default 16; 0 to skip)
  --hold-streams <n>        held-open streams for the RSS test (default 1000)
  --profile-seconds <s>     CPU-profiled closed-loop pass, 0 to skip (default 8; quick 2)
  --profile-concurrency <n> its concurrency (default 64)
  --no-pin                  do not pin the profiled proxy to a core of its own (taskset)
  --targets <list>          subset of direct,sidecar,sidecar-traced,sidecar-traced-1pct,bare,haproxy,
                            nginx (default all; absent peers skip); the traced sidecars export
                            OpenTelemetry spans of 100 % and 1 % of requests to a local sink
  --sidecar-variant <flags> also measure memory and c=64 throughput of a sidecar started with
                            these node flags (default "--max-old-space-size=96
                            --max-semi-space-size=4"; "" to skip)
  --wait-quiet <s>          first wait up to this long for other work on the machine to stop
                            (busy CPU not ours below 10 % of a core over 2 s; default 0)
  --no-wrk                  skip the wrk cross-check even when wrk is installed
  --out <file>              results JSON (default bench/results/overhead.json)
  --no-docs                 do not rewrite the overhead section of docs/benchmarks.md
`;

export interface Flags {
  quick: boolean;
  closedSeconds: number;
  openSeconds: number;
  warmupSeconds: number;
  concurrency: number[];
  rates: number[];
  pacer: Pacer;
  sseChunks: number;
  sseIntervalMs: number;
  sseStreams: number;
  holdStreams: number;
  profileSeconds: number;
  profileConcurrency: number;
  targets: string[];
  largeBodyKb: number;
  pin: boolean;
  rounds: number;
  retries: number;
  sidecarVariant: string[];
  waitQuietSeconds: number;
  wrk: boolean;
  out: string;
  docs: boolean;
}

export function parseFlags(): Flags {
  const values = readFlags(
    {
      quick: { type: 'boolean', default: false },
      'closed-seconds': { type: 'string' },
      'open-seconds': { type: 'string' },
      'warmup-seconds': { type: 'string' },
      concurrency: { type: 'string', default: '1,64,256' },
      rates: { type: 'string', default: '500,1000,2000' },
      pacer: { type: 'string', default: 'worker' },
      'sse-chunks': { type: 'string' },
      'sse-interval-ms': { type: 'string', default: '5' },
      'sse-streams': { type: 'string', default: '1' },
      'hold-streams': { type: 'string', default: '1000' },
      'profile-seconds': { type: 'string' },
      'profile-concurrency': { type: 'string', default: '64' },
      targets: { type: 'string', default: ALL_TARGETS.join(',') },
      'sidecar-variant': { type: 'string' },
      'wait-quiet': { type: 'string', default: '0' },
      rounds: { type: 'string' },
      retries: { type: 'string' },
      'large-body-kb': { type: 'string', default: '16' },
      pin: { type: 'boolean', default: true },
      wrk: { type: 'boolean' },
      out: { type: 'string', default: join(REPO, 'bench/results/overhead.json') },
      docs: { type: 'boolean', default: true },
    },
    HELP,
  );
  const quick = values.quick;
  const num = (name: string, value: string | undefined, fallback: number, min = 0): number =>
    numberFlag(name, value, { fallback, min });
  const pacer = values.pacer as Pacer;
  if (!['worker', 'timer', 'spin'].includes(pacer)) usageError('--pacer: worker, timer or spin');
  const targets = values.targets.split(',').map((t) => t.trim());
  for (const t of targets) {
    if (!(ALL_TARGETS as readonly string[]).includes(t))
      usageError(`--targets: unknown target ${t} (${ALL_TARGETS.join(', ')})`);
  }
  if (!targets.includes('direct')) targets.unshift('direct'); // the baseline is always measured
  return {
    quick,
    closedSeconds: num('closed-seconds', values['closed-seconds'], quick ? 1 : 1.5, 0.1),
    openSeconds: num('open-seconds', values['open-seconds'], quick ? 1.5 : 2, 0.1),
    warmupSeconds: num('warmup-seconds', values['warmup-seconds'], quick ? 0.3 : 0.4),
    concurrency: numberListFlag('concurrency', values.concurrency, 1),
    rates: numberListFlag('rates', values.rates, 1),
    pacer,
    sseChunks: num('sse-chunks', values['sse-chunks'], quick ? 100 : 500, 2),
    sseIntervalMs: num('sse-interval-ms', values['sse-interval-ms'], 5, 1),
    sseStreams: num('sse-streams', values['sse-streams'], 1, 1),
    holdStreams: num('hold-streams', values['hold-streams'], 1000, 0),
    profileSeconds: num('profile-seconds', values['profile-seconds'], quick ? 2 : 8),
    profileConcurrency: num('profile-concurrency', values['profile-concurrency'], 64, 1),
    targets,
    pin: values.pin,
    largeBodyKb: Math.round(num('large-body-kb', values['large-body-kb'], 16)),
    rounds: Math.round(num('rounds', values.rounds, quick ? 1 : 3, 1)),
    retries: Math.round(num('retries', values.retries, quick ? 0 : 2)),
    sidecarVariant: (values['sidecar-variant'] ?? (quick ? '' : DEFAULT_VARIANT))
      .split(/\s+/)
      .filter((a) => a !== ''),
    waitQuietSeconds: num('wait-quiet', values['wait-quiet'], 0),
    wrk: values.wrk ?? !quick,
    out: values.out,
    docs: values.docs,
  };
}
