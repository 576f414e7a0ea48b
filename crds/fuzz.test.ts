import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { Value } from '@sinclair/typebox/value';
import { parse } from 'yaml';
import { BALANCE_EXAMPLE, FAILOVER_EXAMPLE } from './examples.ts';
import { InferencePoolSchema } from './inference-pool.schema.ts';
import { parsePoolYaml } from './pool-document.ts';
import { resolvePool } from './resolve.ts';
import { validatePool } from './validate.ts';

/** Whatever the input, validatePool answers, and every rejection says where and what. */
function checkAnswer(doc: unknown): void {
  const result = validatePool(doc);
  if (result.ok) {
    assert.ok(Value.Check(InferencePoolSchema, result.pool));
    const again = validatePool(result.pool);
    assert.ok(again.ok);
    assert.deepEqual(again.pool, result.pool);
    const resolved = resolvePool(result.pool, { KEY: 'k' });
    if (!resolved.ok) for (const e of resolved.errors) assert.ok(e.path !== '' && e.message !== '');
    return;
  }
  assert.ok(result.errors.length > 0);
  for (const e of result.errors) {
    assert.equal(typeof e.path, 'string');
    assert.notEqual(e.path, '');
    assert.equal(typeof e.message, 'string');
    assert.notEqual(e.message, '');
  }
}

type Json = unknown;

/** Every path into a JSON value, as key lists. */
function pathsOf(value: Json, prefix: (string | number)[] = [], out: (string | number)[][] = []) {
  out.push(prefix);
  if (Array.isArray(value)) value.forEach((v, i) => pathsOf(v, [...prefix, i], out));
  else if (value !== null && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) pathsOf(v, [...prefix, k], out);
  }
  return out;
}

type Mutation =
  | { op: 'set'; at: number; value: Json }
  | { op: 'delete'; at: number }
  | { op: 'add'; at: number; key: string; value: Json };

function mutate(doc: Json, mutations: Mutation[]): Json {
  const copy = structuredClone(doc);
  for (const m of mutations) {
    const paths = pathsOf(copy);
    const path = paths[m.at % paths.length] ?? [];
    if (path.length === 0) continue;
    const parent = path
      .slice(0, -1)
      .reduce<Json>((v, k) => (v as Record<string, Json>)[k], copy) as
      Record<string | number, Json> | Json[];
    const key = path[path.length - 1] as string | number;
    // Values are copied in: the constants of `interesting` are shared between runs.
    if (m.op === 'set') (parent as Record<string | number, Json>)[key] = structuredClone(m.value);
    else if (m.op === 'delete') {
      if (Array.isArray(parent)) parent.splice(Number(key), 1);
      else delete (parent as Record<string, Json>)[key];
    } else {
      const target = (parent as Record<string | number, Json>)[key];
      if (target !== null && typeof target === 'object' && !Array.isArray(target)) {
        Object.defineProperty(target, m.key, {
          value: structuredClone(m.value),
          enumerable: true,
          writable: true,
          configurable: true,
        });
      }
    }
  }
  return copy;
}

/** Values that are likely to matter here, mixed with arbitrary JSON. */
const interesting = fc.oneof(
  fc.jsonValue({ maxDepth: 3 }),
  fc.constantFrom(
    '',
    '0s',
    '5s',
    '1h0m',
    '500',
    'http://10.0.0.1/v1',
    'https://x/v1',
    'ftp://x',
    'Balance',
    'Failover',
    'Header',
    'None',
    'a',
    'K',
    -1,
    0,
    0.5,
    1,
    1.5,
    64,
    65535,
    70000,
    true,
    false,
    null,
    [],
    {},
    { name: 'vllm', port: 'http' },
    { name: 's', key: 'k' },
    ['http://127.0.0.1:1/v1'],
    '__proto__',
    'constructor',
  ),
);

const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  fc.record({ op: fc.constant('set' as const), at: fc.nat(), value: interesting }),
  fc.record({ op: fc.constant('delete' as const), at: fc.nat() }),
  fc.record({
    op: fc.constant('add' as const),
    at: fc.nat(),
    key: fc.oneof(
      fc.string({ maxLength: 12 }),
      fc.constantFrom(
        'service',
        'url',
        'urls',
        'apiKeyEnv',
        'apiKeySecretRef',
        'allowInsecureApiKey',
        'helth',
        '__proto__',
        'openFor',
        'maxOpenFor',
      ),
    ),
    value: interesting,
  }),
);

describe('validatePool never throws', () => {
  it('on arbitrary JSON values', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (doc) => checkAnswer(doc)),
      { numRuns: 1000 },
    );
  });

  it('on arbitrary JavaScript values', () => {
    fc.assert(
      fc.property(
        fc.anything({
          withBigInt: true,
          withMap: true,
          withSet: true,
          withDate: true,
          withTypedArray: true,
          withSparseArray: true,
          withNullPrototype: true,
        }),
        (doc) => checkAnswer(doc),
      ),
      { numRuns: 500 },
    );
  });

  it('on arbitrary values where the spec goes', () => {
    const base = parse(BALANCE_EXAMPLE) as Record<string, unknown>;
    fc.assert(
      fc.property(fc.jsonValue(), (spec) => checkAnswer({ ...base, spec })),
      { numRuns: 500 },
    );
  });

  it('on mutated valid pools', () => {
    const bases = [parse(BALANCE_EXAMPLE) as Json, parse(FAILOVER_EXAMPLE) as Json];
    fc.assert(
      fc.property(
        fc.nat(1),
        fc.array(mutation, { minLength: 1, maxLength: 6 }),
        (which, mutations) => {
          checkAnswer(mutate(bases[which], mutations));
        },
      ),
      { numRuns: 3000 },
    );
  });

  it('on arbitrary text through the YAML parser', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.string(),
          fc
            .constantFrom(BALANCE_EXAMPLE, FAILOVER_EXAMPLE)
            .chain((t) => fc.nat(t.length).map((n) => t.slice(0, n))),
        ),
        (text) => {
          const parsed = parsePoolYaml(text);
          if (!parsed.ok) {
            for (const e of parsed.errors) assert.ok(e.path !== '' && e.message !== '');
            return;
          }
          checkAnswer(parsed.document);
        },
      ),
      { numRuns: 1000 },
    );
  });
});
