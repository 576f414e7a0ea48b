/**
 * Errors as the simulator answers them, and the catalogue of the ones it sends. vLLM's shape
 * (docs/engine.md "Errors", test/engine/fixtures/error-*.http): `{"error":{"message","type",
 * "param","code"}}` with `type` the name of the exception class that vLLM raised
 * (`BadRequestError`, `NotFoundError`) or, for what FastAPI rejects before vLLM sees it, the HTTP
 * reason phrase (`Bad Request`), and `code` **the HTTP status as a number**, unlike OpenAI's string
 * codes. Only the admin API, the simulator's own, keeps string codes (`invalid_option`).
 *
 * What FastAPI answers itself is not in that shape: an unknown path is `{"detail":"Not Found"}`
 * and a wrong method `{"detail":"Method Not Allowed"}` (http-server.ts sends those).
 */

export interface ApiError {
  status: number;
  message: string;
  type: string;
  param?: string | undefined;
  /** The `code` field; undefined: the status as a number, as vLLM sends it. */
  code?: string | undefined;
}

export function isApiError(value: unknown): value is ApiError {
  return typeof value === 'object' && value !== null && 'status' in value && 'type' in value;
}

export function errorBody(e: ApiError): string {
  return JSON.stringify({
    error: { message: e.message, type: e.type, param: e.param ?? null, code: e.code ?? e.status },
  });
}

/** Sent with every 429: clients that honour it come back in a second. */
export const RETRY_AFTER: Readonly<Record<string, string>> = Object.freeze({ 'retry-after': '1' });

/** A request vLLM's own validation refuses (`BadRequestError`, 400). */
export function badRequest(message: string, param?: string): ApiError {
  return { status: 400, message, type: 'BadRequestError', param };
}

/**
 * A body that is not JSON, as FastAPI's validation reports it: pydantic's `json_invalid` at
 * `body.<position>` (the offset where parsing failed; the end of the body when it stopped short).
 */
export function invalidJson(raw: string, err: unknown): ApiError {
  const reason = err instanceof Error ? err.message : '';
  const at = /at position (\d+)/.exec(reason);
  const position = at === null ? raw.length : Number(at[1]);
  const loc = `body.${position}`;
  return {
    status: 400,
    message: `1 validation error:\n  {'type': 'json_invalid', 'loc': '${loc}', 'msg': 'JSON decode error', 'input': '<dict of 0 items>', 'ctx': {'error': 'Expecting value'}}`,
    type: 'Bad Request',
    param: loc,
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

/** A model the server does not serve; `served` is the name it does. */
export function modelNotFound(model: string, served: string): ApiError {
  return {
    status: 404,
    message: `The model \`${model}\` does not exist. Valid aliases: ${served}.`,
    type: 'NotFoundError',
    param: 'model',
  };
}

/** The prompt leaves no room for one output token (vLLM's message, with its numbers). */
export function contextLengthExceeded(maxModelLen: number, promptTokens: number): ApiError {
  return badRequest(
    `This model's maximum context length is ${maxModelLen} tokens. However, your prompt contains at least ${promptTokens} input tokens, which exceeds this limit even without any output tokens. Please reduce the length of the input prompt. (parameter=input_tokens, value=${promptTokens})`,
    'input_tokens',
  );
}

/** `max_tokens` (or its alias `field`) over the context length. */
export function maxTokensTooLarge(field: string, maxTokens: number, maxModelLen: number): ApiError {
  return badRequest(
    `${field}=${maxTokens} cannot be greater than max_model_len=${maxModelLen}. Please request fewer output tokens. (parameter=${field}, value=${maxTokens})`,
    field,
  );
}

export function bodyTooLarge(limitBytes: number): ApiError {
  return {
    status: 413,
    message: `request body larger than ${limitBytes} bytes`,
    type: 'Request Entity Too Large',
  };
}

/**
 * vLLM has no rate limit of its own (it queues); an injected 429 is what a gateway in front of
 * one sends, written the way vLLM writes errors FastAPI raises (the reason phrase as `type`).
 */
function rateLimited(message: string): ApiError {
  return { status: 429, message, type: 'Too Many Requests' };
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

/** An injected error (`errorRate`), as vLLM answers a generation that failed in the engine. */
export function injectedServerError(): ApiError {
  return {
    status: 500,
    message: 'The server had an error while processing your request. (simulated)',
    type: 'InternalServerError',
  };
}

/** A handler threw: a bug of the simulator, not a simulated fault. */
export function simulatorBug(): ApiError {
  return { status: 500, message: 'simulator bug', type: 'InternalServerError' };
}
