/**
 * A fake `EngineTime` for tests of the engine model: time stands still until the test moves it,
 * and timers fire in order of their due time (then of arming) as it passes them.
 */
import type { EngineTime, TimerId } from './engine-time.ts';

export interface FakeTime extends EngineTime {
  /**
   * Move time forward by `ms`, firing every timer that comes due on the way, each at its own
   * time (timers armed by those callbacks fire too when they come due within the step).
   */
  advance(ms: number): void;
  /** Timers armed and neither fired nor cleared. */
  pending(): number;
}

interface FakeTimer {
  readonly atMs: number;
  readonly seq: number;
  readonly fn: () => void;
}

export function fakeTime(startMs = 0): FakeTime {
  let now = startMs;
  let seq = 0;
  const timers = new Set<FakeTimer>();
  const next = (untilMs: number): FakeTimer | undefined => {
    let first: FakeTimer | undefined;
    for (const t of timers) {
      if (t.atMs > untilMs) continue;
      if (
        first === undefined ||
        t.atMs < first.atMs ||
        (t.atMs === first.atMs && t.seq < first.seq)
      )
        first = t;
    }
    return first;
  };
  return {
    nowMs: () => now,
    setTimer(fn, delayMs): TimerId {
      const timer: FakeTimer = { atMs: now + Math.max(0, delayMs), seq: seq++, fn };
      timers.add(timer);
      return timer;
    },
    clearTimer(timer) {
      timers.delete(timer as FakeTimer);
    },
    advance(ms) {
      const until = now + ms;
      for (let t = next(until); t !== undefined; t = next(until)) {
        timers.delete(t);
        now = t.atMs;
        t.fn();
      }
      now = until;
    },
    pending: () => timers.size,
  };
}
