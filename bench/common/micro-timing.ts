/**
 * Timing of one synchronous call on the event loop, for the micro-benchmarks of the policy's hot
 * path (`bench:prefix-hash`, `bench:pick-cost`): a warm-up for the JIT, then one hrtime sample a
 * call, so the p99 shows the calls a GC or a deoptimisation caught.
 */
export interface Timing {
  p50Us: number;
  p99Us: number;
  meanUs: number;
}

export function time(iterations: number, fn: () => void): Timing {
  for (let i = 0; i < Math.min(200, iterations); i++) fn(); // warm the JIT
  const samples: number[] = [];
  for (let i = 0; i < iterations; i++) {
    const start = process.hrtime.bigint();
    fn();
    samples.push(Number(process.hrtime.bigint() - start) / 1000);
  }
  samples.sort((a, b) => a - b);
  const at = (q: number) =>
    samples[Math.min(samples.length - 1, Math.ceil(q * samples.length) - 1)]!;
  const mean = samples.reduce((a, b) => a + b, 0) / samples.length;
  return { p50Us: round(at(0.5)), p99Us: round(at(0.99)), meanUs: round(mean) };
}

const round = (x: number) => Math.round(x * 100) / 100;
