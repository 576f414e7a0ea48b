/**
 * The routing benchmark's plots, as SVG (Vega-Lite, rendered headless by Vega; report.md embeds
 * these, and they are what bench/results/ keeps) and PNG (the SVG rasterised by resvg, for local
 * viewing; .gitignore keeps them out of the tree): per scenario the TTFT CDF of every policy, bar
 * charts of TTFT p99 and of the cache hit rate, each backend's share of the requests over time (one
 * panel per policy: a router that herds shows as swinging shares), and for mixed-cost the
 * cost↔latency frontier of switchyard's exchange rate sweep beside the other policies.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { BenchResults, RunRecord } from './results.ts';

type Spec = Record<string, unknown>;

const FAMILY_ORDER = ['switchyard', 'oracle', 'baseline', 'peer'];

async function render(spec: Spec, dir: string, name: string): Promise<string[]> {
  const [vega, vl, { Resvg }] = await Promise.all([
    import('vega'),
    import('vega-lite'),
    import('@resvg/resvg-js'),
  ]);
  const compiled = vl.compile({
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    ...spec,
  } as never).spec;
  const view = new vega.View(vega.parse(compiled), { renderer: 'none' });
  const svg = await view.toSVG();
  view.finalize();
  writeFileSync(join(dir, `${name}.svg`), svg);
  const png = new Resvg(svg, {
    background: 'white',
    fitTo: { mode: 'zoom', value: 2 },
    font: { loadSystemFonts: true, defaultFontFamily: 'DejaVu Sans' },
  })
    .render()
    .asPng();
  writeFileSync(join(dir, `${name}.png`), png);
  return [`${name}.png`, `${name}.svg`];
}

/** Distinct colours for the other policies (the default palette has 10 and repeats them). */
const PALETTE = [
  '#1f77b4',
  '#ff7f0e',
  '#2ca02c',
  '#d62728',
  '#9467bd',
  '#8c564b',
  '#e377c2',
  '#bcbd22',
  '#17becf',
  '#aec7e8',
  '#ffbb78',
  '#98df8a',
  '#ff9896',
  '#c5b0d5',
  '#c49c94',
  '#f7b6d2',
  '#dbdb8d',
  '#9edae5',
];
const HIGHLIGHT: Record<string, string> = { switchyard: '#000000', oracle: '#7f7f7f' };

/** A colour encoding by policy: one distinct colour each, switchyard and the oracle fixed. */
function policyColor(policies: string[]): Spec {
  let next = 0;
  return {
    field: 'policy',
    type: 'nominal',
    scale: {
      domain: policies,
      range: policies.map((p) => HIGHLIGHT[p] ?? PALETTE[next++ % PALETTE.length]!),
    },
    legend: { title: null, orient: 'right', labelLimit: 220 },
  };
}

/**
 * The TTFT CDF of every policy: one colour each, switchyard thick and black and the oracle
 * dashed and grey drawn last, so the two lines the reader looks for stand out of fifteen.
 */
function cdfLayers(policies: string[]): Spec[] {
  const color = policyColor(policies);
  const line = (filter: string, style: Spec): Spec => ({
    transform: [{ filter }],
    mark: { type: 'line', interpolate: 'step-after', ...style },
    encoding: {
      x: {
        field: 'ttft',
        type: 'quantitative',
        scale: { type: 'log' },
        title: 'time to first token (ms, log)',
      },
      y: { field: 'p', type: 'quantitative', title: 'fraction of requests' },
      color,
    },
  });
  return [
    line("datum.policy !== 'switchyard' && datum.policy !== 'oracle'", { strokeWidth: 1.3 }),
    line("datum.policy === 'oracle'", { strokeWidth: 2, strokeDash: [6, 3] }),
    line("datum.policy === 'switchyard'", { strokeWidth: 2.5 }),
  ];
}

/** Writes every plot; returns their file names (PNG first for each). */
export async function writePlots(
  dir: string,
  records: Record<string, Record<string, RunRecord>>,
  results: BenchResults,
): Promise<string[]> {
  const files: string[] = [];
  for (const [scenario, byPolicy] of Object.entries(records)) {
    const entries = Object.entries(byPolicy);
    const points = entries.flatMap(([policy, r]) =>
      r.ttftCdf.map((pt) => ({ policy, ttft: Math.max(1, pt.x), p: pt.p })),
    );
    files.push(
      ...(await render(
        {
          title: `TTFT, ${scenario} (${results.trace.file}, simulated ms)`,
          width: 640,
          height: 360,
          data: { values: points },
          layer: cdfLayers(entries.map(([policy]) => policy)),
        },
        dir,
        `${scenario}-ttft-cdf`,
      )),
    );
    const bars = entries
      .map(([policy, r]) => ({ policy, family: r.family, p99: r.ttftMs.p99, hit: r.cacheHitRate }))
      .sort(
        (a, b) => FAMILY_ORDER.indexOf(a.family) - FAMILY_ORDER.indexOf(b.family) || a.p99 - b.p99,
      );
    files.push(
      ...(await render(
        {
          title: `TTFT p99, ${scenario} (simulated ms, lower is better)`,
          width: 560,
          height: { step: 18 },
          data: { values: bars },
          mark: 'bar',
          encoding: {
            y: { field: 'policy', type: 'nominal', sort: null, title: null },
            x: { field: 'p99', type: 'quantitative', title: 'TTFT p99 (ms)' },
            color: { field: 'family', type: 'nominal', legend: { title: null } },
          },
        },
        dir,
        `${scenario}-ttft-p99`,
      )),
    );
    if (results.trace.idealHitRate !== null)
      files.push(
        ...(await render(
          {
            title: `Prefix-cache hit rate, ${scenario} (higher is better)`,
            width: 560,
            height: { step: 18 },
            data: { values: bars },
            layer: [
              {
                mark: 'bar',
                encoding: {
                  y: { field: 'policy', type: 'nominal', sort: null, title: null },
                  x: {
                    field: 'hit',
                    type: 'quantitative',
                    title: 'block hit rate',
                    axis: { format: '%' },
                  },
                  color: { field: 'family', type: 'nominal', legend: { title: null } },
                },
              },
              {
                mark: { type: 'rule', color: 'black', strokeDash: [4, 3] },
                encoding: { x: { datum: results.trace.idealHitRate } },
              },
            ],
          },
          dir,
          `${scenario}-hit-rate`,
        )),
      );
    // Runs written before the per-request backend was recorded have no series.
    const shares = entries.flatMap(([policy, r]) =>
      (r.shareOverTime ?? []).map((pt) => ({ policy, ...pt })),
    );
    if (shares.length > 0)
      files.push(
        ...(await render(
          {
            title: `Each backend's share of the requests over the run, ${scenario} (first seed)`,
            data: { values: shares },
            facet: {
              field: 'policy',
              type: 'nominal',
              sort: entries.map(([policy]) => policy),
              title: null,
              header: { labelFontSize: 10 },
            },
            columns: 4,
            // Each panel its own time axis: a run that times out lasts ten times longer.
            resolve: { scale: { x: 'independent' } },
            spec: {
              width: 170,
              height: 80,
              mark: { type: 'line', strokeWidth: 1.2 },
              encoding: {
                x: { field: 'tS', type: 'quantitative', title: 'wall s' },
                y: {
                  field: 'share',
                  type: 'quantitative',
                  title: 'share',
                  axis: { format: '%' },
                  scale: { domain: [0, 1] },
                },
                color: { field: 'backend', type: 'nominal', legend: { title: 'backend' } },
              },
            },
          },
          dir,
          `${scenario}-share-over-time`,
        )),
      );
    if (entries.some(([, r]) => r.costWeightPerMs !== undefined)) {
      const frontier = entries.map(([policy, r], index) => ({
        policy,
        index,
        swept: r.costWeightPerMs !== undefined,
        label:
          r.costWeightPerMs === undefined
            ? ''
            : r.costWeightPerMs === null
              ? 'latency only'
              : `w=${r.costWeightPerMs}`,
        cost: r.costPer1k,
        p99: r.ttftMs.p99,
        p50: Math.max(1, r.ttftMs.p50),
      }));
      const x = {
        field: 'cost',
        type: 'quantitative',
        title: '$ per 1,000 requests',
        scale: { zero: false },
      };
      // Log scale: the peers that cannot keep up sit at tens of seconds, the rest below one.
      const y = {
        field: 'p50',
        type: 'quantitative',
        title: 'TTFT p50 (simulated ms, log)',
        scale: { type: 'log' },
      };
      const others = entries.map(([p]) => p).filter((p) => !p.startsWith('switchyard'));
      files.push(
        ...(await render(
          {
            title: `Cost ↔ latency, ${scenario}: switchyard's costWeightPerMs sweep (black) and the others`,
            width: 560,
            height: 360,
            data: { values: frontier },
            layer: [
              {
                transform: [{ filter: 'datum.swept' }],
                mark: {
                  type: 'line',
                  point: { filled: true, size: 60, color: '#000000' },
                  color: '#000000',
                },
                // In sweep order (from latency only to the most cost-averse rate), not by cost.
                encoding: { x, y, order: { field: 'index' } },
              },
              {
                transform: [{ filter: 'datum.swept' }],
                mark: { type: 'text', align: 'left', dx: 7, dy: -7, fontSize: 10 },
                encoding: { x, y, text: { field: 'label' } },
              },
              {
                transform: [{ filter: '!datum.swept' }],
                mark: { type: 'point', filled: true, size: 60 },
                encoding: {
                  x,
                  y,
                  color: policyColor(others),
                  tooltip: [
                    { field: 'policy' },
                    { field: 'cost' },
                    { field: 'p50' },
                    { field: 'p99' },
                  ],
                },
              },
            ],
          },
          dir,
          `${scenario}-cost-frontier`,
        )),
      );
    }
  }
  return files.filter((f) => f.endsWith('.png')).concat(files.filter((f) => f.endsWith('.svg')));
}
