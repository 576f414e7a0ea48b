/**
 * The controller bench's command line.
 */
import { join } from 'node:path';
import { numberFlag, readFlags, usageError } from '../common/flags.ts';
import { REPO } from '../common/repo.ts';
import { maxPools } from './fixture.ts';

const HELP = `npm run bench:controller -- [flags]

  --pools <n>             InferencePools, each with a Service and one EndpointSlice (default 200)
  --endpoints <n>         endpoints per EndpointSlice (default 20)
  --subscribers <n>       simulated sidecars; subscriber i follows pool i mod pools (default 500)
  --namespaces <n>        namespaces the pools are spread over (default 4)
  --rounds <n>            measured EndpointSlice writes one at a time (default 100)
  --warmup <n>            unmeasured writes before them (default 5)
  --gap-ms <ms>           pause between two writes one at a time (default 200)
  --bursts <n>            measured bursts of concurrent writes (default 5; 0: none)
  --burst-size <n>        pools written at once in a burst (default 20)
  --idle-seconds <s>      idle window after the initial sync (default 10)
  --report-every <s>      subscribers' report interval, as the sidecar's --report-every
                          (default 10; 0: no reports)
  --tokens <kind>         subscriber: a token of its own per subscriber (default);
                          namespace: one token per namespace, shared
  --timeout <s>           a write that has not reached every subscriber by then is a timeout
                          (default 15)
  --profile               run the controller with --cpu-prof and summarise the initial sync,
                          idle and writes windows (the profile goes to
                          bench/results/controller.cpuprofile)
  --node-args=<flags>     extra node flags for the controller, for what-ifs, e.g.
                          --node-args=--max-semi-space-size=8 (recorded in the results)
  --controller-env <K=V>  an environment variable for the controller (repeatable), e.g.
                          SWITCHYARD_V8_FLAGS=applied (bin/switchyard.js then keeps V8's
                          default young generation)
  --prime-tokens          connect one subscriber per distinct token first, and the rest once
                          those hold a snapshot (with --tokens namespace: no TokenReview burst)
  --clear-what-ifs        drop the recorded what-if rows (a main run keeps them otherwise)
  --wait-quiet <s>        first wait up to this long for other work on the machine to drop
                          below 25 % of a core (default 0)
  --what-if <label>       a variant run: record a one-row summary under this label in the
                          results JSON (the main measurements stay) and in the docs'
                          What-ifs table; e.g. --what-if "semi-space 8 MB" --node-args ...
  --out <file>            results JSON (default bench/results/controller.json)
  --no-docs               do not write the Controller section of docs/benchmarks.md
`;

export interface Flags {
  pools: number;
  endpoints: number;
  subscribers: number;
  namespaces: number;
  rounds: number;
  warmup: number;
  gapMs: number;
  bursts: number;
  burstSize: number;
  idleSeconds: number;
  reportEveryMs: number;
  tokens: 'per-subscriber' | 'per-namespace';
  timeoutMs: number;
  profile: boolean;
  nodeArgs: string[];
  controllerEnv: Record<string, string>;
  primeTokens: boolean;
  clearWhatIfs: boolean;
  waitQuietSeconds: number;
  whatIf: string | undefined;
  out: string;
  docs: boolean;
}

export function parseFlags(): Flags {
  const values = readFlags(
    {
      pools: { type: 'string', default: '200' },
      endpoints: { type: 'string', default: '20' },
      subscribers: { type: 'string', default: '500' },
      namespaces: { type: 'string', default: '4' },
      rounds: { type: 'string', default: '100' },
      warmup: { type: 'string', default: '5' },
      'gap-ms': { type: 'string', default: '200' },
      bursts: { type: 'string', default: '5' },
      'burst-size': { type: 'string', default: '20' },
      'idle-seconds': { type: 'string', default: '10' },
      'report-every': { type: 'string', default: '10' },
      tokens: { type: 'string', default: 'subscriber' },
      timeout: { type: 'string', default: '15' },
      profile: { type: 'boolean', default: false },
      'node-args': { type: 'string', default: '' },
      'controller-env': { type: 'string', multiple: true, default: [] },
      'prime-tokens': { type: 'boolean', default: false },
      'clear-what-ifs': { type: 'boolean', default: false },
      'wait-quiet': { type: 'string', default: '0' },
      'what-if': { type: 'string' },
      out: { type: 'string', default: join(REPO, 'bench/results/controller.json') },
      docs: { type: 'boolean', default: true },
    },
    HELP,
  );
  const num = (name: string, value: string, min: number): number =>
    numberFlag(name, value, { min });
  const int = (name: string, value: string, min: number): number =>
    numberFlag(name, value, { min, integer: true });
  const endpoints = int('endpoints', values.endpoints, 1);
  const pools = int('pools', values.pools, 1);
  if (pools > maxPools(endpoints))
    usageError(
      `--pools: at most ${maxPools(endpoints)} pools of ${endpoints} endpoints fit in 10.200.0.0/16`,
    );
  if (values.tokens !== 'subscriber' && values.tokens !== 'namespace')
    usageError('--tokens: subscriber or namespace');
  const namespaces = int('namespaces', values.namespaces, 1);
  return {
    pools,
    endpoints,
    subscribers: int('subscribers', values.subscribers, 1),
    namespaces: Math.min(namespaces, pools),
    rounds: int('rounds', values.rounds, 1),
    warmup: int('warmup', values.warmup, 0),
    gapMs: num('gap-ms', values['gap-ms'], 0),
    bursts: int('bursts', values.bursts, 0),
    burstSize: Math.min(int('burst-size', values['burst-size'], 1), pools),
    idleSeconds: num('idle-seconds', values['idle-seconds'], 0),
    reportEveryMs: num('report-every', values['report-every'], 0) * 1000,
    tokens: values.tokens === 'subscriber' ? 'per-subscriber' : 'per-namespace',
    timeoutMs: num('timeout', values.timeout, 1) * 1000,
    profile: values.profile,
    nodeArgs: values['node-args'].split(/\s+/).filter((a) => a !== ''),
    controllerEnv: Object.fromEntries(
      values['controller-env'].map((kv) => {
        const eq = kv.indexOf('=');
        if (eq <= 0) usageError(`--controller-env: expected NAME=value, got ${kv}`);
        return [kv.slice(0, eq), kv.slice(eq + 1)];
      }),
    ),
    primeTokens: values['prime-tokens'],
    clearWhatIfs: values['clear-what-ifs'],
    waitQuietSeconds: num('wait-quiet', values['wait-quiet'], 0),
    whatIf: values['what-if'],
    out: values.out,
    docs: values.docs,
  };
}
