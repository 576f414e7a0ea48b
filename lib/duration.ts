/**
 * Durations as people type them on a command line, shared by the CLI's flags and the benches'.
 * Pure: no imports, no I/O.
 */

/** `500ms`, `5s`, `2m`, `1h`, or a plain number of seconds, in ms; undefined when it is none. */
export function parseDuration(value: string): number | undefined {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(value.trim());
  if (match === null) return undefined;
  const n = Number(match[1]);
  const unit = match[2] ?? 's';
  return n * { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[unit]!;
}

/** The longest delay a Node timer takes (2^31 − 1 ms, ~24.8 days); a longer one fires at once. */
export const MAX_TIMER_MS = 2 ** 31 - 1;
