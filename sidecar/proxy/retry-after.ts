/** Longest Retry-After we honour; a provider asking for more is treated as this. */
export const MAX_RETRY_AFTER_MS = 60_000;

/**
 * Parses an HTTP Retry-After header (delay-seconds or an HTTP-date, RFC 9110 §10.2.3) into ms from
 * now, or undefined when absent or unreadable.
 */
export function parseRetryAfterMs(
  value: string | string[] | undefined,
  nowEpochMs: number,
): number | undefined {
  const text = Array.isArray(value) ? value[0] : value;
  if (text === undefined || text.trim() === '') return undefined;
  const trimmed = text.trim();
  if (/^\d+(\.\d+)?$/.test(trimmed)) return Math.min(Number(trimmed) * 1000, MAX_RETRY_AFTER_MS);
  const date = Date.parse(trimmed);
  if (Number.isNaN(date)) return undefined;
  return Math.min(Math.max(0, date - nowEpochMs), MAX_RETRY_AFTER_MS);
}
