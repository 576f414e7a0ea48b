import { InvalidArgumentError } from 'commander';
import type { HostPort } from '../sidecar/sidecar.ts';
import { parseDuration } from '../lib/duration.ts';

/** `127.0.0.1:8080`, `[::1]:8080`, `:8080` or `8080` (host defaults to loopback: never all interfaces by accident). */
export function parseHostPort(value: string): HostPort {
  const match = /^(?:(?:\[([^\]]+)\]|([^:[\]]*)):)?(\d+)$/.exec(value.trim());
  const port = Number(match?.[3]);
  if (match === null || !Number.isInteger(port) || port < 0 || port > 65535) {
    throw new InvalidArgumentError(
      'expected HOST:PORT, e.g. 127.0.0.1:8080 (port 0 picks a free one)',
    );
  }
  const host = match[1] ?? (match[2] !== undefined && match[2] !== '' ? match[2] : '127.0.0.1');
  return { host, port };
}

export function parsePositiveInt(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n <= 0)
    throw new InvalidArgumentError('expected a positive whole number');
  return n;
}

export function parseNonNegativeNumber(value: string): number {
  const n = Number(value);
  if (!Number.isFinite(n) || n < 0) throw new InvalidArgumentError('expected a number >= 0');
  return n;
}

/** `500ms`, `5s`, `2m`, or a plain number of seconds. */
export function parseDurationMs(value: string): number {
  const ms = parseDuration(value);
  if (ms === undefined) throw new InvalidArgumentError('expected a duration like 500ms, 30s or 2m');
  return ms;
}

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

/**
 * The shortest period of a load scrape (controller or standalone sidecar), other than 0 (off):
 * model servers answer `/metrics` in milliseconds, but not for free. The Gateway API inference
 * extension's endpoint picker scrapes every 50 ms by default; the routing benchmark runs its
 * simulators 3.2 times faster than real time and so scrapes them every 31 ms for a default 100.
 */
export const MIN_LOAD_SCRAPE_EVERY_MS = 25;

/**
 * The default period of a load scrape. The balancing step counts the servers' reports only while
 * every one is under half a second old (BALANCE_REPORT_MAX_AGE_MS, docs/policy.md §4), and the
 * fresher they are, the less sidecars that hold the same one pile onto its emptiest server: on
 * the routing benchmark with 16 sidecars, TTFT p50 424 ms at 100 ms against 510 at 250 and 808
 * with the own counts alone. Ten small GETs a second per server from each controller replica (or
 * per standalone sidecar); a pool with hundreds of endpoints and sidecars may want 250ms.
 */
export const DEFAULT_LOAD_SCRAPE_EVERY_MS = 100;

/** Why a `--load-scrape-every` value is refused, or undefined when it is fine. */
export function loadScrapePeriodProblem(ms: number): string | undefined {
  if (ms === 0 || ms >= MIN_LOAD_SCRAPE_EVERY_MS) return undefined;
  return `--load-scrape-every must be 0 (off) or at least ${MIN_LOAD_SCRAPE_EVERY_MS}ms: model servers answer /metrics in milliseconds, but not for free`;
}
