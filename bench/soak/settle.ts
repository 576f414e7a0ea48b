/**
 * After the load: the sidecar must be back to idle (nothing in flight, no client connection
 * held), and its log tells which circuit breakers opened and why.
 */
import { readdirSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { establishedWith, rssMb } from '../../harness/proc.ts';
import type { RunningProcess } from '../../harness/processes.ts';
import { gauge, round } from './samples.ts';

export interface AfterLoad {
  settled: boolean;
  settleMs: number;
  inFlight: number;
  fds: number;
  clientConnections: number;
  rssMb: number;
}

/** Waits up to 15 s for nothing to be in flight, then reads what the sidecar still holds. */
export async function settle(sidecar: RunningProcess): Promise<AfterLoad> {
  const { pid } = sidecar;
  let settled = false;
  const settleStarted = performance.now();
  let afterText = '';
  while (performance.now() - settleStarted < 15_000) {
    afterText = await (
      await fetch(`${sidecar.adminUrl!}/metrics`, { headers: { connection: 'close' } })
    ).text();
    if (gauge(afterText, 'switchyard_inflight') === 0) {
      settled = true;
      break;
    }
    await sleep(200);
  }
  return {
    settled,
    settleMs: Math.round(performance.now() - settleStarted),
    inFlight: gauge(afterText, 'switchyard_inflight'),
    fds: readdirSync(`/proc/${pid}/fd`).length,
    clientConnections: establishedWith(pid, Number(new URL(sidecar.url).port)),
    rssMb: round(rssMb(pid) ?? NaN, 1),
  };
}

export interface BreakerOpenings {
  /** Openings by reason. */
  byReason: Record<string, number>;
  /** The first ten. */
  first: unknown[];
}

/** Breaker transitions from the sidecar's log (warn level shows the openings). */
export function breakerOpenings(sidecar: RunningProcess): BreakerOpenings {
  const byReason: Record<string, number> = {};
  const first: unknown[] = [];
  for (const line of sidecar.output().split('\n')) {
    if (!line.includes('"msg":"circuit breaker open"')) continue;
    const event = JSON.parse(line) as { endpoint: string; reason: string; openForMs: number };
    byReason[event.reason] = (byReason[event.reason] ?? 0) + 1;
    if (first.length < 10)
      first.push({ endpoint: event.endpoint, reason: event.reason, openForMs: event.openForMs });
  }
  return { byReason, first };
}
