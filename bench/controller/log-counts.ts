/**
 * Log lines counted by what they say, for `bench:controller-fleet`: why 10,000 subscribers
 * reconnect is in their warnings, and 10,000 clients' warnings written out would cost the hosts
 * more than they tell. A key is the level, the message and, where the line has one, the reason or
 * the error code (`warn: disconnected from the controller (heartbeat timeout)`).
 */

const LABELS: Record<number, string> = {
  10: 'trace',
  20: 'debug',
  30: 'info',
  40: 'warn',
  50: 'error',
  60: 'fatal',
};

export class LogCounts {
  readonly #counts = new Map<string, number>();

  add(level: number, msg: string, fields?: Record<string, unknown>): void {
    const detail = detailOf(fields);
    const key = `${LABELS[level] ?? level}: ${msg}${detail === undefined ? '' : ` (${detail})`}`;
    this.#counts.set(key, (this.#counts.get(key) ?? 0) + 1);
  }

  /** A pino JSON line (a replica's stdout); lines below `minLevel` and others are skipped. */
  addLine(line: string, minLevel: number): void {
    if (!line.startsWith('{')) return;
    let entry: { level?: unknown; msg?: unknown } & Record<string, unknown>;
    try {
      entry = JSON.parse(line) as typeof entry;
    } catch {
      return;
    }
    if (typeof entry.level !== 'number' || entry.level < minLevel) return;
    this.add(entry.level, typeof entry.msg === 'string' ? entry.msg : '(no message)', entry);
  }

  /** Most frequent first. */
  toJSON(): Record<string, number> {
    return byCount(this.#counts);
  }
}

/** Several processes' counts summed, most frequent first; only keys `only` matches when given. */
export function sumLogCounts(
  counts: readonly (Record<string, number> | undefined)[],
  only?: RegExp,
): Record<string, number> {
  const sum = new Map<string, number>();
  for (const c of counts)
    for (const [key, n] of Object.entries(c ?? {}))
      if (only === undefined || only.test(key)) sum.set(key, (sum.get(key) ?? 0) + n);
  return byCount(sum);
}

function byCount(counts: Map<string, number>): Record<string, number> {
  return Object.fromEntries([...counts].sort((a, b) => b[1] - a[1]));
}

function detailOf(fields: Record<string, unknown> | undefined): string | undefined {
  if (fields === undefined) return undefined;
  if (typeof fields.reason === 'string') return fields.reason;
  const err = fields.err as { code?: unknown; message?: unknown } | undefined;
  if (err !== undefined && typeof err === 'object' && err !== null) {
    if (typeof err.code === 'string') return err.code;
    if (typeof err.message === 'string') return err.message.slice(0, 80);
  }
  if (typeof fields.status === 'number') return `status ${fields.status}`;
  return undefined;
}
