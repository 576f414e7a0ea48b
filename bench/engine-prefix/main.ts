/**
 * `npm run bench:engine-prefix`: what prefix affinity is worth on a real engine. Three vLLM
 * servers (CPU, the tiny model of harness/engine/, prefix caching on) behind two standalone
 * sidecars that differ only in `affinity.key` (Prefix, the default, and None), and the same kind
 * of multi-turn conversation workload through each. vLLM's own counters say how much of the
 * prompts it found in its prefix cache (`vllm:prefix_cache_hits_total` over
 * `vllm:prefix_cache_queries_total`, in tokens); the client measures time to first token.
 *
 * Each round runs both modes on fresh conversations (another seed: another system prompt, other
 * texts), so neither finds what the other left in the caches; rounds alternate which goes first.
 * Writes bench/results/engine-prefix.json. docs/benchmarks.md has the figures.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { cpus } from 'node:os';
import { dirname, join } from 'node:path';
import OpenAI from 'openai';
import { engineVenv, tinyModel } from '../../harness/engine/install.ts';
import { startVllm, stopVllms, type VllmServer } from '../../harness/engine/vllm.ts';
import { startSidecar, stopAll, type RunningProcess } from '../../harness/processes.ts';
import { readFlags, numberFlag } from '../common/flags.ts';
import { stderrLog } from '../common/log.ts';
import { tempDir } from '../common/peers.ts';
import { waitQuiet } from '../common/quiet.ts';
import { REPO, gitCommit } from '../common/repo.ts';
import {
  conversationAffinity,
  conversationWorkload,
  turnMessages,
  type ConversationSpec,
  type TurnRecord,
} from '../routing/conversations.ts';

const HELP = `npm run bench:engine-prefix -- [options]

Three vLLM servers on the tiny test model, two sidecars (affinity Prefix and None), the same
multi-turn conversations through each; vLLM's prefix-cache counters and the client's TTFT.
Installs vLLM on first use (~12 minutes cold, cached in ~/.cache/switchyard/).

  --servers N          vLLM servers (default 3)
  --conversations N    conversations per mode and round (default 36)
  --turns N            turns per conversation (default 6)
  --concurrency N      conversations in flight at once (default 6)
  --rounds N           rounds, each runs both modes on new conversations (default 2)
  --out FILE           result file (default bench/results/engine-prefix.json)
`;

const flags = readFlags(
  {
    servers: { type: 'string' },
    conversations: { type: 'string' },
    turns: { type: 'string' },
    concurrency: { type: 'string' },
    rounds: { type: 'string' },
    out: { type: 'string' },
  },
  HELP,
);
const SERVERS = numberFlag('servers', flags.servers, { fallback: 3, min: 2, integer: true });
const CONVERSATIONS = numberFlag('conversations', flags.conversations, {
  fallback: 36,
  min: 1,
  integer: true,
});
const TURNS = numberFlag('turns', flags.turns, { fallback: 6, min: 2, integer: true });
const CONCURRENCY = numberFlag('concurrency', flags.concurrency, {
  fallback: 6,
  min: 1,
  integer: true,
});
const ROUNDS = numberFlag('rounds', flags.rounds, { fallback: 2, min: 1, integer: true });
const OUT = flags.out ?? join(REPO, 'bench/results/engine-prefix.json');
const log = stderrLog('[engine-prefix] ');

/**
 * Sized for the tiny model's tokenizer (about 2 characters a token on this pseudo-text) and a
 * 4,096-token context: a sixth turn is ~2,000 tokens, 15 of vLLM's 128-token CPU blocks. The
 * system prompt is shared by every conversation of a round, as an application's is.
 */
const SPEC: ConversationSpec = {
  conversations: CONVERSATIONS,
  turns: TURNS,
  systemChars: 1000,
  userChars: 250,
  answerTokens: 50,
  charsPerToken: 4,
};
/** Tokens generated per turn: the answers sent back are the workload's, not the model's. */
const MAX_TOKENS = 8;
const MAX_MODEL_LEN = 4096;
/** vLLM's CPU KV block: the prefix cache finds whole blocks only. */
const BLOCK_TOKENS = 128;
const wholeBlocks = (tokens: number): number => Math.floor(tokens / BLOCK_TOKENS) * BLOCK_TOKENS;

/** Tokens of the shared system prompt as the chat template renders it (vLLM's /tokenize). */
async function systemTokens(server: VllmServer, system: string): Promise<number> {
  const res = await fetch(`${server.url}/tokenize`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'tiny',
      messages: [{ role: 'system', content: system }],
      add_generation_prompt: false,
    }),
  });
  return ((await res.json()) as { count: number }).count;
}

type Mode = 'Prefix' | 'None';

interface Counters {
  queries: number;
  hits: number;
}

/** vLLM's prefix-cache counters of one server, summed over label sets. */
async function prefixCounters(server: VllmServer): Promise<Counters> {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  const sum = (name: string): number => {
    let total = 0;
    for (const line of text.split('\n'))
      if (line.startsWith(`${name}{`) || line.startsWith(`${name} `))
        total += Number(line.slice(line.lastIndexOf(' ') + 1));
    return total;
  };
  return {
    queries: sum('vllm:prefix_cache_queries_total'),
    hits: sum('vllm:prefix_cache_hits_total'),
  };
}

const quantile = (sorted: readonly number[], q: number): number =>
  sorted.length === 0
    ? NaN
    : sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
const round1 = (x: number): number => Math.round(x * 10) / 10;

interface PhaseResult {
  round: number;
  mode: Mode;
  seed: number;
  requests: number;
  errors: number;
  promptTokens: number;
  /** vLLM's counters, summed over the servers, for this phase alone (tokens). */
  prefixCacheQueries: number;
  prefixCacheHits: number;
  prefixCacheHitRate: number;
  /**
   * The hit rate of a router that sends every turn to the server of the turn before, on servers
   * that never evict: each later turn finds the whole blocks of the previous turn's prompt, each
   * first turn those of the shared system prompt (every server but the first to see it).
   */
  idealHitRate: number;
  /** Per server: hit tokens / query tokens, and how many requests it served. */
  perServer: { server: string; queries: number; hits: number; requests: number }[];
  ttftMs: { p50: number; p90: number; p99: number; mean: number };
  laterTurnsHome: number | undefined;
  maxHomeShare: number | undefined;
  wallSeconds: number;
}

async function runPhase(
  round: number,
  mode: Mode,
  seed: number,
  sidecar: RunningProcess,
  servers: readonly VllmServer[],
): Promise<PhaseResult> {
  const client = new OpenAI({
    baseURL: `${sidecar.url}/v1`,
    apiKey: 'bench',
    maxRetries: 0,
    timeout: 120_000,
  });
  const conversations = conversationWorkload(SPEC, seed);
  const shared = wholeBlocks(await systemTokens(servers[0]!, conversations[0]!.system));
  /** Prompt tokens of each turn, by conversation, from the usage vLLM reports. */
  const turnTokens = conversations.map(() => new Array<number>(TURNS).fill(0));
  const before = await Promise.all(servers.map(prefixCounters));
  const records: TurnRecord[] = [];
  const ttfts: number[] = [];
  const served = new Map<string, number>();
  let promptTokens = 0;
  let errors = 0;
  let next = 0;
  const started = performance.now();
  const worker = async (): Promise<void> => {
    for (let c = next++; c < conversations.length; c = next++) {
      const conversation = conversations[c]!;
      for (let turn = 0; turn < TURNS; turn++) {
        const sent = performance.now();
        let backend: string | undefined;
        let ok = false;
        try {
          // ignore_eos, vLLM's sampling extension: answers of a fixed length.
          const body: OpenAI.ChatCompletionCreateParamsStreaming & { ignore_eos: boolean } = {
            model: 'tiny',
            messages: turnMessages(conversation, turn),
            max_tokens: MAX_TOKENS,
            temperature: 0,
            stream: true,
            stream_options: { include_usage: true },
            ignore_eos: true,
          };
          const { data: stream, response } = await client.chat.completions
            .create(body)
            .withResponse();
          backend = response.headers.get('x-switchyard-backend')?.split('/')[0];
          let first = true;
          for await (const chunk of stream) {
            if (first) {
              ttfts.push(performance.now() - sent);
              first = false;
            }
            promptTokens += chunk.usage?.prompt_tokens ?? 0;
            if (chunk.usage) turnTokens[c]![turn] = chunk.usage.prompt_tokens;
          }
          ok = true;
        } catch (err) {
          errors++;
          if (errors <= 3) log(`request failed: ${(err as Error).message}`);
        }
        if (backend !== undefined) served.set(backend, (served.get(backend) ?? 0) + 1);
        records.push({ conversation: conversation.index, turn: turn + 1, backend, ok });
      }
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  const wallSeconds = (performance.now() - started) / 1000;
  const after = await Promise.all(servers.map(prefixCounters));
  const perServer = servers.map((_, i) => ({
    server: `s${i}`,
    queries: after[i]!.queries - before[i]!.queries,
    hits: after[i]!.hits - before[i]!.hits,
    requests: served.get(`s${i}`) ?? 0,
  }));
  const queries = perServer.reduce((a, s) => a + s.queries, 0);
  const hits = perServer.reduce((a, s) => a + s.hits, 0);
  let idealHits = 0;
  for (const tokens of turnTokens)
    for (const [turn, n] of tokens.entries())
      idealHits += Math.min(n, turn === 0 ? shared : wholeBlocks(tokens[turn - 1]!));
  idealHits -= shared * Math.min(servers.length, conversations.length);
  ttfts.sort((a, b) => a - b);
  const affinity = conversationAffinity(records);
  return {
    round,
    mode,
    seed,
    requests: records.length,
    errors,
    promptTokens,
    prefixCacheQueries: queries,
    prefixCacheHits: hits,
    prefixCacheHitRate: queries === 0 ? 0 : hits / queries,
    idealHitRate: promptTokens === 0 ? 0 : idealHits / promptTokens,
    perServer,
    ttftMs: {
      p50: round1(quantile(ttfts, 0.5)),
      p90: round1(quantile(ttfts, 0.9)),
      p99: round1(quantile(ttfts, 0.99)),
      mean: round1(ttfts.reduce((a, b) => a + b, 0) / Math.max(1, ttfts.length)),
    },
    laterTurnsHome: affinity?.laterTurnsHome,
    maxHomeShare: affinity?.maxHomeShare,
    wallSeconds: round1(wallSeconds),
  };
}

async function main(): Promise<void> {
  const dir = tempDir('engine-prefix');
  const venv = await engineVenv();
  const model = await tinyModel(1);
  // Before the servers start: idle vLLM servers poll, which would read as a busy machine.
  const otherCpu = await waitQuiet(120, { belowPct: 30, windows: 2, log });
  log(`starting ${SERVERS} vLLM servers (about a minute each on 2 cores)`);
  const servers: VllmServer[] = [];
  const sidecars: RunningProcess[] = [];
  try {
    for (const s of await Promise.all(
      Array.from({ length: SERVERS }, (_, i) =>
        startVllm({
          venv,
          model,
          servedName: 'tiny',
          maxModelLen: MAX_MODEL_LEN,
          logFile: join(dir, `vllm-${i}.log`),
        }),
      ),
    ))
      servers.push(s);
    const sidecarFor = async (mode: Mode): Promise<RunningProcess> => {
      const file = join(dir, `pool-${mode}.yaml`);
      await writeFile(
        file,
        [
          'apiVersion: switchyard.dev/v1alpha1',
          'kind: InferencePool',
          `metadata: {name: prefix-${mode.toLowerCase()}}`,
          'spec:',
          '  mode: Balance',
          `  affinity: {key: ${mode}}`,
          '  backends:',
          ...servers.map((s, i) => `  - {name: s${i}, url: '${s.url}/v1'}`),
          '',
        ].join('\n'),
      );
      const started = await startSidecar(file, ['--log-level', 'warn']);
      sidecars.push(started);
      return started;
    };
    const bySidecar = { Prefix: await sidecarFor('Prefix'), None: await sidecarFor('None') };
    const phases: PhaseResult[] = [];
    for (let round = 1; round <= ROUNDS; round++) {
      const order: Mode[] = round % 2 === 1 ? ['None', 'Prefix'] : ['Prefix', 'None'];
      for (const [i, mode] of order.entries()) {
        const seed = 100 * round + i;
        const phase = await runPhase(round, mode, seed, bySidecar[mode], servers);
        log(
          `round ${round} ${mode}: hit rate ${(phase.prefixCacheHitRate * 100).toFixed(1)} % ` +
            `(${phase.prefixCacheHits}/${phase.prefixCacheQueries} tokens; ideal ` +
            `${(phase.idealHitRate * 100).toFixed(1)} %), TTFT p50 ` +
            `${phase.ttftMs.p50} ms p99 ${phase.ttftMs.p99} ms, later turns home ` +
            `${((phase.laterTurnsHome ?? 0) * 100).toFixed(1)} %, ${phase.errors} errors`,
        );
        phases.push(phase);
      }
    }
    const summary = (mode: Mode) => {
      const of = phases.filter((p) => p.mode === mode);
      const queries = of.reduce((a, p) => a + p.prefixCacheQueries, 0);
      const hits = of.reduce((a, p) => a + p.prefixCacheHits, 0);
      const prompts = of.reduce((a, p) => a + p.promptTokens, 0);
      const ideal = of.reduce((a, p) => a + p.idealHitRate * p.promptTokens, 0);
      const mean = (f: (p: PhaseResult) => number): number =>
        round1(of.reduce((a, p) => a + f(p), 0) / of.length);
      return {
        mode,
        requests: of.reduce((a, p) => a + p.requests, 0),
        errors: of.reduce((a, p) => a + p.errors, 0),
        prefixCacheQueries: queries,
        prefixCacheHits: hits,
        prefixCacheHitRate: queries === 0 ? 0 : hits / queries,
        idealHitRate: prompts === 0 ? 0 : ideal / prompts,
        ttftP50MsMean: mean((p) => p.ttftMs.p50),
        ttftP99MsMean: mean((p) => p.ttftMs.p99),
        laterTurnsHome: mean((p) => (p.laterTurnsHome ?? 0) * 100) / 100,
      };
    };
    const result = {
      bench: 'engine-prefix',
      date: new Date().toISOString(),
      commit: gitCommit(),
      node: process.version,
      cpus: cpus().length,
      otherCpuPctAtStart: otherCpu === undefined ? null : Math.round(otherCpu),
      engine: { vllm: '0.32.0', model: 'tiny Llama of harness/engine (seed 1)', blockTokens: 128 },
      servers: SERVERS,
      workload: { ...SPEC, maxTokens: MAX_TOKENS, concurrency: CONCURRENCY, rounds: ROUNDS },
      summary: [summary('Prefix'), summary('None')],
      phases,
    };
    mkdirSync(dirname(OUT), { recursive: true });
    writeFileSync(OUT, `${JSON.stringify(result, null, 2)}\n`);
    for (const s of result.summary)
      log(
        `${s.mode}: prefix-cache hit rate ${(s.prefixCacheHitRate * 100).toFixed(1)} % ` +
          `(ideal ${(s.idealHitRate * 100).toFixed(1)} %), ` +
          `TTFT p50 ${s.ttftP50MsMean} ms p99 ${s.ttftP99MsMean} ms, later turns home ` +
          `${(s.laterTurnsHome * 100).toFixed(1)} %, errors ${s.errors}/${s.requests}`,
      );
    log(`wrote ${OUT}`);
  } finally {
    await stopAll(sidecars);
    await stopVllms(servers);
  }
}

await main();
