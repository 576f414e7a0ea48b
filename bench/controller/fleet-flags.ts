/**
 * `npm run bench:controller-fleet`'s command line, and the `Flags` of the single-controller bench
 * its shared set-up steps (pools, tokens) read.
 */
import { join } from 'node:path';
import { parseAllocator, type Allocator } from '../../harness/allocator.ts';
import { numberFlag, readFlags, usageError } from '../common/flags.ts';
import { REPO } from '../common/repo.ts';
import { maxPools } from './fixture.ts';
import type { Flags } from './flags.ts';

const HELP = `npm run bench:controller-fleet -- [flags]

  --pools <n>            InferencePools, each with a Service and one EndpointSlice (default 1000)
  --endpoints <n>        endpoints per EndpointSlice (default 20)
  --subscribers <n>      sidecar controller clients in subscriber hosts; subscriber i follows
                         pool i mod pools (default 1000)
  --hosts <n>            subscriber host processes sharing them (default 4)
  --sidecars <n>         full sidecar processes of the compiled build (npm run build) on top,
                         following the pools after the clients' (default 0)
  --replicas <n>         controller replicas; each host spreads its connections over them
                         round-robin, as the chart's Service would (default 3)
  --namespaces <n>       namespaces the pools are spread over (default 4)
  --rounds <n>           EndpointSlice writes measured one at a time (default 30)
  --gap-ms <ms>          pause between two writes (default 300)
  --steady-seconds <s>   steady-state window for the API server's TokenReview and write rates,
                         and the replicas' CPU (default 60)
  --report-every <s>     the subscribers' --report-every (default 10)
  --timeout <s>          give up waiting for a write's or the kill's subscribers (default 60)
  --sync-timeout <s>     give up the initial sync after this long (default 1800)
  --rolling-restart <n>  the rolling-restart stage: a pool of n endpoints (EndpointSlices of at
                         most 100) restarted as a Deployment with maxSurge/maxUnavailable 25 %;
                         0 = off (default 500)
  --rolling-subscribers <n>  clients following that pool, in hosts of their own (default 100)
  --rolling-step-ms <ms> one EndpointSlice sync of the rollout every ms (default 250)
  --rolling-batch <n>    pods changed per sync at most (default 25)
  --no-kill              skip killing a replica
  --allocator <name>     the replicas' C allocator: glibc (Node's own malloc) or jemalloc
                         (preloaded, as the chart runs the controller; default glibc)
  --replica-node-args=<args>  Node/V8 flags for the replicas only, space-separated, given with
                         '=' (--replica-node-args=--heap-growing-percent=20): what a flag in
                         the controller's NODE_OPTIONS would do
  --cpu-prof <dir>       each replica writes a V8 CPU profile there when it stops (the killed
                         one writes none), each subscriber host one under <dir>/hosts: where the
                         CPU goes (open in Chrome's DevTools, or bench/controller/profile-top.ts)
  --out <file>           results JSON (default bench/results/controller-fleet.json)
`;

export interface FleetFlags {
  pools: number;
  endpoints: number;
  clients: number;
  hosts: number;
  sidecars: number;
  replicas: number;
  namespaces: number;
  rounds: number;
  gapMs: number;
  steadySeconds: number;
  reportEveryS: number;
  timeoutMs: number;
  syncTimeoutMs: number;
  kill: boolean;
  rollingRestart: number;
  rollingSubscribers: number;
  rollingStepMs: number;
  rollingBatch: number;
  out: string;
  cpuProfDir: string | undefined;
  allocator: Allocator;
  replicaNodeArgs: string[];
}

export function parseFleetFlags(): { fleet: FleetFlags; base: Flags } {
  const v = readFlags(
    {
      pools: { type: 'string', default: '1000' },
      endpoints: { type: 'string', default: '20' },
      subscribers: { type: 'string', default: '1000' },
      hosts: { type: 'string', default: '4' },
      sidecars: { type: 'string', default: '0' },
      replicas: { type: 'string', default: '3' },
      namespaces: { type: 'string', default: '4' },
      rounds: { type: 'string', default: '30' },
      'gap-ms': { type: 'string', default: '300' },
      'steady-seconds': { type: 'string', default: '60' },
      'report-every': { type: 'string', default: '10' },
      timeout: { type: 'string', default: '60' },
      'sync-timeout': { type: 'string', default: '1800' },
      kill: { type: 'boolean', default: true },
      'rolling-restart': { type: 'string', default: '500' },
      'rolling-subscribers': { type: 'string', default: '100' },
      'rolling-step-ms': { type: 'string', default: '250' },
      'rolling-batch': { type: 'string', default: '25' },
      out: { type: 'string', default: join(REPO, 'bench/results/controller-fleet.json') },
      'cpu-prof': { type: 'string' },
      allocator: { type: 'string', default: 'glibc' },
      'replica-node-args': { type: 'string', default: '' },
    },
    HELP,
  );
  const int = (name: string, value: string, min: number): number =>
    numberFlag(name, value, { min, integer: true });
  const endpoints = int('endpoints', v.endpoints, 1);
  const pools = int('pools', v.pools, 1);
  if (pools > maxPools(endpoints))
    usageError(`--pools: at most ${maxPools(endpoints)} pools of ${endpoints} endpoints fit`);
  const fleet: FleetFlags = {
    pools,
    endpoints,
    clients: int('subscribers', v.subscribers, 0),
    hosts: int('hosts', v.hosts, 1),
    sidecars: int('sidecars', v.sidecars, 0),
    replicas: int('replicas', v.replicas, 1),
    namespaces: Math.min(int('namespaces', v.namespaces, 1), pools),
    rounds: int('rounds', v.rounds, 0),
    gapMs: numberFlag('gap-ms', v['gap-ms'], { min: 0 }),
    steadySeconds: numberFlag('steady-seconds', v['steady-seconds'], { min: 1 }),
    reportEveryS: numberFlag('report-every', v['report-every'], { min: 1 }),
    timeoutMs: numberFlag('timeout', v.timeout, { min: 1 }) * 1000,
    syncTimeoutMs: numberFlag('sync-timeout', v['sync-timeout'], { min: 1 }) * 1000,
    kill: v.kill,
    rollingRestart: int('rolling-restart', v['rolling-restart'], 0),
    rollingSubscribers: int('rolling-subscribers', v['rolling-subscribers'], 1),
    rollingStepMs: numberFlag('rolling-step-ms', v['rolling-step-ms'], { min: 0 }),
    rollingBatch: int('rolling-batch', v['rolling-batch'], 1),
    out: v.out,
    cpuProfDir: v['cpu-prof'],
    allocator:
      parseAllocator(v.allocator) ??
      usageError(`--allocator takes glibc or jemalloc, got ${v.allocator}`),
    replicaNodeArgs: v['replica-node-args'].split(/\s+/).filter((a) => a !== ''),
  };
  if (fleet.clients + fleet.sidecars === 0) usageError('--subscribers and --sidecars are both 0');
  // Old and new pods' addresses both come from 10.201.0.0/16 (fleet-rolling.ts).
  if (fleet.rollingRestart > (256 * 254) / 2)
    usageError(`--rolling-restart: at most ${(256 * 254) / 2} endpoints`);
  if (fleet.kill && fleet.replicas < 2) usageError('killing a replica needs --replicas >= 2');
  // What the shared set-up steps read: one token per subscriber, in the namespaces given.
  const base = {
    pools,
    endpoints,
    namespaces: fleet.namespaces,
    subscribers: fleet.clients + fleet.sidecars,
    tokens: 'per-subscriber',
  } as Flags;
  return { fleet, base };
}
