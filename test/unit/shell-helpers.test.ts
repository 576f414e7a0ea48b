import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parseDurationMs, parseHostPort } from '../../cli/args.ts';
import { MAX_RETRY_AFTER_MS, parseRetryAfterMs } from '../../sidecar/proxy/retry-after.ts';

describe('parseHostPort', () => {
  test('defaults the host to loopback, never to all interfaces', () => {
    assert.deepEqual(parseHostPort('8080'), { host: '127.0.0.1', port: 8080 });
    assert.deepEqual(parseHostPort(':0'), { host: '127.0.0.1', port: 0 });
  });
  test('accepts IPv4 and bracketed IPv6', () => {
    assert.deepEqual(parseHostPort('0.0.0.0:9090'), { host: '0.0.0.0', port: 9090 });
    assert.deepEqual(parseHostPort('[::1]:9090'), { host: '::1', port: 9090 });
  });
  test('rejects ports out of range and junk', () => {
    assert.throws(() => parseHostPort('127.0.0.1:70000'));
    assert.throws(() => parseHostPort('localhost:http'));
  });
});

describe('parseDurationMs', () => {
  test('reads units and plain seconds', () => {
    assert.equal(parseDurationMs('250ms'), 250);
    assert.equal(parseDurationMs('2m'), 120_000);
    assert.equal(parseDurationMs('3'), 3_000);
    assert.throws(() => parseDurationMs('soon'));
  });
});

describe('parseRetryAfterMs', () => {
  const now = Date.parse('2026-01-01T00:00:00Z');
  test('reads delay-seconds', () => assert.equal(parseRetryAfterMs('2', now), 2_000));
  test('reads an HTTP date', () =>
    assert.equal(parseRetryAfterMs('Thu, 01 Jan 2026 00:00:05 GMT', now), 5_000));
  test('caps long waits', () => assert.equal(parseRetryAfterMs('3600', now), MAX_RETRY_AFTER_MS));
  test('ignores absent or unreadable values', () => {
    assert.equal(parseRetryAfterMs(undefined, now), undefined);
    assert.equal(parseRetryAfterMs('soon', now), undefined);
    assert.equal(parseRetryAfterMs('', now), undefined);
  });
  test('never goes negative for a date in the past', () =>
    assert.equal(parseRetryAfterMs('Wed, 31 Dec 2025 23:59:00 GMT', now), 0));
});
