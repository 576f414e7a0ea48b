import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { metricsUrl, parseLoad } from './snapshot.ts';

describe('parseLoad', () => {
  test('accepts a load message, with only the fields a server reports', () => {
    const load = {
      endpoints: [
        { id: 'gpus/10.0.0.7:8000', running: 3, waiting: 4, kvCacheUsage: 0.5, ageMs: 120 },
        { id: 'gpus/10.0.0.8:8000', waiting: 0, ageMs: 0 },
      ],
    };
    assert.deepEqual(parseLoad(load), { ok: true, value: load });
    assert.deepEqual(parseLoad({ endpoints: [] }), { ok: true, value: { endpoints: [] } });
  });

  test('accepts fields it does not know, so they can be added without a new protocol version', () => {
    const load = { endpoints: [{ id: 'a', ageMs: 1, prefixCacheHitRate: 0.3 }], sentAt: 'x' };
    assert.equal(parseLoad(load).ok, true);
  });

  test('refuses what a sidecar must not use', () => {
    for (const [bad, path] of [
      [{}, '/endpoints'],
      [{ endpoints: [{ id: '', ageMs: 0 }] }, '/endpoints/0/id'],
      [{ endpoints: [{ id: 'a' }] }, '/endpoints/0/ageMs'],
      [{ endpoints: [{ id: 'a', ageMs: 1.5 }] }, '/endpoints/0/ageMs'],
      [{ endpoints: [{ id: 'a', ageMs: 0, running: -1 }] }, '/endpoints/0/running'],
      [{ endpoints: [{ id: 'a', ageMs: 0, waiting: '3' }] }, '/endpoints/0/waiting'],
      [{ endpoints: [{ id: 'a', ageMs: 0, kvCacheUsage: 1.2 }] }, '/endpoints/0/kvCacheUsage'],
      [
        {
          endpoints: [
            { id: 'a', ageMs: 0 },
            { id: 'a', ageMs: 0 },
          ],
        },
        '/endpoints/1/id',
      ],
    ] as const) {
      const result = parseLoad(bad);
      assert.equal(result.ok, false, JSON.stringify(bad));
      if (!result.ok) assert.equal(result.errors[0]?.path, path, JSON.stringify(bad));
    }
  });
});

describe('metricsUrl', () => {
  test('is the endpoint URL without its API prefix, plus /metrics', () => {
    for (const [endpoint, metrics] of [
      ['http://10.0.0.7:8000/v1', 'http://10.0.0.7:8000/metrics'],
      ['http://10.0.0.7:8000/v1/', 'http://10.0.0.7:8000/metrics'],
      ['http://[fd00::7]:8000/v1', 'http://[fd00::7]:8000/metrics'],
      ['https://api.example.com/v1', 'https://api.example.com/metrics'],
      ['https://host:443/openai/v1', 'https://host/openai/metrics'],
      ['http://vllm.apps.svc:8000', 'http://vllm.apps.svc:8000/metrics'],
      ['http://host/v1beta', 'http://host/v1beta/metrics'],
      ['http://user:secret@host/v1?x=1#y', 'http://host/metrics'],
    ] as const)
      assert.equal(metricsUrl(endpoint), metrics, endpoint);
  });

  test('is undefined for what is not an http(s) URL', () => {
    assert.equal(metricsUrl('not a url'), undefined);
    assert.equal(metricsUrl('ftp://host/v1'), undefined);
  });
});
