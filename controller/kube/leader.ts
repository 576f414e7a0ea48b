import type { Logger } from 'pino';
import { KubeApiError, microTime, type KubeRaw } from './kube-raw.ts';
import { withOwners, type OwnerReference } from './owners.ts';

interface Lease {
  metadata: {
    name: string;
    namespace: string;
    resourceVersion?: string;
    ownerReferences?: OwnerReference[];
  };
  spec?: {
    holderIdentity?: string;
    leaseDurationSeconds?: number;
    acquireTime?: string;
    renewTime?: string;
    leaseTransitions?: number;
  };
}

export interface LeaderElectionOptions {
  raw: KubeRaw;
  namespace: string;
  name: string;
  identity: string;
  leaseDurationMs: number;
  renewEveryMs: number;
  logger: Logger;
  /** Owners of the Lease, so that it goes with the release (owners.ts). */
  ownerReferences?: readonly OwnerReference[];
}

/**
 * Leader election on a coordination.k8s.io Lease, like client-go's: the holder renews every
 * `renewEveryMs`; others take over once `renewTime + leaseDuration` has passed. Writes use the
 * Lease's resourceVersion, so two candidates can never both win a round. A leader that cannot
 * renew for a whole lease duration steps down on its own, before anyone else can take over.
 */
export class LeaderElector {
  private readonly options: LeaderElectionOptions;
  private readonly listeners: ((leader: boolean) => void)[] = [];
  private leader = false;
  private lastRenewMs = -Infinity;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  /** The lease record as last seen, and when (local monotonic time): expiry is judged on our clock. */
  private observed = { record: '', atMs: 0 };

  constructor(options: LeaderElectionOptions) {
    this.options = options;
  }

  isLeader(): boolean {
    return this.leader;
  }

  /** Calls `listener` on every change of leadership (after the change). */
  onChange(listener: (leader: boolean) => void): void {
    this.listeners.push(listener);
  }

  start(): void {
    this.stopped = false;
    void this.tick();
  }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => void this.tick(), this.options.renewEveryMs);
  }

  private setLeader(leader: boolean): void {
    if (leader === this.leader) return;
    this.leader = leader;
    this.options.logger.info(
      { identity: this.options.identity, lease: `${this.options.namespace}/${this.options.name}` },
      leader ? 'became leader' : 'lost leadership',
    );
    for (const listener of this.listeners) listener(leader);
  }

  private get path(): string {
    return `/apis/coordination.k8s.io/v1/namespaces/${this.options.namespace}/leases`;
  }

  private async tick(): Promise<void> {
    try {
      await this.tryAcquireOrRenew();
    } catch (err) {
      this.options.logger.warn({ err: (err as Error).message }, 'lease update failed');
      if (this.leader && performance.now() - this.lastRenewMs > this.options.leaseDurationMs)
        this.setLeader(false);
    }
    this.schedule();
  }

  private async tryAcquireOrRenew(): Promise<void> {
    const { raw, name, namespace, identity, leaseDurationMs } = this.options;
    const now = new Date();
    const spec = (previous?: Lease['spec']): Lease['spec'] => ({
      holderIdentity: identity,
      leaseDurationSeconds: Math.ceil(leaseDurationMs / 1000),
      acquireTime:
        previous?.holderIdentity === identity && previous.acquireTime !== undefined
          ? previous.acquireTime
          : microTime(now),
      renewTime: microTime(now),
      leaseTransitions:
        (previous?.leaseTransitions ?? 0) + (previous?.holderIdentity === identity ? 0 : 1),
    });
    let lease: Lease;
    try {
      lease = await raw.request<Lease>('GET', `${this.path}/${name}`);
    } catch (err) {
      if (!(err instanceof KubeApiError) || err.status !== 404) throw err;
      await raw.request('POST', this.path, {
        apiVersion: 'coordination.k8s.io/v1',
        kind: 'Lease',
        metadata: { name, namespace, ownerReferences: [...(this.options.ownerReferences ?? [])] },
        spec: { ...spec(), leaseTransitions: 0 },
      });
      this.lastRenewMs = performance.now();
      this.setLeader(true);
      return;
    }
    const holder = lease.spec?.holderIdentity ?? '';
    // Like client-go, do not trust the holder's clock: a lease is expired when its record has not
    // changed for a whole lease duration as measured here.
    const record = `${holder}|${lease.spec?.renewTime ?? ''}`;
    if (record !== this.observed.record) this.observed = { record, atMs: performance.now() };
    const durationMs = (lease.spec?.leaseDurationSeconds ?? 0) * 1000;
    const expired = holder === '' || performance.now() - this.observed.atMs > durationMs;
    if (holder !== identity && !expired) {
      this.setLeader(false);
      return;
    }
    try {
      await raw.request('PUT', `${this.path}/${name}`, {
        apiVersion: 'coordination.k8s.io/v1',
        kind: 'Lease',
        // A Lease made before it had owners gets them on its next renewal.
        metadata: {
          ...lease.metadata,
          ownerReferences:
            withOwners(lease.metadata.ownerReferences, this.options.ownerReferences ?? []) ??
            lease.metadata.ownerReferences,
        },
        spec: spec(lease.spec),
      });
    } catch (err) {
      if (err instanceof KubeApiError && err.status === 409) {
        this.setLeader(false); // someone else wrote first
        return;
      }
      throw err;
    }
    this.lastRenewMs = performance.now();
    this.setLeader(true);
  }

  /** Stops renewing; a leader releases the lease so a standby takes over at once. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    if (!this.leader) return;
    try {
      const lease = await this.options.raw.request<Lease>(
        'GET',
        `${this.path}/${this.options.name}`,
      );
      if (lease.spec?.holderIdentity === this.options.identity) {
        await this.options.raw.request('PUT', `${this.path}/${this.options.name}`, {
          ...lease,
          spec: { ...lease.spec, holderIdentity: '', renewTime: microTime(new Date(0)) },
        });
      }
    } catch (err) {
      this.options.logger.warn({ err: (err as Error).message }, 'could not release the lease');
    }
    this.setLeader(false);
  }
}
