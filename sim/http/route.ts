/**
 * One endpoint of the simulator's HTTP API, and the exchange its handler works on. An API surface
 * is a module that returns its routes (`completionsRoutes(sim)`, `embeddingsRoutes(sim)`, ...);
 * routes.ts lists them all; http-server.ts dispatches, reads bodies, and answers what no route
 * matches. Adding an endpoint is adding a module and a line in routes.ts.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { JobHandle } from '../engine/engine.ts';

/** One request and its response, from its arrival until the response closes. */
export interface Exchange {
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  /** The request URL's path, without the query. */
  readonly path: string;
  /** The response closed: the client went away, or the answer is complete. */
  closed: boolean;
  /** The engine job serving the request, once admitted: abandoned when the response closes. */
  job: JobHandle | undefined;
}

export type Route = ReadRoute | JsonRoute | ActionRoute | UploadRoute;

/** GET (and HEAD): answers from state, reads no body. */
export interface ReadRoute {
  readonly kind: 'read';
  /** The exact path; with `prefix`, the start of the path (the rest is the route's parameter). */
  readonly path: string;
  readonly prefix?: boolean;
  handle(ex: Exchange): void;
}

/** POST with a JSON body, read in full and parsed before `handle` (malformed: 400 invalid_json). */
export interface JsonRoute {
  readonly kind: 'json';
  readonly path: string;
  /**
   * An inference request: every one counts in the stats' `requests` whatever its outcome, and a
   * malformed body in `badRequests` too.
   */
  readonly inference: boolean;
  handle(ex: Exchange, body: unknown): void;
}

/** POST whose body is ignored. */
export interface ActionRoute {
  readonly kind: 'action';
  /** The exact path; with `prefix`, the start of the path (the rest is the route's parameter). */
  readonly path: string;
  readonly prefix?: boolean;
  handle(ex: Exchange): void;
}

/** POST with a body the route reads itself (multipart uploads), read in full before `handle`. */
export interface UploadRoute {
  readonly kind: 'upload';
  readonly path: string;
  handle(ex: Exchange, body: Buffer): void;
}
