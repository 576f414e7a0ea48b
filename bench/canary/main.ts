/**
 * `npm run bench:canary`: how exactly switchyard splits a model's traffic by backend weight (a
 * canary at 5 %), measured the way it runs: several standalone sidecars on one pool file, real
 * HTTP to simulators, conversations (an affinity key in a header) mixed with keyless requests.
 * It reports each side's share overall, per sidecar, for keyed and keyless requests, and how many
 * conversations ever changed sides (the target: none, and the overall share within ±1 percentage
 * point of the weight over 10,000 requests from 4 sidecars). Writes JSON to --out.
 *
 * The pool: backend `stable` (two simulators, weight 95) and backend `canary` (one simulator,
 * weight 5), Balance mode, affinity by the `x-conversation-id` header. `--weights none` leaves the
 * weights out: what the same pool does without a split (a baseline, and what a build without
 * weighted backends accepts).
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { Agent, request as httpRequest } from 'node:http';
import { stringify } from 'yaml';
import { startSidecar, startSim, stopAll, type RunningProcess } from '../../harness/processes.ts';
import { numberFlag, readFlags, usageError } from '../common/flags.ts';
import { gitCommit, REPO } from '../common/repo.ts';
import { analyse, planRequests, type Outcome, type PlannedRequest } from './plan.ts';

const HELP = `npm run bench:canary -- [flags]

  --requests <n>       requests in all (default 10000)
  --sidecars <n>       standalone sidecars on the one pool file (default 4)
  --weights <a,b>      weights of stable and canary, or none (default 95,5)
  --keyed-share <f>    part of the requests that belong to conversations (default 0.5)
  --turns <n>          turns per conversation (default 5)
  --concurrency <n>    requests in flight (default 32)
  --seed <n>           seed of the plan (default 1)
  --out <file>         where to write the JSON (default bench/results/canary.json)
`;

const KEY_HEADER = 'x-conversation-id';

interface Settings {
  requests: number;
  sidecars: number;
  weights: { stable: number; canary: number } | undefined;
  keyedShare: number;
  turns: number;
  concurrency: number;
  seed: number;
  out: string;
}

function settings(): Settings {
  const f = readFlags(
    {
      requests: { type: 'string' },
      sidecars: { type: 'string' },
      weights: { type: 'string' },
      'keyed-share': { type: 'string' },
      turns: { type: 'string' },
      concurrency: { type: 'string' },
      seed: { type: 'string' },
      out: { type: 'string' },
    },
    HELP,
  );
  let weights: Settings['weights'] = { stable: 95, canary: 5 };
  if (f.weights === 'none') weights = undefined;
  else if (f.weights !== undefined) {
    const parts = f.weights
      .split(',')
      .map((w) => numberFlag('weights', w.trim(), { min: 0, integer: true }));
    if (parts.length !== 2 || parts[0]! + parts[1]! <= 0)
      usageError('--weights: two whole numbers (stable,canary) with a positive sum, or none');
    weights = { stable: parts[0]!, canary: parts[1]! };
  }
  const keyedShare = numberFlag('keyed-share', f['keyed-share'], { fallback: 0.5, min: 0 });
  if (keyedShare > 1) usageError('--keyed-share: a fraction in [0, 1]');
  return {
    requests: numberFlag('requests', f.requests, { fallback: 10_000, min: 1, integer: true }),
    sidecars: numberFlag('sidecars', f.sidecars, { fallback: 4, min: 1, integer: true }),
    weights,
    keyedShare,
    turns: numberFlag('turns', f.turns, { fallback: 5, min: 1, integer: true }),
    concurrency: numberFlag('concurrency', f.concurrency, { fallback: 32, min: 1, integer: true }),
    seed: numberFlag('seed', f.seed, { fallback: 1, min: 0, integer: true }),
    out: resolve(f.out ?? join(REPO, 'bench/results/canary.json')),
  };
}

function poolYaml(s: Settings, stable: readonly string[], canary: readonly string[]): string {
  const weight = (w: number | undefined) => (w === undefined ? {} : { weight: w });
  return stringify({
    apiVersion: 'switchyard.dev/v1alpha1',
    kind: 'InferencePool',
    metadata: { name: 'canary-bench' },
    spec: {
      mode: 'Balance',
      affinity: { key: 'Header', header: KEY_HEADER },
      backends: [
        { name: 'stable', urls: stable.map((u) => `${u}/v1`), ...weight(s.weights?.stable) },
        { name: 'canary', urls: canary.map((u) => `${u}/v1`), ...weight(s.weights?.canary) },
      ],
    },
  });
}

const agent = new Agent({ keepAlive: true, maxSockets: Infinity });

/** One chat request through `sidecarUrl`; the side that answered from the sidecar's header. */
function send(sidecarUrl: string, r: PlannedRequest): Promise<Outcome> {
  const body = JSON.stringify({
    model: 'canary-bench',
    max_tokens: 2,
    messages: [
      {
        role: 'user',
        content:
          r.conversation === undefined
            ? `a question of its own ${Math.random()}`
            : `conversation ${r.conversation}, turn ${r.turn}`,
      },
    ],
  });
  const url = new URL('/v1/chat/completions', sidecarUrl);
  return new Promise((resolveOutcome) => {
    const req = httpRequest(
      url,
      {
        method: 'POST',
        agent,
        headers: {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
          ...(r.conversation === undefined ? {} : { [KEY_HEADER]: `c${r.conversation}` }),
        },
      },
      (res) => {
        res.resume();
        res.on('end', () => {
          const backend = String(res.headers['x-switchyard-backend'] ?? '');
          // `<endpoint id>[; model=…]`, the endpoint id starting with its backend's name.
          const side = /^([^/;\s]+)\//.exec(backend)?.[1];
          const ok = (res.statusCode ?? 0) < 300 && side !== undefined;
          resolveOutcome({ request: r, side: ok ? side : undefined, status: res.statusCode ?? 0 });
        });
      },
    );
    req.on('error', () => resolveOutcome({ request: r, side: undefined, status: 0 }));
    req.end(body);
  });
}

async function main(): Promise<void> {
  const s = settings();
  const processes: RunningProcess[] = [];
  const dir = mkdtempSync(join(tmpdir(), 'switchyard-canary-'));
  try {
    // Many slots and a fast model: the bench measures the split, not queueing.
    const sim = (name: string) =>
      startSim(name, ['--slots', '256', '--queue-limit', '4096', '--speed', '20']);
    const stable = await Promise.all([sim('stable-0'), sim('stable-1')]);
    const canary = await Promise.all([sim('canary-0')]);
    processes.push(...stable, ...canary);
    const poolFile = join(dir, 'pool.yaml');
    writeFileSync(
      poolFile,
      poolYaml(
        s,
        stable.map((p) => p.url),
        canary.map((p) => p.url),
      ),
    );
    for (let i = 0; i < s.sidecars; i++)
      processes.push(await startSidecar(poolFile, ['--log-level', 'warn']));
    const sidecars = processes.slice(stable.length + canary.length);

    const plan = planRequests({
      total: s.requests,
      keyedShare: s.keyedShare,
      turns: s.turns,
      sidecars: s.sidecars,
      seed: s.seed,
    });
    process.stderr.write(
      `canary: ${s.requests} requests through ${s.sidecars} sidecars, weights ${s.weights === undefined ? 'none' : `${s.weights.stable}/${s.weights.canary}`}\n`,
    );
    const started = performance.now();
    const outcomes = new Array<Outcome>(plan.length);
    let next = 0;
    const worker = async (): Promise<void> => {
      while (next < plan.length) {
        const i = next++;
        const r = plan[i]!;
        outcomes[i] = await send(sidecars[r.sidecar]!.url, r);
      }
    };
    await Promise.all(Array.from({ length: s.concurrency }, worker));
    const wallS = (performance.now() - started) / 1000;

    const weights = s.weights ?? { stable: 1, canary: 1 };
    const a = analyse(outcomes, weights, s.sidecars);
    const canaryTarget = s.weights === undefined ? undefined : 1;
    const results = {
      bench: 'canary',
      commit: gitCommit(),
      date: new Date().toISOString(),
      settings: { ...s, out: undefined, weights: s.weights ?? 'none' },
      pool: {
        affinity: `Header ${KEY_HEADER}`,
        backends: { stable: stable.length, canary: canary.length },
      },
      wallS: Math.round(wallS * 10) / 10,
      ...a,
      target:
        canaryTarget === undefined
          ? null
          : {
              description:
                'every side within ±1 percentage point of its weight overall; no conversation changes sides',
              limitPp: canaryTarget,
              met:
                Object.values(a.errorPp).every((pp) => pp <= canaryTarget) &&
                a.conversations.flipped === 0 &&
                a.errors === 0,
            },
    };
    mkdirSync(dirname(s.out), { recursive: true });
    writeFileSync(s.out, JSON.stringify(results, null, 2) + '\n');
    const pct = (v: number | undefined) => `${((v ?? NaN) * 100).toFixed(2)} %`;
    process.stderr.write(
      `canary: overall stable ${pct(a.overall['stable'])} canary ${pct(a.overall['canary'])} ` +
        `(keyless canary ${pct(a.keyless['canary'])}, keyed ${pct(a.keyed['canary'])}); ` +
        `per sidecar canary ${a.bySidecar.map((b) => pct(b.shares['canary'])).join(', ')}; ` +
        `${a.conversations.flipped} of ${a.conversations.count} conversations changed sides; ` +
        `${a.errors} errors; ${wallS.toFixed(1)} s; wrote ${s.out}\n`,
    );
    if (results.target !== null && !results.target.met) process.exitCode = 1;
  } finally {
    agent.destroy();
    await stopAll(processes);
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
