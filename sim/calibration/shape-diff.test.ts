import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { formatDifferences, genericPath, jsonKind, shapeDiff } from './shape-diff.ts';

describe('shapeDiff', () => {
  test('finds nothing between values of the same shape, whatever their values', () => {
    assert.deepEqual(
      shapeDiff(
        { id: 'a', n: 1, ok: true, none: null, list: [{ x: 'p' }], nested: { deep: [1, 2] } },
        { id: 'b', n: 2.5, ok: false, none: null, list: [{ x: 'q' }], nested: { deep: [3, 4] } },
      ),
      [],
    );
  });

  test('reports missing and extra keys, at their path', () => {
    assert.deepEqual(shapeDiff({ a: { b: 1, c: null } }, { a: { b: 1, d: 'x' } }), [
      { path: 'a.c', kind: 'missing', expected: 'null', actual: '(absent)' },
      { path: 'a.d', kind: 'extra', expected: '(absent)', actual: '"x"' },
    ]);
  });

  test('tells null, numbers, strings, booleans, arrays and objects apart', () => {
    const kinds = shapeDiff(
      { a: null, b: 1, c: 's', d: true, e: [], f: {} },
      { a: 0, b: '1', c: null, d: 'true', e: {}, f: [] },
    ).map((d) => `${d.path} ${d.kind} ${d.expected.split(' ')[0]}→${d.actual.split(' ')[0]}`);
    assert.deepEqual(kinds, [
      'a kind null→number',
      'b kind number→string',
      'c kind string→null',
      'd kind boolean→string',
      'e kind array→object',
      'f kind object→array',
    ]);
  });

  test('compares arrays item by item and reports another length', () => {
    assert.deepEqual(shapeDiff({ c: [{ i: 0 }, { i: 1 }] }, { c: [{ i: 0, x: 1 }] }), [
      { path: 'c', kind: 'length', expected: '2 items', actual: '1 items' },
      { path: 'c[0].x', kind: 'extra', expected: '(absent)', actual: '1' },
    ]);
    assert.deepEqual(shapeDiff([], []), []);
  });

  test('compares the values of the keys it is told to, at any depth', () => {
    const sameValue = new Set(['object', 'code']);
    assert.deepEqual(
      shapeDiff(
        { object: 'chat.completion', error: { code: 400, message: 'a' } },
        { object: 'chat.completion', error: { code: 404, message: 'b' } },
        { sameValue },
      ),
      [{ path: 'error.code', kind: 'value', expected: '400', actual: '404' }],
    );
    // A key compared by value still reports another kind as such.
    assert.equal(shapeDiff({ code: 400 }, { code: '400' }, { sameValue })[0]?.kind, 'kind');
  });

  test('starts paths at the prefix it is given, and shortens long values', () => {
    const [d] = shapeDiff({ a: 'x'.repeat(100) }, {}, {}, '<chunk>');
    assert.equal(d?.path, '<chunk>.a');
    assert.equal(d?.expected.length, 60);
  });
});

describe('the helpers around it', () => {
  test('jsonKind names the six JSON kinds', () => {
    assert.deepEqual([null, [], {}, 1, 's', false].map(jsonKind), [
      'null',
      'array',
      'object',
      'number',
      'string',
      'boolean',
    ]);
  });

  test('genericPath puts [*] for every index', () => {
    assert.equal(genericPath('<content>.choices[0].x[12].y'), '<content>.choices[*].x[*].y');
  });

  test('formatDifferences writes one line per difference', () => {
    assert.equal(
      formatDifferences([{ path: '', kind: 'kind', expected: 'JSON', actual: 'text' }]),
      '(root): kind, vLLM JSON, simulator text',
    );
  });
});
