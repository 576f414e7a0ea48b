import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { ModelsServed } from '../policy/index.ts';
import {
  backendHeader,
  choosePool,
  findMultipartField,
  modelNotFoundMessage,
  multipartBoundary,
  replaceField,
  servedModels,
  type PoolModels,
} from './model-routing.ts';

const served = (
  models: Record<string, string | undefined> = {},
  unknownEndpoints = 0,
): ModelsServed => ({
  models: new Map(
    Object.entries(models).map(([id, parent]) => [
      id,
      parent === undefined ? { endpoints: 1 } : { endpoints: 1, parent },
    ]),
  ),
  unknownEndpoints,
});

const pool = (name: string, parts: Partial<PoolModels> = {}): PoolModels => ({
  name,
  declared: [],
  aliases: [],
  served: served({}, 1),
  ...parts,
});

describe('choosePool', () => {
  const chat = pool('chat', { declared: ['llama'], aliases: [{ name: 'gpt-4o', model: 'llama' }] });
  const embed = pool('embed', { served: served({ bge: undefined }) });
  const open = pool('open');

  test('a request without a model goes to the first pool', () => {
    assert.deepEqual(choosePool(undefined, [chat, embed]), {
      kind: 'pool',
      index: 0,
      resolved: undefined,
      aliased: false,
    });
  });

  test('the first pool that knows the model takes it: declared, served or an alias', () => {
    assert.deepEqual(choosePool('bge', [chat, embed]), {
      kind: 'pool',
      index: 1,
      resolved: 'bge',
      aliased: false,
    });
    assert.deepEqual(choosePool('llama', [embed, chat]), {
      kind: 'pool',
      index: 1,
      resolved: 'llama',
      aliased: false,
    });
    assert.deepEqual(choosePool('gpt-4o', [embed, chat]), {
      kind: 'pool',
      index: 1,
      resolved: 'llama',
      aliased: true,
    });
  });

  test('a pool that knows the model wins over an earlier one that only may serve it', () => {
    assert.equal((choosePool('bge', [open, embed]) as { index: number }).index, 1);
  });

  test('an unknown model goes to the first pool that may serve it', () => {
    assert.deepEqual(choosePool('other', [chat, embed, open]), {
      kind: 'pool',
      index: 2,
      resolved: 'other',
      aliased: false,
    });
  });

  test('a pool with a declared list, or with every list known, does not take other models', () => {
    const choice = choosePool('other', [chat, embed]);
    assert.deepEqual(choice, { kind: 'not-found', served: ['bge', 'gpt-4o', 'llama'] });
  });

  test('one pool, nothing declared or discovered: everything goes to it (as before)', () => {
    assert.equal(choosePool('anything', [open]).kind, 'pool');
  });

  test('a pool with no configuration yet holds models no configured pool knows', () => {
    assert.deepEqual(choosePool('other', [chat, undefined, open]), {
      kind: 'not-configured',
      index: 1,
    });
    assert.equal(choosePool('bge', [undefined, embed]).kind, 'pool');
    assert.deepEqual(choosePool(undefined, [undefined, embed]), {
      kind: 'not-configured',
      index: 0,
    });
  });

  test('an alias is resolved only in the pool that takes the request', () => {
    const a = pool('a', { declared: ['x'] });
    const b = pool('b', { aliases: [{ name: 'x', model: 'y' }], declared: ['y'] });
    assert.deepEqual(choosePool('x', [a, b]), {
      kind: 'pool',
      index: 0,
      resolved: 'x',
      aliased: false,
    });
  });
});

describe('servedModels', () => {
  test('the union in pool order, each once, adapters and aliases with their parent', () => {
    const list = servedModels([
      pool('chat', {
        declared: ['llama'],
        served: served({ llama: undefined, 'sql-lora': 'llama', base: 'base' }),
        aliases: [{ name: 'gpt-4o', model: 'llama' }],
      }),
      undefined,
      pool('embed', { served: served({ bge: undefined, llama: undefined }) }),
    ]);
    assert.deepEqual(list, [
      { id: 'llama', pool: 'chat' },
      { id: 'sql-lora', pool: 'chat', parent: 'llama' },
      { id: 'base', pool: 'chat' },
      { id: 'gpt-4o', pool: 'chat', parent: 'llama' },
      { id: 'bge', pool: 'embed' },
    ]);
  });

  test('empty when no pool knows a model', () => {
    assert.deepEqual(servedModels([pool('a'), undefined]), []);
  });
});

test('the 404 message names the model and the served ones', () => {
  assert.equal(
    modelNotFoundMessage('nope', ['a', 'b']),
    'The model `nope` is not served here. Served models: a, b.',
  );
  assert.match(modelNotFoundMessage('x'.repeat(1000), []), /x{200}…` is not served here/);
});

test('x-switchyard-backend names the sent model only when it differs from the requested one', () => {
  assert.equal(backendHeader('a/h:1', 'm', undefined), 'a/h:1');
  assert.equal(backendHeader('a/h:1', 'm', 'm'), 'a/h:1');
  assert.equal(backendHeader('a/h:1', 'gpt-4o', 'llama'), 'a/h:1; model=llama');
});

describe('multipart', () => {
  const form = (boundary: string, parts: [string, string, string?][]): Buffer =>
    Buffer.from(
      parts
        .map(
          ([name, value, filename]) =>
            `--${boundary}\r\nContent-Disposition: form-data; name="${name}"${filename === undefined ? '' : `; filename="${filename}"`}\r\n\r\n${value}\r\n`,
        )
        .join('') + `--${boundary}--\r\n`,
    );

  test('the boundary of a multipart/form-data content type', () => {
    assert.equal(multipartBoundary('multipart/form-data; boundary=abc'), 'abc');
    assert.equal(multipartBoundary('Multipart/Form-Data; charset=x; boundary="a b"'), 'a b');
    assert.equal(multipartBoundary('application/json'), undefined);
    assert.equal(multipartBoundary(undefined), undefined);
    assert.equal(multipartBoundary('multipart/form-data'), undefined);
  });

  test('finds the model field after a file part, and rewrites it', () => {
    const body = form('XyZ', [
      ['file', 'RIFF\r\n--Xy not a delimiter\r\n\r\nmodel', 'a.wav'],
      ['model', 'whisper-alias'],
      ['language', 'en'],
    ]);
    const span = findMultipartField(body, 'XyZ', 'model');
    assert.equal(span?.value, 'whisper-alias');
    const rewritten = replaceField(body, span, 'whisper-large');
    assert.equal(findMultipartField(rewritten, 'XyZ', 'model')?.value, 'whisper-large');
    assert.equal(findMultipartField(rewritten, 'XyZ', 'language')?.value, 'en');
    assert.equal(rewritten.length, body.length - 'whisper-alias'.length + 'whisper-large'.length);
  });

  test('a file part named model is not the field; a body that is not multipart has none', () => {
    const body = form('b', [['model', 'x', 'model.bin']]);
    assert.equal(findMultipartField(body, 'b', 'model'), undefined);
    assert.equal(findMultipartField(Buffer.from('{"model":"x"}'), 'b', 'model'), undefined);
    assert.equal(findMultipartField(Buffer.from('--b\r\nbroken'), 'b', 'model'), undefined);
  });

  test('a preamble before the first delimiter is skipped', () => {
    const body = Buffer.concat([Buffer.from('preamble\r\n'), form('b', [['model', 'm']])]);
    assert.equal(findMultipartField(body, 'b', 'model')?.value, 'm');
  });
});
