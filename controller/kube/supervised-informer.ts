import {
  ListWatch,
  Watch,
  type KubeConfig,
  type KubernetesListObject,
  type KubernetesObject,
} from '@kubernetes/client-node';
import type { Logger } from 'pino';

export interface SupervisedInformerOptions<T extends KubernetesObject> {
  /** For logs and metrics, e.g. `endpointslices`. */
  name: string;
  kubeConfig: KubeConfig;
  /** Watch path, e.g. `/apis/discovery.k8s.io/v1/endpointslices`. */
  path: string;
  list: () => Promise<KubernetesListObject<T>>;
  labelSelector?: string;
  fieldSelector?: string;
  logger: Logger;
  /** Called for every add, update and delete (after the cache changed). */
  onChange: (object: T, kind: 'add' | 'update' | 'delete') => void;
  /** Restart the informer when nothing was heard (events or reconnects) for this long. */
  idleRestartMs?: number;
  backoff?: { initialMs: number; maxMs: number };
  onRestart?: (reason: 'error' | 'idle') => void;
  /**
   * Called each time a (re)started informer has applied its first list. A restarted informer
   * starts from an empty cache and cannot report what was deleted meanwhile, so the controller
   * re-reconciles everything then (level-triggered: a spare reconcile is harmless).
   */
  onSynced?: () => void;
}

/**
 * An informer (list + watch + cache) that does not die. The JavaScript client's ListWatch stops
 * for good on most errors and can sit on a half-open connection; this wrapper restarts it with
 * exponential backoff and full jitter on any error, and from a watchdog when it has been silent
 * for `idleRestartMs` (the watch reconnects every ~30 s when healthy, so silence means trouble).
 */
export class SupervisedInformer<T extends KubernetesObject> {
  /** The informer reads are served from: the last one whose list completed. */
  private informer: ListWatch<T>;
  /**
   * A restarted informer still listing. Reads stay on the previous one until its list is in:
   * a fresh informer's cache is empty, and a reconcile in that window would publish a pool with
   * no endpoints (every sidecar then sheds).
   */
  private pending: ListWatch<T> | undefined;
  private readonly options: SupervisedInformerOptions<T>;
  private failures = 0;
  private lastHeardMs = performance.now();
  private restartTimer: NodeJS.Timeout | undefined;
  private watchdog: NodeJS.Timeout | undefined;
  private stopped = false;
  private synced = false;
  private syncWaiters: (() => void)[] = [];
  /** The informers whose list has come in (a failed list leaves an informer's cache empty). */
  private readonly listed = new WeakSet<ListWatch<T>>();

  constructor(options: SupervisedInformerOptions<T>) {
    this.options = options;
    this.informer = this.create();
  }

  private create(): ListWatch<T> {
    const { options } = this;
    // ListWatch.start() resolves when its list fails too (the failure goes to the error
    // callbacks only), so whether the list came in is recorded here, by the list itself.
    const list = async (): Promise<KubernetesListObject<T>> => {
      const result = await options.list();
      this.listed.add(informer);
      return result;
    };
    const informer: ListWatch<T> = new ListWatch<T>(
      options.path,
      new Watch(options.kubeConfig),
      list,
      false,
      options.labelSelector,
      options.fieldSelector,
    );
    const heard = (): void => {
      this.lastHeardMs = performance.now();
    };
    informer.on('add', (o) => {
      heard();
      options.onChange(o, 'add');
    });
    informer.on('update', (o) => {
      heard();
      options.onChange(o, 'update');
    });
    informer.on('delete', (o) => {
      heard();
      options.onChange(o, 'delete');
    });
    informer.on('connect', () => {
      heard();
      this.failures = 0;
    });
    informer.on('error', (err: unknown) => {
      if ((this.informer !== informer && this.pending !== informer) || this.stopped) return;
      this.scheduleRestart('error', err);
    });
    return informer;
  }

  async start(): Promise<void> {
    this.stopped = false;
    this.launch(this.informer);
    const idle = this.options.idleRestartMs ?? 5 * 60_000;
    this.watchdog = setInterval(
      () => {
        if (this.stopped || this.restartTimer !== undefined) return;
        if (performance.now() - this.lastHeardMs > idle) this.scheduleRestart('idle', undefined);
      },
      Math.min(idle, 10_000),
    );
    this.watchdog.unref();
    return Promise.resolve();
  }

  private launch(informer: ListWatch<T>): void {
    this.lastHeardMs = performance.now();
    informer.start().then(
      () => {
        if (this.stopped || (informer !== this.informer && informer !== this.pending)) return;
        // Its list failed: the error callback has scheduled a restart. Serving its empty cache
        // would publish every pool without endpoints (all sidecars shed) until the next list.
        if (!this.listed.has(informer)) return;
        if (informer === this.pending) {
          // Its list is in: serve from it now, and let the previous one go.
          const previous = this.informer;
          this.informer = informer;
          this.pending = undefined;
          void previous.stop().catch(() => undefined);
        }
        if (!this.synced) {
          this.synced = true;
          for (const w of this.syncWaiters.splice(0)) w();
        }
        this.options.onSynced?.();
      },
      (err: unknown) => {
        if (informer === this.informer || informer === this.pending)
          this.scheduleRestart('error', err);
      },
    );
  }

  private scheduleRestart(reason: 'error' | 'idle', err: unknown): void {
    if (this.stopped || this.restartTimer !== undefined) return;
    const { initialMs, maxMs } = this.options.backoff ?? { initialMs: 500, maxMs: 30_000 };
    const ceiling = Math.min(maxMs, initialMs * 2 ** this.failures);
    const delayMs = Math.random() * ceiling; // full jitter: replicas do not re-list in lockstep
    this.failures++;
    this.options.logger.warn(
      {
        informer: this.options.name,
        reason,
        err:
          err instanceof Error ? err.message : err === undefined ? undefined : JSON.stringify(err),
        retryInMs: Math.round(delayMs),
      },
      'informer stopped; restarting',
    );
    this.options.onRestart?.(reason);
    this.restartTimer = setTimeout(() => {
      this.restartTimer = undefined;
      if (this.stopped) return;
      // A fresh ListWatch re-lists; reads move to it once that list is in (launch). A pending
      // one that failed is replaced; the one serving reads keeps its last good cache meanwhile.
      if (this.pending !== undefined) void this.pending.stop().catch(() => undefined);
      this.pending = this.create();
      this.launch(this.pending);
    }, delayMs);
  }

  /** Resolves once the first list has been applied. */
  waitForSync(): Promise<void> {
    if (this.synced) return Promise.resolve();
    return new Promise((resolve) => this.syncWaiters.push(resolve));
  }

  get hasSynced(): boolean {
    return this.synced;
  }

  get(name: string, namespace?: string): T | undefined {
    return this.informer.get(name, namespace);
  }

  list(namespace?: string): readonly T[] {
    return this.informer.list(namespace);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.restartTimer !== undefined) clearTimeout(this.restartTimer);
    if (this.watchdog !== undefined) clearInterval(this.watchdog);
    if (this.pending !== undefined) await this.pending.stop().catch(() => undefined);
    await this.informer.stop();
  }
}
