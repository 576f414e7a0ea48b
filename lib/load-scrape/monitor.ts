/**
 * Server-reported load (docs/controller.md, "Server-reported load"): scrapes the `/metrics` of the
 * endpoints of a set of pools and publishes each pool's load once a period. The controller runs
 * one per replica over the pools its sidecars subscribe to (publishing `load` events); a
 * standalone sidecar runs one over its own pool (publishing into its balancer). The schedule and the back-offs are decided
 * in scrape-schedule.ts (pure); this shell runs the timers, at most `concurrency` scrapes at
 * once, and logs only when a server changes between reporting, failing and having no metrics.
 *
 * Targets come only from the snapshots being served (`pools`): nothing else is ever scraped. A
 * server listed by several pools (or several ids) is scraped once.
 */
import type { Logger } from 'pino';
import { metricsUrl, type PoolLoad } from '../../crds/snapshot.ts';
import type { RandomFn } from '../rng.ts';
import { scrapeLoad, type ScrapeOptions } from './scrape.ts';
import {
  ScrapeSchedule,
  type ScrapeOutcome,
  type ScrapeTransition,
  type TargetHealth,
} from './scrape-schedule.ts';

/** How a scrape ended, as the metric labels it. */
export type ScrapeResult = 'ok' | 'no_metrics' | 'timeout' | 'error';

export interface LoadMonitorOptions<K> {
  /** How often each endpoint is scraped and each pool's load is sent. */
  periodMs: number;
  /** Scrapes at once. Default 16. */
  concurrency?: number;
  /** Per scrape. Default half the period, at most 5 s. */
  timeoutMs?: number;
  /** How long a server without load metrics is left alone. Default 10 min. */
  noMetricsBackoffMs?: number;
  logger: Logger;
  /** The pools to watch (keyed by anything), with the endpoints of each. */
  pools: () => ReadonlyMap<K, readonly { id: string; url: string }[]>;
  /** Hands on a pool's load (to its subscribers, or to the balancer). */
  publish: (key: K, load: PoolLoad) => void;
  onScrape?: (result: ScrapeResult, seconds: number) => void;
  /** Replaces the HTTP scrape (tests). */
  scrape?: (url: string, options: ScrapeOptions) => Promise<ScrapeOutcome>;
  random?: RandomFn;
  now?: () => number;
}

function resultOf(outcome: ScrapeOutcome): ScrapeResult {
  switch (outcome.kind) {
    case 'load':
      return 'ok';
    case 'no-metrics':
      return 'no_metrics';
    case 'failed':
      return outcome.cause;
  }
}

export class LoadMonitor<K = string> {
  readonly #options: LoadMonitorOptions<K>;
  readonly #schedule: ScrapeSchedule;
  readonly #concurrency: number;
  readonly #timeoutMs: number;
  readonly #now: () => number;
  readonly #stopping = new AbortController();
  /** How many endpoints each pool's last message listed: an empty one is sent once, to clear. */
  readonly #sent = new Map<K, number>();
  #tickTimer: NodeJS.Timeout | undefined;
  #pumpTimer: NodeJS.Timeout | undefined;
  #inFlight = 0;

  constructor(options: LoadMonitorOptions<K>) {
    this.#options = options;
    this.#now = options.now ?? (() => performance.now());
    this.#schedule = new ScrapeSchedule(
      { periodMs: options.periodMs, noMetricsBackoffMs: options.noMetricsBackoffMs },
      options.random ?? Math.random,
    );
    this.#concurrency = options.concurrency ?? 16;
    this.#timeoutMs = options.timeoutMs ?? Math.min(options.periodMs / 2, 5_000);
  }

  start(): void {
    this.#tick();
    this.#tickTimer = setInterval(() => this.#tick(), this.#options.periodMs);
    this.#tickTimer.unref();
  }

  stop(): void {
    clearInterval(this.#tickTimer);
    clearTimeout(this.#pumpTimer);
    this.#stopping.abort();
  }

  /** The endpoints being scraped, by how they stand (for a gauge). */
  counts(): Record<TargetHealth['kind'], number> {
    return this.#schedule.counts();
  }

  /** Follows the pools being served, then sends each one's load. */
  #tick(): void {
    const now = this.#now();
    const pools = new Map<K, { id: string; target: string }[]>();
    const targets = new Set<string>();
    for (const [key, endpoints] of this.#options.pools()) {
      const list: { id: string; target: string }[] = [];
      for (const e of endpoints) {
        const target = metricsUrl(e.url);
        if (target === undefined) continue;
        list.push({ id: e.id, target });
        targets.add(target);
      }
      pools.set(key, list);
    }
    this.#schedule.setTargets(targets, now);
    for (const [key, list] of pools) {
      const load = this.#schedule.poolLoad(list, now);
      if (load.endpoints.length > 0 || (this.#sent.get(key) ?? 0) > 0)
        this.#options.publish(key, load);
      this.#sent.set(key, load.endpoints.length);
    }
    for (const key of this.#sent.keys()) if (!pools.has(key)) this.#sent.delete(key);
    this.#pump();
  }

  /** Starts the due scrapes that fit, and sets the timer for the next one. */
  #pump(): void {
    if (this.#stopping.signal.aborted) return;
    clearTimeout(this.#pumpTimer);
    this.#pumpTimer = undefined;
    const now = this.#now();
    for (const target of this.#schedule.takeDue(now, this.#concurrency - this.#inFlight))
      this.#scrape(target, now);
    const next = this.#schedule.nextDueAtMs();
    if (next === undefined || this.#inFlight >= this.#concurrency) return;
    this.#pumpTimer = setTimeout(() => this.#pump(), Math.max(0, next - now));
    this.#pumpTimer.unref();
  }

  #scrape(target: string, startedAtMs: number): void {
    this.#inFlight++;
    const scrape = this.#options.scrape ?? scrapeLoad;
    const done = (outcome: ScrapeOutcome): void => {
      this.#inFlight--;
      if (this.#stopping.signal.aborted) return;
      const now = this.#now();
      this.#options.onScrape?.(resultOf(outcome), (now - startedAtMs) / 1000);
      const transition = this.#schedule.record(target, outcome, now);
      if (transition !== undefined) this.#log(target, transition);
      this.#pump();
    };
    // scrapeLoad never rejects; a replacement that does still frees its slot.
    scrape(target, { timeoutMs: this.#timeoutMs, signal: this.#stopping.signal }).then(
      done,
      (err: unknown) => done({ kind: 'failed', cause: 'error', reason: String(err) }),
    );
  }

  /** One debug line per change of a server's standing; never one per scrape. */
  #log(target: string, t: ScrapeTransition): void {
    const log = this.#options.logger;
    switch (t.kind) {
      case 'no-metrics':
        log.debug(
          { target, reason: t.reason, retryInMs: Math.round(t.retryInMs) },
          'endpoint serves no load metrics; not scraped again for a while',
        );
        break;
      case 'failing':
        log.debug({ target, reason: t.reason }, 'load scrape failed; backing off');
        break;
      case 'reporting':
        log.debug({ target, after: t.after }, 'endpoint reports load again');
        break;
    }
  }
}
