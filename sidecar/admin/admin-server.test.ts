import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { acceptsGzip } from './admin-server.ts';

describe('Accept-Encoding for /metrics', () => {
  test('gzip when listed or allowed by *, not when weighted 0 or absent', () => {
    for (const header of ['gzip', 'GZIP', 'gzip, deflate', 'deflate;q=1, gzip;q=0.5', '*', 'br, *'])
      assert.equal(acceptsGzip(header), true, header);
    for (const header of [undefined, '', 'identity', 'br, deflate', 'gzip;q=0', '*;q=0'])
      assert.equal(acceptsGzip(header), false, String(header));
  });

  test('an explicit gzip weight beats *', () => {
    assert.equal(acceptsGzip('*;q=0.5, gzip;q=0'), false);
    assert.equal(acceptsGzip('*;q=0, gzip'), true);
  });
});
