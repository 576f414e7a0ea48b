import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { knownPaths, matchRoute, upstreamUrl } from './inference-routes.ts';

describe('matchRoute', () => {
  test('knows every inference path vLLM serves, with its method and body handling', () => {
    const cases: [string, string, string][] = [
      ['POST', '/v1/chat/completions', 'json'],
      ['POST', '/v1/responses', 'json'],
      ['POST', '/v1/messages', 'json'],
      ['POST', '/v1/messages/count_tokens', 'json'],
      ['POST', '/v1/audio/transcriptions', 'stream'],
      ['POST', '/v1/audio/translations', 'stream'],
      ['POST', '/v1/rerank', 'json'],
      ['POST', '/v2/rerank', 'json'],
      ['POST', '/rerank', 'json'],
      ['POST', '/v1/score', 'json'],
      ['POST', '/score', 'json'],
      ['POST', '/tokenize', 'json'],
      ['POST', '/detokenize', 'json'],
      ['GET', '/v1/models', 'models'],
    ];
    for (const [method, path, body] of cases) {
      const match = matchRoute(method, path);
      assert.equal(match.kind, 'route', path);
      assert.equal(match.kind === 'route' && match.route.body, body, path);
    }
    const created = matchRoute('POST', '/v1/responses');
    assert.equal(created.kind === 'route' && created.route.createsResponse, true);
  });

  test('reads the stored response id of /v1/responses/{id} paths', () => {
    assert.deepEqual(matchRoute('GET', '/v1/responses/resp_1a'), {
      kind: 'route',
      route: { body: 'opaque' },
      responseId: 'resp_1a',
    });
    const deleted = matchRoute('DELETE', '/v1/responses/resp_1a');
    assert.equal(deleted.kind === 'route' && deleted.deletesResponse, true);
    const cancelled = matchRoute('POST', '/v1/responses/resp_1a/cancel');
    assert.equal(cancelled.kind === 'route' && cancelled.responseId, 'resp_1a');
    const items = matchRoute('GET', '/v1/responses/resp_1a/input_items');
    assert.equal(items.kind === 'route' && items.responseId, 'resp_1a');
  });

  test('a known path with another method is a wrong method, with what it allows', () => {
    assert.deepEqual(matchRoute('GET', '/v1/messages'), { kind: 'wrong-method', allow: 'POST' });
    assert.deepEqual(matchRoute('POST', '/v1/responses/resp_1'), {
      kind: 'wrong-method',
      allow: 'GET, DELETE',
    });
    assert.deepEqual(matchRoute('GET', '/v1/responses/resp_1/cancel'), {
      kind: 'wrong-method',
      allow: 'POST',
    });
  });

  test('anything else is unknown, ids with odd characters included', () => {
    for (const path of ['/v1/nope', '/v1/responses/a/b', '/v1/responses/a%2Fb', '/v1/responses/']) {
      assert.deepEqual(matchRoute('GET', path), { kind: 'unknown' }, path);
    }
    assert.ok(knownPaths().includes('/v1/messages'));
  });
});

describe('upstreamUrl', () => {
  test('/v1 paths go under the endpoint API prefix, root paths beside it', () => {
    assert.equal(upstreamUrl('http://h:8000/v1', '/v1/messages'), 'http://h:8000/v1/messages');
    assert.equal(
      upstreamUrl('https://h/openai/v1', '/v1/responses'),
      'https://h/openai/v1/responses',
    );
    assert.equal(upstreamUrl('http://h:8000/v1', '/tokenize'), 'http://h:8000/tokenize');
    assert.equal(upstreamUrl('http://h:8000/v1', '/v2/rerank'), 'http://h:8000/v2/rerank');
    assert.equal(upstreamUrl('http://h:8000/api', '/rerank'), 'http://h:8000/api/rerank');
  });
});
