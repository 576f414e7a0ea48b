/**
 * Writing whole JSON answers. Streams write their own bytes (see generation.ts).
 */
import type { ServerResponse } from 'node:http';
import { errorBody } from './api-error.ts';
import type { ApiError } from './api-error.ts';

type Headers = Readonly<Record<string, string>>;

/** A complete JSON answer; nothing when the response has begun or the client is gone. */
export function sendJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Headers = {},
): void {
  if (res.headersSent || res.destroyed) return;
  const text = typeof body === 'string' ? body : JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': String(Buffer.byteLength(text)),
    ...headers,
  });
  res.end(text);
}

export function sendError(res: ServerResponse, e: ApiError, headers: Headers = {}): void {
  sendJson(res, e.status, errorBody(e), headers);
}

/** A malformed inference request (400) or one for another model (404): counted, then answered. */
export function sendBadRequest(
  sim: { countBadRequest(): void },
  res: ServerResponse,
  e: ApiError,
): void {
  sim.countBadRequest();
  sendError(res, e);
}
