/**
 * How much slower a server generates than its peers, from what the servers report, and what that
 * does to the balancing step's count (docs/policy.md §4, "A slower server").
 *
 * A sidecar's own TTFT samples do not show a slower server soon enough: it sends that server an
 * eighth of its requests, a 4× slower server's first tokens take seconds each, and a TTFT mixes
 * the server's speed with its queue and with how much of the prompt was cached (a cache hit on a
 * slow server is fast). The servers report their speed directly: the inter-token latency histogram
 * of vLLM and SGLang, scraped about once a second by the controller (or a standalone sidecar) and
 * turned into a mean time per token between scrapes (lib/load-scrape/scrape-schedule.ts). Every
 * sidecar reads the same number from the first seconds of traffic on, whatever it sent where.
 *
 * Pure: the balancer passes in the numbers it holds.
 */
import { lowerBound, medianWithout } from './median.ts';

/**
 * A server reported at least this many times slower per token than the candidates' median is
 * weighed by its slowdown in the balancing step. Below it, servers are taken as equally fast:
 * a batch's size alone moves a server's inter-token latency by a few tens of percent (the routing
 * benchmark's simulator by up to 1.42×, for a full batch), and every sidecar reads the same
 * reports, so acting on small differences would send them all away from the same server at once.
 */
export const SLOW_SERVER_RATIO = 1.5;

/**
 * Each candidate's reported slowdown: its inter-token latency over the median of the other
 * candidates that report one (its peers: with the server itself in the median, one slow server of
 * two would read as under 2× slower however slow it is). 1 for a candidate that reports none, or
 * whose peers report none.
 */
export function reportedSlowdowns(interTokenLatencyMs: readonly (number | undefined)[]): number[] {
  const usable = (v: number | undefined): v is number =>
    v !== undefined && Number.isFinite(v) && v > 0;
  const sorted = interTokenLatencyMs.filter(usable).sort((a, b) => a - b);
  return interTokenLatencyMs.map((v) => {
    if (!usable(v)) return 1;
    const peers = medianWithout(sorted, lowerBound(sorted, v));
    return peers === undefined ? 1 : v / peers;
  });
}

/**
 * The count the balancing step compares for a candidate with `inFlight` of this sidecar's own
 * attempts, reported `slowdown` times slower than its peers, for a request whose own prefill takes
 * `ownPrefillHolds` of a typical request's slot time (1 when not known); `freeSlots` is what the
 * server's reports say of its room (ReportedLoad.freeSlots; undefined: not known).
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
  ownPrefillHolds: number,
  freeSlots?: number,
): number {
  if (!(slowdown >= SLOW_SERVER_RATIO)) return inFlight;
  const p = Number.isFinite(ownPrefillHolds) && ownPrefillHolds >= 0 ? ownPrefillHolds : 1;
  if (freeSlots !== undefined && freeSlots >= 1) return inFlight + (slowdown - 1) * p;
  return slowdown * (inFlight + p) - p;
}
