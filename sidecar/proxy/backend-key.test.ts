import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { OutgoingHttpHeaders } from 'node:http';
import type { EndpointSpec } from '../policy/index.ts';
import { applyBackendKey } from './backend-key.ts';

const endpoint = (id: string, overrides: Partial<EndpointSpec> = {}): EndpointSpec => ({
  id,
  backend: 'b',
  tier: 0,
  url: `http://${id}/v1`,
  costPerMTok: 0,
  ...overrides,
});

const client = (): OutgoingHttpHeaders => ({
  authorization: 'Bearer client',
  'x-api-key': 'client',
  'content-type': 'application/json',
});

describe('applyBackendKey', () => {
  test('sends the key as a Bearer token by default, dropping the client credentials', () => {
    const headers = client();
    applyBackendKey(headers, endpoint('a', { apiKey: 'sk' }));
    assert.deepEqual(headers, { authorization: 'Bearer sk', 'content-type': 'application/json' });
  });

  test('sends the key as x-api-key when the backend reads that', () => {
    const headers = client();
    applyBackendKey(headers, endpoint('a', { apiKey: 'sk', apiKeyHeader: 'x-api-key' }));
    assert.deepEqual(headers, { 'x-api-key': 'sk', 'content-type': 'application/json' });
  });

  test("leaves a keyless backend's request as the client sent it", () => {
    const headers = client();
    applyBackendKey(headers, endpoint('a'));
    assert.deepEqual(headers, client());
  });
});
