import type { ServerResponse } from 'node:http';

/**
 * Errors the sidecar itself answers with, in the shape OpenAI clients parse:
 * `{"error": {"message", "type", "code"}}`. `code` is stable and safe to alert on; `message` is for
 * the person reading it and never contains prompt text or keys.
 */
export type SidecarErrorCode =
  | 'invalid_json'
  | 'invalid_request'
  | 'unknown_url'
  | 'method_not_allowed'
  | 'model_not_found'
  | 'response_endpoint_gone'
  | 'body_too_large'
  | 'unsupported_encoding'
  | 'no_configuration'
  | 'no_healthy_backend'
  | 'upstream_unreachable'
  | 'upstream_timeout'
  | 'upstream_error'
  | 'shutting_down'
  | 'request_timeout'
  | 'headers_too_large'
  | 'bad_request'
  | 'too_many_pipelined_requests'
  | 'internal_error'
  /** Flow control (docs/sidecar.md, Flow control): a bad `x-switchyard-priority`. */
  | 'invalid_priority'
  /** Flow control: waited `maxQueueWait` and no endpoint had room. */
  | 'queue_timeout_saturated'
  /** Flow control: over a budget of the pool (requests or tokens per minute). */
  | 'over_budget'
  /** Flow control: the queue held its most requests or bytes, or a higher priority pushed it out. */
  | 'queue_full'
  /** Flow control: sheddable (negative priority) while higher priorities wait or nothing has room. */
  | 'sheddable_refused'
  /** Scale from zero (docs/sidecar.md): held `scaleFromZero.maxWait` and no endpoint came. */
  | 'scale_from_zero_timeout'
  /** Scale from zero: the hold had its most requests or bytes (`scaleFromZero.maxRequests`/`maxBytes`). */
  | 'scale_from_zero_full';

const TYPE_BY_STATUS: Record<number, string> = {
  400: 'invalid_request_error',
  404: 'invalid_request_error',
  405: 'invalid_request_error',
  408: 'invalid_request_error',
  409: 'invalid_request_error',
  413: 'invalid_request_error',
  415: 'invalid_request_error',
  429: 'rate_limit_error',
  431: 'invalid_request_error',
  502: 'upstream_error',
  503: 'service_unavailable',
  504: 'upstream_error',
};

export function errorBody(
  status: number,
  code: SidecarErrorCode,
  message: string,
  param: string | null = null,
): string {
  return JSON.stringify({
    error: { message, type: TYPE_BY_STATUS[status] ?? 'server_error', code, param },
  });
}

export function sendError(
  res: ServerResponse,
  status: number,
  code: SidecarErrorCode,
  message: string,
  headers: Record<string, string> = {},
  param: string | null = null,
): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = errorBody(status, code, message, param);
  res.writeHead(status, {
    ...headers,
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
  });
  res.end(body);
}

/**
 * 503 `shutting_down`, closing the connection: the sidecar is draining, and a retry on a fresh
 * connection reaches the pod's next sidecar or a peer.
 */
export function sendShuttingDown(res: ServerResponse): void {
  sendError(
    res,
    503,
    'shutting_down',
    'This sidecar is shutting down; retry on a fresh connection.',
    {
      connection: 'close',
      'retry-after': '1',
    },
  );
}

/**
 * 404 `model_not_found` with `param: "model"`, as OpenAI answers a model it does not serve: the
 * request names a model no pool of this sidecar serves (docs/sidecar.md, "Several pools").
 */
export function sendModelNotFound(
  res: ServerResponse,
  message: string,
  headers: Record<string, string> = {},
): void {
  sendError(res, 404, 'model_not_found', message, headers, 'model');
}

/** Reason phrases of the statuses `sendRawError` writes. */
const REASON: Record<number, string> = {
  400: 'Bad Request',
  408: 'Request Timeout',
  431: 'Request Header Fields Too Large',
};

/**
 * Answers on a raw socket, for errors Node's HTTP parser raises before there is a response object
 * (a malformed request, headers too large, a client too slow to send its request), in the same
 * OpenAI shape, then closes the connection: after such an error the byte stream cannot be trusted.
 */
export function sendRawError(
  socket: { writable: boolean; end(data: string): void },
  status: 400 | 408 | 431,
  code: SidecarErrorCode,
  message: string,
): void {
  if (!socket.writable) return;
  const body = errorBody(status, code, message);
  socket.end(
    `HTTP/1.1 ${status} ${REASON[status]}\r\nconnection: close\r\ncontent-type: application/json\r\n` +
      `content-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
}
