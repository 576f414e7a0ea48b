import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { Value } from '@sinclair/typebox/value';
import { parse } from 'yaml';
import { BALANCE_EXAMPLE, FAILOVER_EXAMPLE, FLOW_CONTROL_EXAMPLE } from './examples.ts';
import { PoolPolicySchema } from './policy-types.ts';
import { InferencePoolSchema } from './inference-pool.schema.ts';
import { parsePoolYaml } from './pool-document.ts';
import { resolvePool } from './resolve.ts';
import { ROOT_PATH, joinPath, splitPath } from './path.ts';
import { validatePool } from './validate.ts';
import { mutate, mutation, type Json } from '../harness/pool-arbitraries.ts';

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
    else assert.ok(Value.Check(PoolPolicySchema, resolved.policy), 'the policy fits its schema');
    return;
  }
  assert.ok(result.errors.length > 0);
  for (const e of result.errors) {
    assert.equal(typeof e.path, 'string');
    assert.notEqual(e.path, '');
    assert.equal(typeof e.message, 'string');
    assert.notEqual(e.message, '');
    assertNamesAField(doc, e.path);
  }
}

/**
 * A rejection names a field: the root only when the document itself is not a mapping; otherwise
 * a path that parses back to itself and whose parent is in the document (the field itself may be
 * missing: "is required").
 */
function assertNamesAField(doc: unknown, path: string): void {
  if (path === ROOT_PATH) {
    assert.ok(
      doc === null || typeof doc !== 'object' || Array.isArray(doc) || !isPlainMapping(doc),
      'a mapping is never rejected as a whole',
    );
    return;
  }
  const segments = splitPath(path);
  assert.ok(segments.length > 0, `unparseable path ${path}`);
  assert.equal(
    segments.reduce<string>((p, k) => joinPath(p, k), ''),
    path,
    'the path round-trips',
  );
  let at: unknown = doc;
  for (const key of segments.slice(0, -1)) {
    assert.ok(
      at !== null && typeof at === 'object' && Object.hasOwn(at, key),
      `${path}: ${String(key)} is not in the document`,
    );
    at = (at as Record<string | number, unknown>)[key];
  }
}

function isPlainMapping(value: object): boolean {
  const proto = Object.getPrototypeOf(value) as unknown;
  return proto === Object.prototype || proto === null;
}

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
    const bases = [BALANCE_EXAMPLE, FAILOVER_EXAMPLE, FLOW_CONTROL_EXAMPLE].map(
      (text) => parse(text) as Json,
    );
    fc.assert(
      fc.property(
        fc.nat(bases.length - 1),
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
