import type { OutgoingHttpHeaders } from 'node:http';
import type { EndpointSpec } from '../policy/index.ts';

/**
 * Puts a backend's API key into an upstream request, in the header the backend reads: OpenAI-style
 * servers (vLLM, SGLang, OpenAI) take `Authorization: Bearer <key>`, Anthropic-style providers
 * `x-api-key: <key>` (`apiKeyHeader` of the backend). The client's own credentials, in either
 * header, are not forwarded to a backend that has a key: they are for the sidecar's caller, not
 * for the provider, and must not leak to it.
 */
export function applyBackendKey(headers: OutgoingHttpHeaders, endpoint: EndpointSpec): void {
  const key = endpoint.apiKey;
  if (key === undefined) return;
  // Node refuses a header whose value is undefined: remove them.
  delete headers.authorization;
  delete headers['x-api-key'];
  if (endpoint.apiKeyHeader === 'x-api-key') headers['x-api-key'] = key;
  else headers.authorization = `Bearer ${key}`;
}
