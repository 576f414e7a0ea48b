import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { parse } from 'yaml';
import { BALANCE_EXAMPLE, FAILOVER_EXAMPLE } from './examples.ts';
import { parsePoolYaml } from './pool-document.ts';
import { validatePool } from './validate.ts';

function errors(text: string) {
  const result = parsePoolYaml(text);
  assert.equal(result.ok, false);
  return result.ok ? [] : result.errors;
}

describe('parsePoolYaml', () => {
  it('parses the examples like any YAML parser', () => {
    for (const text of [BALANCE_EXAMPLE, FAILOVER_EXAMPLE, `---\n${BALANCE_EXAMPLE}`]) {
      const result = parsePoolYaml(text);
      assert.ok(result.ok);
      assert.deepEqual(result.document, parse(text));
    }
  });

  it('reads JSON too', () => {
    const doc = parse(BALANCE_EXAMPLE) as unknown;
    const result = parsePoolYaml(JSON.stringify(doc, null, 2));
    assert.ok(result.ok);
    assert.deepEqual(result.document, doc);
  });

  it('reports syntax errors with line and column', () => {
    assert.deepEqual(errors('spec:\n  mode: Balance\n  mode: Failover\n'), [
      { path: 'line 3, column 3', message: 'Map keys must be unique' },
    ]);
    const [bad] = errors('spec:\n  backends: [a, b\nkind: x\n');
    assert.match(bad?.path ?? '', /^line \d+, column \d+$/);
    const [tab] = errors('spec:\n\tmode: Balance\n');
    assert.match(tab?.path ?? '', /^line 2, column \d+$/);
  });

  it('wants exactly one document', () => {
    assert.deepEqual(errors(`${BALANCE_EXAMPLE}---\nkind: Other\n`), [
      {
        path: 'line 11, column 1',
        message: 'a pool file holds one document, and this is a second one (after ---)',
      },
    ]);
    assert.deepEqual(errors(''), [{ path: '<root>', message: 'the pool file is empty' }]);
    assert.deepEqual(errors('# nothing here\n'), [
      { path: '<root>', message: 'the pool file is empty' },
    ]);
  });

  it('stops alias bombs', () => {
    const lines = ['a: &a [x, x, x, x, x, x, x, x, x, x]'];
    for (let i = 1; i < 10; i++) {
      lines.push(
        `${String.fromCharCode(97 + i)}: &${String.fromCharCode(97 + i)} [${Array(10)
          .fill(`*${String.fromCharCode(96 + i)}`)
          .join(', ')}]`,
      );
    }
    const [bomb] = errors(lines.join('\n'));
    assert.equal(bomb?.path, '<root>');
    assert.match(bomb?.message ?? '', /alias/i);
  });

  it('hands a self-referencing alias to the validator, which reports it', () => {
    const result = parsePoolYaml(
      'apiVersion: switchyard.dev/v1alpha1\nkind: InferencePool\nmetadata: &m {name: x, self: *m}\nspec: {backends: []}\n',
    );
    assert.ok(result.ok);
    const validated = validatePool(result.document);
    assert.deepEqual(validated, {
      ok: false,
      errors: [
        { path: 'metadata.self', message: 'refers to itself (a YAML alias inside its own anchor)' },
      ],
    });
  });

  it('finds the line of a path, or of its nearest ancestor', () => {
    const result = parsePoolYaml(FAILOVER_EXAMPLE);
    assert.ok(result.ok);
    assert.equal(result.lineOf('<root>'), 1);
    assert.equal(result.lineOf('metadata.name'), 3);
    assert.equal(result.lineOf('spec.mode'), 5);
    assert.equal(result.lineOf('spec.backends[1]'), 9);
    assert.equal(result.lineOf('spec.backends[1].model'), 9);
    assert.equal(result.lineOf('spec.retry.maxAttempts'), 11);
    assert.equal(result.lineOf('spec.health.window'), 4, 'missing: the line of spec');
    assert.equal(result.lineOf('spec.backends[7].url'), 7, 'missing: the line of the list');
    assert.equal(result.lineOf('spec["odd key"]'), 4);
  });
});
