/**
 * Scale from zero (issue 44; docs/sidecar.md, Scale from zero): the requests one sidecar holds
 * for one pool while the pool's endpoint list is empty, so that an autoscaler watching
 * `demand.held` brings the first server up and the requests are served rather than refused.
 *
 * Held only while the endpoint list is EMPTY, not while every endpoint's breaker is open: the
 * controller lists ready endpoints only, so an empty list is "scaled to zero (or not started
 * yet)", which a new server ends; open breakers are servers that exist and fail, which holding
 * would only hide from the clients (they get the 503 with Retry-After at once, as before).
 *
 * Pure (time passed in): first come first served, bounded in count, bytes and time. The shell
 * (sidecar/proxy/zero-gate.ts) holds the requests' bodies and sockets, the one timer and the logs.
 * The FIFO is flow control's queue at one priority and one workload (no eviction then).
 */
import type { ScaleFromZeroPolicy } from '../../crds/policy-types.ts';
import { FlowQueue } from './flow-queue.ts';
import type { QueueEntry } from './flow-types.ts';

export type { ScaleFromZeroPolicy };

export type HoldOffer<T> =
  /** Held. `first`: the hold was empty (a new streak: log it, ask for a report). */
  | { kind: 'held'; entry: QueueEntry<T>; first: boolean }
  /** Not held: the most requests or bytes are held already (a 503 at once). */
  | { kind: 'full'; limit: 'requests' | 'bytes' };

/** How one hold streak (from the first request held to the hold empty again) ended, in counts. */
export interface HoldStreak {
  readonly sinceMs: number;
  readonly held: number;
  readonly released: number;
  readonly timedOut: number;
  /** Clients that left while held. */
  readonly gone: number;
  /** Refused at shutdown. */
  readonly shutdown: number;
  /** Refused at once because the hold was full (counted while the streak lasts). */
  readonly full: number;
}

type Counts = { -readonly [K in keyof HoldStreak]: HoldStreak[K] };

export class ZeroHold<T> {
  #policy: ScaleFromZeroPolicy | undefined;
  #endpoints = 0;
  readonly #queue = new FlowQueue<T>({ maxRequests: 0, maxBytes: 0 });
  #streak: Counts | undefined;
  /** Called when held requests may go (an endpoint came, or scale from zero was turned off). */
  onChange: (() => void) | undefined;
  /** Called when a streak starts (the first request held): the controller client reports soon. */
  onFirstHeld: (() => void) | undefined;

  /** A configuration of the pool was applied: its `scaleFromZero` and how many endpoints it has. */
  configure(policy: ScaleFromZeroPolicy | undefined, endpointCount: number): void {
    this.#policy = policy;
    this.#endpoints = endpointCount;
    if (policy !== undefined)
      this.#queue.setLimits({ maxRequests: policy.maxRequests, maxBytes: policy.maxBytes });
    if (this.#queue.size > 0 && !this.holds()) this.onChange?.();
  }

  /** Whether a request of the pool is held now (rather than sent, or shed with a 503). */
  holds(): boolean {
    return this.#policy !== undefined && this.#endpoints === 0;
  }

  get size(): number {
    return this.#queue.size;
  }

  get bytes(): number {
    return this.#queue.bytes;
  }

  /** The bound of the current policy, for the messages (0 when off). */
  get policy(): ScaleFromZeroPolicy | undefined {
    return this.#policy;
  }

  offer(bytes: number, nowMs: number, value: T): HoldOffer<T> {
    const first = this.#queue.size === 0;
    const offered = this.#queue.offer(0, '', bytes, nowMs, value);
    if (offered.kind === 'full') {
      if (this.#streak !== undefined) this.#streak.full += 1;
      return offered;
    }
    if (first) {
      this.#streak ??= {
        sinceMs: nowMs,
        held: 0,
        released: 0,
        timedOut: 0,
        gone: 0,
        shutdown: 0,
        full: 0,
      };
      this.onFirstHeld?.();
    }
    this.#streak!.held += 1;
    return { kind: 'held', entry: offered.entry, first };
  }

  /** The client left: its entry goes, nothing was sent. */
  remove(entry: QueueEntry<T>): boolean {
    const removed = this.#queue.remove(entry);
    if (removed && this.#streak !== undefined) this.#streak.gone += 1;
    return removed;
  }

  /** Every held entry, in arrival order, out of the hold: to send (`released`) or to refuse. */
  takeAll(why: 'released' | 'shutdown'): QueueEntry<T>[] {
    const out: QueueEntry<T>[] = [];
    for (let e = this.#queue.shift(); e !== undefined; e = this.#queue.shift()) out.push(e);
    if (this.#streak !== undefined) {
      if (why === 'released') this.#streak.released += out.length;
      else this.#streak.shutdown += out.length;
    }
    return out;
  }

  /**
   * The entries held `maxWait` or longer at `nowMs`, oldest first, out of the hold. The hold is
   * first come first served, so they are its head.
   */
  expire(nowMs: number): QueueEntry<T>[] {
    const out: QueueEntry<T>[] = [];
    const maxWait = this.#maxWaitMs();
    for (let e = this.#queue.peek(); e !== undefined; e = this.#queue.peek()) {
      if (nowMs - e.enqueuedAtMs < maxWait) break;
      out.push(this.#queue.shift()!);
    }
    if (this.#streak !== undefined) this.#streak.timedOut += out.length;
    return out;
  }

  /** When the oldest held request times out; undefined when none is held. */
  nextDeadlineMs(): number | undefined {
    const head = this.#queue.peek();
    return head === undefined ? undefined : head.enqueuedAtMs + this.#maxWaitMs();
  }

  /**
   * The streak just ended (the hold is empty again): its counts, once; undefined while requests
   * are held or when no streak was on.
   */
  endStreak(): HoldStreak | undefined {
    if (this.#queue.size > 0 || this.#streak === undefined) return undefined;
    const streak = this.#streak;
    this.#streak = undefined;
    return streak;
  }

  /** A policy turned off while requests are held: they wait no longer than they would have. */
  #maxWaitMs(): number {
    return this.#policy?.maxWaitMs ?? 0;
  }
}
