/**
 * LoRA residency (docs/policy.md §1, "LoRA adapters"): among the candidates for a request naming
 * an adapter, prefer the endpoints where it is already loaded, within the load bound prefix
 * affinity uses. A server that must load the adapter first (from disk, evicting another when its
 * slots are full) adds that load to the request's first token; one that has it resident does not.
 *
 * Resident means: the server's fresh report of its adapters (`ServerLoadReport.loadedAdapters`,
 * vLLM's running and waiting adapters) lists it, or this sidecar sent it that adapter within
 * ADAPTER_SERVED_RECENTLY_MS. Both count, because vLLM's gauge names only adapters with requests
 * in flight (docs/engine.md): an adapter resident but idle is in no report, and a recent send is
 * the only sign of it. A model counts as an adapter when some server reports it loaded or
 * some endpoint's discovered list gives it a parent (`isKnownAdapter`); for any other model there
 * is no preference. Pure: every time comes in as an argument.
 */
import { affinityLoadBound } from './bounded-load.ts';
import type { AffinityPolicy } from './types.ts';

/**
 * One minute: how long an adapter this sidecar sent to a server counts as resident there (the
 * server's reports name only adapters in use, not idle resident ones). vLLM keeps an adapter in its GPU slots until another
 * request needs the slot (`--max-loras`), so a recent use is a good guess; after a minute of
 * other adapters' traffic it is a poor one.
 */
export const ADAPTER_SERVED_RECENTLY_MS = 60_000;

/** What the preference reads of an endpoint. */
export interface ResidencyEndpoint {
  readonly id: string;
}

/** The last report of an endpoint that said which adapters it holds. */
interface AdapterReport {
  readonly adapters: ReadonlySet<string>;
  readonly atMs: number;
}

export class AdapterResidency {
  /** The last report with `loadedAdapters` of each endpoint id. */
  readonly #reports = new Map<string, AdapterReport>();
  /** How many endpoints' last reports list each adapter (`isKnownAdapter`). */
  readonly #reportedCount = new Map<string, number>();
  /** Endpoint id → adapter → when this sidecar last sent it there. */
  readonly #served = new Map<string, Map<string, number>>();
  /** Whether a discovered list gives the model a parent (model-filter.ts, `parentOf`). */
  readonly #hasParent: (model: string) => boolean;

  constructor(hasParent: (model: string) => boolean) {
    this.#hasParent = hasParent;
  }

  /**
   * A load report of the endpoint, measured at `atMs`. Undefined `adapters` (a report that says
   * nothing of them, such as an ORCA header) keeps the previous report's; an older report than the
   * one held is dropped.
   */
  report(endpointId: string, adapters: readonly string[] | undefined, atMs: number): void {
    if (adapters === undefined || !Array.isArray(adapters)) return;
    const previous = this.#reports.get(endpointId);
    if (previous !== undefined && atMs < previous.atMs) return;
    const next = new Set(adapters.filter((a) => typeof a === 'string' && a !== ''));
    this.#count(previous?.adapters, -1);
    this.#count(next, +1);
    this.#reports.set(endpointId, { adapters: next, atMs });
  }

  /** This sidecar sent `model` to the endpoint now (recorded for adapters only). */
  served(endpointId: string, model: string, nowMs: number): void {
    if (!this.isKnownAdapter(model)) return;
    let models = this.#served.get(endpointId);
    if (models === undefined) {
      models = new Map();
      this.#served.set(endpointId, models);
    }
    models.set(model, nowMs);
    // Forget what no longer counts, so that a server cycling through many adapters stays small.
    if (models.size > 1)
      for (const [m, atMs] of models)
        if (nowMs - atMs > ADAPTER_SERVED_RECENTLY_MS) models.delete(m);
  }

  /** The endpoint left the pool. */
  forget(endpointId: string): void {
    this.#count(this.#reports.get(endpointId)?.adapters, -1);
    this.#reports.delete(endpointId);
    this.#served.delete(endpointId);
  }

  /** Some server reports the model as a loaded adapter, or a discovered list gives it a parent. */
  isKnownAdapter(model: string): boolean {
    return (this.#reportedCount.get(model) ?? 0) > 0 || this.#hasParent(model);
  }

  /**
   * Whether the adapter is resident on the endpoint now: its fresh report (no older than
   * `reportMaxAgeMs`) lists it, or this sidecar sent it there recently.
   */
  isResident(endpointId: string, model: string, nowMs: number, reportMaxAgeMs: number): boolean {
    const report = this.#reports.get(endpointId);
    if (report !== undefined && nowMs - report.atMs <= reportMaxAgeMs && report.adapters.has(model))
      return true;
    const servedAt = this.#served.get(endpointId)?.get(model);
    return servedAt !== undefined && nowMs - servedAt <= ADAPTER_SERVED_RECENTLY_MS;
  }

  /**
   * The candidates to consider for a request naming `model`: for a known adapter, those where it
   * is resident and whose load fits the bound of prefix affinity (bounded-load.ts: under
   * `loadFactor` × the average, counting this request, or at most `maxExtraInFlight` above the
   * least loaded candidate); when none is, or the model is no adapter, all of them. Never empty
   * when `candidates` is not.
   */
  prefer<S extends ResidencyEndpoint>(
    candidates: readonly S[],
    model: string | undefined,
    view: {
      nowMs: number;
      reportMaxAgeMs: number;
      affinity: AffinityPolicy;
      load: (s: S) => number;
    },
  ): readonly S[] {
    if (model === undefined || candidates.length < 2 || !this.isKnownAdapter(model))
      return candidates;
    const { nowMs, reportMaxAgeMs, affinity, load } = view;
    const resident = candidates.filter((s) => this.isResident(s.id, model, nowMs, reportMaxAgeMs));
    if (resident.length === 0 || resident.length === candidates.length) return candidates;
    const withinBound = affinityLoadBound(candidates.map(load), affinity);
    const fitting = resident.filter((s) => withinBound(load(s)));
    return fitting.length > 0 ? fitting : candidates;
  }

  #count(adapters: ReadonlySet<string> | undefined, delta: 1 | -1): void {
    if (adapters === undefined) return;
    for (const a of adapters) {
      const n = (this.#reportedCount.get(a) ?? 0) + delta;
      if (n > 0) this.#reportedCount.set(a, n);
      else this.#reportedCount.delete(a);
    }
  }
}
