import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parseHttpFixture, parseRecordedResponse } from './http-fixture.ts';

describe('parseHttpFixture', () => {
  test('reads a request with headers and a body, and its response', () => {
    const fixture = parseHttpFixture(
      'POST /v1/chat/completions\nEndpoint-Load-Metrics-Format: TEXT\n\n{"model":"tiny"}\n\n' +
        '--- response\nHTTP/1.1 200 OK\nserver: uvicorn\ncontent-type: application/json\n\n{"id":"x"}\n',
    );
    assert.deepEqual(fixture.request, {
      method: 'POST',
      path: '/v1/chat/completions',
      headers: { 'endpoint-load-metrics-format': 'TEXT' },
      body: '{"model":"tiny"}',
      shortenedFrom: undefined,
    });
    assert.deepEqual(fixture.response, {
      status: 200,
      headers: { server: 'uvicorn', 'content-type': 'application/json' },
      body: '{"id":"x"}\n',
    });
  });

  test('reads a request without a body, and a response without one', () => {
    const fixture = parseHttpFixture(
      'GET /health\n\n--- response\nHTTP/1.1 200 OK\ncontent-length: 0\n\n',
    );
    assert.equal(fixture.request.body, undefined);
    assert.deepEqual(fixture.request.headers, {});
    assert.equal(fixture.response.body, '');
  });

  test('keeps a stream body verbatim', () => {
    const body = 'data: {"a":1}\n\ndata: [DONE]\n\n';
    const fixture = parseHttpFixture(`POST /x\n\n{}\n\n--- response\nHTTP/1.1 200 OK\n\n${body}`);
    assert.equal(fixture.response.body, body);
  });

  test('reads the start and the length of a body the recording shortened', () => {
    const fixture = parseHttpFixture(
      'POST /x\n\n{"content":"hello hel… (15273 characters in all)\n\n--- response\nHTTP/1.1 400 Bad Request\n\n{}',
    );
    assert.equal(fixture.request.body, '{"content":"hello hel');
    assert.equal(fixture.request.shortenedFrom, 15273);
  });

  test('rejects what is not a recording', () => {
    assert.throws(() => parseHttpFixture('GET /x\n'), /--- response/);
    assert.throws(
      () => parseHttpFixture('hello\n\n--- response\nHTTP/1.1 200 OK\n\n'),
      /request line/,
    );
    assert.throws(() => parseRecordedResponse('200 OK\n\n'), /status line/);
    assert.throws(() => parseRecordedResponse('HTTP/1.1 200 OK\nno colon\n\n'), /header line/);
  });
});
