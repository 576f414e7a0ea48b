/* eslint-disable @typescript-eslint/no-unsafe-assignment, @typescript-eslint/no-unsafe-member-access, @typescript-eslint/no-unsafe-call -- these tests build deliberately malformed documents and read plain data */
import { AFFINITY_MAX_EXTRA_IN_FLIGHT } from './policy-defaults.ts';
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { parse } from 'yaml';
import { BALANCE_EXAMPLE, FAILOVER_EXAMPLE } from './examples.ts';
import { type PoolError, validatePool } from './validate.ts';
import {
  BACKEND_HAS_SOURCE,
  BACKEND_SINGLE_KEY_SOURCE,
  BACKEND_SINGLE_SOURCE,
  BUDGET_HAS_RATE,
  BUDGET_WORKLOAD_NEEDS_SOURCE,
  BUDGETS_ONE_POOL_WIDE,
  BUDGETS_UNIQUE_WORKLOADS,
  HTTP_URL_KEY_NEEDS_OPT_IN,
  MAX_OPEN_FOR_AT_LEAST_OPEN_FOR,
  SERVICE_KEY_NEEDS_OPT_IN,
  WORKLOAD_HAS_SOURCE,
  WORKLOAD_SINGLE_SOURCE,
} from './semantic.ts';

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- tests poke at arbitrary shapes
type Doc = any;

/** A small valid pool to break in one place. */
function pool(): Doc {
  return {
    apiVersion: 'switchyard.dev/v1alpha1',
    kind: 'InferencePool',
    metadata: { name: 'chat' },
    spec: { backends: [{ name: 'a', url: 'http://127.0.0.1:9101/v1' }] },
  };
}

function errorsOf(doc: unknown): PoolError[] {
  const result = validatePool(doc);
  assert.equal(result.ok, false, 'expected the document to be rejected');
  return result.ok ? [] : result.errors;
}

function okSpec(doc: unknown): Doc {
  const result = validatePool(doc);
  assert.ok(
    result.ok,
    `expected a valid pool, got ${JSON.stringify(result.ok ? [] : result.errors)}`,
  );
  return result.pool.spec;
}

/** The errors of a document, as `path: message` lines. */
function lines(doc: unknown): string[] {
  return errorsOf(doc).map((e) => `${e.path}: ${e.message}`);
}

const DEFAULT_SECTIONS = {
  defaultTtft: '500ms',
  affinity: {
    key: 'Prefix',
    header: 'x-session-id',
    prefixChars: 4096,
    maxSlowdown: 2.5,
    maxExtraInFlight: AFFINITY_MAX_EXTRA_IN_FLIGHT,
    loadFactor: 1.25,
  },
  health: {
    window: '10s',
    minRequests: 20,
    maxErrorRate: 0.5,
    consecutiveErrors: 5,
    max429Rate: 0.3,
    maxTtftSlowdown: 4,
    openFor: '30s',
    maxOpenFor: '5m',
  },
  retry: { budgetPercent: 20, minPerSecond: 10, maxAttempts: 3 },
  coldStart: { idleAfter: '60s' },
  timeouts: { connect: '5s', firstByte: '60s', idle: '5m', clientStall: '60s' },
  drift: { expect: 'Majority', action: 'Exclude' },
};

describe('validatePool: the reference examples', () => {
  it('accepts the Balance example exactly as written, with every default filled in', () => {
    assert.deepEqual(okSpec(parse(BALANCE_EXAMPLE)), {
      ...DEFAULT_SECTIONS,
      mode: 'Balance',
      backends: ['a', 'b', 'c'].map((name, i) => ({
        name,
        url: `http://127.0.0.1:910${i + 1}/v1`,
        costPerMTok: 0,
        allowInsecureApiKey: false,
      })),
      health: {
        ...DEFAULT_SECTIONS.health,
        window: '5s',
        minRequests: 10,
        maxErrorRate: 0.5,
        openFor: '30s',
      },
    });
  });

  it('accepts the Failover example exactly as written', () => {
    const result = validatePool(parse(FAILOVER_EXAMPLE));
    assert.ok(result.ok);
    assert.equal(result.pool.metadata.name, 'chat');
    assert.deepEqual(result.pool.spec, {
      ...DEFAULT_SECTIONS,
      mode: 'Failover',
      costWeightPerMs: 0.001,
      backends: [
        {
          name: 'primary',
          url: 'http://127.0.0.1:9101/v1',
          costPerMTok: 0.2,
          allowInsecureApiKey: false,
        },
        {
          name: 'secondary',
          url: 'http://127.0.0.1:9102/v1',
          costPerMTok: 0.6,
          model: 'other-model',
          allowInsecureApiKey: false,
        },
      ],
    });
  });
});

describe('validatePool: defaults', () => {
  it('fills every default of a minimal pool', () => {
    assert.deepEqual(okSpec(pool()), {
      ...DEFAULT_SECTIONS,
      mode: 'Balance',
      backends: [
        { name: 'a', url: 'http://127.0.0.1:9101/v1', costPerMTok: 0, allowInsecureApiKey: false },
      ],
    });
  });

  it('keeps what is set and fills the rest of a section', () => {
    const doc = pool();
    doc.spec.health = { window: '1m' };
    doc.spec.drift = { probeEvery: '10m', expect: 'sha256:abc' };
    const spec = okSpec(doc);
    assert.deepEqual(spec.health, { ...DEFAULT_SECTIONS.health, window: '1m' });
    assert.deepEqual(spec.drift, { probeEvery: '10m', expect: 'sha256:abc', action: 'Exclude' });
    assert.equal('costWeightPerMs' in spec, false, 'no default: pure latency routing');
    assert.equal('models' in spec, false);
  });

  it('treats null as unset, like the API server (which prunes nulls)', () => {
    const doc = parse(`
apiVersion: switchyard.dev/v1alpha1
kind: InferencePool
metadata: {name: chat}
spec:
  mode:
  health:
  affinity: {key: ~, header: x-user}
  backends:
  - {name: a, url: http://127.0.0.1:1/v1, model: null}
`);
    const spec = okSpec(doc);
    assert.equal(spec.mode, 'Balance');
    assert.deepEqual(spec.health, DEFAULT_SECTIONS.health);
    assert.deepEqual(spec.affinity, { ...DEFAULT_SECTIONS.affinity, header: 'x-user' });
    assert.equal('model' in spec.backends[0], false);
  });

  it('does not change the input, and returns a copy', () => {
    const doc = pool();
    const before = structuredClone(doc);
    const result = validatePool(doc);
    assert.deepEqual(doc, before);
    assert.ok(result.ok);
    doc.spec.backends[0].name = 'changed';
    assert.equal(result.pool.spec.backends[0]?.name, 'a');
  });

  it('is idempotent: a validated pool validates to itself', () => {
    const first = validatePool(parse(FAILOVER_EXAMPLE));
    assert.ok(first.ok);
    const second = validatePool(first.pool);
    assert.ok(second.ok);
    assert.deepEqual(second.pool, first.pool);
  });
});

describe('validatePool: the document', () => {
  it('needs a mapping', () => {
    for (const doc of [null, undefined, 42, 'pool', [], true]) {
      const errors = errorsOf(doc);
      assert.equal(errors.length, 1);
      assert.equal(errors[0]?.path, '<root>');
      assert.match(
        errors[0]?.message ?? '',
        /^must be a mapping with apiVersion, kind, metadata and spec, not /,
      );
    }
  });

  it('checks apiVersion, kind and metadata.name', () => {
    assert.deepEqual(lines({ spec: pool().spec }), [
      'apiVersion: is required',
      'kind: is required',
      'metadata: is required',
    ]);
    const doc = pool();
    doc.apiVersion = 'switchyard.dev/v1';
    doc.kind = 'Deployment';
    doc.metadata = { namespace: 'Prod', labels: { app: 'x' } };
    assert.deepEqual(lines(doc), [
      'apiVersion: must be switchyard.dev/v1alpha1, not a string ("switchyard.dev/v1")',
      'kind: must be InferencePool, not a string ("Deployment")',
      'metadata.namespace: must be a namespace name: lower-case letters, digits and "-", starting and ending with a letter or digit',
      'metadata.name: is required',
    ]);
  });

  it('keeps other metadata as it is (a resource read from the API server validates too)', () => {
    const doc = pool();
    doc.metadata = {
      name: 'chat',
      namespace: 'prod',
      uid: 'b3c1',
      generation: 3,
      labels: { app: 'chat' },
      managedFields: [{ manager: 'kubectl', fieldsV1: { 'f:spec': {} } }],
    };
    doc.status = {
      observedGeneration: 3,
      conditions: [
        {
          type: 'Ready',
          status: 'True',
          lastTransitionTime: '2025-01-31T12:00:00Z',
          reason: 'EndpointsReady',
          message: '2 of 2 endpoints are ready',
        },
      ],
      endpoints: { ready: 2, total: 2, drifted: 0 },
      snapshot: { version: 7, hash: 'abc' },
      sidecars: { connected: 4, inSync: 4 },
    };
    const result = validatePool(doc);
    assert.ok(result.ok);
    assert.deepEqual(result.pool.metadata, doc.metadata);
    assert.deepEqual(result.pool.status, doc.status);
  });

  it('checks status when there is one', () => {
    const doc = pool();
    doc.status = { conditions: [{ type: 'Ready', status: 'Yes' }], endpoints: { ready: -1 } };
    assert.deepEqual(lines(doc), [
      'status.conditions[0].status: must be one of True, False, Unknown, not a string ("Yes")',
      'status.conditions[0].lastTransitionTime: is required',
      'status.conditions[0].reason: is required',
      'status.conditions[0].message: is required',
      'status.endpoints.ready: must be at least 0, not -1',
    ]);
  });
});

describe('validatePool: unknown fields', () => {
  it('names a misspelt field and suggests the right one', () => {
    const doc = pool();
    doc.spec.helth = { window: '5s' };
    doc.spec.backends[0].costPerMtok = 0.2;
    doc.spec.affinity = { max_slowdown: 3 };
    doc.spc = {};
    assert.deepEqual(lines(doc), [
      'spec.backends[0].costPerMtok: unknown field; did you mean costPerMTok?',
      'spec.helth: unknown field; did you mean health?',
      'spec.affinity.max_slowdown: unknown field; did you mean maxSlowdown?',
      'spc: unknown field; did you mean spec?',
    ]);
  });

  it('lists the fields when nothing is close', () => {
    const doc = pool();
    doc.spec.retry = { backoff: '1s' };
    assert.deepEqual(lines(doc), [
      'spec.retry.backoff: unknown field; the fields here are budgetPercent, minPerSecond, maxAttempts',
    ]);
  });

  it('writes odd keys so they can be found', () => {
    const doc = pool();
    doc.spec = JSON.parse(
      '{"backends": [{"name": "a", "url": "https://x/v1"}], "a key": 1, "__proto__": {"polluted": true}}',
    );
    const errors = lines(doc);
    assert.ok(
      errors.includes(
        'spec["a key"]: unknown field; the fields here are mode, costWeightPerMs, defaultTtft, models, aliases, backends, affinity, health, retry, coldStart, timeouts, drift, flowControl, scaleFromZero',
      ),
      errors.join('\n'),
    );
    assert.ok(
      errors.some((e) => e.startsWith('spec.__proto__: unknown field')),
      errors.join('\n'),
    );
    assert.equal(({} as Doc).polluted, undefined);
  });
});

describe('validatePool: types and values', () => {
  it('says which type a field needs and what it got', () => {
    const doc = pool();
    doc.spec.mode = 1;
    doc.spec.models = 'llama';
    doc.spec.backends[0].costPerMTok = '0.2';
    doc.spec.backends[0].allowInsecureApiKey = 'yes';
    doc.spec.health = { minRequests: '10', maxErrorRate: null, window: 5 };
    doc.spec.retry = [];
    doc.spec.affinity = { prefixChars: 100.5, maxSlowdown: Infinity };
    assert.deepEqual(lines(doc), [
      'spec.backends[0].costPerMTok: must be a number, not a string ("0.2")',
      'spec.backends[0].allowInsecureApiKey: must be true or false, not a string ("yes")',
      'spec.mode: must be one of Balance, Failover, not a number (1)',
      'spec.models: must be a list, not a string ("llama")',
      'spec.health.minRequests: must be a whole number, not a string ("10")',
      'spec.health.window: must be a duration like 500ms, 5s, 10m or 1h30m: 5 has no unit (5ms? 5s?)',
      'spec.retry: must be a mapping of fields, not a list',
      'spec.affinity.prefixChars: must be a whole number, not 100.5',
      'spec.affinity.maxSlowdown: must be a finite number, not Infinity',
    ]);
  });

  it('checks ranges and says them', () => {
    const doc = pool();
    doc.spec.costWeightPerMs = 0;
    doc.spec.affinity = { prefixChars: 10, maxSlowdown: 0.5 };
    doc.spec.health = {
      minRequests: 0,
      maxErrorRate: 1.5,
      consecutiveErrors: -1,
      max429Rate: -0.1,
      maxTtftSlowdown: 0.9,
    };
    doc.spec.retry = { budgetPercent: 101, minPerSecond: -1, maxAttempts: 0 };
    doc.spec.backends[0].costPerMTok = -1;
    assert.deepEqual(lines(doc), [
      'spec.backends[0].costPerMTok: must be at least 0, not -1',
      'spec.costWeightPerMs: must be greater than 0, not 0',
      'spec.affinity.prefixChars: must be from 64 to 1000000, not 10',
      'spec.affinity.maxSlowdown: must be at least 1, not 0.5',
      'spec.health.minRequests: must be at least 1, not 0',
      'spec.health.maxErrorRate: must be from 0 to 1, not 1.5',
      'spec.health.consecutiveErrors: must be from 0 to 1000, not -1',
      'spec.health.max429Rate: must be from 0 to 1, not -0.1',
      'spec.health.maxTtftSlowdown: must be at least 1, not 0.9',
      'spec.retry.budgetPercent: must be from 0 to 100, not 101',
      'spec.retry.minPerSecond: must be at least 0, not -1',
      'spec.retry.maxAttempts: must be from 1 to 10, not 0',
    ]);
  });

  it('accepts the edges of every range', () => {
    const doc = pool();
    doc.spec.affinity = { prefixChars: 64, maxSlowdown: 1 };
    doc.spec.health = { minRequests: 1, maxErrorRate: 0, max429Rate: 1, maxTtftSlowdown: 1 };
    doc.spec.retry = { budgetPercent: 0, minPerSecond: 0, maxAttempts: 10 };
    okSpec(doc);
    doc.spec.affinity.prefixChars = 1_000_000;
    doc.spec.retry = { budgetPercent: 100, maxAttempts: 1 };
    okSpec(doc);
  });

  it('suggests the spelling of an enum value', () => {
    const doc = pool();
    doc.spec.mode = 'failover';
    doc.spec.affinity = { key: 'Cookie' };
    doc.spec.drift = { action: 'warn' };
    assert.deepEqual(lines(doc), [
      'spec.mode: must be one of Balance, Failover, not a string ("failover") (did you mean Failover?)',
      'spec.affinity.key: must be one of Prefix, Header, None, not a string ("Cookie")',
      'spec.drift.action: must be one of Exclude, Warn, not a string ("warn") (did you mean Warn?)',
    ]);
  });

  it('explains bad durations', () => {
    const doc = pool();
    doc.spec.defaultTtft = '0s';
    doc.spec.health = { window: '10', openFor: '1h0m', maxOpenFor: '30m1h' };
    doc.spec.coldStart = { idleAfter: '1.5s' };
    doc.spec.timeouts = { connect: '', firstByte: '2 min', idle: '1d', clientStall: '60' };
    doc.spec.drift = { probeEvery: '1000000ms' };
    const help = 'must be a duration like 500ms, 5s, 10m or 1h30m';
    assert.deepEqual(lines(doc), [
      `spec.defaultTtft: ${help}: it must be longer than 0`,
      `spec.health.window: ${help}: "10" has no unit (10ms? 10s?)`,
      `spec.health.openFor: ${help}: leave out zero parts (1h, not 1h0m)`,
      `spec.health.maxOpenFor: ${help}: put the largest unit first and each unit only once (1h30m, not 30m1h)`,
      `spec.coldStart.idleAfter: ${help}: use whole numbers (1500ms, not 1.5s)`,
      `spec.timeouts.connect: ${help}: it is empty`,
      `spec.timeouts.firstByte: ${help}: write numbers with units h, m, s or ms and nothing else`,
      `spec.timeouts.idle: ${help}: unknown unit "d" (use h, m, s or ms)`,
      `spec.timeouts.clientStall: ${help}: "60" has no unit (60ms? 60s?)`,
      `spec.drift.probeEvery: ${help}: each number may have at most 6 digits`,
    ]);
  });

  it('checks names, ports, references and headers', () => {
    const doc = pool();
    doc.metadata.name = 'Chat Pool';
    doc.spec.backends = [
      { name: 'In-Cluster', url: 'https://a.example/v1' },
      {
        name: 'b',
        service: { name: '1vllm', port: 70000 },
        apiKeySecretRef: { name: 'Key', key: 'a/b' },
        allowInsecureApiKey: true,
      },
      { name: 'c', service: { name: 'vllm', port: '8080' } },
      { name: 'd', service: { name: 'vllm', port: 'http--2' } },
      { name: 'e', url: 'https://a.example/v1', apiKeyEnv: '1KEY' },
      { name: '', url: 'https://a.example/v1' },
    ];
    doc.spec.affinity = { key: 'Header', header: 'x session' };
    const port =
      'must be a port number from 1 to 65535 or a port name (up to 15 lower-case letters, digits and "-", with at least one letter)';
    assert.deepEqual(lines(doc), [
      'metadata.name: must be a name of lower-case letters, digits, "-" and ".", starting and ending with a letter or digit, like chat',
      'spec.backends[0].name: must be a name of lower-case letters, digits and "-", starting and ending with a letter or digit, like in-cluster or provider-2',
      'spec.backends[1].service.name: must be a Service name: lower-case letters, digits and "-", starting with a letter and ending with a letter or digit',
      `spec.backends[1].service.port: ${port}`,
      'spec.backends[1].apiKeySecretRef.name: must be a Secret name: lower-case letters, digits, "-" and ".", starting and ending with a letter or digit',
      'spec.backends[1].apiKeySecretRef.key: must be a Secret key: letters, digits, "-", "_" and "."',
      `spec.backends[2].service.port: ${port}`,
      `spec.backends[3].service.port: ${port}`,
      'spec.backends[4].apiKeyEnv: must be an environment variable name: letters, digits and "_", not starting with a digit',
      'spec.backends[5].name: must not be empty',
      'spec.affinity.header: must be an HTTP header name like x-session-id (no spaces or ":")',
    ]);
  });

  it('accepts port numbers and port names', () => {
    const doc = pool();
    doc.spec.backends = [
      { name: 'a', service: { name: 'vllm', port: 1 } },
      { name: 'b', service: { name: 'vllm', port: 65535 } },
      { name: 'c', service: { name: 'vllm', port: 'http' } },
      { name: 'd', service: { name: 'vllm', port: 'grpc-web2' } },
      { name: 'e', service: { name: 'vllm', port: '8080-tcp' } },
    ];
    okSpec(doc);
  });

  it('checks URLs for real', () => {
    const doc = pool();
    doc.spec.backends = [
      { name: 'a', url: 'ftp://example.com/v1' },
      { name: 'b', url: 'http://user:pw@example.com/v1' },
      { name: 'c', url: 'https://example.com/v1?key=1' },
      { name: 'd', url: 'http://example.com:99999/v1' },
      { name: 'e', url: 'example.com/v1' },
      {
        name: 'f',
        urls: ['http://127.0.0.1:1/v1', 'http://example.com/a b', 'https://[::1]:8443/v1'],
      },
      { name: 'g', url: 'http://exa mple.com/v1' },
    ];
    const help = 'must be an http or https URL like https://api.example.com/v1';
    assert.deepEqual(lines(doc), [
      `spec.backends[0].url: ${help}: the scheme must be http or https`,
      `spec.backends[1].url: ${help}: put no user or password into it (use apiKeySecretRef or apiKeyEnv)`,
      `spec.backends[2].url: ${help}: it is a base URL, without ?query or #fragment`,
      `spec.backends[3].url: ${help}: it does not parse as a URL`,
      `spec.backends[4].url: ${help}: it does not parse as a URL`,
      `spec.backends[5].urls[1]: ${help}, with no spaces, user, ?query or #fragment`,
      `spec.backends[6].url: ${help}: it does not parse as a URL`,
    ]);
  });
});

describe('validatePool: urls lists', () => {
  it('accepts several endpoints for one backend', () => {
    const doc = pool();
    doc.spec.backends = [
      { name: 'replicas', urls: ['http://10.0.0.1:8000/v1', 'http://10.0.0.2:8000/v1'] },
    ];
    assert.deepEqual(okSpec(doc).backends[0].urls, [
      'http://10.0.0.1:8000/v1',
      'http://10.0.0.2:8000/v1',
    ]);
  });

  it('rejects an empty list, duplicates and too many', () => {
    const doc = pool();
    doc.spec.backends = [
      { name: 'a', urls: [] },
      { name: 'b', urls: ['http://10.0.0.1/v1', 'http://10.0.0.1/v1'] },
      { name: 'c', urls: Array.from({ length: 65 }, (_, i) => `http://10.0.1.${i}/v1`) },
      { name: 'd', urls: 'http://10.0.0.1/v1' },
    ];
    assert.deepEqual(lines(doc), [
      'spec.backends[0].urls: must not be empty',
      'spec.backends[1].urls[1]: duplicate value "http://10.0.0.1/v1": already at spec.backends[1].urls[0]',
      'spec.backends[2].urls: must have at most 64 items, not 65',
      'spec.backends[3].urls: must be a list, not a string ("http://10.0.0.1/v1")',
    ]);
  });

  it('rejects duplicate models', () => {
    const doc = pool();
    doc.spec.models = ['a', 'b', 'a'];
    assert.deepEqual(lines(doc), [
      'spec.models[2]: duplicate value "a": already at spec.models[0]',
    ]);
  });

  it('needs 1 to 64 backends', () => {
    const doc = pool();
    doc.spec.backends = [];
    assert.deepEqual(lines(doc), ['spec.backends: must not be empty']);
    doc.spec.backends = Array.from({ length: 65 }, (_, i) => ({
      name: `b${i}`,
      url: `http://10.0.0.${i}/v1`,
    }));
    assert.deepEqual(lines(doc), ['spec.backends: must have at most 64 items, not 65']);
    delete doc.spec.backends;
    assert.deepEqual(lines(doc), ['spec.backends: is required']);
  });
});

describe('validatePool: semantic rules (the twins of the CRD CEL rules)', () => {
  const cases: { name: string; backends?: Doc[]; health?: Doc; error: PoolError }[] = [
    {
      name: 'service and url',
      backends: [{ name: 'a', service: { name: 'vllm', port: 8000 }, url: 'https://x/v1' }],
      error: { path: 'spec.backends[0]', message: BACKEND_SINGLE_SOURCE.message },
    },
    {
      name: 'service and urls',
      backends: [{ name: 'a', service: { name: 'vllm', port: 8000 }, urls: ['https://x/v1'] }],
      error: { path: 'spec.backends[0]', message: BACKEND_SINGLE_SOURCE.message },
    },
    {
      name: 'url and urls',
      backends: [{ name: 'a', url: 'https://x/v1', urls: ['https://y/v1'] }],
      error: { path: 'spec.backends[0]', message: BACKEND_SINGLE_SOURCE.message },
    },
    {
      name: 'no endpoint source',
      backends: [
        { name: 'a', url: 'https://x/v1' },
        { name: 'b', costPerMTok: 1 },
      ],
      error: { path: 'spec.backends[1]', message: BACKEND_HAS_SOURCE.message },
    },
    {
      name: 'duplicate backend names',
      backends: [
        { name: 'a', url: 'https://x/v1' },
        { name: 'b', url: 'https://y/v1' },
        { name: 'b', url: 'https://z/v1' },
        { name: 'a', url: 'https://w/v1' },
      ],
      error: {
        path: 'spec.backends',
        message: 'backend names must be unique: "a" is used more than once',
      },
    },
    {
      name: 'apiKeySecretRef on a service backend',
      backends: [
        {
          name: 'a',
          service: { name: 'vllm', port: 8000 },
          apiKeySecretRef: { name: 'key', key: 'k' },
        },
      ],
      error: {
        path: 'spec.backends[0].apiKeySecretRef',
        message: SERVICE_KEY_NEEDS_OPT_IN.message,
      },
    },
    {
      name: 'apiKeySecretRef on a service backend, allowInsecureApiKey: false',
      backends: [
        {
          name: 'a',
          service: { name: 'vllm', port: 8000 },
          apiKeySecretRef: { name: 'key', key: 'k' },
          allowInsecureApiKey: false,
        },
      ],
      error: {
        path: 'spec.backends[0].apiKeySecretRef',
        message: SERVICE_KEY_NEEDS_OPT_IN.message,
      },
    },
    {
      name: 'two key sources',
      backends: [
        {
          name: 'a',
          url: 'https://x/v1',
          apiKeySecretRef: { name: 'key', key: 'k' },
          apiKeyEnv: 'KEY',
        },
      ],
      error: { path: 'spec.backends[0]', message: BACKEND_SINGLE_KEY_SOURCE.message },
    },
    {
      name: 'a key over plain http to another host',
      backends: [{ name: 'a', url: 'http://10.0.0.1:8000/v1', apiKeyEnv: 'KEY' }],
      error: { path: 'spec.backends[0]', message: HTTP_URL_KEY_NEEDS_OPT_IN.message },
    },
    {
      name: 'a key over plain http to one of several urls',
      backends: [
        {
          name: 'a',
          urls: ['https://x/v1', 'http://127.0.0.1.example.com/v1'],
          apiKeySecretRef: { name: 'key', key: 'k' },
        },
      ],
      error: { path: 'spec.backends[0]', message: HTTP_URL_KEY_NEEDS_OPT_IN.message },
    },
    {
      name: 'maxOpenFor shorter than openFor (openFor set, maxOpenFor defaulted)',
      health: { openFor: '10m' },
      error: { path: 'spec.health.maxOpenFor', message: MAX_OPEN_FOR_AT_LEAST_OPEN_FOR.message },
    },
  ];
  for (const c of cases) {
    it(`reports ${c.name}`, () => {
      const doc = pool();
      if (c.backends !== undefined) doc.spec.backends = c.backends;
      if (c.health !== undefined) doc.spec.health = c.health;
      assert.deepEqual(errorsOf(doc), [c.error]);
    });
  }

  it('accepts what the rules allow', () => {
    const doc = pool();
    doc.spec.backends = [
      {
        name: 'a',
        service: { name: 'vllm', port: 8000 },
        apiKeySecretRef: { name: 'key', key: 'k' },
        allowInsecureApiKey: true,
      },
      { name: 'b', url: 'https://api.example.com/v1', apiKeySecretRef: { name: 'key', key: 'k' } },
      { name: 'c', url: 'http://10.0.0.1/v1', apiKeyEnv: 'KEY', allowInsecureApiKey: true },
      {
        name: 'd',
        urls: [
          'http://localhost:8000/v1',
          'http://localhost',
          'http://127.0.0.1/v1',
          'http://[::1]:9000/v1',
        ],
        apiKeyEnv: 'KEY',
      },
      { name: 'e', url: 'http://10.0.0.2/v1' },
    ];
    doc.spec.health = { openFor: '5m', maxOpenFor: '5m' };
    okSpec(doc);
  });

  it('messages are the ones the API server gives (same text as the CEL rules)', () => {
    for (const rule of [
      BACKEND_SINGLE_SOURCE,
      BACKEND_HAS_SOURCE,
      BACKEND_SINGLE_KEY_SOURCE,
      SERVICE_KEY_NEEDS_OPT_IN,
      HTTP_URL_KEY_NEEDS_OPT_IN,
      MAX_OPEN_FOR_AT_LEAST_OPEN_FOR,
    ]) {
      assert.ok(
        cases.some((c) => c.error.message === rule.message),
        rule.message,
      );
    }
  });
});

describe('validatePool: everything at once', () => {
  it('lists every problem, in document order, each with its path', () => {
    const doc = parse(`
apiVersion: switchyard.dev/v1alpha1
kind: InferencePool
metadata: {name: chat}
spec:
  mode: Failover
  backends:
  - {name: a, url: http://127.0.0.1:9101/v1, service: {name: vllm, port: 8000}}
  - {name: a, urls: [http://10.0.0.1/v1], apiKeyEnv: KEY}
  - {name: c}
  helth: {window: 5s}
  health: {window: 5, openFor: 10m}
  retry: {maxAttempts: 0}
`);
    assert.deepEqual(errorsOf(doc), [
      {
        path: 'spec.backends',
        message: 'backend names must be unique: "a" is used more than once',
      },
      { path: 'spec.backends[0]', message: BACKEND_SINGLE_SOURCE.message },
      { path: 'spec.backends[1]', message: HTTP_URL_KEY_NEEDS_OPT_IN.message },
      { path: 'spec.backends[2]', message: BACKEND_HAS_SOURCE.message },
      { path: 'spec.helth', message: 'unknown field; did you mean health?' },
      {
        path: 'spec.health.window',
        message: 'must be a duration like 500ms, 5s, 10m or 1h30m: 5 has no unit (5ms? 5s?)',
      },
      { path: 'spec.health.maxOpenFor', message: MAX_OPEN_FOR_AT_LEAST_OPEN_FOR.message },
      { path: 'spec.retry.maxAttempts', message: 'must be from 1 to 10, not 0' },
    ]);
  });
});

describe('validatePool: inputs that are not plain data', () => {
  it('reports a cycle instead of looping', () => {
    const doc = pool();
    doc.spec.backends[0].self = doc.spec;
    assert.deepEqual(errorsOf(doc), [
      {
        path: 'spec.backends[0].self',
        message: 'refers to itself (a YAML alias inside its own anchor)',
      },
    ]);
  });

  it('accepts shared (non-cyclic) values, as YAML aliases make them', () => {
    const doc = pool();
    const health = { window: '5s' };
    doc.spec.health = health;
    doc.metadata.annotations = { a: health };
    okSpec(doc);
  });

  it('rejects functions, symbols, class instances and holes', () => {
    const cases: [Doc, string, string][] = [
      [() => 1, '<root>', 'must be plain data (YAML or JSON values), not function'],
      [
        { ...pool(), spec: new Map() },
        'spec',
        'must be plain data (YAML or JSON values), not a class instance',
      ],
      [
        { ...pool(), kind: Symbol('k') },
        'kind',
        'must be plain data (YAML or JSON values), not symbol',
      ],
      [{ ...pool(), kind: 10n }, 'kind', 'must be plain data (YAML or JSON values), not bigint'],
      [
        { ...pool(), metadata: { name: 'x', d: new Date(0) } },
        'metadata.d',
        'must be plain data (YAML or JSON values), not a class instance',
      ],
      [
        { ...pool(), spec: { backends: [undefined] } },
        'spec.backends[0]',
        'must be a value, not undefined',
      ],
    ];
    for (const [doc, path, message] of cases) assert.deepEqual(errorsOf(doc), [{ path, message }]);
  });

  it('rejects documents nested too deeply or too large', () => {
    let deep: Doc = 'x';
    for (let i = 0; i < 200; i++) deep = { d: deep };
    const doc = pool();
    doc.metadata.annotations = deep;
    const [error] = errorsOf(doc);
    assert.match(error?.message ?? '', /^is nested too deeply/);
    const big = pool();
    big.metadata.labels = Array.from({ length: 250_000 }, () => 1);
    assert.match(errorsOf(big)[0]?.message ?? '', /^the document is too large/);
  });

  it('accepts objects without a prototype (as some parsers make them)', () => {
    const doc = Object.assign(Object.create(null), pool());
    okSpec(doc);
  });
});

describe('validatePool: models, aliases and weights', () => {
  function withModels(): Doc {
    const doc = pool();
    doc.spec.backends = [
      { name: 'base', url: 'http://127.0.0.1:9101/v1', models: ['llama-3.1-8b', 'sql-lora'] },
      { name: 'plain', url: 'http://127.0.0.1:9102/v1' },
    ];
    doc.spec.aliases = [{ name: 'gpt-4o-mini', model: 'llama-3.1-8b' }];
    return doc;
  }

  it('accepts models per backend (adapters included), aliases and weights', () => {
    const doc = withModels();
    doc.spec.backends[0].weight = 95;
    doc.spec.backends[1].weight = 5;
    const spec = okSpec(doc);
    assert.deepEqual(spec.backends[0].models, ['llama-3.1-8b', 'sql-lora']);
    assert.equal(spec.backends[1].models, undefined);
    assert.equal(spec.backends[0].weight, 95);
    assert.deepEqual(spec.aliases, [{ name: 'gpt-4o-mini', model: 'llama-3.1-8b' }]);
  });

  it('refuses empty, duplicate and over-long model names', () => {
    const doc = withModels();
    doc.spec.backends[0].models = ['a', '', 'a', 'x'.repeat(257)];
    assert.deepEqual(lines(doc), [
      'spec.backends[0].models[1]: must not be empty',
      'spec.backends[0].models[2]: duplicate value "a": already at spec.backends[0].models[0]',
      'spec.backends[0].models[3]: must be at most 256 characters long',
    ]);
    doc.spec.backends[0].models = [];
    assert.deepEqual(lines(doc), ['spec.backends[0].models: must not be empty']);
  });

  it('refuses weights that are not whole numbers from 0 to 1000000', () => {
    const doc = pool();
    doc.spec.backends = [
      { name: 'a', url: 'http://127.0.0.1:9101/v1', weight: 1.5 },
      { name: 'b', url: 'http://127.0.0.1:9102/v1', weight: -1 },
      { name: 'c', url: 'http://127.0.0.1:9103/v1', weight: 1_000_001 },
      { name: 'd', url: 'http://127.0.0.1:9104/v1', weight: '5' },
    ];
    assert.deepEqual(lines(doc), [
      'spec.backends[0].weight: must be a whole number, not 1.5',
      'spec.backends[1].weight: must be from 0 to 1000000, not -1',
      'spec.backends[2].weight: must be from 0 to 1000000, not 1000001',
      'spec.backends[3].weight: must be a whole number, not a string ("5")',
    ]);
  });

  it('in Balance mode wants a weight on every backend or none, not all 0', () => {
    const doc = pool();
    doc.spec.backends = [
      { name: 'a', url: 'http://127.0.0.1:9101/v1', weight: 95 },
      { name: 'b', url: 'http://127.0.0.1:9102/v1' },
    ];
    assert.deepEqual(lines(doc), [
      'spec.backends: in Balance mode the backends share one split: set weight on every backend or on none',
    ]);
    doc.spec.backends[1].weight = 0;
    doc.spec.backends[0].weight = 0;
    assert.deepEqual(lines(doc), [
      'spec.backends: the weights are all 0, so no backend would get any traffic: give one a weight above 0',
    ]);
    doc.spec.backends[0].weight = 1;
    okSpec(doc);
  });

  it('in Failover mode takes weights on some backends, none of them 0', () => {
    const doc = pool();
    doc.spec.mode = 'Failover';
    doc.spec.backends = [
      { name: 'a', url: 'http://127.0.0.1:9101/v1', weight: 3 },
      { name: 'b', url: 'http://127.0.0.1:9102/v1' },
    ];
    okSpec(doc);
    doc.spec.backends[1].weight = 0;
    assert.deepEqual(lines(doc), [
      'spec.backends: in Failover mode each backend is a tier of its own, so a weight of 0 leaves its tier without traffic: remove the weight or the backend',
    ]);
  });

  it('refuses duplicate alias names at the later one', () => {
    const doc = withModels();
    doc.spec.aliases.push({ name: 'gpt-4o-mini', model: 'sql-lora' });
    assert.deepEqual(lines(doc), [
      'spec.aliases[1]: duplicate name "gpt-4o-mini": already at spec.aliases[0]',
    ]);
  });

  it('refuses chains and loops, naming the alias', () => {
    const doc = withModels();
    doc.spec.aliases.push({ name: 'fast', model: 'gpt-4o-mini' });
    assert.deepEqual(lines(doc), [
      'spec.aliases: an alias must point at a served model, not at another alias: "gpt-4o-mini" is an alias and the model of an alias',
    ]);
    doc.spec.aliases = [{ name: 'me', model: 'me' }];
    assert.deepEqual(lines(doc), [
      'spec.aliases: an alias must point at a served model, not at another alias: "me" is an alias and the model of an alias',
    ]);
  });

  it('checks aliases against spec.models', () => {
    const doc = withModels();
    doc.spec.models = ['llama-3.1-8b', 'gpt-4o-mini'];
    assert.deepEqual(lines(doc), [
      'spec.aliases: an alias name must not be one of spec.models: a request for it would be rewritten to another model, so the served model of that name could never be reached',
    ]);
    doc.spec.models = ['sql-lora'];
    assert.deepEqual(lines(doc), [
      'spec.aliases: with spec.models set, every alias must point at one of spec.models: the pool refuses any other model, so the alias would only ever answer 404',
    ]);
    doc.spec.models = [];
    okSpec(doc);
  });

  it('refuses an alias named like a model a backend serves, at the alias name', () => {
    const doc = withModels();
    doc.spec.aliases.push({ name: 'sql-lora', model: 'llama-3.1-8b' });
    assert.deepEqual(lines(doc), [
      'spec.aliases[1].name: "sql-lora" is a model a backend serves (spec.backends[0].models): as an alias it would be rewritten and that model never reached; give the alias another name',
    ]);
  });

  it('refuses an alias without its fields and unknown alias fields', () => {
    const doc = withModels();
    doc.spec.aliases = [{ name: 'x' }, { name: 'y', model: 'z', modle: 'q' }];
    assert.deepEqual(lines(doc), [
      'spec.aliases[0].model: is required',
      'spec.aliases[1].modle: unknown field; the fields here are name, model',
    ]);
  });
});

describe('validatePool: flowControl', () => {
  const FLOW_DEFAULTS = {
    defaultPriority: 0,
    maxQueueWait: '30s',
    queue: { maxRequests: 1000, maxBytes: 67_108_864 },
    saturation: { kvCacheUsage: 0.95, sheddableHeadroom: 0.2, preemptSheddable: false },
  };

  function withFlow(flowControl: unknown): Doc {
    const doc = pool();
    doc.spec.flowControl = flowControl;
    return doc;
  }

  it('is off when left out: no section is defaulted in', () => {
    assert.equal('flowControl' in okSpec(pool()), false);
  });

  it('fills every default of an empty section', () => {
    assert.deepEqual(okSpec(withFlow({})).flowControl, FLOW_DEFAULTS);
  });

  it('keeps what is set and fills the rest', () => {
    const spec = okSpec(
      withFlow({ queue: { maxBytes: 1024 }, saturation: { maxInFlightPerEndpoint: 8 } }),
    );
    assert.deepEqual(spec.flowControl, {
      ...FLOW_DEFAULTS,
      queue: { maxRequests: 1000, maxBytes: 1024 },
      saturation: {
        kvCacheUsage: 0.95,
        sheddableHeadroom: 0.2,
        preemptSheddable: false,
        maxInFlightPerEndpoint: 8,
      },
    });
  });

  it('accepts each workload source with pool-wide and per-workload budgets', () => {
    for (const workload of [
      { serviceAccount: {} },
      { podLabel: 'team' },
      { podLabel: 'app.kubernetes.io/name' },
      { header: 'X-Team' },
    ]) {
      okSpec(
        withFlow({
          workload,
          budgets: [
            { tokensPerMinute: 100_000 },
            { workload: 'chat', requestsPerMinute: 600 },
            { workload: 'apps/batch', requestsPerMinute: 0.5, tokensPerMinute: 20_000 },
          ],
        }),
      );
    }
  });

  it('accepts the edges of every range', () => {
    okSpec(
      withFlow({
        defaultPriority: -1_000_000,
        maxQueueWait: '1ms',
        queue: { maxRequests: 0, maxBytes: 0 },
        saturation: { kvCacheUsage: 1, maxInFlightPerEndpoint: 1 },
      }),
    );
    okSpec(
      withFlow({
        defaultPriority: 1_000_000,
        queue: { maxRequests: 1_000_000, maxBytes: 17_179_869_184 },
        saturation: { maxInFlightPerEndpoint: 1_000_000 },
      }),
    );
    okSpec(withFlow({ budgets: [] }));
  });

  it('checks types, ranges and durations, naming the field', () => {
    assert.deepEqual(
      lines(
        withFlow({
          defaultPriority: 1.5,
          maxQueueWait: '30',
          queue: { maxRequests: -1, maxBytes: 17_179_869_185 },
          saturation: { kvCacheUsage: 0, maxInFlightPerEndpoint: 0 },
        }),
      ),
      [
        'spec.flowControl.defaultPriority: must be a whole number, not 1.5',
        'spec.flowControl.maxQueueWait: must be a duration like 500ms, 5s, 10m or 1h30m: "30" has no unit (30ms? 30s?)',
        'spec.flowControl.queue.maxRequests: must be from 0 to 1000000, not -1',
        'spec.flowControl.queue.maxBytes: must be from 0 to 17179869184, not 17179869185',
        'spec.flowControl.saturation.kvCacheUsage: must be greater than 0, not 0',
        'spec.flowControl.saturation.maxInFlightPerEndpoint: must be from 1 to 1000000, not 0',
      ],
    );
    assert.deepEqual(
      lines(withFlow({ defaultPriority: -1_000_001, saturation: { kvCacheUsage: 1.01 } })),
      [
        'spec.flowControl.defaultPriority: must be from -1000000 to 1000000, not -1000001',
        'spec.flowControl.saturation.kvCacheUsage: must be at most 1, not 1.01',
      ],
    );
    assert.deepEqual(lines(withFlow('on')), [
      'spec.flowControl: must be a mapping of fields, not a string ("on")',
    ]);
  });

  it('checks the workload source', () => {
    assert.deepEqual(lines(withFlow({ workload: { header: 'x team' } })), [
      'spec.flowControl.workload.header: must be an HTTP header name like x-team (no spaces or ":")',
    ]);
    assert.deepEqual(lines(withFlow({ workload: { podLabel: 'team/' } })), [
      'spec.flowControl.workload.podLabel: must be a label key like team or app.kubernetes.io/name',
    ]);
    assert.deepEqual(lines(withFlow({ workload: { serviceAccount: { name: 'x' } } })), [
      'spec.flowControl.workload.serviceAccount.name: unknown field; this is an empty mapping, written {}',
    ]);
    assert.deepEqual(errorsOf(withFlow({ workload: { header: 'x-team', podLabel: 'team' } })), [
      { path: 'spec.flowControl.workload', message: WORKLOAD_SINGLE_SOURCE.message },
    ]);
    assert.deepEqual(errorsOf(withFlow({ workload: {} })), [
      { path: 'spec.flowControl.workload', message: WORKLOAD_HAS_SOURCE.message },
    ]);
    assert.deepEqual(lines(withFlow({ workload: { source: 'Header' } })), [
      'spec.flowControl.workload: ' + WORKLOAD_HAS_SOURCE.message,
      'spec.flowControl.workload.source: unknown field; the fields here are serviceAccount, podLabel, header',
    ]);
  });

  it('checks budgets: a rate each, one pool-wide, unique workloads, a workload source', () => {
    assert.deepEqual(
      lines(
        withFlow({
          workload: { header: 'x-team' },
          budgets: [
            { workload: 'chat', requestsPerMinute: 60 },
            { workload: 'batch', tokensPerMinute: 1000 },
            { workload: 'other' },
            { workload: '', requestsPerMinute: 0, tokensPerMinute: -1, rpm: 5 },
          ],
        }),
      ),
      [
        'spec.flowControl.budgets[2]: ' + BUDGET_HAS_RATE.message,
        'spec.flowControl.budgets[3].workload: must not be empty',
        'spec.flowControl.budgets[3].requestsPerMinute: must be greater than 0, not 0',
        'spec.flowControl.budgets[3].tokensPerMinute: must be greater than 0, not -1',
        'spec.flowControl.budgets[3].rpm: unknown field; the fields here are workload, requestsPerMinute, tokensPerMinute',
      ],
    );
    assert.deepEqual(
      errorsOf(withFlow({ budgets: [{ requestsPerMinute: 60 }, { tokensPerMinute: 1000 }] })),
      [{ path: 'spec.flowControl.budgets', message: BUDGETS_ONE_POOL_WIDE.message }],
    );
    assert.deepEqual(
      errorsOf(
        withFlow({
          workload: { serviceAccount: {} },
          budgets: [
            { workload: 'apps/chat', requestsPerMinute: 60 },
            { workload: 'apps/batch', requestsPerMinute: 6 },
            { workload: 'apps/batch', tokensPerMinute: 1000 },
            { workload: 'apps/chat', tokensPerMinute: 1000 },
          ],
        }),
      ),
      [
        {
          path: 'spec.flowControl.budgets',
          message: `${BUDGETS_UNIQUE_WORKLOADS.message}: "apps/chat" has more than one`,
        },
      ],
    );
    assert.deepEqual(
      errorsOf(
        withFlow({ budgets: [{ requestsPerMinute: 60 }, { workload: 'a', requestsPerMinute: 6 }] }),
      ),
      [{ path: 'spec.flowControl.budgets', message: BUDGET_WORKLOAD_NEEDS_SOURCE.message }],
    );
    const tooMany = Array.from({ length: 257 }, (_, i) => ({
      workload: `w${i}`,
      requestsPerMinute: 1,
    }));
    assert.deepEqual(lines(withFlow({ workload: { header: 'x-team' }, budgets: tooMany })), [
      'spec.flowControl.budgets: must have at most 256 items, not 257',
    ]);
    assert.deepEqual(lines(withFlow({ budgets: { requestsPerMinute: 5 } })), [
      'spec.flowControl.budgets: must be a list, not a mapping',
    ]);
  });

  it('suggests the right spelling of a misspelt field', () => {
    assert.deepEqual(lines(withFlow({ maxQueueWaitMs: 5 })), [
      'spec.flowControl.maxQueueWaitMs: unknown field; did you mean maxQueueWait?',
    ]);
  });
});
