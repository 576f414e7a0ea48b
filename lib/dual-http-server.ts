/**
 * One port that speaks HTTP/2 and HTTP/1.1, for the controller's snapshot stream (and the test
 * fakes of it). Why HTTP/2: a sidecar multiplexes every pool's stream, its reports and its
 * placement uploads on one connection (issue 46): `npm run bench:stream-memory` measures 139.7 KB
 * of server RSS per one-pool sidecar with its two HTTP/1.1 TLS connections, 99.9 KB with one
 * HTTP/2 one (docs/controller.md, "One connection per sidecar"). Why HTTP/1.1 too: sidecars of earlier
 * versions, `curl`, and the API server's webhook calls keep working unchanged.
 *
 * Over TLS the protocol is chosen by ALPN (`allowHTTP1`). In clear text (tests only:
 * `--insecure-http`) there is no ALPN, so the first bytes decide: HTTP/2's connection preface
 * starts with `PRI * HTTP/2.0`, which no HTTP/1 request does.
 */
import type * as NodeHttp from 'node:http';
import type * as NodeHttp2 from 'node:http2';
import type { Socket } from 'node:net';
import * as net from 'node:net';
import { Duplex, PassThrough, type Readable, type Writable } from 'node:stream';
import { http, http2 } from './node-http.ts';

/**
 * What a handler uses of a request on either protocol: Node's `IncomingMessage`, or its HTTP/2
 * compatibility API's `Http2ServerRequest` (both are one of these).
 */
export interface AnyRequest extends Readable {
  readonly method?: string | undefined;
  readonly url?: string | undefined;
  readonly headers: NodeHttp.IncomingHttpHeaders;
  readonly httpVersionMajor: number;
  readonly socket: { readonly remoteAddress?: string | undefined; setTimeout(ms: number): unknown };
}
/** What a handler uses of a response on either protocol (`ServerResponse`, `Http2ServerResponse`). */
export interface AnyResponse extends Writable {
  writeHead(status: number, headers?: NodeHttp.OutgoingHttpHeaders): this;
  /** A header for the `writeHead` to come (merged with its own). */
  setHeader(name: string, value: string | number | readonly string[]): unknown;
  readonly headersSent: boolean;
}
export type AnyHandler = (req: AnyRequest, res: AnyResponse) => void;

export interface DualServerOptions {
  /** PEM certificate and key: TLS with ALPN. Undefined: clear text (tests). */
  tls?: { cert: string | Buffer; key: string | Buffer } | undefined;
  /**
   * An HTTP/1.1 connection idle between requests is closed after this (the sidecar closes its
   * own first, at 30 s); an HTTP/2 connection with no frames for this long is closed too (an
   * open stream is never idle: the controller sends a heartbeat every 10 s).
   */
  idleTimeoutMs?: number;
  /** How long an HTTP/1.1 client may take to send its request headers. */
  headersTimeoutMs?: number;
}

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n');

/** Bytes that begin HTTP/2's preface, as far as they go (a first read may be short). */
function startsLikePreface(bytes: Buffer): boolean {
  const n = Math.min(bytes.length, PREFACE.length);
  return bytes.subarray(0, n).equals(PREFACE.subarray(0, n));
}

export class DualHttpServer {
  /** What listens: a TLS server (ALPN picks the protocol) or a TCP one (the first bytes do). */
  readonly server: net.Server;
  readonly #sockets = new Set<Socket>();
  readonly #h2: NodeHttp2.Http2Server | NodeHttp2.Http2SecureServer;
  readonly #h1: NodeHttp.Server | undefined;

  constructor(options: DualServerOptions, handler: AnyHandler) {
    const idleTimeoutMs = options.idleTimeoutMs ?? 65_000;
    const headersTimeoutMs = options.headersTimeoutMs ?? 30_000;
    const h1Timeouts = { keepAliveTimeout: idleTimeoutMs, headersTimeout: headersTimeoutMs };
    if (options.tls !== undefined) {
      const secure = http2().createSecureServer(
        { cert: options.tls.cert, key: options.tls.key, allowHTTP1: true },
        handler,
      );
      // HTTP/1.1 connections of a secure HTTP/2 server are served by node:http's connection
      // handler, which reads these two from the server object.
      Object.assign(secure, h1Timeouts);
      this.#h2 = secure;
      this.#h1 = undefined;
      this.server = secure;
    } else {
      this.#h2 = http2().createServer(handler);
      this.#h1 = Object.assign(http.createServer(handler), h1Timeouts);
      this.server = net.createServer((socket) => this.#route(socket));
    }
    this.#h2.setTimeout(idleTimeoutMs);
    // Every TCP connection, whatever it turns out to speak, so that closeAllConnections ends all.
    this.server.on('connection', (socket: Socket) => {
      // Events are small and must go out as written (a snapshot change, a heartbeat), not wait
      // for Nagle's algorithm to fill a segment.
      socket.setNoDelay(true);
      this.#sockets.add(socket);
      socket.once('close', () => this.#sockets.delete(socket));
    });
  }

  /** Clear text: hands the connection to the HTTP/2 or the HTTP/1.1 server by its first bytes. */
  #route(socket: Socket): void {
    let seen = Buffer.alloc(0);
    const onData = (chunk: Buffer): void => {
      seen = Buffer.concat([seen, chunk]);
      // "PRI " tells them apart (no HTTP/1 method starts so); wait for 4 bytes unless it differs sooner.
      if (seen.length < 4 && startsLikePreface(seen)) return;
      socket.off('data', onData);
      socket.pause();
      if (startsLikePreface(seen)) {
        // HTTP/2 reads a TCP socket's handle natively, past any bytes given back with unshift:
        // it gets a stream that replays what was read, then the socket (clear text is for tests,
        // so the extra copy costs nothing that matters).
        const replay = new PassThrough();
        replay.write(seen);
        socket.pipe(replay);
        const joined = Duplex.from({ readable: replay, writable: socket });
        socket.once('close', () => joined.destroy());
        joined.once('close', () => socket.destroy());
        this.#h2.emit('connection', joined);
      } else {
        socket.unshift(seen);
        (this.#h1 as NodeHttp.Server).emit('connection', socket);
      }
      socket.resume();
    };
    socket.on('data', onData);
    socket.on('error', () => undefined); // the owner's handler reports errors once it has it
  }

  /** Serves a new certificate from the next TLS handshake on (TLS only). */
  setSecureContext(tls: { cert: string; key: string }): void {
    if ('setSecureContext' in this.server)
      (this.server as NodeHttp2.Http2SecureServer).setSecureContext(tls);
  }

  /** TCP connections open now, whatever they speak. */
  get connectionCount(): number {
    return this.#sockets.size;
  }

  /** Ends every open connection (streams included) at once. */
  closeAllConnections(): void {
    for (const socket of this.#sockets) socket.destroy();
  }

  close(callback?: (err?: Error) => void): void {
    this.server.close(callback);
    this.#h1?.close();
  }
}

/** What identifies the connection a request came on (an HTTP/2 session, or an HTTP/1.1 socket). */
export function connectionOf(req: AnyRequest): object {
  const stream = (req as Partial<NodeHttp2.Http2ServerRequest>).stream;
  return stream === undefined ? req.socket : (stream.session ?? stream);
}
