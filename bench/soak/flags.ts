/**
 * The soak's command line.
 */
import { join } from 'node:path';
import { durationFlag, numberFlag, readFlags } from '../common/flags.ts';
import { REPO } from '../common/repo.ts';

const HELP = `npm run bench:soak -- [flags]

  --duration <d>         how long the load is held (default 10m; e.g. 30s, 2h)
  --rate <n>             requests offered per second, open loop (default 200)
  --abort-fraction <f>   share of requests the client abandons at a random point (default 0.2)
  --sims <n>             simulated backends (default 3)
  --sample-every <d>     sampling interval of RSS, heap and event-loop delay (default 5s)
  --warmup <d>           samples before this are left out of the "after warm-up" slopes
                         (default 2m, or a fifth of the duration when shorter)
  --health <mapping>     the pool's spec.health, as YAML, e.g. '{maxTtftSlowdown: 1000}'
                         (default: none, the defaults of docs/configuration.md)
  --seed <n>             seeds the workload (default 6)
  --out <file>           results JSON (default bench/results/soak.json)
`;

export interface Flags {
  durationMs: number;
  rate: number;
  abortFraction: number;
  sims: number;
  sampleEveryMs: number;
  warmupMs: number;
  seed: number;
  health: string | undefined;
  out: string;
}

export function parseFlags(): Flags {
  const values = readFlags(
    {
      duration: { type: 'string', default: '10m' },
      rate: { type: 'string', default: '200' },
      'abort-fraction': { type: 'string', default: '0.2' },
      sims: { type: 'string', default: '3' },
      'sample-every': { type: 'string', default: '5s' },
      warmup: { type: 'string' },
      seed: { type: 'string', default: '6' },
      health: { type: 'string' },
      out: { type: 'string', default: join(REPO, 'bench/results/soak.json') },
    },
    HELP,
  );
  const durationMs = durationFlag('duration', values.duration);
  return {
    durationMs,
    rate: numberFlag('rate', values.rate, { min: 0.001 }),
    abortFraction: numberFlag('abort-fraction', values['abort-fraction'], { min: 0 }),
    sims: numberFlag('sims', values.sims, { min: 1, integer: true }),
    sampleEveryMs: durationFlag('sample-every', values['sample-every']),
    warmupMs:
      values.warmup === undefined
        ? Math.min(120_000, durationMs / 5)
        : durationFlag('warmup', values.warmup),
    seed: numberFlag('seed', values.seed, { integer: true }),
    health: values.health,
    out: values.out,
  };
}
