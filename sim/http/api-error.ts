/**
 * Errors as the simulator answers them, in OpenAI's shape
 * (`{"error":{"message","type","param","code"}}`), and the catalogue of the ones it sends. Every
 * route answers its errors in this shape today; a surface with another error format would render
 * `ApiError` its own way.
 */

export interface ApiError {
  status: number;
  message: string;
  type: string;
  code: string;
  param?: string | undefined;
}

export function isApiError(value: unknown): value is ApiError {
  return typeof value === 'object' && value !== null && 'status' in value && 'code' in value;
}

export function errorBody(e: ApiError): string {
  return JSON.stringify({
    error: { message: e.message, type: e.type, param: e.param ?? null, code: e.code },
  });
}

/** Sent with every 429: clients that honour it come back in a second. */
export const RETRY_AFTER: Readonly<Record<string, string>> = Object.freeze({ 'retry-after': '1' });

export function invalidJson(): ApiError {
  return {
    status: 400,
    message: 'We could not parse the JSON body of your request.',
    type: 'invalid_request_error',
    code: 'invalid_json',
  };
}

export function invalidOption(field: string, message: string): ApiError {
  return {
    status: 400,
    message: `invalid option ${field}: ${message}`,
    type: 'invalid_request_error',
    code: 'invalid_option',
    param: field,
  };
}

export function modelNotFound(model: string): ApiError {
  return {
    status: 404,
    message: `The model \`${model}\` does not exist or you do not have access to it.`,
    type: 'invalid_request_error',
    code: 'model_not_found',
    param: 'model',
  };
}

export function unknownUrl(method: string, path: string): ApiError {
  return {
    status: 404,
    message: `Unknown request URL: ${method} ${path}`,
    type: 'invalid_request_error',
    code: 'unknown_url',
  };
}

export function methodNotAllowed(method: string, path: string): ApiError {
  return {
    status: 405,
    message: `Method ${method} is not allowed on ${path}`,
    type: 'invalid_request_error',
    code: 'method_not_allowed',
  };
}

export function bodyTooLarge(limitBytes: number): ApiError {
  return {
    status: 413,
    message: `request body larger than ${limitBytes} bytes`,
    type: 'invalid_request_error',
    code: 'body_too_large',
  };
}

function rateLimited(message: string): ApiError {
  return { status: 429, message, type: 'requests', code: 'rate_limit_exceeded' };
}

/** An injected rate limit (`rateLimitRate`). */
export function injectedRateLimit(): ApiError {
  return rateLimited('Rate limit reached for requests. (simulated)');
}

/** Every slot busy and the queue full. */
export function queueFull(slots: number, queued: number): ApiError {
  return rateLimited(
    `The server is at capacity (${slots} slots busy, ${queued} queued). (simulated)`,
  );
}

/** An injected error (`errorRate`). */
export function injectedServerError(): ApiError {
  return {
    status: 500,
    message: 'The server had an error while processing your request. (simulated)',
    type: 'server_error',
    code: 'internal_error',
  };
}

/** A handler threw: a bug of the simulator, not a simulated fault. */
export function simulatorBug(): ApiError {
  return { status: 500, message: 'simulator bug', type: 'server_error', code: 'internal_error' };
}
