/**
 * Keeps `caBundle` of the injection webhook's MutatingWebhookConfiguration equal to the CA of the
 * controller's certificate, so the API server trusts the webhook: at start, whenever the
 * certificate changes, and every `checkEveryMs` (a `helm upgrade` or a person may reset it). Only
 * the leader writes, so replicas that briefly hold different CAs during a rotation do not take
 * turns. The chart leaves caBundle out of its manifest: Helm's three-way merge then keeps ours.
 */
import type { Logger } from 'pino';
import { KubeApiError, type KubeRaw } from '../kube/kube-raw.ts';

interface WebhookConfiguration {
  metadata: { name: string; resourceVersion?: string };
  webhooks?: { name: string; clientConfig?: { caBundle?: string } }[];
}

export interface WebhookCaBundleOptions {
  raw: KubeRaw;
  /** The MutatingWebhookConfiguration's name. */
  name: string;
  caPem: () => string;
  isLeader: () => boolean;
  logger: Logger;
  checkEveryMs?: number;
  onWrite?: () => void;
}

export class WebhookCaBundle {
  private readonly options: WebhookCaBundleOptions;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private again = false;
  private warnedMissing = false;

  constructor(options: WebhookCaBundleOptions) {
    this.options = options;
  }

  start(): void {
    this.timer = setInterval(() => this.sync(), this.options.checkEveryMs ?? 60_000);
    this.timer.unref();
    this.sync();
  }

  stop(): void {
    if (this.timer !== undefined) clearInterval(this.timer);
  }

  /** Checks now (coalesced: at most one check runs, and one more is queued behind it). */
  sync(): void {
    if (this.running !== undefined) {
      this.again = true;
      return;
    }
    this.running = this.syncOnce()
      .catch((err: unknown) =>
        this.options.logger.warn(
          { webhook: this.options.name, err: (err as Error).message },
          'cannot update the webhook caBundle; retrying',
        ),
      )
      .finally(() => {
        this.running = undefined;
        if (this.again) {
          this.again = false;
          this.sync();
        }
      });
  }

  /** Resolves when the current check (if any) has finished. */
  async settled(): Promise<void> {
    while (this.running !== undefined) await this.running;
  }

  private async syncOnce(): Promise<void> {
    if (!this.options.isLeader()) return;
    const { raw, name, logger } = this.options;
    const path = `/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/${encodeURIComponent(name)}`;
    let config: WebhookConfiguration;
    try {
      config = await raw.request<WebhookConfiguration>('GET', path);
    } catch (err) {
      if (err instanceof KubeApiError && err.status === 404) {
        if (!this.warnedMissing)
          logger.warn(
            { webhook: name },
            'MutatingWebhookConfiguration not found: pods are not injected until it exists',
          );
        this.warnedMissing = true;
        return;
      }
      throw err;
    }
    this.warnedMissing = false;
    const bundle = Buffer.from(this.options.caPem()).toString('base64');
    const ops: unknown[] = [];
    (config.webhooks ?? []).forEach((w, i) => {
      if (w.clientConfig?.caBundle === bundle) return;
      ops.push({ op: 'add', path: `/webhooks/${i}/clientConfig/caBundle`, value: bundle });
    });
    if (ops.length === 0) return;
    // The test makes the patch a compare-and-swap: webhooks cannot have moved under our indexes.
    ops.unshift({
      op: 'test',
      path: '/metadata/resourceVersion',
      value: config.metadata.resourceVersion,
    });
    await raw.request('PATCH', path, ops, 'application/json-patch+json');
    this.options.onWrite?.();
    logger.info({ webhook: name, webhooks: ops.length - 1 }, 'webhook caBundle updated');
  }
}
