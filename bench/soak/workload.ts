/**
 * The soak's load: chat requests at a steady open-loop rate, most of them streamed, a share
 * abandoned by the client at a random point, all drawn from one seeded RNG so a run repeats.
 */
import http from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { ask, completeStream, type Answer } from '../../harness/ask.ts';
import type { RandomFn } from '../../lib/rng.ts';
import type { Flags } from './flags.ts';

export class Workload {
  readonly counts = { offered: 0, completed: 0, aborted: 0, failed: 0 };
  /** The first 20 failures, for the results. */
  readonly failures: string[] = [];
  /** Whole streams' durations, one in ten sampled. */
  readonly e2eMs: number[] = [];
  clientInFlight = 0;
  private readonly pending = new Set<Promise<void>>();
  private readonly agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });
  private readonly prefixes = Array.from({ length: 8 }, (_, i) =>
    `You are assistant number ${i}. Answer briefly and precisely. `.repeat(3),
  );
  private readonly flags: Flags;
  private readonly random: RandomFn;
  private readonly url: string;

  constructor(flags: Flags, random: RandomFn, sidecarUrl: string) {
    this.flags = flags;
    this.random = random;
    this.url = sidecarUrl;
  }

  /** Offers `--rate` requests per second until `--duration` after `startedAt` has passed. */
  async offer(startedAt: number): Promise<void> {
    const intervalMs = 1000 / this.flags.rate;
    let next = performance.now();
    while (performance.now() - startedAt < this.flags.durationMs) {
      const p = this.one().catch((err: unknown) => {
        this.counts.failed++;
        if (this.failures.length < 20) this.failures.push(String(err));
      });
      this.pending.add(p);
      void p.finally(() => this.pending.delete(p));
      next += intervalMs;
      const wait = next - performance.now();
      if (wait > 1) await sleep(wait);
      else if (wait < -1000) next = performance.now(); // far behind: do not burst to catch up
    }
  }

  /** Waits for every request still out, and closes the client's connections. */
  async drain(): Promise<void> {
    await Promise.all([...this.pending]);
    this.agent.destroy();
  }

  private async one(): Promise<void> {
    const { random, counts } = this;
    const streamed = random() < 0.8;
    const abort = random() < this.flags.abortFraction;
    const body = {
      model: 'm',
      stream: streamed,
      max_tokens: 16 + Math.floor(random() * 240),
      messages: [
        {
          role: 'system',
          content: this.prefixes[Math.floor(random() * this.prefixes.length)]!,
        },
        { role: 'user', content: `question ${Math.floor(random() * 1e6)}` },
      ],
    };
    const abortAfterBytes = abort ? Math.floor(random() * 3000) : undefined;
    counts.offered++;
    this.clientInFlight++;
    let a: Answer;
    try {
      a = await ask(this.url, body, {
        abortAfterBytes,
        agent: abort ? false : this.agent,
        timeoutMs: 60_000,
      });
    } finally {
      this.clientInFlight--;
    }
    if (abort && a.ended === 'aborted') {
      counts.aborted++;
      return;
    }
    const ok = streamed ? completeStream(a) : a.status === 200 && a.ended === 'end';
    if (ok) {
      counts.completed++;
      if (streamed && counts.completed % 10 === 0) this.e2eMs.push(a.ms);
    } else {
      counts.failed++;
      if (this.failures.length < 20)
        this.failures.push(`${a.status} ${a.ended} ${a.error ?? ''} ${a.body.slice(0, 120)}`);
    }
  }
}
