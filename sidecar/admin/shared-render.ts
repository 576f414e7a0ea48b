/**
 * Admin responses rendered on the proxy's event loop in pieces, with the loop yielded between
 * them, and shared by the requests that want the same text.
 *
 * Why: the admin answers are read from state that lives on the proxy's loop (metrics, the
 * balancer), and at 4,096 endpoints `/metrics` is 8.5 MB: rendered in one go (prom-client), one
 * scrape stalled every stream for hundreds of milliseconds (issue 16). Rendered in slices of about
 * a millisecond, a stream waits at most about a slice. Encoding an 8.5 MB string to bytes is
 * itself a long task (docs/benchmarks.md, "Admin scrapes at the largest pool"), so each piece is
 * encoded on its own, and the body is written chunk by chunk as the client's socket drains. A
 * client that accepts gzip (Prometheus does by default) gets the body compressed once per render
 * on the threadpool: a tenth of the bytes to write per scrape.
 */
import type { ServerResponse } from 'node:http';
import { setImmediate as yieldToLoop } from 'node:timers/promises';
import { constants as zlibConstants, createGzip } from 'node:zlib';

/** A rendered body: its chunks in order and their total length. */
export interface RenderedBody {
  readonly chunks: readonly Buffer[];
  readonly bytes: number;
}

/** Pieces shorter than this are joined before encoding, so a body is not thousands of tiny writes. */
const MIN_CHUNK_CHARS = 64 * 1024;

/**
 * Takes the pieces one at a time, yielding to the event loop after each, so what runs between
 * two yields is one piece's work (the source decides how much that is).
 */
export async function renderInSlices(
  pieces: Iterable<string> | AsyncIterable<string>,
): Promise<RenderedBody> {
  const chunks: Buffer[] = [];
  let bytes = 0;
  let pending = '';
  const flush = (): void => {
    const chunk = Buffer.from(pending);
    chunks.push(chunk);
    bytes += chunk.length;
    pending = '';
  };
  for await (const piece of pieces) {
    pending += piece;
    if (pending.length >= MIN_CHUNK_CHARS) flush();
    await yieldToLoop();
  }
  if (pending.length > 0) flush();
  return { chunks, bytes };
}

/**
 * The body gzipped, at the fastest level: exposition text is so repetitive that level 1 already
 * shrinks it about tenfold, and a higher level would cost the threadpool several times the CPU for
 * a few percent. The work runs on libuv's threadpool, a chunk at a time; the event loop only hands
 * the chunks over and collects the output.
 */
export async function gzipBody(body: RenderedBody): Promise<RenderedBody> {
  const gzip = createGzip({ level: zlibConstants.Z_BEST_SPEED });
  const chunks: Buffer[] = [];
  let bytes = 0;
  gzip.on('data', (chunk: Buffer) => {
    chunks.push(chunk);
    bytes += chunk.length;
  });
  const finished = new Promise<void>((resolve, reject) => {
    gzip.once('end', resolve);
    gzip.once('error', reject);
  });
  for (const chunk of body.chunks) {
    if (!gzip.write(chunk)) await new Promise((resolve) => gzip.once('drain', resolve));
  }
  gzip.end();
  await finished;
  return { chunks, bytes };
}

/** Resolves once the response can take more, or is closed (a client that left). */
function drained(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.on('drain', done);
    res.on('close', done);
  });
}

/**
 * Writes the body with its length, a chunk at a time as the socket drains (the body is shared:
 * it is never copied into one buffer). Stops when the client leaves; never rejects.
 */
export async function sendBody(
  res: ServerResponse,
  contentType: string,
  body: RenderedBody,
  headers: Record<string, string> = {},
): Promise<void> {
  res.writeHead(200, { ...headers, 'content-type': contentType, 'content-length': body.bytes });
  for (const chunk of body.chunks) {
    if (res.destroyed) return;
    if (!res.write(chunk)) await drained(res);
  }
  res.end();
}

/**
 * One text rendered in slices (`renderInSlices`), reused for `ttlMs` after it was finished and
 * shared by every request that arrives while it renders: a scrape storm costs one render, and
 * renders never overlap, even when one takes longer than `ttlMs` (the next starts only when a
 * request comes after the last one finished). A request never sees a half-rendered body: the
 * cached body is replaced only by a finished one. With `ttlMs` 0 nothing is reused, but
 * concurrent requests still share the render in progress.
 */
export class SharedRender {
  readonly #render: () => Iterable<string> | AsyncIterable<string>;
  readonly #ttlMs: number;
  readonly #nowMs: () => number;
  #body: RenderedBody | undefined;
  #renderedAtMs = -Infinity;
  #rendering: Promise<RenderedBody> | undefined;
  /** The gzip of `#body`, made on the first request that asks for it, once per render. */
  #gzipped: { of: RenderedBody; body: Promise<RenderedBody> } | undefined;

  constructor(
    render: () => Iterable<string> | AsyncIterable<string>,
    ttlMs: number,
    nowMs = () => performance.now(),
  ) {
    this.#render = render;
    this.#ttlMs = ttlMs;
    this.#nowMs = nowMs;
  }

  /** A body at most `ttlMs` old (counted from the end of its render), or the render in progress. */
  get(): Promise<RenderedBody> {
    if (this.#body !== undefined && this.#nowMs() - this.#renderedAtMs < this.#ttlMs)
      return Promise.resolve(this.#body);
    this.#rendering ??= this.#renderOnce().finally(() => (this.#rendering = undefined));
    return this.#rendering;
  }

  /** The same body as `get()`, gzipped (`gzipBody`); requests for the same render share it. */
  async getGzipped(): Promise<RenderedBody> {
    const body = await this.get();
    if (this.#gzipped?.of !== body) this.#gzipped = { of: body, body: gzipBody(body) };
    return this.#gzipped.body;
  }

  async #renderOnce(): Promise<RenderedBody> {
    const body = await renderInSlices(this.#render());
    this.#body = body;
    this.#renderedAtMs = this.#nowMs();
    return body;
  }
}
