/**
 * The routing benchmark's report: the targets of docs/benchmarks.md#routing checked against the
 * results, and a markdown page with a table per scenario.
 */
import { OWN_POLICY_NAMES } from '../../lib/bench-names.ts';
import type { BenchResults, ScenarioResult, TargetCheck } from './results.ts';
import { range, type SeedFigures } from './seeds.ts';

const PEERS = (results: BenchResults, scenario: string): string[] =>
  Object.keys(results.scenarios[scenario] ?? {}).filter(
    (p) => !(OWN_POLICY_NAMES as readonly string[]).includes(p) && !p.includes('@'),
  );

const CENTRAL = '-central';
/** One instance for every client: the `-central` gateways, and GAIE's pickers by design (gaie.ts). */
const isCentral = (policy: string): boolean =>
  policy.endsWith(CENTRAL) || policy === 'gaie-epp' || policy === 'gaie-lwepp';

/**
 * The routing issue's targets (docs/benchmarks.md#routing), for the scenarios that were run:
 * steady against every peer (the central gateways too) and the oracle, slow-backend against p2c
 * and every peer, fast-failure without client-visible errors, for conversations how many
 * later turns stayed home and how evenly homes are spread, and for lora the adapter loads against
 * least-connections' and the TTFT p99 against every peer.
 */
export function checkTargets(results: BenchResults): { checks: TargetCheck[] } {
  const checks: TargetCheck[] = [];
  const check = (
    scenario: string,
    target: string,
    measured: number | null,
    limit: number | null,
    atLeast = false,
  ): void => {
    const met =
      measured === null || limit === null ? null : atLeast ? measured >= limit : measured <= limit;
    checks.push({ scenario, target, measured, limit, met });
  };
  for (const scenario of ['steady', 'slow-backend']) {
    const by = results.scenarios[scenario];
    if (by === undefined) continue;
    const sy = by['switchyard'];
    const p99 = sy?.ttftMs.p99 ?? null;
    const p99Limit = (name: string, factor: number, target: string): void =>
      check(scenario, target, p99, by[name] === undefined ? null : by[name].ttftMs.p99 * factor);
    const peers = PEERS(results, scenario);
    if (scenario === 'slow-backend') p99Limit('p2c', 1, 'TTFT p99 ≤ p2c');
    for (const peer of peers) p99Limit(peer, 1, `TTFT p99 ≤ ${peer}`);
    if (scenario !== 'steady') continue;
    p99Limit('oracle', 1.25, 'TTFT p99 ≤ 1.25 × oracle');
    const p50 = sy?.ttftMs.p50 ?? null;
    const bestP50 = (names: string[]): number | null =>
      names.length === 0 ? null : Math.min(...names.map((n) => by[n]!.ttftMs.p50));
    const perPod = bestP50(peers.filter((p) => !isCentral(p)));
    const central = bestP50(peers.filter(isCentral));
    check(
      scenario,
      'TTFT p50 ≤ 0.85 × the best per-pod peer',
      p50,
      perPod === null ? null : 0.85 * perPod,
    );
    check(scenario, 'TTFT p50 ≤ the best central peer', p50, central);
    const oracleHit = by['oracle']?.cacheHitRate;
    check(
      scenario,
      'prefix-cache hit rate ≥ 0.85 × oracle',
      sy?.cacheHitRate ?? null,
      oracleHit === undefined ? null : 0.85 * oracleHit,
      true,
    );
  }
  if (results.scenarios['fast-failure'] !== undefined) {
    const sy = results.scenarios['fast-failure']['switchyard'];
    check('fast-failure', 'no client-visible errors', sy?.errorRate ?? null, 0);
  }
  if (results.scenarios['conversations'] !== undefined) {
    const chats = results.scenarios['conversations']['switchyard']?.conversations;
    check(
      'conversations',
      'share of later turns on their first turn’s backend ≥ 90 %',
      chats?.laterTurnsHome ?? null,
      0.9,
      true,
    );
    check(
      'conversations',
      'share of conversations on the busiest home ≤ 60 %',
      chats?.maxHomeShare ?? null,
      0.6,
    );
  }
  const lora = results.scenarios['lora'];
  if (lora !== undefined) {
    const sy = lora['switchyard'];
    const leastConnections = lora['least-connections']?.adapterLoadsPer1k;
    check(
      'lora',
      'adapter loads per 1,000 requests ≤ 0.5 × least-connections',
      sy?.adapterLoadsPer1k ?? null,
      leastConnections === undefined ? null : 0.5 * leastConnections,
    );
    for (const peer of PEERS(results, 'lora'))
      check('lora', `TTFT p99 ≤ ${peer}`, sy?.ttftMs.p99 ?? null, lora[peer]!.ttftMs.p99);
  }
  return { checks };
}

/** The instances' CPU per request, and the relay's beside it (`+ 0.05 relay`) where there is one. */
function routerCpuText(r: ScenarioResult): string {
  if (r.routerCpuMsPerRequest === undefined) return '–';
  const aux =
    r.auxCpuMsPerRequest === undefined ? '' : ` + ${r.auxCpuMsPerRequest.toFixed(2)} relay`;
  return `${r.routerCpuMsPerRequest.toFixed(2)}${aux}`;
}

const ms = (v: number): string =>
  Number.isFinite(v) ? Math.round(v).toLocaleString('en-US') : '–';
const pct = (v: number, digits = 1): string => `${(v * 100).toFixed(digits)} %`;
const bareRate = (v: number): string => (v * 100).toFixed(1);
const bareRate2 = (v: number): string => (v * 100).toFixed(2);

/** Each run's figures (none in results written before --seeds). */
const seedsOf = (r: ScenarioResult): SeedFigures[] => (r as Partial<ScenarioResult>).seeds ?? [];

/** The median, and the range over the seeds in parentheses when there was more than one. */
function withRange(
  r: ScenarioResult,
  median: number,
  of: (s: SeedFigures) => number | undefined,
  format: (v: number) => string,
  bare: (v: number) => string = format,
): string {
  const values = seedsOf(r).flatMap((s) => {
    const v = of(s);
    return v === undefined ? [] : [v];
  });
  const span = values.length > 1 ? range(values) : undefined;
  return span === undefined || span.min === span.max
    ? format(median)
    : `${format(median)} (${bare(span.min)}–${bare(span.max)})`;
}

function shareText(share: Record<string, number>): string {
  return Object.entries(share)
    .map(([b, f]) => `${b} ${(f * 100).toFixed(0)}`)
    .join(' · ');
}

export function renderReport(results: BenchResults, plots: string[]): string {
  const s = results.settings;
  const t = results.trace;
  const out: string[] = [];
  out.push('# Routing benchmark report', '');
  out.push(
    `Trace \`${t.file}\` (${t.format}): ${t.requestsReplayed.toLocaleString('en-US')} of ${t.requestsInFile.toLocaleString('en-US')} requests, ` +
      `${t.traceSpanS.toFixed(0)} s of trace replayed in ${t.replaySpanS.toFixed(0)} s (time scale ${s.timeScale}), ` +
      `simulators at speed ${s.speed}. ${s.backends} backends, ${s.routers} instances of every router (one of each \`-central\` gateway), ` +
      `${(s.seeds ?? 1) > 1 ? `${s.seeds} runs of every policy (seeds ${s.seed}–${s.seed + s.seeds - 1})` : `seed ${s.seed}`}` +
      `${t.laterTurns === null || t.laterTurns === undefined ? '' : `; prompts sent as chat conversations rebuilt from the hash-id chains (${t.laterTurns.toLocaleString('en-US')} of the replayed requests are later turns)`}` +
      `${s.heterogeneous ? ', heterogeneous fleet' : ''}` +
      `${s.loadSource === 'controller' ? "; switchyard's sidecars get the servers' load from one controller stream that scrapes them (as in Kubernetes), not each from its own scrapes" : ''}` +
      `. ${results.machine.cpus} CPUs, Node ${results.machine.node}; the whole run took ${results.durationS.toFixed(0)} s` +
      `${results.loadAverage === undefined ? '' : `; load average (1, 5, 15 min) ${results.loadAverage.start.map((l) => l.toFixed(1)).join(', ')} at the start, ${results.loadAverage.end.map((l) => l.toFixed(1)).join(', ')} at the end`}.`,
    '',
  );
  out.push(
    'Times are simulated milliseconds (wall time × speed); TTFT is the time to the first streamed byte. ' +
      'CPU is how busy the whole machine (all cores, every process) was while the run replayed: near 100 % the routers compete with the simulators and the load generator, and their own cost shows in the latencies. ' +
      ((s.seeds ?? 1) > 1
        ? 'Every figure is the median over the runs; TTFT p50 and p99, errors, hit rate and the conversation figures show the range over the runs in parentheses. '
        : '') +
      (t.idealHitRate === null
        ? 'The trace has no prefix information, so cache hit rates are not meaningful.'
        : `The single-cache ideal hit rate of the replayed requests is ${pct(t.idealHitRate)} (${pct(t.idealHitRateWholeTrace ?? NaN)} for the whole trace).`),
    '',
  );
  if (Object.keys(results.skipped).length > 0) {
    out.push('Skipped (not installed here):', '');
    for (const [p, why] of Object.entries(results.skipped)) out.push(`- \`${p}\`: ${why}`);
    out.push('');
  }
  if (results.targets.checks.length > 0) {
    out.push(
      '## Targets',
      '',
      '| scenario | target | switchyard | limit | met |',
      '|---|---|---:|---:|---|',
    );
    for (const c of results.targets.checks) {
      const isRate =
        c.target.includes('rate') || c.target.includes('errors') || c.target.includes('share');
      const f = (v: number | null): string =>
        v === null ? '–' : isRate ? pct(v, 2) : c.target.includes('loads') ? v.toFixed(1) : ms(v);
      out.push(
        `| ${c.scenario} | ${c.target} | ${f(c.measured)} | ${f(c.limit)} | ${c.met === null ? 'n/a' : c.met ? 'yes' : '**no**'} |`,
      );
    }
    out.push('');
  }
  for (const [scenario, byPolicy] of Object.entries(results.scenarios)) {
    out.push(`## ${scenario}`, '', `${results.scenarioDescriptions[scenario] ?? ''}.`, '');
    const rate = results.scenarioRates?.[scenario];
    if (rate !== undefined && rate.timeScale !== results.settings.timeScale) {
      out.push(
        `Replayed at time scale ${rate.timeScale.toFixed(4)} (${(1 / rate.timeScale).toFixed(1)}× faster than the trace): the requests' nominal demand keeps ${(rate.offeredUtilisation * 100).toFixed(0)} % of the servers' slots busy.`,
        '',
      );
    }
    out.push(
      '| policy | TTFT p50 | p90 | p99 | e2e p50 | e2e p99 | errors | hit rate | req/s | $/1k req | CPU | router CPU ms/req | share (%) |',
      '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|',
    );
    for (const [policy, r] of Object.entries(byPolicy)) {
      const cells = [
        policy,
        withRange(r, r.ttftMs.p50, (x) => x.ttftMs.p50, ms),
        ms(r.ttftMs.p90),
        withRange(r, r.ttftMs.p99, (x) => x.ttftMs.p99, ms),
        ms(r.e2eMs.p50),
        ms(r.e2eMs.p99),
        withRange(
          r,
          r.errorRate,
          (x) => x.errorRate,
          (v) => pct(v, 2),
          bareRate2,
        ),
        withRange(
          r,
          r.cacheHitRate,
          (x) => x.cacheHitRate,
          (v) => pct(v),
          bareRate,
        ),
        r.throughputRps.toFixed(2),
        r.costPer1k.toFixed(2),
        r.machineCpuPercent === null || r.machineCpuPercent === undefined
          ? '–'
          : `${r.machineCpuPercent} %`,
        routerCpuText(r),
        shareText(r.share),
      ];
      out.push(`| ${cells.join(' | ')} |`);
    }
    const chats = Object.entries(byPolicy).filter(([, r]) => r.conversations !== undefined);
    if (chats.length > 0) {
      out.push(
        '',
        'Conversations: the share of later turns answered by the backend of their conversation’s first turn (where its KV cache is), and the largest share of conversations one backend is home to (1/K is an even spread).',
        '',
        '| policy | later turns at home | busiest home | conversations | later turns |',
        '|---|---:|---:|---:|---:|',
      );
      for (const [policy, r] of chats) {
        const c = r.conversations!;
        const cells = [
          policy,
          withRange(r, c.laterTurnsHome, (x) => x.conversations?.laterTurnsHome, pct, bareRate),
          withRange(r, c.maxHomeShare, (x) => x.conversations?.maxHomeShare, pct, bareRate),
          String(c.conversations),
          `${c.laterTurns}${c.unknownBackend > 0 ? ` (${c.unknownBackend} requests without a backend)` : ''}`,
        ];
        out.push(`| ${cells.join(' | ')} |`);
      }
    }
    const loads = Object.entries(byPolicy).filter(([, r]) => r.adapterLoadsPer1k !== undefined);
    if (loads.length > 0) {
      out.push(
        '',
        'LoRA: adapters the servers had to load (the request waited for it before its prefill), per 1,000 requests, from their `sim:lora_adapter_loads_total`.',
        '',
        '| policy | adapter loads per 1,000 requests |',
        '|---|---:|',
      );
      for (const [policy, r] of loads)
        out.push(
          `| ${policy} | ${withRange(
            r,
            r.adapterLoadsPer1k!,
            (x) => x.adapterLoadsPer1k,
            (v) => v.toFixed(1),
          )} |`,
        );
    }
    const kinds = Object.entries(byPolicy).filter(
      ([, r]) => Object.keys(r.errorKinds ?? {}).length > 0,
    );
    if (kinds.length > 0) {
      out.push('', 'Errors by kind:', '');
      for (const [policy, r] of kinds)
        out.push(
          `- ${policy}: ${Object.entries(r.errorKinds)
            .map(([k, n]) => `${n} × ${k}`)
            .join(', ')}`,
        );
    }
    out.push('');
    for (const plot of plots.filter((p) => p.endsWith('.svg') && p.startsWith(`${scenario}-`)))
      out.push(`![${plot}](${plot})`, '');
  }
  out.push('## Policies', '');
  const wall = (p: string): string => {
    const times = Object.values(results.scenarios).flatMap((byPolicy) =>
      Object.entries(byPolicy)
        .filter(([label]) => label === p || label.startsWith(`${p}@`))
        .flatMap(([, r]) => seedsOf(r).map((x) => x.wallS)),
    );
    return times.length === 0
      ? ''
      : `, ${(times.reduce((a, b) => a + b, 0) / times.length).toFixed(1)} s a run`;
  };
  for (const [p, d] of Object.entries(results.policiesDescribed))
    out.push(`- \`${p}\` (${results.versions[p] ?? '?'}${wall(p)}): ${d}`);
  out.push('');
  return out.join('\n');
}
