/**
 * Drift detection in the controller (docs/drift.md): the leader probes every endpoint of each
 * pool that sets `drift.probeEvery` (probe/drift-prober.ts), judges the fingerprints
 * (crds/drift.ts) and records the verdicts in the pool's status. Every replica then marks the
 * drifted endpoints in its snapshots from that status (core/desired-snapshot.ts), so all
 * replicas send the same snapshot and a new leader starts from its predecessor's verdicts.
 *
 * The status is written when a fingerprint, a verdict, an error or the expected fingerprint
 * changes, not for every probe (probedAt rides along with the next write).
 */
import type { Logger } from 'pino';
import { judgeDrift } from '../../crds/drift.ts';
import type { InferencePoolStatus } from '../../crds/inference-pool.schema.ts';
import type { DriftPolicy, EndpointSpec } from '../../crds/policy-types.ts';
import { DriftProber, type ProbeResult, type ProbeTarget } from '../../probe/drift-prober.ts';
import type { DriftChangeView } from './events.ts';

type DriftSection = NonNullable<InferencePoolStatus['drift']>;

interface EndpointRecord {
  fingerprint: string | undefined;
  probedAtMs: number | undefined;
  error: string | undefined;
}

interface PoolDrift {
  policy: DriftPolicy;
  prober: DriftProber | undefined;
  targets: ProbeTarget[];
  records: Map<string, EndpointRecord>;
  /** The judged content last reported (to tell a real change from a probe that confirmed it). */
  lastContent: string;
  drifted: ReadonlySet<string>;
  expected: string | undefined;
}

/** One change of a pool's verdicts, as its Event tells it (drift/events.ts). */
export type DriftChange = DriftChangeView;

export interface DriftMonitorOptions {
  logger: Logger;
  isLeader: () => boolean;
  /** The pool's drift view changed: its status should be written. */
  onChange: (key: string, changes: DriftChange[]) => void;
  onProbe?: (result: 'ok' | 'failed') => void;
  /** Seconds for probes to answer. Default 10 s. */
  timeoutMs?: number;
}

const MAX_ERROR = 256;
const MAX_ENTRIES = 256;

export class DriftMonitor {
  readonly #options: DriftMonitorOptions;
  readonly #pools = new Map<string, PoolDrift>();

  constructor(options: DriftMonitorOptions) {
    this.#options = options;
  }

  /**
   * A reconcile's view of the pool: its drift policy (undefined: detection off) and endpoints.
   * `previous` (the pool's status) seeds the records the first time, so verdicts survive a
   * change of leader.
   */
  sync(
    key: string,
    policy: DriftPolicy | undefined,
    endpoints: readonly EndpointSpec[],
    previous: InferencePoolStatus['drift'] | undefined,
  ): void {
    if (policy === undefined) {
      this.remove(key);
      return;
    }
    let pool = this.#pools.get(key);
    if (
      pool !== undefined &&
      (pool.policy.probeEveryMs !== policy.probeEveryMs || pool.policy.prompt !== policy.prompt)
    ) {
      pool.prober?.stop();
      pool.prober = undefined;
    }
    if (pool === undefined) {
      const records = new Map<string, EndpointRecord>();
      for (const e of previous?.endpoints ?? [])
        records.set(e.id, {
          fingerprint: e.fingerprint,
          probedAtMs: e.probedAt === undefined ? undefined : Date.parse(e.probedAt),
          error: e.error,
        });
      pool = {
        policy,
        prober: undefined,
        targets: [],
        records,
        lastContent: '',
        drifted: new Set(),
        expected: previous?.expected,
      };
      this.#pools.set(key, pool);
      this.#judge(key, pool, false);
    }
    pool.policy = policy;
    pool.targets = endpoints.map((e) => ({
      id: e.id,
      url: e.url,
      apiKey: e.apiKey,
      model: e.model,
    }));
    const ids = new Set(pool.targets.map((t) => t.id));
    for (const id of pool.records.keys()) if (!ids.has(id)) pool.records.delete(id);
    this.#ensureProber(key, pool);
  }

  remove(key: string): void {
    this.#pools.get(key)?.prober?.stop();
    this.#pools.delete(key);
  }

  /** Leadership changed: only the leader probes. */
  leadershipChanged(): void {
    for (const [key, pool] of this.#pools) this.#ensureProber(key, pool);
  }

  /**
   * What the pool's status should say: null when drift detection is off (the section goes),
   * undefined when this replica has nothing to say yet (keep what status says).
   */
  section(key: string): DriftSection | null | undefined {
    const pool = this.#pools.get(key);
    if (pool === undefined) return null;
    if (pool.records.size === 0) return undefined;
    const entries = [...pool.records]
      .map(([id, r]) => ({
        id,
        ...(r.fingerprint === undefined ? {} : { fingerprint: r.fingerprint }),
        drifted: pool.drifted.has(id),
        ...(r.probedAtMs === undefined || !Number.isFinite(r.probedAtMs)
          ? {}
          : { probedAt: new Date(r.probedAtMs).toISOString() }),
        ...(r.error === undefined ? {} : { error: r.error.slice(0, MAX_ERROR) }),
      }))
      .sort(
        (a, b) => Number(b.drifted) - Number(a.drifted) || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0),
      )
      .slice(0, MAX_ENTRIES);
    return {
      ...(pool.expected === undefined ? {} : { expected: pool.expected }),
      endpoints: entries,
    };
  }

  /** Endpoint ids judged drifted now, per pool (for the metric). */
  drifted(): ReadonlyMap<string, { ids: readonly string[]; drifted: ReadonlySet<string> }> {
    return new Map(
      [...this.#pools].map(([key, p]) => [key, { ids: [...p.records.keys()], drifted: p.drifted }]),
    );
  }

  stop(): void {
    for (const pool of this.#pools.values()) pool.prober?.stop();
    this.#pools.clear();
  }

  #ensureProber(key: string, pool: PoolDrift): void {
    if (!this.#options.isLeader()) {
      pool.prober?.stop();
      pool.prober = undefined;
      return;
    }
    pool.prober ??= new DriftProber({
      everyMs: pool.policy.probeEveryMs,
      prompt: pool.policy.prompt,
      timeoutMs: this.#options.timeoutMs,
      onResult: (target, result) => this.#record(key, target, result),
    });
    pool.prober.setTargets(pool.targets);
  }

  #record(key: string, target: ProbeTarget, result: ProbeResult): void {
    const pool = this.#pools.get(key);
    if (pool === undefined) return;
    this.#options.onProbe?.(result.ok ? 'ok' : 'failed');
    const before = pool.records.get(target.id);
    // A failed probe is not drift: the last good fingerprint (and its verdict) stands.
    pool.records.set(target.id, {
      fingerprint: result.ok ? result.fingerprint : before?.fingerprint,
      probedAtMs: result.atMs,
      error: result.ok ? undefined : result.error,
    });
    if (!result.ok && before?.error === undefined)
      this.#options.logger.warn(
        { pool: key, endpoint: target.id, err: result.error },
        'drift probe failed',
      );
    this.#judge(key, pool, true);
  }

  #judge(key: string, pool: PoolDrift, notify: boolean): void {
    const judgement = judgeDrift(
      new Map([...pool.records].map(([id, r]) => [id, r.fingerprint])),
      pool.policy.expect,
    );
    const changes: DriftChange[] = [];
    for (const id of judgement.drifted)
      if (!pool.drifted.has(id))
        changes.push({
          kind: 'drifted',
          endpoint: id,
          fingerprint: pool.records.get(id)?.fingerprint,
          expected: judgement.expected,
        });
    for (const id of pool.drifted)
      if (!judgement.drifted.has(id) && pool.records.has(id))
        changes.push({
          kind: 'cleared',
          endpoint: id,
          fingerprint: pool.records.get(id)?.fingerprint,
          expected: judgement.expected,
        });
    const fingerprints = new Set(
      [...pool.records.values()].flatMap((r) =>
        r.fingerprint === undefined ? [] : [r.fingerprint],
      ),
    );
    if (judgement.expected === undefined && pool.expected !== undefined && fingerprints.size > 1)
      changes.push({ kind: 'undecided' });
    pool.drifted = judgement.drifted;
    pool.expected = judgement.expected;
    const content = JSON.stringify([
      judgement.expected,
      [...pool.records].map(([id, r]) => [id, r.fingerprint, r.error === undefined]).sort(),
      [...judgement.drifted].sort(),
    ]);
    if (content === pool.lastContent) return;
    pool.lastContent = content;
    if (notify) this.#options.onChange(key, changes);
  }
}
