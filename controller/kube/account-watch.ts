/**
 * The ServiceAccounts that exist now, by UID: what lets the TokenReview cache keep a sidecar's
 * answer for the whole `--token-review-cache` and still stop a deleted account's tokens within
 * seconds (controller/stream/review-cache.ts). Without it, the only way to notice a deleted
 * ServiceAccount was to review every token again, which at 10,000 sidecars and a 5 min cache is
 * ~33 TokenReviews a second.
 *
 * Cluster-wide like the pod watch, because sidecars of any namespace connect. A ServiceAccount is
 * a few hundred bytes; a cluster's few thousand cost a replica about a megabyte.
 */
import type { Logger } from 'pino';
import type { AccountWatch } from '../stream/review-cache.ts';
import type { KubeRaw } from './kube-raw.ts';
import type { KubeObject } from './list-watch.ts';

/** What the watch reads of a ServiceAccount. */
interface Account extends KubeObject {
  metadata?: { name?: string; namespace?: string; resourceVersion?: string; uid?: string };
}
import { SupervisedInformer } from './supervised-informer.ts';

export interface ServiceAccountWatchOptions {
  raw: Pick<KubeRaw, 'request' | 'stream'>;
  logger: Logger;
  onRestart: (reason: string) => void;
}

export class ServiceAccountWatch implements AccountWatch {
  private readonly informer: SupervisedInformer<Account>;

  constructor(options: ServiceAccountWatchOptions) {
    this.informer = new SupervisedInformer<Account>({
      name: 'serviceaccounts',
      api: options.raw,
      path: '/api/v1/serviceaccounts',
      logger: options.logger,
      onChange: () => undefined,
      onRestart: options.onRestart,
    });
  }

  start(): Promise<void> {
    return this.informer.start();
  }

  stop(): Promise<void> {
    return this.informer.stop();
  }

  get hasSynced(): boolean {
    return this.informer.hasSynced;
  }

  uid(namespace: string, name: string): string | undefined {
    return this.informer.get(name, namespace)?.metadata?.uid;
  }
}
