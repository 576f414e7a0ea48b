/**
 * The `placements` event of the snapshot stream (issue 45; docs/snapshot-protocol.md,
 * "Placements"): parsed and checked here, applied by whoever the stream hands it to. Advisory like
 * `load`: an invalid one is skipped, and said so at most once a minute (a controller that sends
 * bad ones sends ten a second; one line a minute is enough to notice).
 */
import type { Logger } from 'pino';
import { parsePlacements, type PoolPlacements } from '../../../crds/snapshot.ts';

const WARN_EVERY_MS = 60_000;

/**
 * The `x-switchyard-placements` header's value: the bytes per second the controller may send this
 * subscriber, > 0; undefined when absent or not a positive number (then nothing is uploaded).
 */
export function placementsBudget(header: string | string[] | undefined): number | undefined {
  const text = Array.isArray(header) ? header[0] : header;
  if (text === undefined || !/^\d{1,12}$/.test(text.trim())) return undefined;
  const n = Number(text.trim());
  return n > 0 ? n : undefined;
}

export class PlacementsEvents {
  readonly #log: Logger;
  #lastWarnMs = -Infinity;
  #skipped = 0;

  constructor(log: Logger) {
    this.#log = log;
  }

  /** Parses `data`; a valid batch goes to `apply` with its size in bytes. */
  accept(data: string, apply: (placements: PoolPlacements, bytes: number) => void): void {
    let value: unknown;
    try {
      value = JSON.parse(data);
    } catch {
      this.#skip({ size: data.length }, 'not valid JSON');
      return;
    }
    const parsed = parsePlacements(value);
    if (!parsed.ok) {
      this.#skip({ errors: parsed.errors }, 'it does not match the placements schema');
      return;
    }
    apply(parsed.value, Buffer.byteLength(data));
  }

  #skip(fields: Record<string, unknown>, why: string): void {
    this.#skipped += 1;
    const now = performance.now();
    if (now - this.#lastWarnMs < WARN_EVERY_MS) return;
    this.#lastWarnMs = now;
    this.#log.warn(
      { ...fields, skippedSinceLastWarning: this.#skipped },
      `placements event ignored: ${why}; routing goes on with the placements known (said at most once a minute)`,
    );
    this.#skipped = 0;
  }
}
