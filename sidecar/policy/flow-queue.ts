/**
 * The queue of requests that wait for room or for budget in one pool of one sidecar (issue 43):
 * ordered by priority (higher first); within a priority, fair between workloads (each workload
 * with entries takes its turn) and first come first served within a workload; bounded in count
 * and in bytes, a higher priority pushing out the newest entries of the lowest one.
 *
 * Layout: a band per priority (kept sorted, higher first). A band holds one FIFO per workload
 * and a ring of the workloads that have entries; the turn walks the ring. Every entry also sits
 * in its band's arrival list, so that the newest of a band is found at once when it must be
 * pushed out. All lists are doubly linked: taking out any entry (a client that went away) costs
 * O(1) plus O(bands) when its band empties; offer costs O(bands) for the bounds check.
 */
import type { FlowQueueApi, FlowQueueLimits, OfferResult, QueueEntry } from './flow-types.ts';

interface Node<T> {
  readonly entry: QueueEntry<T>;
  readonly band: Band<T>;
  readonly fifo: WorkloadFifo<T>;
  /** Within the workload's FIFO. */
  prev: Node<T> | undefined;
  next: Node<T> | undefined;
  /** Within the band's arrival list. */
  older: Node<T> | undefined;
  newer: Node<T> | undefined;
}

/** One workload's entries of one priority, oldest first; a member of the band's ring while not empty. */
interface WorkloadFifo<T> {
  readonly workload: string;
  head: Node<T> | undefined;
  tail: Node<T> | undefined;
  /** The ring of workloads with entries (circular; a lone member points to itself). */
  ringPrev: WorkloadFifo<T>;
  ringNext: WorkloadFifo<T>;
}

interface Band<T> {
  readonly priority: number;
  readonly fifos: Map<string, WorkloadFifo<T>>;
  /** The workload served next; undefined when the band is empty. */
  turn: WorkloadFifo<T> | undefined;
  oldest: Node<T> | undefined;
  newest: Node<T> | undefined;
  count: number;
  bytes: number;
}

export class FlowQueue<T> implements FlowQueueApi<T> {
  #limits: FlowQueueLimits;
  /** Non-empty bands, higher priority first. */
  readonly #bands: Band<T>[] = [];
  readonly #byPriority = new Map<number, Band<T>>();
  readonly #nodes = new Map<QueueEntry<T>, Node<T>>();
  #size = 0;
  #bytes = 0;

  constructor(limits: FlowQueueLimits) {
    this.#limits = { ...limits };
  }

  /** New bounds for the next offers; entries already queued stay even when they now exceed them. */
  setLimits(limits: FlowQueueLimits): void {
    this.#limits = { ...limits };
  }

  get size(): number {
    return this.#size;
  }

  get bytes(): number {
    return this.#bytes;
  }

  offer(
    priority: number,
    workload: string,
    bytes: number,
    nowMs: number,
    value: T,
  ): OfferResult<T> {
    const size = Number.isFinite(bytes) && bytes > 0 ? bytes : 0;
    // Check before pushing anything out: what all lower priorities hold is the most that can go.
    let lowerCount = 0;
    let lowerBytes = 0;
    for (const band of this.#bands) {
      if (band.priority < priority) {
        lowerCount += band.count;
        lowerBytes += band.bytes;
      }
    }
    if (this.#size - lowerCount + 1 > this.#limits.maxRequests)
      return { kind: 'full', limit: 'requests' };
    if (this.#bytes - lowerBytes + size > this.#limits.maxBytes)
      return { kind: 'full', limit: 'bytes' };

    const evicted: QueueEntry<T>[] = [];
    while (
      this.#size + 1 > this.#limits.maxRequests ||
      this.#bytes + size > this.#limits.maxBytes
    ) {
      // The lowest band is below `priority` here: the check above guarantees enough lies below.
      const lowest = this.#bands[this.#bands.length - 1] as Band<T>;
      const victim = lowest.newest as Node<T>;
      this.#unlink(victim);
      evicted.push(victim.entry);
    }

    const entry: QueueEntry<T> = Object.freeze({
      priority,
      workload,
      bytes: size,
      enqueuedAtMs: nowMs,
      value,
    });
    const band = this.#bandFor(priority);
    let fifo = band.fifos.get(workload);
    if (fifo === undefined) {
      fifo = { workload, head: undefined, tail: undefined } as WorkloadFifo<T>;
      fifo.ringPrev = fifo;
      fifo.ringNext = fifo;
      band.fifos.set(workload, fifo);
    }
    if (fifo.head === undefined) joinRing(band, fifo);
    const node: Node<T> = {
      entry,
      band,
      fifo,
      prev: fifo.tail,
      next: undefined,
      older: band.newest,
      newer: undefined,
    };
    if (fifo.tail) fifo.tail.next = node;
    else fifo.head = node;
    fifo.tail = node;
    if (band.newest) band.newest.newer = node;
    else band.oldest = node;
    band.newest = node;
    band.count += 1;
    band.bytes += size;
    this.#size += 1;
    this.#bytes += size;
    this.#nodes.set(entry, node);
    return { kind: 'queued', entry, evicted };
  }

  remove(entry: QueueEntry<T>): boolean {
    const node = this.#nodes.get(entry);
    if (node === undefined) return false;
    this.#unlink(node);
    return true;
  }

  peek(): QueueEntry<T> | undefined {
    return this.#bands[0]?.turn?.head?.entry;
  }

  shift(): QueueEntry<T> | undefined {
    const band = this.#bands[0];
    if (band === undefined) return undefined;
    const fifo = band.turn as WorkloadFifo<T>;
    const node = fifo.head as Node<T>;
    // Advance the turn first: #unlink drops an emptied FIFO from the ring and moves the turn on.
    band.turn = fifo.ringNext;
    this.#unlink(node);
    return node.entry;
  }

  waitingAbove(priority: number): boolean {
    const top = this.#bands[0];
    return top !== undefined && top.priority > priority;
  }

  countsByPriority(): Map<number, number> {
    return new Map(this.#bands.map((band) => [band.priority, band.count]));
  }

  #bandFor(priority: number): Band<T> {
    const known = this.#byPriority.get(priority);
    if (known) return known;
    const band: Band<T> = {
      priority,
      fifos: new Map(),
      turn: undefined,
      oldest: undefined,
      newest: undefined,
      count: 0,
      bytes: 0,
    };
    // Binary search for the first band of a lower priority.
    let lo = 0;
    let hi = this.#bands.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if ((this.#bands[mid] as Band<T>).priority > priority) lo = mid + 1;
      else hi = mid;
    }
    this.#bands.splice(lo, 0, band);
    this.#byPriority.set(priority, band);
    return band;
  }

  #unlink(node: Node<T>): void {
    const { band, fifo } = node;
    this.#nodes.delete(node.entry);
    if (node.prev) node.prev.next = node.next;
    else fifo.head = node.next;
    if (node.next) node.next.prev = node.prev;
    else fifo.tail = node.prev;
    if (node.older) node.older.newer = node.newer;
    else band.oldest = node.newer;
    if (node.newer) node.newer.older = node.older;
    else band.newest = node.older;
    band.count -= 1;
    band.bytes -= node.entry.bytes;
    this.#size -= 1;
    this.#bytes -= node.entry.bytes;
    if (fifo.head === undefined) {
      leaveRing(band, fifo);
      band.fifos.delete(fifo.workload);
    }
    if (band.count === 0) {
      this.#byPriority.delete(band.priority);
      this.#bands.splice(this.#bands.indexOf(band), 1);
    }
  }
}

/** A workload that gets entries joins the ring last in the current round (just before the turn). */
function joinRing<T>(band: Band<T>, fifo: WorkloadFifo<T>): void {
  const turn = band.turn;
  if (turn === undefined) {
    fifo.ringPrev = fifo;
    fifo.ringNext = fifo;
    band.turn = fifo;
    return;
  }
  fifo.ringNext = turn;
  fifo.ringPrev = turn.ringPrev;
  turn.ringPrev.ringNext = fifo;
  turn.ringPrev = fifo;
}

function leaveRing<T>(band: Band<T>, fifo: WorkloadFifo<T>): void {
  if (fifo.ringNext === fifo) {
    band.turn = undefined;
    return;
  }
  fifo.ringPrev.ringNext = fifo.ringNext;
  fifo.ringNext.ringPrev = fifo.ringPrev;
  if (band.turn === fifo) band.turn = fifo.ringNext;
}
