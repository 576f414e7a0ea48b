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
 * `content-encoding` (the body is forwarded decoded, see `decodeBody`).
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
 * Runs one connection's requests one after the other. Node parses pipelined requests as they
 * arrive and hands them all over at once; answered in order anyway, running them at once would
 * only turn one client's 1,000 pipelined requests into 1,000 concurrent upstream requests.
 * `run(done)` must call `done` exactly once, when its response has finished or closed.
 */
export class ConnectionQueue {
  readonly #waiting = new WeakMap<object, (() => void)[]>();

  enqueue(connection: object, run: () => void): void {
    const queue = this.#waiting.get(connection);
    if (queue === undefined) {
      this.#waiting.set(connection, []);
      run();
    } else {
      queue.push(run);
    }
  }

  /** The running request of `connection` has finished: start its next one, if any. */
  done(connection: object): void {
    const queue = this.#waiting.get(connection);
    if (queue === undefined) return;
    const next = queue.shift();
    if (next === undefined) this.#waiting.delete(connection);
    else next();
  }
}
