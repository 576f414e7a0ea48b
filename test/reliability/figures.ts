/**
 * The figures of docs/reliability.md. Every reliability test reports what it measured through
 * `recordFigure`: as a test diagnostic (shown by `node --test`), and appended as one JSON line to
 * `$SWITCHYARD_RELIABILITY_FIGURES` when that is set, which is how the table was filled.
 */
import { appendFileSync } from 'node:fs';
import type { TestContext } from 'node:test';

export interface Figure {
  /** The row of the table, e.g. `backend: reset mid-stream`. */
  fault: string;
  /** The load held while the fault was on, e.g. `20 streams, 4 at a time`. */
  load: string;
  /** Client requests that failed (non-2xx, broken or hung), of `requests`. */
  lost: number;
  requests: number;
  /** From the end of the fault (or its start, when it is permanent) until normal service, ms. */
  recoveryMs?: number | undefined;
  /** Anything else measured, by name. */
  [key: string]: unknown;
}

export function recordFigure(t: TestContext, figure: Figure): void {
  t.diagnostic(`figure ${JSON.stringify(figure)}`);
  const file = process.env['SWITCHYARD_RELIABILITY_FIGURES'];
  if (file !== undefined && file !== '') appendFileSync(file, `${JSON.stringify(figure)}\n`);
}
