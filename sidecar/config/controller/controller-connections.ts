/**
 * The sidecar's connection to the controller (issue 46): one HTTP/2 connection per controller URL
 * and CA, shared by every pool's snapshot stream, its reports and its placement uploads.
 *
 * Why: most of what a TLS connection costs the controller is OpenSSL's state, and a sidecar held
 * two per pool (its stream; one kept-alive connection for reports and uploads). Measured by
 * `npm run bench:stream-memory` (1,000 sidecars): 139.7 → 99.9 KB of a replica's RSS per one-pool
 * sidecar, 445.1 → 140.5 KB per three-pool one (docs/controller.md, "One connection per sidecar"). It also means one TLS handshake per sidecar, and its reports land on
 * the replica that holds its stream, which reviews its token once per `--token-review-cache`.
 */
import type * as NodeHttp2 from 'node:http2';
import type * as NodeTls from 'node:tls';
import { http2 } from '../../../lib/node-http.ts';
import { REVIEW_TICKET_HEADER } from '../../../crds/snapshot.ts';

/** What a stream was opened with: the reports and uploads of that stream use the same. */
export interface ControllerSession {
  token: string;
  ca: string | undefined;
}

/**
 * A connection with no stream on it and no frame in either direction for this long is closed by
 * the sidecar (the controller closes idle ones after 65 s, later than this, so the sidecar never
 * sends on a connection being closed). A connection with a stream on it is never closed for
 * being quiet: an open snapshot stream gets a heartbeat every 10 s, and one still waiting for its
 * answer is the stream's watchdog's to judge (stream-connection.ts: it PINGs a busy controller
 * and waits). Closing it here instead, 5 s before that watchdog, sent every sidecar a busy
 * replica had not answered in 30 s to the back of the queue with a new handshake (one of the
 * three causes of the 10,000-sidecar retry storm in docs/benchmarks.md, "Why 10,000 subscribers
 * reconnected").
 */
const CONTROLLER_IDLE_TIMEOUT_MS = 30_000;

/**
 * Flow-control windows the sidecar grants the controller: a snapshot of a large pool (100 KB and
 * more) arrives without waiting for a window update per 64 KB (HTTP/2's default). The sidecar
 * reads every event as it comes, so these are credit, not buffers it fills.
 */
const STREAM_WINDOW_BYTES = 1024 * 1024;
const CONNECTION_WINDOW_BYTES = 4 * 1024 * 1024;

/** Errors that mean the request never reached the controller's handler: worth sending again. */
const NOT_PROCESSED = new Set(['ERR_HTTP2_GOAWAY_SESSION', 'ERR_HTTP2_INVALID_SESSION']);

export class ControllerConnections {
  readonly #current = new Map<string, NodeHttp2.ClientHttp2Session>();
  /** Streams not yet closed, per connection: a connection with any is not idle. */
  readonly #streams = new Map<NodeHttp2.ClientHttp2Session, number>();
  readonly #idleTimeoutMs: number;
  /**
   * Per controller URL and CA: the last review ticket its answers carried, and the token it
   * vouches for. Sent with every request while the token is the same: a replica the sidecar
   * reconnects to (its own restarted, or another after one died) then lets it in without a
   * TokenReview (controller/stream/review-ticket.ts). Kept across connections on purpose.
   */
  readonly #tickets = new Map<string, { token: string; ticket: string }>();
  /** Every connection not yet closed, current or draining (after a GOAWAY), for `close()`. */
  readonly #open = new Set<NodeHttp2.ClientHttp2Session>();
  #closed = false;

  /** `idleTimeoutMs`: how long a connection without streams stays open (tests shorten it). */
  constructor(options: { idleTimeoutMs?: number } = {}) {
    this.#idleTimeoutMs = options.idleTimeoutMs ?? CONTROLLER_IDLE_TIMEOUT_MS;
  }

  /**
   * A request on the connection to `url`'s origin with `session`'s CA, opened when there is none
   * (or the last was closed or told to go away). Throws only after `close()`.
   */
  request(
    url: URL,
    session: ControllerSession,
    headers: NodeHttp2.OutgoingHttpHeaders,
    options: { endStream: boolean },
  ): NodeHttp2.ClientHttp2Stream {
    if (this.#closed) throw new Error('the connection to the controller is closed');
    const key = connectionKey(url, session.ca);
    const held = this.#tickets.get(key);
    const all = {
      ':path': url.pathname + url.search,
      authorization: `Bearer ${session.token}`,
      'user-agent': 'switchyard-sidecar',
      ...(held?.token === session.token ? { [REVIEW_TICKET_HEADER]: held.ticket } : {}),
      ...headers,
    };
    const connection = this.#connectionTo(url, session.ca);
    let stream: NodeHttp2.ClientHttp2Stream;
    try {
      stream = connection.request(all, options);
    } catch {
      // It closed between the check and the request (a GOAWAY just read): a new one.
      this.#forget(connection);
      stream = this.#connectionTo(url, session.ca).request(all, options);
    }
    const on = stream.session as NodeHttp2.ClientHttp2Session | undefined;
    if (on !== undefined) {
      this.#streams.set(on, (this.#streams.get(on) ?? 0) + 1);
      stream.once('close', () => {
        const left = (this.#streams.get(on) ?? 1) - 1;
        if (left > 0) this.#streams.set(on, left);
        else this.#streams.delete(on);
      });
    }
    stream.once('response', (answer) => {
      const ticket = answer[REVIEW_TICKET_HEADER];
      if (typeof ticket === 'string' && ticket.length > 0)
        this.#tickets.set(key, { token: session.token, ticket });
    });
    return stream;
  }

  /**
   * The connection `stream` runs on is presumed dead (its stream got no heartbeat in time): ends
   * it with every stream on it, so that the next request opens a new one. Each stream on it then
   * reconnects on its own, as it would after the controller closed it.
   */
  reset(stream: NodeHttp2.ClientHttp2Stream): void {
    const connection = stream.session;
    if (connection === undefined) return;
    this.#forget(connection);
    connection.destroy();
  }

  /** How many connections are open (tests, and the sidecar's debug view). */
  get size(): number {
    return this.#open.size;
  }

  /** Ends every connection, and whatever runs on them; resolves when all are closed. */
  async close(): Promise<void> {
    this.#closed = true;
    await Promise.all(
      [...this.#open].map(
        (connection) =>
          new Promise<void>((resolve) => {
            if (connection.destroyed) resolve();
            else {
              connection.once('close', () => resolve());
              connection.destroy();
            }
          }),
      ),
    );
  }

  #connectionTo(url: URL, ca: string | undefined): NodeHttp2.ClientHttp2Session {
    const key = connectionKey(url, ca);
    const current = this.#current.get(key);
    if (current !== undefined && !current.closed && !current.destroyed) return current;
    const connection = http2().connect(url.origin, {
      secureContext: secureContextFor(ca),
      settings: { enablePush: false, initialWindowSize: STREAM_WINDOW_BYTES },
    });
    // Every failure reaches the streams on it, each of which reports its own.
    connection.on('error', () => undefined);
    connection.once('connect', () => {
      // 'connect' is emitted on a later tick: the connection may have been destroyed meanwhile
      // (a reset, an error), and then setLocalWindowSize throws (the fleet bench found it).
      if (connection.destroyed || connection.closed) return;
      try {
        connection.setLocalWindowSize(CONNECTION_WINDOW_BYTES);
      } catch {
        // going away: its streams report why
      }
    });
    // A GOAWAY (a replica shutting down): its open streams finish, new ones go elsewhere.
    connection.once('goaway', () => this.#forget(connection));
    connection.once('close', () => {
      this.#forget(connection);
      this.#open.delete(connection);
      this.#streams.delete(connection);
    });
    connection.setTimeout(this.#idleTimeoutMs, () => {
      if (!this.#streams.has(connection)) connection.close();
    });
    this.#current.set(key, connection);
    this.#open.add(connection);
    return connection;
  }

  #forget(connection: NodeHttp2.Http2Session): void {
    for (const [key, c] of this.#current) if (c === connection) this.#current.delete(key);
  }
}

/**
 * One TLS client context per CA, kept (the last few CAs; a CA file rotates rarely). Without it
 * every connection makes its own (`tls.connect` does, given `ca` or not), and OpenSSL 3 makes a
 * context slowly: in the fleet bench's hosts, contexts were ~13 % of all CPU while a replica's
 * sidecars reconnected after it was killed (V8 profiles, docs/benchmarks.md). A sidecar opens
 * few connections, but it opens them exactly when every other sidecar does.
 */
const secureContexts = new Map<string, NodeTls.SecureContext>();
const MAX_SECURE_CONTEXTS = 4;

function secureContextFor(ca: string | undefined): NodeTls.SecureContext {
  const key = ca ?? '';
  let context = secureContexts.get(key);
  if (context === undefined) {
    const tls: typeof NodeTls = process.getBuiltinModule('node:tls');
    context = tls.createSecureContext(ca === undefined ? {} : { ca });
    if (secureContexts.size >= MAX_SECURE_CONTEXTS)
      secureContexts.delete(secureContexts.keys().next().value!);
  } else secureContexts.delete(key); // to the back: the most recently used
  secureContexts.set(key, context);
  return context;
}

function connectionKey(url: URL, ca: string | undefined): string {
  return `${url.origin}\n${ca ?? ''}`;
}

/** The end of a POST: its status (0 when no answer came), and why it failed. */
export interface PostResult {
  status: number;
  error: Error | undefined;
  /** The controller never saw it (the connection was going away): sending it again is safe. */
  notProcessed: boolean;
}

/** One JSON POST to the controller: `abort()` ends it; `done` never rejects. */
export interface ControllerPost {
  abort(): void;
  readonly done: Promise<PostResult>;
}

/**
 * A JSON POST (a report, a placements upload) on the shared connection, with the stream's
 * credentials; the answer's body is read and dropped (only its status matters).
 */
export function postJson(
  connections: ControllerConnections,
  url: URL,
  session: ControllerSession,
  body: string,
  timeoutMs: number,
): ControllerPost {
  let stream: NodeHttp2.ClientHttp2Stream;
  try {
    stream = connections.request(
      url,
      session,
      {
        ':method': 'POST',
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(body),
      },
      { endStream: false },
    );
  } catch (err) {
    return {
      abort: () => undefined,
      done: Promise.resolve({ status: 0, error: err as Error, notProcessed: false }),
    };
  }
  let status = 0;
  let error: NodeJS.ErrnoException | undefined;
  const done = new Promise<PostResult>((resolve) => {
    stream.on('response', (headers) => {
      status = Number(headers[':status'] ?? 0);
    });
    stream.on('error', (err: NodeJS.ErrnoException) => {
      error ??= err;
    });
    stream.on('close', () => {
      const code = error?.code;
      const refused = stream.rstCode === http2().constants.NGHTTP2_REFUSED_STREAM;
      // Ended without an answer and without an error (its connection was reset under it, or it
      // was aborted): still a failure that says why.
      if (status === 0 && error === undefined)
        error = new Error(`closed before an answer (HTTP/2 stream reset, code ${stream.rstCode})`);
      resolve({
        status,
        error,
        notProcessed: status === 0 && (refused || (code !== undefined && NOT_PROCESSED.has(code))),
      });
    });
  });
  stream.setTimeout(timeoutMs, () => stream.destroy(new Error(`no answer in ${timeoutMs} ms`)));
  stream.resume();
  stream.end(body);
  return { abort: () => stream.destroy(), done };
}
