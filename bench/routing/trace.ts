/**
 * Request traces for the routing benchmark, in the two formats of ../shared/traces/README.md,
 * recognised by their content (never by the file name):
 *
 * - JSON lines, one object a line: `timestamp` (ms from the start), `input_length` and
 *   `output_length` (tokens), and optionally `hash_ids` (one id per 512-token prompt block; equal
 *   ids mean an equal prefix up to that block), as in Mooncake's traces;
 * - CSV with the header `TIMESTAMP,ContextTokens,GeneratedTokens` (Azure's LLM inference traces):
 *   wall-clock timestamps (`2023-11-16 18:15:46.6805900`), no prefix information.
 *
 * A bad file gets an error naming the line and what is wrong with it.
 */

export interface TraceRequest {
  /** ms since the trace's first request. */
  atMs: number;
  inputTokens: number;
  outputTokens: number;
  /** Prompt block ids (512 tokens each), when the trace has them. */
  hashIds: readonly number[] | undefined;
}

export interface Trace {
  format: 'jsonl' | 'azure-csv';
  /** Tokens per hash id block (512 for Mooncake), when the trace has hash ids. */
  blockTokens: number | undefined;
  requests: TraceRequest[];
}

export class TraceError extends Error {
  readonly line: number;
  constructor(line: number, message: string) {
    super(`line ${line}: ${message}`);
    this.line = line;
  }
}

/** Mooncake's block size: one hash id stands for 512 prompt tokens. */
export const HASH_BLOCK_TOKENS = 512;
const AZURE_HEADER = ['TIMESTAMP', 'ContextTokens', 'GeneratedTokens'];

const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v >= 0;

function parseJsonLines(lines: string[]): Trace {
  const requests: TraceRequest[] = [];
  let withHashes = 0;
  lines.forEach((raw, index) => {
    const line = index + 1;
    const text = raw.trim();
    if (text === '') return;
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (err) {
      throw new TraceError(line, `not JSON (${(err as Error).message})`);
    }
    if (value === null || typeof value !== 'object' || Array.isArray(value))
      throw new TraceError(line, 'expected an object with timestamp, input_length, output_length');
    const o = value as Record<string, unknown>;
    if (
      typeof o['timestamp'] !== 'number' ||
      !Number.isFinite(o['timestamp']) ||
      o['timestamp'] < 0
    )
      throw new TraceError(line, 'timestamp must be a number of ms >= 0');
    if (!isCount(o['input_length']))
      throw new TraceError(line, 'input_length must be a whole number of tokens >= 0');
    if (!isCount(o['output_length']))
      throw new TraceError(line, 'output_length must be a whole number of tokens >= 0');
    let hashIds: number[] | undefined;
    if (o['hash_ids'] !== undefined) {
      const ids = o['hash_ids'];
      if (!Array.isArray(ids) || !ids.every(isCount))
        throw new TraceError(line, 'hash_ids must be an array of whole numbers >= 0');
      hashIds = ids;
      withHashes++;
    }
    requests.push({
      atMs: o['timestamp'],
      inputTokens: o['input_length'],
      outputTokens: o['output_length'],
      hashIds,
    });
  });
  return {
    format: 'jsonl',
    blockTokens: withHashes > 0 ? HASH_BLOCK_TOKENS : undefined,
    requests: normalise(requests),
  };
}

/** `2023-11-16 18:15:46.6805900` (UTC, any number of fractional digits) → ms since the epoch. */
function parseAzureTime(text: string): number | undefined {
  const m = /^(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?$/.exec(text.trim());
  if (m === null) return undefined;
  const [, y, mo, d, h, mi, s, frac = ''] = m;
  const ms = Date.UTC(Number(y), Number(mo) - 1, Number(d), Number(h), Number(mi), Number(s));
  return Number.isFinite(ms) ? ms + Number(`0.${frac || '0'}`) * 1000 : undefined;
}

function parseAzureCsv(lines: string[]): Trace {
  const header = lines[0]!
    .trim()
    .split(',')
    .map((h) => h.trim());
  const column = (name: string): number => header.indexOf(name);
  const [ts, ctx, gen] = AZURE_HEADER.map(column) as [number, number, number];
  const requests: TraceRequest[] = [];
  for (let index = 1; index < lines.length; index++) {
    const line = index + 1;
    const text = lines[index]!.trim();
    if (text === '') continue;
    const cells = text.split(',');
    if (cells.length !== header.length)
      throw new TraceError(
        line,
        `expected ${header.length} comma-separated values, found ${cells.length}`,
      );
    const at = parseAzureTime(cells[ts]!);
    if (at === undefined)
      throw new TraceError(
        line,
        `TIMESTAMP must look like 2023-11-16 18:15:46.6805900, not ${JSON.stringify(cells[ts])}`,
      );
    const input = Number(cells[ctx]);
    const output = Number(cells[gen]);
    if (!isCount(input)) throw new TraceError(line, 'ContextTokens must be a whole number >= 0');
    if (!isCount(output)) throw new TraceError(line, 'GeneratedTokens must be a whole number >= 0');
    requests.push({ atMs: at, inputTokens: input, outputTokens: output, hashIds: undefined });
  }
  return { format: 'azure-csv', blockTokens: undefined, requests: normalise(requests) };
}

/** Sorted by time (stable), starting at 0. */
function normalise(requests: TraceRequest[]): TraceRequest[] {
  if (requests.length === 0) throw new TraceError(1, 'the trace has no requests');
  const sorted = requests
    .map((r, i) => ({ r, i }))
    .sort((a, b) => a.r.atMs - b.r.atMs || a.i - b.i)
    .map(({ r }) => r);
  const start = sorted[0]!.atMs;
  return sorted.map((r) => ({ ...r, atMs: r.atMs - start }));
}

/** Parses a trace file's text; throws TraceError (with the line) when it is neither format. */
export function parseTrace(text: string): Trace {
  const lines = text.replace(/^\uFEFF/, '').split(/\r?\n/);
  const first = lines.find((l) => l.trim() !== '')?.trim() ?? '';
  if (first === '') throw new TraceError(1, 'the file is empty');
  if (first.startsWith('{')) return parseJsonLines(lines);
  const header = first.split(',').map((h) => h.trim());
  if (AZURE_HEADER.every((h) => header.includes(h))) {
    // The header must be the first non-empty line; drop blank lines before it.
    return parseAzureCsv(lines.slice(lines.findIndex((l) => l.trim() !== '')));
  }
  throw new TraceError(
    1,
    'neither JSON lines (objects with timestamp, input_length, output_length[, hash_ids]) nor an Azure CSV (header TIMESTAMP,ContextTokens,GeneratedTokens)',
  );
}

/**
 * The block hit ratio of one infinite cache over these requests' hash ids: the bound no set of
 * separate caches can beat (0.640 for the whole Mooncake trace).
 */
export function idealHitRate(requests: readonly TraceRequest[]): number | undefined {
  const seen = new Set<number>();
  let hits = 0;
  let total = 0;
  for (const r of requests) {
    if (r.hashIds === undefined) return undefined;
    for (const id of r.hashIds) {
      total++;
      if (seen.has(id)) hits++;
      else seen.add(id);
    }
  }
  return total === 0 ? undefined : hits / total;
}

/**
 * `count` requests spread evenly over the whole trace (every k-th, k = ceil(total / count)),
 * or all of them for 0. Taking every k-th rather than the first `count` keeps the trace's
 * long-range prefix sharing: in Mooncake's trace a shared prefix comes back minutes later (median
 * 7 minutes), so the first 1,000 requests share 17 % of their blocks and every 4th request 39 %.
 */
export function sampleEvenly(requests: readonly TraceRequest[], count: number): TraceRequest[] {
  if (count <= 0 || count >= requests.length) return [...requests];
  const stride = Math.ceil(requests.length / count);
  const out: TraceRequest[] = [];
  for (let i = 0; i < requests.length && out.length < count; i += stride) out.push(requests[i]!);
  return out;
}
