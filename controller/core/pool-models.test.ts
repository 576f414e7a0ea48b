import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { STATUS_MODELS_LIMIT } from '../../crds/inference-pool.schema.ts';
import type { EndpointSpec } from '../../crds/policy-types.ts';
import { poolModels } from './pool-models.ts';

const endpoint = (id: string, models?: string[], drifted?: boolean): EndpointSpec => ({
  id,
  backend: id.split('/')[0] ?? id,
  tier: 0,
  url: 'http://10.0.0.1:8000/v1',
  costPerMTok: 0,
  ...(models === undefined ? {} : { models }),
  ...(drifted === undefined ? {} : { drifted }),
});

describe('poolModels', () => {
  test('says nothing when no backend declares models', () => {
    assert.deepEqual(
      poolModels({ backends: [{ name: 'a' } as never], aliases: [{ name: 'x', model: 'y' }] }, [
        endpoint('a/1'),
      ]),
      { models: undefined, aliasesNotServed: [] },
    );
  });

  test('does not count endpoints that drift detection excludes', () => {
    const spec = { backends: [{ name: 'a', models: ['m'] } as never] };
    const { models } = poolModels(spec, [
      endpoint('a/1', ['m']),
      endpoint('a/2', ['m'], true),
      endpoint('a/3', ['m'], false),
    ]);
    assert.deepEqual(models, [{ name: 'm', endpoints: 2 }]);
  });

  test('keeps status.models within its limit, models before aliases', () => {
    const names = Array.from({ length: 128 }, (_, i) => `m${String(i).padStart(3, '0')}`);
    const spec = {
      backends: [
        { name: 'a', models: names } as never,
        { name: 'b', models: names.map((n) => `b-${n}`) } as never,
      ],
      aliases: [{ name: 'alias', model: 'm000' }],
    };
    const { models } = poolModels(spec, []);
    assert.equal(models?.length, STATUS_MODELS_LIMIT);
    assert.ok(models?.every((m) => m.aliasOf === undefined));
  });
});
