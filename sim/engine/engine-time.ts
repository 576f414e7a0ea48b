/**
 * Time as the engine model sees it. Injected so that the model never reads the wall clock or
 * arms a Node timer itself: the simulator passes `wallTime` (sim/wall-time.ts), tests pass
 * `fakeTime()` (./testing.ts) and move time by hand.
 */

/** A pending timer as `setTimer` returned it; only that `EngineTime`'s `clearTimer` reads it. */
export type TimerId = object;

export interface EngineTime {
  /** Monotonic milliseconds of wall time. */
  nowMs(): number;
  /** Call `fn` once, no sooner than `delayMs` from now (a negative delay means at once). */
  setTimer(fn: () => void, delayMs: number): TimerId;
  clearTimer(timer: TimerId): void;
}
