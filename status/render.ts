/**
 * The text of `switchyard status`: a header of key/value lines, a table of endpoints whose
 * columns line up, and a verdict. Pure: a view in, a string out (docs/status.md shows it).
 */
import {
  breakerSummary,
  type PoolEndpointRow,
  type PoolStatusView,
  type SidecarEndpointRow,
  type SidecarStatusView,
  type StatusView,
} from './view.ts';

/** Longest fingerprint shown whole; longer ones keep their start and end around an ellipsis. */
export const FINGERPRINT_WIDTH = 40;
/** Longest condition message or probe error shown (the JSON output has them whole). */
const MESSAGE_WIDTH = 300;
/** status.endpointHealth lists at most this many endpoints (crds/inference-pool.schema.ts). */
const ENDPOINT_HEALTH_LIMIT = 32;

const width = (s: string): number => [...s].length;

/** `s` cut to `max` characters, the end replaced by an ellipsis. */
export function cut(s: string, max: number): string {
  const chars = [...s.replace(/\s+/g, ' ').trim()];
  return chars.length <= max ? chars.join('') : `${chars.slice(0, max - 1).join('')}…`;
}

/**
 * A fingerprint of at most FINGERPRINT_WIDTH characters. Of `model/system_fingerprint/hash` the
 * model is shortened (it is usually the same across a pool), keeping the parts that tell endpoints
 * apart whole; anything else loses its middle.
 */
export function shortFingerprint(fingerprint: string): string {
  const chars = [...fingerprint];
  if (chars.length <= FINGERPRINT_WIDTH) return fingerprint;
  const parts = fingerprint.split('/');
  if (parts.length === 3) {
    const rest = `/${parts[1]}/${parts[2]}`;
    const room = FINGERPRINT_WIDTH - width(rest);
    if (room >= 6) return cut(parts[0]!, room) + rest;
  }
  const tail = Math.floor((FINGERPRINT_WIDTH - 1) / 2);
  const head = FINGERPRINT_WIDTH - 1 - tail;
  return `${chars.slice(0, head).join('')}…${chars.slice(-tail).join('')}`;
}

/** 850ms, 1.25s, 12.5s. */
export function formatMs(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)}ms`;
  return `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)}s`;
}

export type Align = 'left' | 'right';

/**
 * Lines of a table: every column as wide as its widest cell, two spaces apart, numbers
 * right-aligned where `align` says so; no trailing spaces.
 */
export function formatTable(headers: string[], rows: string[][], align: Align[] = []): string[] {
  const widths = headers.map((h, i) => Math.max(width(h), ...rows.map((r) => width(r[i] ?? ''))));
  const line = (cells: string[]): string =>
    widths
      .map((w, i) => {
        const cell = cells[i] ?? '';
        const pad = ' '.repeat(w - width(cell));
        return align[i] === 'right' ? pad + cell : cell + pad;
      })
      .join('  ')
      .trimEnd();
  return [line(headers), ...rows.map(line)];
}

/** `key  value` lines with the values lined up. */
function keyValues(pairs: [string, string][]): string[] {
  const w = Math.max(...pairs.map(([k]) => width(k)));
  return pairs.map(([k, v]) => `${k}${' '.repeat(w - width(k))}  ${v}`.trimEnd());
}

const dash = (value: number | null, format: (n: number) => string = String): string =>
  value === null ? '-' : format(value);

const plural = (n: number, one: string, many = `${one}s`): string => `${n} ${n === 1 ? one : many}`;

function verdict(view: StatusView): string[] {
  if (view.exitCode === 0) return ['OK'];
  return [`UNHEALTHY (exit code 1):`, ...view.problems.map((p) => `  - ${p}`)];
}

// ---------------------------------------------------------------------------------------------
// A pool, from its status
// ---------------------------------------------------------------------------------------------

function poolHealth(row: PoolEndpointRow, sidecarsConnected: number | null): string {
  const breaker = breakerSummary(row);
  if (breaker !== undefined) return breaker;
  // Listed in endpointHealth but no breaker open: reported (for errors or mismatches), closed.
  if (row.reporting !== null) return row.reporting === 0 ? '-' : 'ok';
  // Not listed: no connected sidecar reports a problem, which says something only if one is.
  return (sidecarsConnected ?? 0) > 0 ? 'ok' : '-';
}

function poolDrift(row: PoolEndpointRow): string {
  const parts = [row.drifted === null ? '-' : row.drifted ? 'drifted' : 'ok'];
  if ((row.driftMismatches ?? 0) > 0)
    parts.push(plural(row.driftMismatches!, 'mismatch', 'mismatches'));
  // The error itself goes below the table: it would make the column as wide as the longest one.
  if (row.probeError !== null) parts.push('probe failed');
  return parts.join(', ');
}

function conditionLine(c: PoolStatusView['conditions'][number]): string {
  if (c.status === 'True') return 'True';
  if (c.status === null) return 'missing';
  const why = [
    c.reason,
    c.message === null || c.message === '' ? null : cut(c.message, MESSAGE_WIDTH),
  ]
    .filter((x) => x !== null)
    .join(': ');
  return why === '' ? c.status : `${c.status}  ${why}`;
}

function renderPool(view: PoolStatusView): string[] {
  const header: [string, string][] = [
    ['Pool', `${view.namespace}/${view.pool}${view.mode === null ? '' : ` (mode ${view.mode})`}`],
  ];
  if (view.conditions.every((c) => c.status === null))
    header.push(['Status', 'none written yet (is the controller running?)']);
  else for (const c of view.conditions) header.push([c.type, conditionLine(c)]);
  if (
    view.generation !== null &&
    view.observedGeneration !== null &&
    view.observedGeneration < view.generation
  )
    header.push([
      'Generation',
      `status is of generation ${view.observedGeneration}, the spec is at ${view.generation} (the controller has not caught up)`,
    ]);
  if (view.snapshot !== null)
    header.push([
      'Snapshot',
      `version ${dash(view.snapshot.version)}${view.snapshot.hash === null ? '' : ` (hash ${view.snapshot.hash})`}`,
    ]);
  if (view.sidecars !== null) {
    const { connected, inSync } = view.sidecars;
    const behind = connected - inSync;
    header.push([
      'Sidecars',
      `${connected} connected, ${inSync} in sync${behind > 0 ? ` (${behind} behind)` : ''}`,
    ]);
  }
  if (view.endpoints !== null) {
    const { ready, total, drifted } = view.endpoints;
    header.push(['Endpoints', `${ready}/${total} ready, ${drifted} drifted`]);
  }
  if (view.drift !== null)
    header.push(['Drift', `expected ${view.drift.expected ?? '(undecided: no majority yet)'}`]);

  const lines = keyValues(header);
  lines.push('');
  const connected = view.sidecars?.connected ?? null;
  if (view.rows.length > 0) {
    lines.push(
      ...formatTable(
        ['ID', 'HEALTH', 'ERR%', '429%', 'TTFT', 'DRIFT', 'FINGERPRINT'],
        view.rows.map((r) => [
          r.id,
          poolHealth(r, connected),
          dash(r.errorPercent),
          dash(r.rateLimitPercent),
          dash(r.ewmaTtftMs, formatMs),
          poolDrift(r),
          r.fingerprint === null ? '-' : shortFingerprint(r.fingerprint),
        ]),
        ['left', 'left', 'right', 'right', 'right', 'left', 'left'],
      ),
    );
  } else {
    lines.push('No endpoint has a problem reported or a drift probe result.');
  }
  for (const r of view.rows)
    if (r.probeError !== null)
      lines.push(`Probe of ${r.id} failed: ${cut(r.probeError, MESSAGE_WIDTH)}`);
  if (connected === 0) lines.push('No sidecar is connected: nothing reports endpoint health.');
  else if (view.unlistedEndpoints > 0)
    lines.push(
      `${plural(view.unlistedEndpoints, 'endpoint')} not listed${view.rows.length > 0 ? ' above' : ''}: healthy in every sidecar (the status lists only endpoints with problems or drift probes).`,
    );
  const reported = view.rows.filter((r) => r.reporting !== null).length;
  if (reported >= ENDPOINT_HEALTH_LIMIT)
    lines.push(
      `The status lists at most ${ENDPOINT_HEALTH_LIMIT} unhealthy endpoints: there may be more.`,
    );
  if (view.models.length > 0)
    lines.push(
      '',
      ...formatTable(
        ['MODEL', 'ENDPOINTS', 'ALIAS OF'],
        view.models.map((m) => [m.name, String(m.endpoints), m.aliasOf ?? '-']),
        ['left', 'right', 'left'],
      ),
      "ENDPOINTS counts the ready endpoints whose backend declares the model (an alias: its model's).",
    );
  if (view.budgets.length > 0)
    lines.push(
      '',
      ...formatTable(
        ['BUDGET', 'UNIT', 'PER MINUTE', 'USED', 'WANTED', 'SIDECARS'],
        view.budgets.map((b) => [
          b.id,
          b.unit,
          String(b.limit),
          b.used === null ? '-' : `${b.used} (${Math.round((100 * b.used) / b.limit)}%)`,
          dash(b.wanted),
          dash(b.sidecars),
        ]),
        ['left', 'left', 'right', 'right', 'right', 'right'],
      ),
      'USED and WANTED: the fleet over its last minute, as the sidecars last reported (WANTED counts what they refused or held for want of share).',
    );
  lines.push('', ...verdict(view));
  return lines;
}

// ---------------------------------------------------------------------------------------------
// A sidecar, from its admin API
// ---------------------------------------------------------------------------------------------

function sidecarDrift(row: SidecarEndpointRow): string {
  const state = row.drifted ? 'drifted' : row.fingerprint === null ? '-' : 'ok';
  return row.driftMismatches > 0
    ? `${state}, ${plural(row.driftMismatches, 'mismatch', 'mismatches')}`
    : state;
}

function windowCounts(row: SidecarEndpointRow): string {
  const { requests, errors } = row.window;
  if (requests === 0) return '0/0';
  return `${errors}/${requests} (${Math.round((100 * errors) / requests)}%)`;
}

function renderSidecar(view: SidecarStatusView): string[] {
  const header: [string, string][] = [
    ['Sidecar', view.admin],
    ['Ready', view.ready ? 'yes' : `no (${view.readyStatus})`],
  ];
  if (view.pool !== null)
    header.push(['Pool', `${view.pool}${view.mode === null ? '' : ` (mode ${view.mode})`}`]);
  if (view.snapshotVersion !== null || view.snapshotHash !== null)
    header.push([
      'Snapshot',
      `version ${dash(view.snapshotVersion)}${view.snapshotHash === null ? '' : ` (hash ${view.snapshotHash})`}`,
    ]);
  const count = (breaker: string): number => view.rows.filter((r) => r.breaker === breaker).length;
  header.push([
    'Endpoints',
    `${view.rows.length}: ${count('open')} open, ${count('half-open')} half-open, ${view.rows.filter((r) => r.drifted).length} drifted`,
  ]);
  const lines = keyValues(header);
  lines.push('');
  if (view.rows.length > 0)
    lines.push(
      ...formatTable(
        ['ID', 'BREAKER', 'IN-FLIGHT', 'ERRORS/REQS', '429S', 'EWMA TTFT', 'DRIFT', 'FINGERPRINT'],
        view.rows.map((r) => [
          r.id,
          r.slow ? `${r.breaker} (slow)` : r.breaker,
          String(r.inFlight),
          windowCounts(r),
          String(r.window.rateLimited),
          r.ewmaSeeded ? `${formatMs(r.ewmaTtftMs)} (seed)` : formatMs(r.ewmaTtftMs),
          sidecarDrift(r),
          r.fingerprint === null ? '-' : shortFingerprint(r.fingerprint),
        ]),
        ['left', 'left', 'right', 'right', 'right', 'right', 'left', 'left'],
      ),
      'ERRORS/REQS and 429S count the current health window; EWMA TTFT is what the balancer scores with.',
    );
  else lines.push('No endpoints.');
  lines.push('', ...verdict(view));
  return lines;
}

/** The whole text of `switchyard status` for one view, ending with a newline. */
export function renderStatusTable(view: StatusView): string {
  const lines = view.source === 'kubernetes' ? renderPool(view) : renderSidecar(view);
  return lines.join('\n') + '\n';
}
