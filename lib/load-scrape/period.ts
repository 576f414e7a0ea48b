/**
 * How often a load scrape runs (the controller's, or a standalone sidecar's): the defaults live
 * with the scraper, and the CLI, the chart's docs and the benchmarks take them from here.
 */

/**
 * The shortest period other than 0 (off): model servers answer `/metrics` in milliseconds, but
 * not for free. The Gateway API inference extension's endpoint picker scrapes every 50 ms by
 * default; the routing benchmark runs its simulators faster than real time and scales the
 * period with them, so it needs room below the default.
 */
export const MIN_LOAD_SCRAPE_EVERY_MS = 25;

/**
 * The default period. The balancing step counts the servers' reports only while every one is
 * under half a second old, and the fresher they are, the less sidecars that hold the same one
 * pile onto its emptiest server (docs/policy.md §4 has the measurements). Ten small GETs a second
 * per server from each controller replica (or standalone sidecar); a pool with hundreds of
 * endpoints and sidecars may want 250ms.
 */
export const DEFAULT_LOAD_SCRAPE_EVERY_MS = 100;

/** Why a `--load-scrape-every` value is refused, or undefined when it is fine. */
export function loadScrapePeriodProblem(ms: number): string | undefined {
  if (ms === 0 || ms >= MIN_LOAD_SCRAPE_EVERY_MS) return undefined;
  return `--load-scrape-every must be 0 (off) or at least ${MIN_LOAD_SCRAPE_EVERY_MS}ms: model servers answer /metrics in milliseconds, but not for free`;
}
