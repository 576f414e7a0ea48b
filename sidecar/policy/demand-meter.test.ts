import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { DEMAND_MIN_WINDOW_MS, DemandMeter } from './demand-meter.ts';
import { fakeClock } from './testing.ts';

function count(meter: DemandMeter, requests: number, shed: number): void {
  for (let i = 0; i < requests; i++) meter.request();
  for (let i = 0; i < shed; i++) meter.shed();
}

describe('DemandMeter', () => {
  test('reads zero rates when nothing was sent', () => {
    const clock = fakeClock(500);
    const meter = new DemandMeter(clock);
    clock.advance(10_000);
    assert.deepEqual(meter.take(), { requestsPerSecond: 0, shedPerSecond: 0 });
  });

  test('turns counts into rates over the time since the previous take', () => {
    const clock = fakeClock();
    const meter = new DemandMeter(clock);
    count(meter, 50, 5);
    clock.advance(10_000);
    assert.deepEqual(meter.take(), { requestsPerSecond: 5, shedPerSecond: 0.5 });
    // A new window: only what came since.
    count(meter, 6, 0);
    clock.advance(2_000);
    assert.deepEqual(meter.take(), { requestsPerSecond: 3, shedPerSecond: 0 });
  });

  test('repeats the last rates for a take sooner than the minimum window, keeping the counts', () => {
    const clock = fakeClock();
    const meter = new DemandMeter(clock);
    count(meter, 20, 2);
    clock.advance(2_000);
    assert.deepEqual(meter.take(), { requestsPerSecond: 10, shedPerSecond: 1 });
    count(meter, 1, 1);
    clock.advance(5); // a report right after a snapshot: one request in 5 ms is not 200/s
    assert.deepEqual(meter.take(), { requestsPerSecond: 10, shedPerSecond: 1 });
    count(meter, 3, 0);
    clock.advance(DEMAND_MIN_WINDOW_MS - 5);
    // The window that stayed open holds all four requests and the one shed.
    assert.deepEqual(meter.take(), { requestsPerSecond: 4, shedPerSecond: 1 });
  });

  test('measures a first window shorter than the minimum as if it were the minimum', () => {
    const clock = fakeClock();
    const meter = new DemandMeter(clock);
    count(meter, 3, 1);
    clock.advance(100);
    assert.deepEqual(meter.take(), { requestsPerSecond: 3, shedPerSecond: 1 });
    // Not reset: the next take, a whole window later, still counts them.
    clock.advance(1_900);
    assert.deepEqual(meter.take(), { requestsPerSecond: 1.5, shedPerSecond: 0.5 });
  });

  test('rounds the rates to three decimals', () => {
    const clock = fakeClock();
    const meter = new DemandMeter(clock);
    count(meter, 1, 2);
    clock.advance(3_000);
    assert.deepEqual(meter.take(), { requestsPerSecond: 0.333, shedPerSecond: 0.667 });
  });
});
