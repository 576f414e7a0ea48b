import type { Logger } from 'pino';
import type { KubeRaw } from './kube-raw.ts';
import { ListWatch, type KubeList, type KubeObject, type ListWatchOptions } from './list-watch.ts';

export interface SupervisedInformerOptions<T extends KubeObject> {
  /** For logs and metrics, e.g. `endpointslices`. */
  name: string;
  api: Pick<KubeRaw, 'request' | 'stream'>;
  /** The collection listed and watched, e.g. `/apis/discovery.k8s.io/v1/endpointslices`. */
  path: string;
  /** The list; by default a GET of `path` with the selectors. */
  list?: () => Promise<KubeList<T>>;
  labelSelector?: string | undefined;
  fieldSelector?: string | undefined;
  /** Each watch's timeout and idleness limit (list-watch.ts), for tests. */
  watch?: Pick<ListWatchOptions<T>, 'watchTimeoutSeconds' | 'idleTimeoutMs'>;
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
 * An informer (list + watch + cache) that does not die. A ListWatch (list-watch.ts) stops for
 * good on any error; this wrapper starts a fresh one with exponential backoff and full jitter,
 * and from a watchdog when it has been silent for `idleRestartMs` (a healthy watch hears a
 * bookmark about every minute and is re-made every ~5, so silence means trouble).
 */
export class SupervisedInformer<T extends KubeObject> {
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

  constructor(options: SupervisedInformerOptions<T>) {
    this.options = options;
    this.informer = this.create();
  }

  private create(): ListWatch<T> {
    const { options } = this;
    const { api, path, labelSelector, fieldSelector } = options;
    const heard = (): void => {
      this.lastHeardMs = performance.now();
    };
    const informer: ListWatch<T> = new ListWatch<T>({
      api,
      path,
      list: options.list ?? (() => api.request<KubeList<T>>('GET', withSelectors(path, options))),
      labelSelector,
      fieldSelector,
      ...options.watch,
      handlers: {
        onChange: (object, kind) => {
          heard();
          options.onChange(object, kind);
        },
        onHeard: heard,
        // A watch is up: the list and the watch work again, so the backoff starts over.
        onConnect: () => {
          heard();
          this.failures = 0;
        },
        onError: (err) => {
          if ((this.informer !== informer && this.pending !== informer) || this.stopped) return;
          this.scheduleRestart('error', err);
        },
      },
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
        if (informer === this.pending) {
          // Its list is in: serve from it now, and let the previous one go.
          const previous = this.informer;
          this.informer = informer;
          this.pending = undefined;
          previous.stop();
        }
        if (!this.synced) {
          this.synced = true;
          for (const w of this.syncWaiters.splice(0)) w();
        }
        this.options.onSynced?.();
      },
      // Its list failed (its cache is empty): serving from it would publish every pool without
      // endpoints (all sidecars shed) until the next list, so reads stay where they are.
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
      this.pending?.stop();
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

  stop(): Promise<void> {
    this.stopped = true;
    if (this.restartTimer !== undefined) clearTimeout(this.restartTimer);
    if (this.watchdog !== undefined) clearInterval(this.watchdog);
    this.pending?.stop();
    this.informer.stop();
    return Promise.resolve();
  }
}

/** `path` with the label and field selectors as its query. */
export function withSelectors(
  path: string,
  selectors: { labelSelector?: string | undefined; fieldSelector?: string | undefined },
): string {
  const query = new URLSearchParams();
  if (selectors.labelSelector !== undefined) query.set('labelSelector', selectors.labelSelector);
  if (selectors.fieldSelector !== undefined) query.set('fieldSelector', selectors.fieldSelector);
  const text = query.toString();
  return text === '' ? path : `${path}?${text}`;
}
