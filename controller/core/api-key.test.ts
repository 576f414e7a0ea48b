import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { decodeBase64Utf8, fitsHeader, readApiKey } from './api-key.ts';
import { secret } from './testing.ts';

describe('decodeBase64Utf8', () => {
  test('decodes base64 of UTF-8 text', () => {
    assert.equal(decodeBase64Utf8('c2stw6k='), 'sk-é');
    assert.equal(decodeBase64Utf8(''), '');
  });

  test('returns undefined for what is not base64, or not UTF-8', () => {
    assert.equal(decodeBase64Utf8('***'), undefined);
    assert.equal(decodeBase64Utf8('/w=='), undefined);
  });
});

describe('fitsHeader', () => {
  test('accepts what Node accepts in a header value', () => {
    assert.ok(fitsHeader('sk-abc\tdef ~'));
    assert.ok(fitsHeader('\u0080\u00ff'));
  });

  test('refuses control characters, DEL and characters past U+00FF', () => {
    for (const bad of ['a\nb', 'a\rb', 'a\u0000', 'a\u007f', 'a\u0100', '🔑']) {
      assert.ok(!fitsHeader(bad), JSON.stringify(bad));
    }
  });
});

describe('readApiKey', () => {
  test('reads and trims the key', () => {
    const secrets = new Map([['k', secret('k', { apiKey: 'sk-1\n' })]]);
    assert.deepEqual(readApiKey(secrets, { name: 'k', key: 'apiKey' }), {
      ok: true,
      apiKey: 'sk-1',
    });
  });
});
