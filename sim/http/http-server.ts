/**
 * The simulator's HTTP server (node:http, or node:https given a certificate; no framework): checks the API key when it has one,
 * dispatches each request to its route, reads JSON bodies, and answers what no route does as
 * vLLM's FastAPI app does (401 `{"error":"Unauthorized"}`, 404 `{"detail":"Not Found"}`, 405
 * `{"detail":"Method Not Allowed"}`, 400 for a body that is not JSON), plus 413 past its body
 * limit and 500 when a handler throws. Every response carries `x-sim-backend: <name>`.
 */
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { createServer as createTlsServer } from 'node:https';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { once } from 'node:events';
import type { Simulator } from '../simulator.ts';
import { bodyTooLarge, invalidJson, simulatorBug } from './api-error.ts';
import { sendError, sendJson } from './respond.ts';
import type { ActionRoute, Exchange, JsonRoute, ReadRoute, Route, UploadRoute } from './route.ts';

const MAX_BODY_BYTES = 32 * 1024 * 1024;
/** The paths vLLM's `--api-key` guards. */
const GUARDED_PATHS = /^\/(v1|v2|inference|cohere)(\/|$)/;
export class SimHttpServer {
  readonly #sim: Simulator;
  readonly #server: Server;
  readonly #reads = new Map<string, ReadRoute>();
  readonly #readPrefixes: ReadRoute[] = [];
  readonly #posts = new Map<string, JsonRoute | ActionRoute | UploadRoute>();
  readonly #postPrefixes: ActionRoute[] = [];
  /** Paths some route serves exactly: a request with another method gets 405, not 404. */
  readonly #knownPaths = new Set<string>();
  #closing = false;

  constructor(sim: Simulator, routes: readonly Route[]) {
    this.#sim = sim;
    for (const route of routes) {
      if (route.kind === 'read' && route.prefix === true) {
        this.#readPrefixes.push(route);
        continue;
      }
      if (route.kind === 'action' && route.prefix === true) {
        this.#postPrefixes.push(route);
        continue;
      }
      if (route.kind === 'read') this.#reads.set(route.path, route);
      else this.#posts.set(route.path, route);
      this.#knownPaths.add(route.path);
    }
    const { tlsCert, tlsKey } = sim.options();
    const onRequest = (req: IncomingMessage, res: ServerResponse): void => {
      this.#onRequest(req, res);
    };
    // An https server is an http.Server underneath (tls.Server's subclass): one code path after.
    this.#server =
      tlsCert !== undefined && tlsKey !== undefined
        ? createTlsServer({ cert: readFileSync(tlsCert), key: readFileSync(tlsKey) }, onRequest)
        : createServer(onRequest);
  }

  /** Listen on the configured host and port; resolves with the actual port. */
  async listen(): Promise<number> {
    const opts = this.#sim.options();
    this.#server.listen(opts.port, opts.host);
    await once(this.#server, 'listening');
    const port = (this.#server.address() as AddressInfo).port;
    this.#sim.listening(port);
    this.#sim.log.info({ port, name: this.#sim.name() }, 'simulator listening');
    return port;
  }

  /** Stop the engine (in-flight responses are destroyed), then every socket. */
  async close(): Promise<void> {
    if (this.#closing) return;
    this.#closing = true;
    this.#sim.engine.close();
    const closed = once(this.#server, 'close');
    this.#server.close();
    this.#server.closeAllConnections();
    await closed;
  }

  #onRequest(req: IncomingMessage, res: ServerResponse): void {
    // Long by default (`keepAliveMs`): a proxy's pooled upstream socket should not be closed
    // under it by the server's idle timer (Node's default is 5 s), which shows as spurious
    // resets. Node reads it as each response finishes, so a run-time change applies at once.
    this.#server.keepAliveTimeout = this.#sim.options().keepAliveMs;
    const path = (req.url ?? '/').split('?', 1)[0] ?? '/';
    const ex: Exchange = { req, res, path, closed: false, job: undefined };
    res.once('close', () => {
      ex.closed = true;
      if (ex.job !== undefined) this.#sim.engine.abandon(ex.job);
    });
    req.on('error', () => {}); // a client that resets mid-body: res 'close' handles it
    res.setHeader('x-sim-backend', this.#sim.name());
    if (!this.#authorized(req, path)) {
      req.resume();
      sendJson(res, 401, { error: 'Unauthorized' });
      return;
    }
    try {
      this.#dispatch(ex);
    } catch (err) {
      this.#sim.log.warn({ err }, 'request handler failed');
      sendError(res, simulatorBug());
    }
  }

  /**
   * vLLM's `--api-key` check: only the API paths need the key, only as `Authorization: Bearer`
   * (no `x-api-key`, even on `/v1/messages`), and CORS preflights pass; `/health`, `/metrics`,
   * `/load` and the rest stay open.
   */
  #authorized(req: IncomingMessage, path: string): boolean {
    const key = this.#sim.options().apiKey;
    if (key === undefined || req.method === 'OPTIONS' || !GUARDED_PATHS.test(path)) return true;
    return req.headers.authorization === `Bearer ${key}`;
  }

  #dispatch(ex: Exchange): void {
    const { req, res, path } = ex;
    const method = req.method ?? 'GET';
    if (method === 'POST') {
      const route = this.#posts.get(path);
      if (route?.kind === 'json') return this.#withJson(ex, route);
      if (route?.kind === 'upload') {
        return this.#withBody(ex, (body) => {
          this.#sim.countRequest(traceparentOf(req));
          route.handle(ex, body);
        });
      }
      const action =
        route?.kind === 'action'
          ? route
          : route === undefined
            ? this.#postPrefixes.find((r) => path.startsWith(r.path))
            : undefined;
      if (action !== undefined) {
        req.resume();
        return action.handle(ex);
      }
    } else if (method === 'GET' || method === 'HEAD') {
      const route =
        this.#reads.get(path) ?? this.#readPrefixes.find((r) => path.startsWith(r.path));
      if (route !== undefined) return route.handle(ex);
    }
    req.resume();
    if (this.#knownPaths.has(path)) {
      // The Allow header the simulator has always sent: POST for the inference paths, else both.
      const allow = path.startsWith('/v1/') && path !== '/v1/models' ? 'POST' : 'GET, POST';
      return sendJson(res, 405, { detail: 'Method Not Allowed' }, { allow });
    }
    sendJson(res, 404, { detail: 'Not Found' });
  }

  #withJson(ex: Exchange, route: JsonRoute): void {
    this.#withBody(ex, (raw) => {
      const { res } = ex;
      if (route.inference) this.#sim.countRequest(traceparentOf(ex.req));
      const text = raw.toString('utf8');
      let body: unknown;
      try {
        body = JSON.parse(text);
      } catch (err) {
        if (route.inference) this.#sim.countBadRequest();
        sendError(res, invalidJson(text, err));
        return;
      }
      route.handle(ex, body);
    });
  }

  /** Reads the whole body (413 past MAX_BODY_BYTES), then hands it to `handle`. */
  #withBody(ex: Exchange, handle: (body: Buffer) => void): void {
    const { req, res } = ex;
    const chunks: Buffer[] = [];
    let size = 0;
    let tooBig = false;
    req.on('data', (chunk: Buffer) => {
      if (tooBig) return;
      size += chunk.length;
      if (size > MAX_BODY_BYTES) {
        tooBig = true;
        chunks.length = 0;
        sendError(res, bodyTooLarge(MAX_BODY_BYTES), { connection: 'close' });
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => {
      if (tooBig || ex.closed || this.#closing) return;
      try {
        handle(Buffer.concat(chunks));
      } catch (err) {
        this.#sim.log.warn({ err }, 'request handler failed');
        sendError(res, simulatorBug());
      }
    });
  }
}

/** The W3C trace context the request carried, for /admin/stats (the tracing tests read it). */
function traceparentOf(req: { headers: Record<string, string | string[] | undefined> }) {
  const { traceparent } = req.headers;
  return typeof traceparent === 'string' ? traceparent : undefined;
}
