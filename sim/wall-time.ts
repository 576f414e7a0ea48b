/**
 * The engine's time on the real clock: `performance.now()` and Node timers.
 */
import { performance } from 'node:perf_hooks';
import { MAX_TIMER_MS } from '../lib/duration.ts';
import type { EngineTime, TimerId } from './engine/engine-time.ts';

export const wallTime: EngineTime = {
  nowMs: () => performance.now(),
  // Whole milliseconds, rounded up: a timer may fire late, never before its time.
  setTimer: (fn, delayMs) =>
    setTimeout(fn, Math.min(MAX_TIMER_MS, Math.max(0, Math.ceil(delayMs)))),
  // The only TimerIds this EngineTime hands out are the Timeouts made just above.
  clearTimer: (timer: TimerId) => clearTimeout(timer as NodeJS.Timeout),
};
