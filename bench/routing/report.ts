/**
 * The routing benchmark's report: the targets of docs/benchmarks.md#routing checked against the
 * results, and a markdown page with a table per scenario.
 */
import type { BenchResults, TargetCheck } from './results.ts';

const PEERS = (results: BenchResults, scenario: string): string[] =>
  Object.keys(results.scenarios[scenario] ?? {}).filter(
    (p) =>
      !['round-robin', 'random', 'least-connections', 'p2c', 'switchyard', 'oracle'].includes(p) &&
      !p.includes('@'),
  );

/** The issue's targets, for the steady and fast-failure scenarios that were run. */
export function checkTargets(results: BenchResults): { checks: TargetCheck[] } {
  const checks: TargetCheck[] = [];
  for (const scenario of ['steady', 'fast-failure']) {
    const by = results.scenarios[scenario];
    if (by === undefined) continue;
    const sy = by['switchyard'];
    const p99 = sy?.ttftMs.p99 ?? null;
    const ratio = (name: string, factor: number, target: string): void => {
      const other = by[name]?.ttftMs.p99;
      const limit = other === undefined ? null : other * factor;
      checks.push({
        scenario,
        target,
        measured: p99,
        limit,
        met: p99 === null || limit === null ? null : p99 <= limit,
      });
    };
    ratio('round-robin', 0.5, 'TTFT p99 ≤ 0.5 × round-robin');
    ratio('least-connections', 0.8, 'TTFT p99 ≤ 0.8 × least-connections');
    for (const peer of PEERS(results, scenario)) ratio(peer, 1, `TTFT p99 ≤ ${peer}`);
    ratio('oracle', 1.3, 'TTFT p99 ≤ 1.3 × oracle');
    const ideal = results.trace.idealHitRate;
    const hit = sy?.cacheHitRate ?? null;
    checks.push({
      scenario,
      target: 'prefix-cache hit rate ≥ 0.8 × single-cache ideal of the replayed requests',
      measured: hit,
      limit: ideal === null ? null : 0.8 * ideal,
      met: hit === null || ideal === null ? null : hit >= 0.8 * ideal,
    });
    if (scenario === 'fast-failure')
      checks.push({
        scenario,
        target: 'client-visible errors ≤ 0.1 %',
        measured: sy?.errorRate ?? null,
        limit: 0.001,
        met: sy === undefined ? null : sy.errorRate <= 0.001,
      });
  }
  return { checks };
}

const ms = (v: number): string =>
  Number.isFinite(v) ? Math.round(v).toLocaleString('en-US') : '–';
const pct = (v: number, digits = 1): string => `${(v * 100).toFixed(digits)} %`;

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
      `simulators at speed ${s.speed}. ${s.backends} backends, ${s.routers} instances of every router, seed ${s.seed}` +
      `${s.heterogeneous ? ', heterogeneous fleet' : ''}. ${results.machine.cpus} CPUs, Node ${results.machine.node}; the whole run took ${results.durationS.toFixed(0)} s.`,
    '',
  );
  out.push(
    'Times are simulated milliseconds (wall time × speed); TTFT is the time to the first streamed byte. ' +
      'CPU is how busy the whole machine (all cores, every process) was while the run replayed: near 100 % the routers compete with the simulators and the load generator, and their own cost shows in the latencies. ' +
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
      const isRate = c.target.includes('rate') || c.target.includes('errors');
      const f = (v: number | null): string => (v === null ? '–' : isRate ? pct(v, 2) : ms(v));
      out.push(
        `| ${c.scenario} | ${c.target} | ${f(c.measured)} | ${f(c.limit)} | ${c.met === null ? 'n/a' : c.met ? 'yes' : '**no**'} |`,
      );
    }
    out.push('');
  }
  for (const [scenario, byPolicy] of Object.entries(results.scenarios)) {
    out.push(`## ${scenario}`, '', `${results.scenarioDescriptions[scenario] ?? ''}.`, '');
    out.push(
      '| policy | TTFT p50 | p90 | p99 | e2e p50 | e2e p99 | errors | hit rate | req/s | $/1k req | CPU | share (%) |',
      '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|',
    );
    for (const [policy, r] of Object.entries(byPolicy)) {
      out.push(
        `| ${policy} | ${ms(r.ttftMs.p50)} | ${ms(r.ttftMs.p90)} | ${ms(r.ttftMs.p99)} | ${ms(r.e2eMs.p50)} | ${ms(r.e2eMs.p99)} | ${pct(r.errorRate, 2)} | ${pct(r.cacheHitRate)} | ${r.throughputRps.toFixed(2)} | ${r.costPer1k.toFixed(2)} | ${r.machineCpuPercent === null || r.machineCpuPercent === undefined ? '–' : `${r.machineCpuPercent} %`} | ${shareText(r.share)} |`,
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
    for (const plot of plots.filter((p) => p.endsWith('.png') && p.startsWith(`${scenario}-`)))
      out.push(`![${plot}](${plot})`, '');
  }
  out.push('## Policies', '');
  for (const [p, d] of Object.entries(results.policiesDescribed))
    out.push(`- \`${p}\` (${results.versions[p] ?? '?'}): ${d}`);
  out.push('');
  return out.join('\n');
}
