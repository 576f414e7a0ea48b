/**
 * The `/metrics` text, rendered at most once per `ttlMs` and shared by every scrape in between.
 * Rendering runs on the proxy's event loop (the metrics live there): at 4,096 endpoints one render
 * took hundreds of milliseconds, and 150 back-to-back scrapes pushed streaming p99 to seconds
 * (issue 16). Scrapes are seconds apart in practice; a second-old counter changes no dashboard.
 */
import { setImmediate as yieldToLoop } from 'node:timers/promises';
import type { Registry } from 'prom-client';

export const METRICS_TTL_MS = 1_000;

export class CachedMetricsText {
  readonly #registry: Registry;
  readonly #ttlMs: number;
  readonly #nowMs: () => number;
  #text: string | undefined;
  #renderedAtMs = -Infinity;
  #rendering: Promise<string> | undefined;

  constructor(registry: Registry, ttlMs = METRICS_TTL_MS, nowMs = () => performance.now()) {
    this.#registry = registry;
    this.#ttlMs = ttlMs;
    this.#nowMs = nowMs;
  }

  /** The text of a render at most `ttlMs` old; concurrent scrapes wait for one render. */
  get(): Promise<string> {
    if (this.#text !== undefined && this.#nowMs() - this.#renderedAtMs < this.#ttlMs)
      return Promise.resolve(this.#text);
    this.#rendering ??= this.#render().finally(() => (this.#rendering = undefined));
    return this.#rendering;
  }

  /**
   * One metric at a time, yielding to the event loop between them, so streams get a turn between
   * the largest pieces instead of waiting for the whole text.
   */
  async #render(): Promise<string> {
    const parts: string[] = [];
    for (const metric of this.#registry.getMetricsAsArray()) {
      const name = (metric as { name?: string }).name;
      if (name === undefined) continue;
      parts.push(await this.#registry.getSingleMetricAsString(name));
      await yieldToLoop();
    }
    // The same text as Registry.metrics(): metrics separated by a blank line.
    const text = parts.join('\n\n') + '\n';
    this.#text = text;
    this.#renderedAtMs = this.#nowMs();
    return text;
  }
}
