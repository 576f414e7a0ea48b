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
import type { KubeConfig, KubernetesListObject, KubernetesObject } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { AccountWatch } from '../stream/review-cache.ts';
import type { KubeRaw } from './kube-raw.ts';
import { SupervisedInformer } from './supervised-informer.ts';

export interface ServiceAccountWatchOptions {
  kubeConfig: KubeConfig;
  raw: Pick<KubeRaw, 'request'>;
  logger: Logger;
  onRestart: (reason: string) => void;
}

export class ServiceAccountWatch implements AccountWatch {
  private readonly informer: SupervisedInformer<KubernetesObject>;

  constructor(options: ServiceAccountWatchOptions) {
    this.informer = new SupervisedInformer<KubernetesObject>({
      name: 'serviceaccounts',
      kubeConfig: options.kubeConfig,
      path: '/api/v1/serviceaccounts',
      list: () =>
        options.raw.request<KubernetesListObject<KubernetesObject>>(
          'GET',
          '/api/v1/serviceaccounts',
        ),
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
