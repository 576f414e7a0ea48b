/**
 * The inference paths the sidecar balances, what each does with its request body, and where it
 * goes on an endpoint. The paths are vLLM 0.32's (docs/engine.md), most of which SGLang, LiteLLM
 * and OpenAI serve too; docs/sidecar.md lists them. Anything else is refused with a 404.
 */

/**
 * What the sidecar does with a request's body:
 * - `json`: read whole (up to the limit), parsed, checked against the pool's models, read for
 *   affinity, its `model` rewritten per backend;
 * - `stream`: passed through byte for byte as it arrives, never parsed or held whole (multipart
 *   audio uploads): no affinity, no model check or rewrite, and no retry once bytes have gone;
 * - `opaque`: read whole (up to the limit) and forwarded as it is (GET, DELETE, cancel);
 * - `models`: `/v1/models`, answered from the pool's list when it declares one, else with the
 *   union of its backends' lists (models-union.ts).
 */
export type BodyHandling = 'json' | 'stream' | 'opaque' | 'models';

export type RouteMethod = 'GET' | 'POST' | 'DELETE';

export interface InferenceRoute {
  readonly body: BodyHandling;
  /**
   * `POST /v1/responses`: the answer's response id is remembered with the endpoint that made
   * it, and the request's `previous_response_id` pins it to that endpoint.
   */
  readonly createsResponse?: boolean;
  /** A request without `model` is fine here (vLLM's tokenizer endpoints default to theirs). */
  readonly modelOptional?: boolean;
}

const JSON_ROUTE: InferenceRoute = { body: 'json' };
const STREAM_ROUTE: InferenceRoute = { body: 'stream' };
const OPAQUE_ROUTE: InferenceRoute = { body: 'opaque' };
const TOKENIZER_ROUTE: InferenceRoute = { body: 'json', modelOptional: true };

/** Paths without a parameter, and the method each accepts. */
const FIXED_ROUTES: ReadonlyMap<string, { method: RouteMethod; route: InferenceRoute }> = new Map(
  (
    [
      ['/v1/chat/completions', 'POST', JSON_ROUTE],
      ['/v1/completions', 'POST', JSON_ROUTE],
      ['/v1/embeddings', 'POST', JSON_ROUTE],
      ['/v1/models', 'GET', { body: 'models' }],
      ['/v1/responses', 'POST', { body: 'json', createsResponse: true }],
      ['/v1/messages', 'POST', JSON_ROUTE],
      ['/v1/messages/count_tokens', 'POST', JSON_ROUTE],
      ['/v1/audio/transcriptions', 'POST', STREAM_ROUTE],
      ['/v1/audio/translations', 'POST', STREAM_ROUTE],
      // vLLM serves rerank under three prefixes (Jina's /v1/rerank, Cohere's /v2/rerank, and
      // /rerank) and score under two; clients of each convention exist.
      ['/v1/rerank', 'POST', JSON_ROUTE],
      ['/v2/rerank', 'POST', JSON_ROUTE],
      ['/rerank', 'POST', JSON_ROUTE],
      ['/v1/score', 'POST', JSON_ROUTE],
      ['/score', 'POST', JSON_ROUTE],
      ['/tokenize', 'POST', TOKENIZER_ROUTE],
      ['/detokenize', 'POST', TOKENIZER_ROUTE],
    ] as const
  ).map(([path, method, route]) => [path, { method, route }]),
);

/**
 * `/v1/responses/{id}` (GET, DELETE), `/v1/responses/{id}/cancel` (POST) and
 * `/v1/responses/{id}/input_items` (GET). An id is what OpenAI and vLLM make (`resp_` and hex)
 * or any other server's word characters, at most 256 of them.
 */
const RESPONSE_PATH = /^\/v1\/responses\/([A-Za-z0-9_.-]{1,256})(\/cancel|\/input_items)?$/;

export type RouteMatch =
  | {
      kind: 'route';
      route: InferenceRoute;
      /** The stored response the path names (`/v1/responses/{id}…`). */
      responseId?: string;
      /** `DELETE /v1/responses/{id}`: a success removes the response from its server. */
      deletesResponse?: boolean;
    }
  | { kind: 'wrong-method'; allow: string }
  | { kind: 'unknown' };

export function matchRoute(method: string, path: string): RouteMatch {
  const fixed = FIXED_ROUTES.get(path);
  if (fixed !== undefined) {
    return method === fixed.method
      ? { kind: 'route', route: fixed.route }
      : { kind: 'wrong-method', allow: fixed.method };
  }
  const stored = RESPONSE_PATH.exec(path);
  if (stored === null) return { kind: 'unknown' };
  const responseId = stored[1] as string;
  const action = stored[2];
  const allow = action === '/cancel' ? 'POST' : action === '/input_items' ? 'GET' : 'GET, DELETE';
  if (!allow.split(', ').includes(method)) return { kind: 'wrong-method', allow };
  return {
    kind: 'route',
    route: OPAQUE_ROUTE,
    responseId,
    ...(method === 'DELETE' ? { deletesResponse: true } : {}),
  };
}

/** The paths listed in the 404 of an unknown path. */
export function knownPaths(): string[] {
  return [...FIXED_ROUTES.keys(), '/v1/responses/{id}', '/v1/responses/{id}/cancel'];
}

/**
 * The upstream URL of `path` on an endpoint whose URL includes its API prefix
 * (`http://10.0.0.7:8000/v1`): `/v1/...` paths replace the `/v1` with the endpoint's prefix;
 * vLLM's root-level paths (`/tokenize`, `/rerank`, `/v2/rerank`) sit beside that prefix, so
 * they replace the endpoint URL's final `/v1` (or are appended when it has none).
 */
export function upstreamUrl(endpointUrl: string, path: string): string {
  if (path.startsWith('/v1/')) return endpointUrl + path.slice(3);
  const root = endpointUrl.endsWith('/v1') ? endpointUrl.slice(0, -3) : endpointUrl;
  return root + path;
}
