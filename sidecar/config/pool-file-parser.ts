/**
 * Parses pool file text off the proxy's thread: one worker (pool-file-worker.ts), started with
 * the sidecar and kept, since at one reload per second under continuous writes a fresh worker
 * each time would cost more CPU than the parse. The worker's heap is bounded, so a file built to
 * exhaust memory kills the worker (a rejected change), never the sidecar and its streams.
 */
import { Worker } from 'node:worker_threads';
import type { ParseRequest } from './pool-file-worker.ts';
import type { LoadResult } from './pool-file.ts';

/** A parse that takes longer is abandoned (the worker is replaced) and the change rejected. */
export const PARSE_TIMEOUT_MS = 10_000;
/** The worker's old-generation heap: a few hundred times the largest file allowed. */
const WORKER_HEAP_MB = 256;

interface Pending {
  resolve(result: LoadResult): void;
  timer: NodeJS.Timeout;
}

export class PoolFileParser {
  /** The pool file, named in the problems of a failed parse. */
  readonly #path: string;
  #worker: Worker | undefined;
  #nextId = 1;
  readonly #pending = new Map<number, Pending>();

  constructor(path: string) {
    this.#path = path;
  }

  /**
   * Starts the worker now: loading its modules takes about a second, which would otherwise delay
   * the first change past the promised second.
   */
  warm(): void {
    this.#start();
  }

  parse(text: string, env: Record<string, string | undefined>): Promise<LoadResult> {
    const worker = this.#start();
    const id = this.#nextId++;
    return new Promise((resolve) => {
      const timer = setTimeout(
        () => this.#failAll(`parsing took longer than ${PARSE_TIMEOUT_MS} ms`),
        PARSE_TIMEOUT_MS,
      );
      this.#pending.set(id, { resolve, timer });
      const request: ParseRequest = { id, text, env };
      worker.postMessage(request);
      worker.ref();
    });
  }

  close(): void {
    const worker = this.#worker;
    this.#worker = undefined;
    void worker?.terminate();
  }

  #start(): Worker {
    if (this.#worker !== undefined) return this.#worker;
    const worker = new Worker(new URL('./pool-file-worker.ts', import.meta.url), {
      resourceLimits: { maxOldGenerationSizeMb: WORKER_HEAP_MB },
    });
    worker.unref();
    worker.on('message', (message: { id: number; result: LoadResult }) => {
      const pending = this.#pending.get(message.id);
      if (pending === undefined) return;
      this.#pending.delete(message.id);
      clearTimeout(pending.timer);
      // Unreferenced while idle: the parser must not keep a stopping sidecar alive.
      if (this.#pending.size === 0) worker.unref();
      pending.resolve(message.result);
    });
    worker.on('error', (err: NodeJS.ErrnoException) =>
      this.#failAll(
        err.code === 'ERR_WORKER_OUT_OF_MEMORY'
          ? `parsing needed more than ${WORKER_HEAP_MB} MB of memory`
          : `the parser failed: ${err.message}`,
      ),
    );
    worker.on('exit', () => {
      if (this.#worker === worker) this.#worker = undefined;
    });
    this.#worker = worker;
    return worker;
  }

  /** The worker is broken or stuck: every parse waiting on it is a rejected change. */
  #failAll(message: string): void {
    const path = this.#path;
    const worker = this.#worker;
    this.#worker = undefined;
    void worker?.terminate();
    for (const [id, pending] of this.#pending) {
      clearTimeout(pending.timer);
      this.#pending.delete(id);
      pending.resolve({ ok: false, problems: [{ path, message }] });
    }
  }
}
