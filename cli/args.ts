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

/** A repeatable option's parser: each use adds its value, in order. */
export function collectRepeated(value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), value];
}

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
