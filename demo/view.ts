import type { RequestResult, Summary } from '../harness/stream-client.ts';

export interface EndpointRow {
  id: string;
  inFlight: number;
  ewmaTtftMs?: number;
  breaker?: string;
  requests?: number;
}

const pad = (s: string, n: number): string =>
  s.length >= n ? s.slice(0, n) : s + ' '.repeat(n - s.length);
const ms = (v: number | undefined): string =>
  v === undefined || Number.isNaN(v) ? '-' : `${Math.round(v)} ms`;

/** One frame of the live view: per endpoint its traffic share, in-flight, EWMA TTFT and breaker. */
export function renderLiveView(
  title: string,
  elapsedMs: number,
  durationMs: number,
  results: readonly RequestResult[],
  pending: number,
  rows: readonly EndpointRow[],
): string {
  const counts = new Map<string, number>();
  for (const r of results) {
    if (r.backend === undefined) continue;
    const key = r.backend.split('/')[0]!;
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  const errors = results.filter((r) => !r.ok).length;
  const lines = [
    `phase ${title}`,
    `  ${Math.min(100, Math.round((elapsedMs / durationMs) * 100))}%  done ${results.length}  in flight ${pending}  client errors ${errors}`,
    `  ${pad('endpoint', 30)} ${pad('share', 7)} ${pad('in-flight', 10)} ${pad('EWMA TTFT', 11)} breaker`,
  ];
  for (const row of rows) {
    const name = row.id.split('/')[0]!;
    const share = results.length === 0 ? 0 : (counts.get(name) ?? 0) / results.length;
    lines.push(
      `  ${pad(row.id, 30)} ${pad(`${Math.round(share * 100)}%`, 7)} ${pad(String(row.inFlight), 10)} ${pad(ms(row.ewmaTtftMs), 11)} ${row.breaker ?? '-'}`,
    );
  }
  return lines.join('\n') + '\n';
}

/** The side-by-side table printed at the end. */
export function renderComparison(
  results: Record<string, Summary & { cacheHitRate: number }>,
): string {
  const names = Object.keys(results);
  const row = (label: string, f: (s: Summary & { cacheHitRate: number }) => string): string =>
    `${pad(label, 18)}${names.map((n) => pad(f(results[n]!), 16)).join('')}`;
  return [
    `${pad('', 18)}${names.map((n) => pad(n, 16)).join('')}`,
    row('requests', (s) => String(s.requests)),
    row('TTFT p50', (s) => ms(s.ttftMs.p50)),
    row('TTFT p99', (s) => ms(s.ttftMs.p99)),
    row('end-to-end p50', (s) => ms(s.e2eMs.p50)),
    row('client errors', (s) => `${s.errors} (${(s.errorRate * 100).toFixed(1)}%)`),
    row('cache hit rate', (s) => `${(s.cacheHitRate * 100).toFixed(1)}%`),
  ].join('\n');
}
