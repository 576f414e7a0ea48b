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
  | 'body_too_large'
  | 'no_healthy_backend'
  | 'upstream_unreachable'
  | 'upstream_timeout'
  | 'upstream_error'
  | 'shutting_down';

const TYPE_BY_STATUS: Record<number, string> = {
  400: 'invalid_request_error',
  404: 'invalid_request_error',
  405: 'invalid_request_error',
  413: 'invalid_request_error',
  502: 'upstream_error',
  503: 'service_unavailable',
  504: 'upstream_error',
};

export function errorBody(status: number, code: SidecarErrorCode, message: string): string {
  return JSON.stringify({
    error: { message, type: TYPE_BY_STATUS[status] ?? 'server_error', code, param: null },
  });
}

export function sendError(
  res: ServerResponse,
  status: number,
  code: SidecarErrorCode,
  message: string,
  headers: Record<string, string> = {},
): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = errorBody(status, code, message);
  res.writeHead(status, {
    ...headers,
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
  });
  res.end(body);
}
