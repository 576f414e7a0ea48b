/**
 * What the proxy does with a client's request before an exchange sends it: which of its headers
 * go upstream, how its body is decoded, and the order in which one connection's requests run.
 * Kept apart from exchange.ts and proxy-server.ts so that the HTTP rules (RFC 9110/9112) live in
 * one place.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { promisify } from 'node:util';
import zlib from 'node:zlib';

/**
 * Request headers never forwarded: those that describe this hop only (RFC 9110 §7.6.1), those we
 * set ourselves, `expect` (the sidecar answered the client's 100-continue and holds the body), and
 * `content-encoding` (a JSON body is forwarded decoded, see `decodeBody`; a body streamed through
 * undecoded gets its coding back from the exchange).
 */
const HOP_BY_HOP: ReadonlySet<string> = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'content-length',
  'content-encoding',
  'host',
  'expect',
]);

/**
 * The client's end-to-end headers, in a fresh object (deleting keys would turn the original into
 * a slow dictionary): without the hop-by-hop ones, without any header the client's `Connection`
 * names (RFC 9110 §7.6.1: those are for this hop only, e.g. `Connection: x-secret`), and without
 * any `x-switchyard-*` (those are ours to set).
 */
export function forwardedHeaders(headers: IncomingHttpHeaders): IncomingHttpHeaders {
  const named = connectionNamed(headers.connection);
  const forwarded: IncomingHttpHeaders = {};
  for (const name in headers) {
    if (HOP_BY_HOP.has(name) || name.startsWith('x-switchyard-')) continue;
    if (named !== undefined && named.has(name)) continue;
    forwarded[name] = headers[name];
  }
  return forwarded;
}

function connectionNamed(value: string | undefined): Set<string> | undefined {
  if (value === undefined || value === '') return undefined;
  const names = new Set<string>();
  for (const token of value.split(',')) {
    const name = token.trim().toLowerCase();
    if (name !== '' && name !== 'close' && name !== 'keep-alive') names.add(name);
  }
  return names.size === 0 ? undefined : names;
}

export type DecodedBody =
  | { readonly kind: 'ok'; readonly body: Buffer }
  /** Decoded, it is larger than the limit (a small gzip may inflate to gigabytes). */
  | { readonly kind: 'too-large' }
  | { readonly kind: 'unsupported'; readonly encoding: string }
  | { readonly kind: 'corrupt'; readonly encoding: string };

/** The content codings the proxy decodes (what OpenAI's own API accepts, plus `deflate`). */
export const SUPPORTED_ENCODINGS = ['gzip', 'deflate'] as const;

const gunzip = promisify(zlib.gunzip);
const inflate = promisify(zlib.inflate);

/**
 * The body as JSON text the upstream can read: decoded when the client compressed it
 * (`Content-Encoding: gzip`), with the body limit applied to the decoded size, and without a UTF-8
 * byte-order mark (JSON forbids one; many Windows tools write one). Decoding runs on libuv's
 * thread pool, never on the proxy's loop.
 */
export async function decodeBody(
  raw: Buffer,
  contentEncoding: string | undefined,
  limitBytes: number,
): Promise<DecodedBody> {
  let body = raw;
  const codings = (contentEncoding ?? '')
    .split(',')
    .map((c) => c.trim().toLowerCase())
    .filter((c) => c !== '' && c !== 'identity');
  // Codings are listed in the order they were applied: undo them last to first.
  for (const coding of codings.reverse()) {
    const decode =
      coding === 'gzip' || coding === 'x-gzip'
        ? gunzip
        : coding === 'deflate'
          ? inflate
          : undefined;
    if (decode === undefined) return { kind: 'unsupported', encoding: coding };
    try {
      body = await decode(body, { maxOutputLength: limitBytes + 1 });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE')
        return { kind: 'too-large' };
      return { kind: 'corrupt', encoding: coding };
    }
    if (body.length > limitBytes) return { kind: 'too-large' };
  }
  return { kind: 'ok', body: withoutBom(body) };
}

export function withoutBom(body: Buffer): Buffer {
  return body.length >= 3 && body[0] === 0xef && body[1] === 0xbb && body[2] === 0xbf
    ? body.subarray(3)
    : body;
}

/**
 * How many requests one connection may have waiting behind its running one. Pipelining clients
 * send a handful ahead; past this many, the connection's next request is answered 503 (in its
 * turn, as HTTP/1.1 requires) with `Connection: close`, and the connection is read no further,
 * so one client cannot make the sidecar hold thousands of parsed requests.
 */
export const MAX_PIPELINED_REQUESTS = 100;

/** The connection a request came on: its `close` ends its queue. */
interface Connection {
  readonly destroyed: boolean;
  once(event: 'close', listener: () => void): unknown;
}

interface Queue {
  /** A request of the connection runs (the queue lives as long as the connection). */
  running: boolean;
  readonly waiting: (() => void)[];
  /** Completions not yet acted on (see `done`). */
  pendingDone: number;
  /** `done` is starting this connection's next requests: a nested `done` only counts itself. */
  starting: boolean;
  /** The excess request was queued to be refused; any later one is dropped unanswered. */
  refused: boolean;
}

/**
 * Runs one connection's requests one after the other. Node parses pipelined requests as they
 * arrive and hands them all over at once; answered in order anyway, running them at once would
 * only turn one client's 1,000 pipelined requests into 1,000 concurrent upstream requests.
 * `run(done)` must call `done` exactly once, when its response has finished or closed.
 *
 * Never recursive: a request may finish within its own `run` (its client has left, so it calls
 * `done` at once), and a connection that closed with thousands queued used to recurse once per
 * queued request until the stack overflowed and took the process with it (issue 40). `done`
 * starts the next requests from a loop instead, and a closed connection's queue is dropped whole.
 */
export class ConnectionQueue {
  readonly #queues = new WeakMap<object, Queue>();
  readonly #maxWaiting: number;

  constructor(maxWaiting = MAX_PIPELINED_REQUESTS) {
    this.#maxWaiting = maxWaiting;
  }

  /**
   * Runs `run` now, or after the connection's earlier requests. Past `maxWaiting` queued, the
   * first excess request runs `refuse` in its turn instead and any later one is dropped (its
   * connection closes after the refusal). Returns false when the request was not queued to run.
   */
  enqueue(connection: Connection, run: () => void, refuse: () => void): boolean {
    let queue = this.#queues.get(connection);
    if (queue === undefined) {
      if (connection.destroyed) return false;
      const created: Queue = {
        running: false,
        waiting: [],
        pendingDone: 0,
        starting: false,
        refused: false,
      };
      queue = created;
      this.#queues.set(connection, created);
      // Whatever still waits when the client leaves will never be answered: let it go at once.
      connection.once('close', () => {
        created.waiting.length = 0;
        this.#queues.delete(connection);
      });
    }
    if (!queue.running) {
      queue.running = true;
      run();
      return true;
    }
    if (queue.refused) return false;
    if (queue.waiting.length >= this.#maxWaiting) {
      queue.refused = true;
      queue.waiting.push(refuse);
      return false;
    }
    queue.waiting.push(run);
    return true;
  }

  /** How many requests of `connection` wait behind its running one. */
  waiting(connection: object): number {
    return this.#queues.get(connection)?.waiting.length ?? 0;
  }

  /** The running request of `connection` has finished: start its next one, if any. */
  done(connection: object): void {
    const queue = this.#queues.get(connection);
    if (queue === undefined) return;
    queue.pendingDone++;
    if (queue.starting) return; // the loop below, further up the stack, takes this one too
    queue.starting = true;
    try {
      while (queue.pendingDone > 0) {
        queue.pendingDone--;
        const next = queue.waiting.shift();
        if (next === undefined) {
          queue.running = false;
          queue.pendingDone = 0;
          return;
        }
        next();
      }
    } finally {
      queue.starting = false;
    }
  }
}
