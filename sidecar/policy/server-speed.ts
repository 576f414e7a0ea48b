/**
 * How much slower a server generates than its peers, from what the servers report, and what that
 * does to the balancing step's count (docs/policy.md §4, "A slower server").
 *
 * A sidecar's own TTFT samples do not show a slower server soon enough: it sends that server an
 * eighth of its requests, a 4× slower server's first tokens take seconds each, and a TTFT mixes
 * the server's speed with its queue and with how much of the prompt was cached (a cache hit on a
 * slow server is fast). The servers report their speed directly: the inter-token latency histogram
 * of vLLM and SGLang, scraped every 100 ms by default by the controller (or a standalone sidecar)
 * and turned into a mean time per token between scrapes (lib/load-scrape/scrape-schedule.ts). Every
 * sidecar reads the same number from the first seconds of traffic on, whatever it sent where.
 * But a report is the server's word: it is weighed only as far as the sidecar's own TTFTs show the
 * server slower too (`trustedSlowdown`), so that no server can talk its way into a pool's traffic.
 *
 * Pure: the balancer passes in the numbers it holds.
 */
/**
 * A server reported at least this many times slower per token than the candidates' median is
 * weighed by its slowdown in the balancing step. Below it, servers are taken as equally fast:
 * a batch's size alone moves a server's inter-token latency by a few tens of percent (the routing
 * benchmark's simulator by up to 1.42×, for a full batch), and every sidecar reads the same
 * reports, so acting on small differences would send them all away from the same server at once.
 */
export const SLOW_SERVER_RATIO = 1.5;

/**
 * How much further than this sidecar's own measurement a report may go: a server's reported
 * slowdown counts for at most this many times its measured one (its TTFTs over its peers',
 * `TtftEwmas.measured`). The routing benchmark's 4× slower server measured 1.7× by its TTFTs
 * (its cache hits are fast, and a free slot hides its queue) while it reported 4×: the factor
 * leaves that report whole, and bounds what a lying server can make of a peer's measured speed.
 */
export const REPORT_TRUST_FACTOR = 4;

/**
 * A reported slowdown is weighed only for a server this sidecar has itself measured at least this
 * much slower than its peers (median of its last TTFTs over its peers' median). Reports are one
 * server's word about itself, and, through the peers' median, about every other server: one that
 * claimed 0.01 ms per token made an honest peer read 2,000× slower and took every request of a
 * two-server pool while answering 300 ms late (issue 40). The same clear slowdown reports must
 * show (`SLOW_SERVER_RATIO`): at 1.25 the jitter of equally fast servers on a busy machine
 * sometimes passed it, and a liar then took the serial traffic of its peers (the hostile-server
 * probe). The routing benchmark's slow server measured 1.7×. A server not measured yet is not
 * weighed at all, so it gets the requests that measure it.
 */
export const MEASURED_SLOWER_RATIO = SLOW_SERVER_RATIO;

/**
 * The slowdown the balancing step weighs a server by: its `reported` slowdown, as far as this
 * sidecar's `measured` one (its TTFTs against its peers', undefined when it has none of its own)
 * supports it. 1 (not slower) unless the sidecar measured it at least `MEASURED_SLOWER_RATIO`
 * slower, and never more than `REPORT_TRUST_FACTOR` × measured: a report may say how much slower a
 * server is, never that it is slower when this sidecar measured otherwise. A report saying a server
 * is faster than its peers changes nothing either way (only slower servers are weighed).
 */
export function trustedSlowdown(reported: number, measured: number | undefined): number {
  if (!(reported > 1)) return 1;
  if (measured === undefined || !(measured >= MEASURED_SLOWER_RATIO)) return 1;
  // Past the doubles (a 1e308 ms TTFT over a 1e-10 one): no measurement at all.
  const trusted = Math.min(reported, REPORT_TRUST_FACTOR * measured);
  return Number.isFinite(trusted) ? trusted : 1;
}

/**
 * `trustedSlowdown` for candidates that report inter-token latencies `interTokenLatencyMs` and
 * were measured at TTFTs `measuredTtftMs` (undefined: no report, no samples of its own), each
 * compared with its peers' median (`slowdownAgainstPeers`); asked per candidate with its own pair.
 */
export function trustedSlowdownAgainstPeers(
  interTokenLatencyMs: readonly (number | undefined)[],
  measuredTtftMs: readonly (number | undefined)[],
): (interTokenLatencyMs: number | undefined, measuredTtftMs: number | undefined) => number {
  const reported = slowdownAgainstPeers(interTokenLatencyMs);
  const measured = slowdownAgainstPeers(measuredTtftMs);
  return (itl, ttft) => trustedSlowdown(reported(itl), usable(ttft) ? measured(ttft) : undefined);
}

/**
 * Each candidate's reported slowdown: its inter-token latency over the median of the other
 * candidates that report one (its peers: with the server itself in the median, one slow server of
 * two would read as under 2× slower however slow it is). 1 for a candidate that reports none, or
 * whose peers report none.
 */
export function reportedSlowdowns(interTokenLatencyMs: readonly (number | undefined)[]): number[] {
  return interTokenLatencyMs.map(slowdownAgainstPeers(interTokenLatencyMs));
}

/**
 * The slowdown of a candidate reporting `v` among candidates reporting `interTokenLatencyMs`, as
 * `reportedSlowdowns` gives it, for asking per candidate without building a list. The balancer
 * asks it on every pick, for every candidate, so it costs O(n) once and O(1) a question.
 *
 * The median of the peers is the median of the usable values without the candidate's own, and
 * which values are left in the middle depends only on where the candidate's value sits next to
 * the middle three of the sorted values (with equal values, which one is left out changes
 * nothing). So it needs those three order statistics, not a sorted list: `medianWithout(sorted,
 * lowerBound(sorted, v))` of median.ts, with the same operands added in the same order.
 */
export function slowdownAgainstPeers(
  interTokenLatencyMs: readonly (number | undefined)[],
): (v: number | undefined) => number {
  const values: number[] = [];
  for (const v of interTokenLatencyMs) if (usable(v)) values.push(v);
  // With the candidate's own value left out there are n; the median is at mid (n odd) or the
  // mean of mid − 1 and mid (n even), of the sorted values with the candidate's removed.
  const n = values.length - 1;
  if (n <= 0) return () => 1;
  const mid = n >> 1;
  const [below, middle, above] = middleThree(values, mid);
  return (v) => {
    if (!usable(v)) return 1;
    // k, the index of v's first occurrence in the sorted values: above mid, at mid, or below.
    const kAboveMid = middle < v;
    const kAtLeastMid = mid === 0 || below < v;
    let peers: number;
    if (n % 2 === 1) peers = kAboveMid ? middle : above;
    else if (kAboveMid) peers = (below + middle) / 2;
    else if (kAtLeastMid) peers = (below + above) / 2;
    else peers = (middle + above) / 2;
    return v / peers;
  };
}

/**
 * The median of `values` as median.ts's `median` computes it (the mean of the two middle values
 * for an even count, same operands, same order), by selection: O(n) expected instead of a sort.
 * Reorders `values`; undefined for none. For the comparisons made on every pick at large pools.
 */
export function medianBySelection(values: number[]): number | undefined {
  const n = values.length;
  if (n === 0) return undefined;
  const mid = n >> 1;
  const [below, middle] = middleThree(values, mid);
  return n % 2 === 1 ? middle : (below + middle) / 2;
}

function usable(v: number | undefined): v is number {
  return v !== undefined && Number.isFinite(v) && v > 0;
}

/**
 * The values that would sit at `at − 1`, `at` and `at + 1` if `values` were sorted ascending
 * (`at − 1` is −Infinity when `at` is 0); `at + 1` must be an index of `values`. Reorders `values`.
 * Quickselect (Hoare's FIND) for `at`, then the largest value left of it and the smallest right
 * of it: O(n) expected, where sorting the latencies of a 4,096-endpoint pool on every pick took
 * most of the pick's time.
 */
function middleThree(values: number[], at: number): [number, number, number] {
  let lo = 0;
  let hi = values.length - 1;
  while (lo < hi) {
    // The median of three as the pivot keeps sorted and reverse-sorted input linear.
    const m = (lo + hi) >> 1;
    const pivot = medianOfThree(values[lo] as number, values[m] as number, values[hi] as number);
    let i = lo;
    let j = hi;
    while (i <= j) {
      while ((values[i] as number) < pivot) i++;
      while ((values[j] as number) > pivot) j--;
      if (i <= j) {
        const t = values[i] as number;
        values[i] = values[j] as number;
        values[j] = t;
        i++;
        j--;
      }
    }
    // Now values[lo..j] ≤ pivot ≤ values[i..hi], and anything between i and j equals the pivot.
    if (at <= j) hi = j;
    else if (at >= i) lo = i;
    else break;
  }
  const middle = values[at] as number;
  let below = -Infinity;
  for (let i = 0; i < at; i++) below = Math.max(below, values[i] as number);
  let above = Infinity;
  for (let i = at + 1; i < values.length; i++) above = Math.min(above, values[i] as number);
  return [below, middle, above];
}

function medianOfThree(a: number, b: number, c: number): number {
  return Math.max(Math.min(a, b), Math.min(Math.max(a, b), c));
}

/**
 * The count the balancing step compares for a candidate with `inFlight` requests, reported
 * `slowdown` times slower than its peers, for a request whose own prefill is worth
 * `ownPrefillPositions` queue positions (`prefillPositions`; 1 when not known); `freeSlots` is
 * what the server's reports say of its room (ReportedLoad.freeSlots; undefined: not known).
 *
 * The time to this request's first token is about (requests ahead + its own prefill) × the
 * server's time per unit of work: `inFlight + p` at a server of typical speed, `slowdown ×
 * (inFlight + p)` at a slower one whose batch is full. Subtracting `p` from every candidate's
 * count changes no order, and leaves servers of typical speed at their plain count, so the
 * fewest-in-flight step among them is unchanged (its ties included). With a free slot the request
 * waits behind nobody: only its own prefill is slower, `inFlight + (slowdown − 1) × p`, so the
 * slow server keeps its batch busy with short prompts, while a long one costs it several times its
 * prefill and goes there only when its peers are that much busier.
 */
export function speedWeightedCount(
  inFlight: number,
  slowdown: number,
  ownPrefillPositions: number,
  freeSlots?: number,
): number {
  if (!(slowdown >= SLOW_SERVER_RATIO)) return inFlight;
  const p =
    Number.isFinite(ownPrefillPositions) && ownPrefillPositions >= 0 ? ownPrefillPositions : 1;
  if (freeSlots !== undefined && freeSlots >= 1) return inFlight + (slowdown - 1) * p;
  return slowdown * (inFlight + p) - p;
}

/**
 * A request's own prefill in queue positions of a server, the unit of the counts the balancing
 * step compares: its prefill in holds of a typical request (`PrefillExchange.prefillInHolds`) times
 * the server's batch, since at a full batch a slot frees every hold ÷ batch. 1 (one request ahead)
 * while the prefill is not measured; the batch counts as 1 while the server has not shown it
 * (ReportedLoad.batch). Counted in holds, a 60k-token prompt weighed a sixth of its cost on a
 * server of six slots, and a 4× slower server with a free slot took it ahead of peers two or
 * three positions deep: 12 s to its first token against about 4 (docs/policy.md §4).
 */
export function prefillPositions(holds: number | undefined, batch: number | undefined): number {
  if (holds === undefined || !Number.isFinite(holds) || holds < 0) return 1;
  return holds * (batch !== undefined && batch >= 1 ? batch : 1);
}
