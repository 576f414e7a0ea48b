import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { execFileSync } from 'node:child_process';
import { Value } from '@sinclair/typebox/value';
import { parse } from 'yaml';
import { BALANCE_EXAMPLE } from './examples.ts';
import { resolvePool } from './resolve.ts';
import {
  checkPoolLoad,
  checkPoolSnapshot,
  checkSidecarReport,
} from './snapshot-checks.generated.ts';
import { SNAPSHOT_SCHEMAS, type SnapshotMessage } from './snapshot.schema.ts';
import { metricsUrl, parseLoad, parseSnapshot, type PoolSnapshot } from './snapshot.ts';
import { validatePool } from './validate.ts';

/** The Balance example as a controller would stream it. */
function exampleSnapshot(): PoolSnapshot {
  const validated = validatePool(parse(BALANCE_EXAMPLE));
  assert.ok(validated.ok);
  const resolved = resolvePool(validated.pool, {});
  assert.ok(resolved.ok);
  const { policy, timeouts, endpoints } = resolved;
  return {
    version: 1,
    hash: 'h',
    pool: { namespace: 'ns', name: 'p' },
    policy,
    timeouts,
    endpoints,
  };
}

describe('parseSnapshot', () => {
  test('accepts a snapshot of an older controller, which has no clientStallMs', () => {
    const snapshot = exampleSnapshot();
    assert.equal(snapshot.timeouts.clientStallMs, 60_000);
    delete snapshot.timeouts.clientStallMs;
    assert.equal(parseSnapshot(snapshot).ok, true);
  });

  test('refuses a clientStallMs that is not a positive number', () => {
    for (const clientStallMs of [0, -1, '60s']) {
      const snapshot = exampleSnapshot();
      const result = parseSnapshot({
        ...snapshot,
        timeouts: { ...snapshot.timeouts, clientStallMs },
      });
      assert.equal(result.ok, false, String(clientStallMs));
      if (!result.ok) assert.equal(result.errors[0]?.path, '/timeouts/clientStallMs');
    }
  });
});

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

describe('the compiled checks', () => {
  test('decide as the schemas do', () => {
    const load = { endpoints: [{ id: 'a', ageMs: 1, running: 2 }] };
    const samples: [SnapshotMessage, (v: unknown) => boolean, unknown][] = [
      ['PoolLoad', checkPoolLoad, load],
      ['PoolLoad', checkPoolLoad, { endpoints: [{ id: 'a', ageMs: -1 }] }],
      ['PoolLoad', checkPoolLoad, null],
      ['SidecarReport', checkSidecarReport, { sidecar: 'p', appliedVersion: 0, appliedHash: '' }],
      [
        'SidecarReport',
        checkSidecarReport,
        { sidecar: 'p', appliedVersion: 0, appliedHash: '', endpoints: [] },
      ],
      ['PoolSnapshot', checkPoolSnapshot, { version: 1, hash: 'h' }],
      ['PoolSnapshot', checkPoolSnapshot, []],
    ];
    for (const [message, check, value] of samples)
      assert.equal(check(value), Value.Check(SNAPSHOT_SCHEMAS[message], value), message);
  });

  test('let a process check what the stream carries without loading TypeBox', () => {
    // Records every module the child resolves; it parses a message, valid and not.
    const script = `
      import { registerHooks } from 'node:module';
      const seen = [];
      registerHooks({ resolve(specifier, context, next) {
        const result = next(specifier, context);
        seen.push(result.url);
        return result;
      } });
      const { parseLoad } = await import(${JSON.stringify(new URL('./snapshot.ts', import.meta.url).href)});
      const ok = parseLoad({ endpoints: [{ id: 'a', ageMs: 1 }] }).ok;
      const before = seen.filter((u) => u.includes('typebox')).length;
      const bad = parseLoad({ endpoints: [{ id: 'a' }] });
      const after = seen.filter((u) => u.includes('typebox')).length;
      console.log(JSON.stringify({ ok, before, after, path: bad.ok ? null : bad.errors[0].path }));
    `;
    const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], {
      encoding: 'utf8',
    });
    const seen = JSON.parse(out) as { ok: boolean; before: number; after: number; path: string };
    assert.equal(seen.ok, true);
    assert.equal(seen.before, 0, 'a valid message is checked without TypeBox');
    assert.ok(seen.after > 0, 'TypeBox is loaded to explain a failure');
    assert.equal(seen.path, '/endpoints/0/ageMs');
  });
});
