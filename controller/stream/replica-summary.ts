import type { Logger } from 'pino';
import type { BudgetUnit, ReplicaDemand } from '../core/budget-shares.ts';
import { demandKey } from '../core/budget-shares.ts';
import {
  decodeSignals,
  encodeSignals,
  type CompactSignals,
  type ReplicaSignals,
} from '../core/pool-signals.ts';
import type { SidecarView } from '../core/status.ts';
import { KubeApiError, microTime, type KubeRaw } from '../kube/kube-raw.ts';
import type { OwnerReference } from '../kube/owners.ts';

/**
 * Sidecars connect to any replica, but only the leader writes status. Each replica therefore
 * publishes what its own sidecars reported in a small per-replica Lease (an annotation, compact
 * JSON), and the leader folds the other replicas' summaries into the status it writes. Leases
 * are already in the controller's RBAC, are cheap, and say by their renew time whether the
 * replica behind them is alive.
 */

export const SUMMARY_LABEL = 'switchyard.dev/sidecar-summary';
const ANNOTATION = 'switchyard.dev/sidecars';
/**
 * What this replica's sidecars want of each pool's budgets (issue 43), so that each replica hands
 * out only its part: `{pool: {"<budget>\u0000<unit>": [Σ wanted, sidecars, not yet reported, Σ used]}}`.
 * A separate annotation: replicas of an older version read the other one unchanged.
 */
const DEMAND_ANNOTATION = 'switchyard.dev/budget-demand';
type DemandSummary = Record<string, Record<string, [number, number, number, number?]>>;
/**
 * What this replica knows of each pool's autoscaling signals (issue 44): its sidecars' demand
 * summed and the load of the servers it scrapes, `{pool: CompactSignals}` (core/pool-signals.ts).
 * A separate annotation, as the budget demand: older replicas ignore it.
 */
const SIGNALS_ANNOTATION = 'switchyard.dev/pool-signals';
/**
 * Where the other replicas reach this one's stream (its pod IP and port), to relay placements
 * (issue 45, stream/placement-peers.ts). Absent when the replica does not know its address.
 */
const STREAM_URL_ANNOTATION = 'switchyard.dev/stream-url';
/** Keeps the annotation well under the 256 KiB limit of all annotations together. */
const MAX_SIDECARS_PER_REPLICA = 1500;
/** About 80 bytes a pool: 1,000 pools stay under 100 KiB beside the sidecars. */
const MAX_SIGNAL_POOLS_PER_REPLICA = 1000;

/** One sidecar, compactly: id, applied hash, streaming (1/0), endpoints whose breaker is not closed. */
type CompactSidecar = [string, string, 0 | 1, [string, 'o' | 'h'][]];
type Summary = Record<string, CompactSidecar[]>;

interface LeaseObject {
  metadata: {
    name: string;
    namespace?: string;
    resourceVersion?: string;
    annotations?: Record<string, string>;
    labels?: Record<string, string>;
    ownerReferences?: OwnerReference[];
  };
  spec?: { holderIdentity?: string; renewTime?: string; leaseDurationSeconds?: number };
}

export interface ReplicaSummaryOptions {
  raw: KubeRaw;
  namespace: string;
  identity: string;
  publishEveryMs: number;
  logger: Logger;
  /** Owners of this replica's Lease (its Pod), so that it goes with the replica (owners.ts). */
  ownerReferences?: readonly OwnerReference[];
  /** This replica's sidecars per pool key, as the status core sees them. */
  local: () => Map<string, Map<string, SidecarView>>;
  /** Remote sidecars changed: the leader should rewrite these pools' status. */
  onRemoteChange: (poolKeys: string[]) => void;
  /** This replica's demand of each pool's budgets, by `demandKey` (issue 43). */
  localDemand?: () => Map<string, Map<string, ReplicaDemand>>;
  /** Another replica's demand changed: re-split the budgets. */
  onRemoteDemandChange?: () => void;
  /** This replica's part of each pool's autoscaling signals, by pool key (issue 44). */
  localSignals?: () => Map<string, ReplicaSignals>;
  /** Where the other replicas reach this one's stream (placements relay); undefined: unknown. */
  streamUrl?: () => string | undefined;
}

function leaseName(identity: string): string {
  const safe = identity
    .toLowerCase()
    .replace(/[^a-z0-9.-]/g, '-')
    .replace(/^[^a-z0-9]+|[^a-z0-9]+$/g, '');
  return `switchyard-sidecars-${safe}`.slice(0, 253);
}

export class ReplicaSummaries {
  private readonly options: ReplicaSummaryOptions;
  private timer: NodeJS.Timeout | undefined;
  private lastPublished = '';
  private lastPublishedAtMs = -Infinity;
  /** Other replicas' sidecars, per pool key; refreshed by `refresh()`. */
  private remote = new Map<string, Map<string, SidecarView>>();
  private remoteText = '';
  /** Per pool, per live other replica with sidecars of it: its demand by `demandKey` (or none). */
  private remoteDemandByPool = new Map<string, (Map<string, ReplicaDemand> | undefined)[]>();
  private remoteDemandText = '';
  /** Per pool, what each other live replica with sidecars of it knows of its signals. */
  private remoteSignalsByPool = new Map<string, ReplicaSignals[]>();
  /** The stream URLs of the other live replicas that published one. */
  private peerUrls: string[] = [];
  /** Lease record → when we first saw it (monotonic): a replica is gone when its record stops changing. */
  private observed = new Map<string, { record: string; atMs: number }>();

  constructor(options: ReplicaSummaryOptions) {
    this.options = options;
  }

  start(): void {
    const tick = (): void => {
      Promise.all([this.publish(), this.refresh()])
        .catch((err: unknown) =>
          this.options.logger.debug(
            { err: (err as Error).message },
            'replica summary round failed',
          ),
        )
        .finally(() => {
          this.timer = setTimeout(tick, this.options.publishEveryMs);
          this.timer.unref();
        });
    };
    tick();
  }

  stop(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
  }

  /** Sidecars of `poolKey` connected to other replicas. */
  remoteSidecars(poolKey: string): ReadonlyMap<string, SidecarView> {
    return this.remote.get(poolKey) ?? new Map();
  }

  /**
   * What the sidecars of `poolKey` on each other live replica want of a budget and unit; undefined
   * for a replica whose demand is not known (an older version, or no report yet).
   */
  remoteDemand(poolKey: string, budget: string, unit: BudgetUnit): (ReplicaDemand | undefined)[] {
    const key = demandKey(budget, unit);
    return (this.remoteDemandByPool.get(poolKey) ?? []).map((m) =>
      m === undefined ? undefined : (m.get(key) ?? { wanted: 0, sidecars: 0, unknown: 0 }),
    );
  }

  /** The stream URLs of the other live replicas (as of the last refresh). */
  peerStreamUrls(): readonly string[] {
    return this.peerUrls;
  }

  /** What the other live replicas know of `poolKey`'s autoscaling signals, one entry each. */
  remoteSignals(poolKey: string): readonly ReplicaSignals[] {
    return this.remoteSignalsByPool.get(poolKey) ?? [];
  }

  private get path(): string {
    return `/apis/coordination.k8s.io/v1/namespaces/${this.options.namespace}/leases`;
  }

  private async publish(): Promise<void> {
    const summary: Summary = {};
    let count = 0;
    for (const [pool, sidecars] of this.options.local()) {
      const list: CompactSidecar[] = [];
      for (const [id, s] of sidecars) {
        if (count++ >= MAX_SIDECARS_PER_REPLICA) break;
        const broken = (s.endpoints ?? [])
          .filter((e) => e.breaker !== 'closed')
          .map((e): [string, 'o' | 'h'] => [e.id, e.breaker === 'open' ? 'o' : 'h']);
        list.push([id, s.appliedHash ?? '', s.streaming === true ? 1 : 0, broken]);
      }
      if (list.length > 0) summary[pool] = list;
    }
    const demand: DemandSummary = {};
    for (const [pool, byKey] of this.options.localDemand?.() ?? [])
      demand[pool] = Object.fromEntries(
        [...byKey].map(([k, d]) => [
          k,
          [
            Math.round(d.wanted * 1000) / 1000,
            d.sidecars,
            d.unknown,
            Math.round((d.used ?? 0) * 1000) / 1000,
          ],
        ]),
      );
    const demandText = JSON.stringify(demand);
    const signals: Record<string, CompactSignals> = {};
    let pools = 0;
    for (const [pool, known] of this.options.localSignals?.() ?? []) {
      if (pools++ >= MAX_SIGNAL_POOLS_PER_REPLICA) break;
      signals[pool] = encodeSignals(known);
    }
    const signalsText = JSON.stringify(signals);
    const streamUrl = this.options.streamUrl?.();
    const text = JSON.stringify(summary) + demandText + signalsText + (streamUrl ?? '');
    // Renew at least every third period even when nothing changed, so others see this replica live.
    if (
      text === this.lastPublished &&
      performance.now() - this.lastPublishedAtMs < 3 * this.options.publishEveryMs
    )
      return;
    const name = leaseName(this.options.identity);
    const body = (
      resourceVersion?: string,
    ): LeaseObject & { apiVersion: string; kind: string } => ({
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: {
        name,
        namespace: this.options.namespace,
        labels: { [SUMMARY_LABEL]: 'true' },
        annotations: {
          [ANNOTATION]: JSON.stringify(summary),
          [DEMAND_ANNOTATION]: demandText,
          [SIGNALS_ANNOTATION]: signalsText,
          ...(streamUrl === undefined ? {} : { [STREAM_URL_ANNOTATION]: streamUrl }),
        },
        // On every write: a PUT replaces the whole object, owners included.
        ownerReferences: [...(this.options.ownerReferences ?? [])],
        ...(resourceVersion === undefined ? {} : { resourceVersion }),
      },
      spec: {
        holderIdentity: this.options.identity,
        renewTime: microTime(new Date()),
        leaseDurationSeconds: Math.ceil((4 * this.options.publishEveryMs) / 1000),
      },
    });
    try {
      const current = await this.options.raw.request<LeaseObject>('GET', `${this.path}/${name}`);
      await this.options.raw.request(
        'PUT',
        `${this.path}/${name}`,
        body(current.metadata.resourceVersion),
      );
    } catch (err) {
      if (!(err instanceof KubeApiError) || err.status !== 404) throw err;
      await this.options.raw.request('POST', this.path, body());
    }
    this.lastPublished = text;
    this.lastPublishedAtMs = performance.now();
  }

  private async refresh(): Promise<void> {
    const list = await this.options.raw.request<{ items: LeaseObject[] }>(
      'GET',
      `${this.path}?labelSelector=${encodeURIComponent(`${SUMMARY_LABEL}=true`)}`,
    );
    const now = performance.now();
    const next = new Map<string, Map<string, SidecarView>>();
    const nextDemand = new Map<string, (Map<string, ReplicaDemand> | undefined)[]>();
    const nextSignals = new Map<string, ReplicaSignals[]>();
    const seen = new Set<string>();
    const peerUrls: string[] = [];
    for (const lease of list.items) {
      const holder = lease.spec?.holderIdentity ?? '';
      if (holder === this.options.identity) continue;
      seen.add(lease.metadata.name);
      const record = `${lease.spec?.renewTime ?? ''}`;
      const before = this.observed.get(lease.metadata.name);
      if (before === undefined || before.record !== record)
        this.observed.set(lease.metadata.name, { record, atMs: now });
      const ageMs = now - (this.observed.get(lease.metadata.name)?.atMs ?? now);
      if (ageMs > (lease.spec?.leaseDurationSeconds ?? 0) * 1000) continue; // that replica is gone
      const peerUrl = lease.metadata.annotations?.[STREAM_URL_ANNOTATION];
      if (peerUrl !== undefined && URL.canParse(peerUrl)) peerUrls.push(peerUrl);
      let summary: Summary;
      try {
        summary = JSON.parse(lease.metadata.annotations?.[ANNOTATION] ?? '{}') as Summary;
      } catch {
        continue;
      }
      let demand: DemandSummary | undefined;
      try {
        const raw = lease.metadata.annotations?.[DEMAND_ANNOTATION];
        demand = raw === undefined ? undefined : (JSON.parse(raw) as DemandSummary);
      } catch {
        demand = undefined;
      }
      for (const [pool, compact] of Object.entries(parseRecord(lease, SIGNALS_ANNOTATION))) {
        const list = nextSignals.get(pool) ?? [];
        list.push(decodeSignals(compact));
        nextSignals.set(pool, list);
      }
      for (const [pool, sidecars] of Object.entries(summary)) {
        if (sidecars.some((s) => s[2] === 1)) {
          const entries = demand?.[pool];
          const list = nextDemand.get(pool) ?? [];
          list.push(
            entries === undefined
              ? demand === undefined
                ? undefined
                : new Map()
              : new Map(
                  Object.entries(entries).map(([k, [wanted, n, unknown, used]]) => [
                    k,
                    { wanted, sidecars: n, unknown, used },
                  ]),
                ),
          );
          nextDemand.set(pool, list);
        }
        const map = next.get(pool) ?? new Map<string, SidecarView>();
        for (const [id, hash, streaming, broken] of sidecars) {
          map.set(id, {
            streaming: streaming === 1,
            lastSeenMs: now,
            appliedHash: hash === '' ? undefined : hash,
            endpoints: broken.map(([endpoint, b]) => ({
              id: endpoint,
              breaker: b === 'o' ? 'open' : 'half-open',
            })),
          });
        }
        next.set(pool, map);
      }
    }
    for (const name of this.observed.keys()) if (!seen.has(name)) this.observed.delete(name);
    this.remoteSignalsByPool = nextSignals;
    this.peerUrls = peerUrls;
    const demandText = JSON.stringify(
      [...nextDemand].map(([pool, l]) => [pool, l.map((m) => (m === undefined ? null : [...m]))]),
    );
    if (demandText !== this.remoteDemandText) {
      this.remoteDemandByPool = nextDemand;
      this.remoteDemandText = demandText;
      this.options.onRemoteDemandChange?.();
    }
    const text = JSON.stringify([...next].map(([pool, m]) => [pool, [...m]]));
    if (text === this.remoteText) return;
    const changed = new Set([...this.remote.keys(), ...next.keys()]);
    this.remote = next;
    this.remoteText = text;
    this.options.onRemoteChange([...changed]);
  }
}

/** An annotation holding a JSON object, or {} when it is missing or not one. */
function parseRecord(lease: LeaseObject, annotation: string): Record<string, unknown> {
  try {
    const value: unknown = JSON.parse(lease.metadata.annotations?.[annotation] ?? '{}');
    return typeof value === 'object' && value !== null && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : {};
  } catch {
    return {};
  }
}
