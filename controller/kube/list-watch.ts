/**
 * One list + watch + cache of a kind of object, over kube-raw.ts: list, then watch from the
 * list's resourceVersion (newline-delimited JSON events), re-watching from the last
 * resourceVersion each time a watch ends. It never retries an error itself: it stops and says so
 * (`onError`), and SupervisedInformer starts a fresh one with backoff, serving reads from this
 * one's cache until the fresh one has listed.
 */
import type { IncomingMessage } from 'node:http';
import { KubeApiError, type KubeRaw } from './kube-raw.ts';
import { ObjectCache, type ChangeKind, type KubeList, type KubeObject } from './object-cache.ts';

export type { KubeList, KubeObject };

export interface ListWatchHandlers<T> {
  /** After the cache changed. */
  onChange(object: T, kind: ChangeKind): void;
  /** A watch is established (its 200 is in). */
  onConnect(): void;
  /** Bytes came in on the watch: events, bookmarks, anything (the connection lives). */
  onHeard(): void;
  /** The list-watch stopped on this error (after `start` resolved); it does nothing more. */
  onError(err: unknown): void;
}

export interface ListWatchOptions<T> {
  api: Pick<KubeRaw, 'stream'>;
  /** The collection, e.g. `/api/v1/namespaces/apps/pods`. */
  path: string;
  list: () => Promise<KubeList<T>>;
  labelSelector?: string | undefined;
  fieldSelector?: string | undefined;
  handlers: ListWatchHandlers<T>;
  /**
   * Each watch's `timeoutSeconds`: the API server ends it then, and the next one starts from the
   * last resourceVersion. Jittered so that replicas and informers do not re-watch in step.
   */
  watchTimeoutSeconds?: () => number;
  /**
   * A watch silent this long is taken for a dead connection, ended and started again. The API
   * server sends a bookmark about every minute to a watch that allows them, so a healthy one is
   * never this quiet; a watch it serves without bookmarks is merely re-made this often.
   */
  idleTimeoutMs?: number;
}

/** A watch event's type and object; `ERROR` carries a Status. */
interface WatchEvent<T> {
  type: 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';
  object: T & { code?: number; reason?: string; message?: string };
}

/** The watch answered an ERROR event that is not 410 Gone. */
export class WatchEventError extends Error {
  override readonly name = 'WatchEventError';
  readonly status: number | undefined;
  constructor(path: string, status: number | undefined, message: string | undefined) {
    super(`watch ${path}: ERROR ${status ?? '(no code)'} ${message ?? ''}`.trim());
    this.status = status;
  }
}

/** Splits a stream of text into lines; a line cut across chunks is kept until its end comes. */
export class LineSplitter {
  #rest = '';

  push(chunk: string): string[] {
    const text = this.#rest + chunk;
    const lines = text.split('\n');
    this.#rest = lines.pop() ?? '';
    return lines.filter((line) => line.trim() !== '');
  }

  /** What is left after the stream ended (a last line without its newline). */
  end(): string[] {
    const rest = this.#rest;
    this.#rest = '';
    return rest.trim() === '' ? [] : [rest];
  }
}

/** Client-go's range is 5–10 minutes; around 5 here, so that the idle watchdog never trips. */
const defaultWatchTimeoutSeconds = (): number => Math.round(240 + Math.random() * 120);
const DEFAULT_IDLE_TIMEOUT_MS = 90_000;
/** A watch that ends sooner than this waits out the rest before the next one (no hot loop). */
const MIN_WATCH_MS = 1_000;

type WatchEnd = 'ended' | 'gone';

export class ListWatch<T extends KubeObject> {
  readonly #options: ListWatchOptions<T>;
  readonly #cache = new ObjectCache<T>();
  #resourceVersion = '';
  #stopped = false;
  #response: IncomingMessage | undefined;

  constructor(options: ListWatchOptions<T>) {
    this.#options = options;
  }

  /**
   * Lists and applies the list, then watches in the background. Rejects when the list fails (the
   * cache stays empty); a later error goes to `onError`.
   */
  async start(): Promise<void> {
    await this.#relist();
    if (this.#stopped) return;
    void this.#run();
  }

  stop(): void {
    this.#stopped = true;
    this.#response?.destroy();
    this.#response = undefined;
  }

  get(name: string, namespace?: string): T | undefined {
    return this.#cache.get(name, namespace);
  }

  list(namespace?: string): T[] {
    return this.#cache.list(namespace);
  }

  async #relist(): Promise<void> {
    const list = await this.#options.list();
    if (this.#stopped) return;
    for (const { object, kind } of this.#cache.replace(list.items ?? []))
      this.#options.handlers.onChange(object, kind);
    this.#resourceVersion = list.metadata?.resourceVersion ?? '';
  }

  async #run(): Promise<void> {
    try {
      while (!this.#stopped) {
        const startedMs = performance.now();
        const end = await this.#watch();
        if (this.#stopped) return;
        if (end === 'gone') {
          // The resourceVersion was compacted away. Re-listing here, in place, rather than
          // failing to SupervisedInformer: reads stay on this cache meanwhile (as with a restart),
          // the objects deleted in between come out as deletes (a restart's fresh cache cannot say
          // them, hence its full re-reconcile), and a routine compaction costs no backoff, no
          // warning and no restart metric. A failing re-list is an error like any other.
          await this.#relist();
          continue;
        }
        const elapsedMs = performance.now() - startedMs;
        if (elapsedMs < MIN_WATCH_MS) await sleep(MIN_WATCH_MS - elapsedMs);
      }
    } catch (err) {
      if (this.#stopped) return;
      this.stop();
      this.#options.handlers.onError(err);
    }
  }

  /** One watch, from the last resourceVersion until it ends, goes idle or says 410 Gone. */
  async #watch(): Promise<WatchEnd> {
    const { api, path, labelSelector, fieldSelector, handlers } = this.#options;
    const query = new URLSearchParams({
      watch: 'true',
      resourceVersion: this.#resourceVersion,
      allowWatchBookmarks: 'true',
      timeoutSeconds: String((this.#options.watchTimeoutSeconds ?? defaultWatchTimeoutSeconds)()),
    });
    if (labelSelector !== undefined) query.set('labelSelector', labelSelector);
    if (fieldSelector !== undefined) query.set('fieldSelector', fieldSelector);
    let response: IncomingMessage;
    try {
      response = await api.stream(`${path}?${query.toString()}`);
    } catch (err) {
      if (err instanceof KubeApiError && err.status === 410) return 'gone';
      throw err;
    }
    if (this.#stopped) {
      response.destroy();
      return 'ended';
    }
    this.#response = response;
    handlers.onConnect();
    const idleMs = this.#options.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS;
    let idle = false;
    let timer: NodeJS.Timeout | undefined;
    const arm = (): void => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        idle = true;
        response.destroy();
      }, idleMs);
    };
    const lines = new LineSplitter();
    response.setEncoding('utf8'); // a character cut across chunks is decoded whole
    arm();
    try {
      for await (const chunk of response as AsyncIterable<string>) {
        arm();
        handlers.onHeard();
        for (const line of lines.push(chunk)) if (this.#apply(line) === 'gone') return 'gone';
      }
      for (const line of lines.end()) if (this.#apply(line) === 'gone') return 'gone';
      return 'ended';
    } catch (err) {
      // Ended here: for idleness (the next watch starts from the last resourceVersion) or by stop().
      if (idle || this.#stopped) return 'ended';
      throw err;
    } finally {
      clearTimeout(timer);
      response.destroy();
      if (this.#response === response) this.#response = undefined;
    }
  }

  /** Applies one event line to the cache; `gone` when it says the resourceVersion is too old. */
  #apply(line: string): 'gone' | undefined {
    const { path, handlers } = this.#options;
    let event: WatchEvent<T>;
    try {
      event = JSON.parse(line) as WatchEvent<T>;
    } catch {
      // Skipping it could lose an event for good: fail, and the restart re-lists.
      throw new Error(`watch ${path}: not a JSON event: ${line.slice(0, 200)}`);
    }
    const { type, object } = event;
    if (type === 'ERROR') {
      if (object?.code === 410) return 'gone';
      throw new WatchEventError(path, object?.code, object?.message);
    }
    if (typeof object !== 'object' || object === null)
      throw new Error(`watch ${path}: a ${type} event without an object`);
    if (type === 'ADDED' || type === 'MODIFIED') {
      const kind = this.#cache.upsert(object);
      if (kind !== undefined) handlers.onChange(object, kind);
    } else if (type === 'DELETED') {
      const held = this.#cache.remove(object);
      if (held !== undefined) handlers.onChange(object, 'delete');
    }
    // BOOKMARK (and any type unknown to this code) only moves the resourceVersion on.
    const version = object.metadata?.resourceVersion;
    if (version !== undefined && version !== '') this.#resourceVersion = version;
    return undefined;
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
