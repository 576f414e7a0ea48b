/**
 * Durations in the InferencePool API.
 *
 * A duration is a string of one or more `<number><unit>` parts: `500ms`, `5s`, `10m`, `1h30m`.
 * - units `h`, `m`, `s`, `ms`, largest first, each at most once;
 * - whole numbers of 1 to 6 digits without a leading zero, so no part is zero and every duration
 *   is longer than 0 (write `1h`, not `1h0m`);
 * - a plain number (`500`) is rejected: without a unit nobody can tell ms from s.
 *
 * This is a subset of Go's `time.ParseDuration` syntax, so the API server's CEL `duration()`
 * accepts every valid value, and the 6-digit limit keeps every value far below Go's overflow
 * (about 2.5 million hours) and below `Number.MAX_SAFE_INTEGER` milliseconds.
 */

/**
 * The one grammar, shared by the schema (`pattern`, checked by TypeBox and by the API server) and
 * by the CEL rules that compare durations. Plain RE2/ECMAScript: no look-around, no escapes.
 */
export const DURATION_PATTERN =
  '^([1-9][0-9]{0,5}h)?([1-9][0-9]{0,5}m)?([1-9][0-9]{0,5}s)?([1-9][0-9]{0,5}ms)?$';

/** The shortest valid duration (`1s`) has two characters; the pattern alone accepts ''. */
export const DURATION_MIN_LENGTH = 2;
/** `999999h999999m999999s999999ms`. */
export const DURATION_MAX_LENGTH = 29;

/** The start of every duration error message. */
export const DURATION_HELP = 'must be a duration like 500ms, 5s, 10m or 1h30m';

const UNIT_MS: Readonly<Record<string, number>> = { h: 3_600_000, m: 60_000, s: 1_000, ms: 1 };
const UNIT_ORDER = ['h', 'm', 's', 'ms'];
const DURATION_REGEX = new RegExp(DURATION_PATTERN);
const PART = /([0-9]+(?:\.[0-9]*)?|\.[0-9]+)([a-zµμ]*)/giy;

export type DurationParse = { ok: true; ms: number } | { ok: false; reason: string };

/**
 * Parse a duration into whole milliseconds. On failure `reason` is a complete sentence fragment
 * for a person, starting with {@link DURATION_HELP}, e.g.
 * `must be a duration like 500ms, 5s, 10m or 1h30m: "500" has no unit (500ms? 500s?)`.
 * Accepts exactly the strings that match {@link DURATION_PATTERN} (and are at least 2 long).
 */
export function parseDuration(text: string): DurationParse {
  if (DURATION_REGEX.test(text) && text.length >= DURATION_MIN_LENGTH) {
    let ms = 0;
    PART.lastIndex = 0;
    for (let m = PART.exec(text); m !== null; m = PART.exec(text)) {
      ms += Number(m[1]) * (UNIT_MS[m[2] ?? ''] ?? 0);
    }
    return { ok: true, ms };
  }
  return { ok: false, reason: `${DURATION_HELP}: ${explain(text)}` };
}

/** Why `text` is not a duration (only called when it is not). */
function explain(text: string): string {
  const trimmed = text.trim();
  if (trimmed === '') return 'it is empty';
  if (trimmed !== text) return 'remove the spaces around it';
  if (/^[0-9]+(\.[0-9]*)?$/.test(text)) {
    return `"${text}" has no unit (${text}ms? ${text}s?)`;
  }
  const parts: { num: string; unit: string }[] = [];
  PART.lastIndex = 0;
  let end = 0;
  for (let m = PART.exec(text); m !== null; m = PART.exec(text)) {
    parts.push({ num: m[1] ?? '', unit: m[2] ?? '' });
    end = PART.lastIndex;
  }
  if (end !== text.length || parts.length === 0) {
    return 'write numbers with units h, m, s or ms and nothing else';
  }
  for (const { num, unit } of parts) {
    if (!(unit in UNIT_MS)) {
      return unit === '' ? `"${num}" has no unit` : `unknown unit "${unit}" (use h, m, s or ms)`;
    }
    if (num.includes('.')) return 'use whole numbers (1500ms, not 1.5s)';
  }
  const order = parts.map((p) => UNIT_ORDER.indexOf(p.unit));
  if (order.some((o, i) => i > 0 && o <= (order[i - 1] ?? -1))) {
    return 'put the largest unit first and each unit only once (1h30m, not 30m1h)';
  }
  if (parts.every((p) => /^0+$/.test(p.num))) return 'it must be longer than 0';
  if (parts.some((p) => /^0+$/.test(p.num))) return 'leave out zero parts (1h, not 1h0m)';
  if (parts.some((p) => p.num.startsWith('0'))) return 'remove the leading zeros';
  return 'each number may have at most 6 digits';
}

/**
 * Format whole milliseconds the way the API writes them: largest unit first, zero parts left
 * out (`90000` → `1m30s`). Every result for 1 ms up to 999999 h parses back to the same value.
 * Meant for display: `0` gives `0s` (not a valid pool duration); negative values get a `-`;
 * fractions are rounded to whole milliseconds.
 */
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms)) return String(ms);
  const sign = ms < 0 ? '-' : '';
  let rest = Math.round(Math.abs(ms));
  if (rest === 0) return '0s';
  let out = '';
  for (const unit of UNIT_ORDER) {
    const size = UNIT_MS[unit] ?? 1;
    const n = Math.floor(rest / size);
    if (n > 0) out += `${n}${unit}`;
    rest -= n * size;
  }
  return sign + out;
}
