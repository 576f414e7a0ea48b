/**
 * Command-line flags of the benches: node's `parseArgs` with `--help` and `--no-<flag>`, and
 * readers for numbers, lists and durations. A malformed command line is a usage error: the
 * reason on stderr and exit code 2, never a stack trace.
 */
import { parseArgs, type ParseArgsOptionsConfig } from 'node:util';
import { parseDuration } from '../../lib/duration.ts';

type Values<O extends ParseArgsOptionsConfig> = ReturnType<
  typeof parseArgs<{ options: O; allowNegative: true }>
>['values'];

/** Prints `message` and exits 2. */
export function usageError(message: string): never {
  process.stderr.write(`${message}\n`);
  process.exit(2);
}

/** Parses this process's arguments; `--help` (or `-h`) prints `help` and exits 0. */
export function readFlags<const O extends ParseArgsOptionsConfig>(
  options: O,
  help: string,
): Values<O> {
  if (process.argv.slice(2).some((a) => a === '--help' || a === '-h')) {
    process.stdout.write(help);
    process.exit(0);
  }
  try {
    return parseArgs({ options, allowNegative: true }).values;
  } catch (err) {
    return usageError(`${(err as Error).message}\n\n${help}`);
  }
}

/** A number of at least `min` (a whole one with `integer`); `fallback` when the flag is absent. */
export function numberFlag(
  name: string,
  value: string | undefined,
  options: { fallback?: number; min?: number; integer?: boolean } = {},
): number {
  const { fallback, min = -Infinity, integer = false } = options;
  if (value === undefined) {
    if (fallback === undefined) return usageError(`--${name}: a value is required`);
    return fallback;
  }
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || n < min)
    return usageError(`--${name}: expected a number ≥ ${min}, got ${value}`);
  if (integer && !Number.isInteger(n))
    return usageError(`--${name}: expected a whole number, got ${value}`);
  return n;
}

/** A comma-separated list of numbers, each at least `min`. */
export function numberListFlag(name: string, value: string, min = -Infinity): number[] {
  return value.split(',').map((v) => numberFlag(name, v.trim(), { min }));
}

/** `500ms`, `30s`, `2m`, `1h` or a number of seconds, in ms. */
export function durationFlag(name: string, value: string): number {
  return (
    parseDuration(value) ??
    usageError(`--${name}: expected a duration like 500ms, 30s or 2m, got ${value}`)
  );
}
