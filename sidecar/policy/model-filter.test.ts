import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ModelLists, requestedModel, servedAnywhere, type ModelEndpoint } from './model-filter.ts';
import type { ServedModel } from './types.ts';

function ep(id: string, models?: string[], drifted?: boolean): ModelEndpoint {
  const spec: { models?: string[]; drifted?: boolean } = {};
  if (models !== undefined) spec.models = models;
  if (drifted !== undefined) spec.drifted = drifted;
  return { id, spec };
}

const served = (lists: ModelLists, endpoint: ModelEndpoint) =>
  [...(lists.listOf(endpoint) ?? ['<unknown>'])].sort();

describe('ModelLists', () => {
  it('a declared list wins over a discovered one; without either the list is unknown', () => {
    const lists = new ModelLists();
    const declared = ep('a', ['llama']);
    lists.report('a', [{ id: 'qwen' }]);
    assert.deepEqual(served(lists, declared), ['llama']);
    assert.deepEqual(served(lists, ep('a')), ['qwen']);
    assert.equal(lists.listOf(ep('b')), undefined);
  });

  it('an adapter entry serves its parent too; a parent equal to the id is no parent', () => {
    const lists = new ModelLists();
    lists.report('a', [
      { id: 'llama', parent: 'llama' },
      { id: 'sql-lora', parent: 'llama' },
      { id: 'other-lora', parent: 'base-b' },
      { id: '' },
      { id: 'empty-parent', parent: '' },
    ]);
    assert.deepEqual(served(lists, ep('a')), [
      'base-b',
      'empty-parent',
      'llama',
      'other-lora',
      'sql-lora',
    ]);
    assert.equal(lists.parentOf('sql-lora'), 'llama');
    assert.equal(lists.parentOf('llama'), undefined);
    assert.equal(lists.parentOf('empty-parent'), undefined);
  });

  it('a new report replaces the list; an identical one changes nothing; forget drops it', () => {
    const lists = new ModelLists();
    lists.report('a', [{ id: 'x-lora', parent: 'x' }]);
    assert.equal(lists.parentOf('x-lora'), 'x');
    lists.report('a', [{ id: 'x-lora', parent: 'x' }]);
    assert.equal(lists.parentOf('x-lora'), 'x');
    lists.report('a', [{ id: 'x-lora', parent: 'y' }]);
    assert.equal(lists.parentOf('x-lora'), 'y');
    lists.report('a', [{ id: 'x-lora', parent: 'y' }, { id: 'z' }]);
    assert.deepEqual(served(lists, ep('a')), ['x-lora', 'y', 'z']);
    lists.report('a', [{ id: 'x-lora', parent: 'y' }, { id: 'w' }]);
    assert.deepEqual(served(lists, ep('a')), ['w', 'x-lora', 'y']);
    lists.report('a', [{ id: 'x-lora' }, { id: 'w' }, { id: 'y' }]);
    assert.equal(lists.parentOf('x-lora'), undefined);
    lists.forget('a');
    lists.forget('never-seen');
    assert.equal(lists.listOf(ep('a')), undefined);
  });

  it('ignores a report that is not a list', () => {
    const lists = new ModelLists();
    lists.report('a', [{ id: 'm' }]);
    lists.report('a', 'garbage' as unknown as ServedModel[]);
    lists.report('a', [null as unknown as ServedModel]);
    assert.deepEqual(served(lists, ep('a')), []);
  });

  it('the filter keeps endpoints that serve the model or whose list is unknown', () => {
    const lists = new ModelLists();
    lists.report('discovered', [{ id: 'm' }]);
    lists.report('other', [{ id: 'n' }]);
    const endpoints = [ep('declared', ['m']), ep('discovered'), ep('other'), ep('unknown')];
    const serves = lists.servesFilter<ModelEndpoint>('m')!;
    assert.deepEqual(
      endpoints.filter(serves).map((e) => e.id),
      ['declared', 'discovered', 'unknown'],
    );
    assert.equal(lists.servesFilter(undefined), undefined);
    assert.equal(lists.servesFilter(''), undefined);
  });

  it('modelsServed counts endpoints per model, unknown ones apart, drifted ones in neither', () => {
    const lists = new ModelLists();
    lists.report('b', [{ id: 'base' }, { id: 'lora', parent: 'base' }]);
    lists.report('c', [{ id: 'other' }]);
    const reading = lists.modelsServed([
      ep('a', ['base']),
      ep('b'),
      ep('c', undefined, true),
      ep('d'),
      ep('e', undefined, true),
    ]);
    assert.deepEqual(
      [...reading.models].sort(([x], [y]) => (x < y ? -1 : 1)),
      [
        ['base', { endpoints: 2 }],
        ['lora', { endpoints: 1, parent: 'base' }],
      ],
    );
    assert.equal(reading.unknownEndpoints, 1);
  });
});

describe('servedAnywhere', () => {
  const endpoints = ['a', 'b'];
  const stateOf = (id: string) => (endpoints.includes(id) ? id : undefined);
  it('is true without a filter, else when some endpoint serves', () => {
    assert.equal(servedAnywhere(undefined, endpoints, undefined, stateOf), true);
    assert.equal(
      servedAnywhere((s) => s === 'b', endpoints, undefined, stateOf),
      true,
    );
    assert.equal(
      servedAnywhere(() => false, endpoints, undefined, stateOf),
      false,
    );
  });
  it('asks a pinned endpoint in the pool alone; an unknown pin falls back to the pool', () => {
    assert.equal(
      servedAnywhere((s) => s === 'b', endpoints, 'a', stateOf),
      false,
    );
    assert.equal(
      servedAnywhere((s) => s === 'a', endpoints, 'a', stateOf),
      true,
    );
    assert.equal(
      servedAnywhere((s) => s === 'b', endpoints, 'gone', stateOf),
      true,
    );
  });
});

describe('requestedModel', () => {
  it('takes an empty name as none', () => {
    assert.equal(requestedModel(''), undefined);
    assert.equal(requestedModel(undefined), undefined);
    assert.equal(requestedModel('m'), 'm');
  });
});
