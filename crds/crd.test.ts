/* eslint-disable @typescript-eslint/no-unsafe-assignment, @typescript-eslint/no-unsafe-member-access, @typescript-eslint/no-unsafe-call, @typescript-eslint/no-unsafe-return -- these tests build deliberately malformed documents and read plain data */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Kind } from '@sinclair/typebox';
import { parse } from 'yaml';
import {
  CRD_NAME,
  GENERATED_HEADER,
  type JSONSchemaProps,
  inferencePoolCrd,
  inferencePoolOpenApiSchema,
  renderInferencePoolCrd,
  toCrdSchema,
} from './crd.ts';
import { InferencePoolSchema } from './inference-pool.schema.ts';

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- reading the CRD as plain data
type Any = any;

/** Every node of a CRD schema with its path, anyOf branches of int-or-string left out. */
function nodes(node: JSONSchemaProps, path = '', out: [string, JSONSchemaProps][] = []) {
  out.push([path, node]);
  for (const [key, child] of Object.entries(node.properties ?? {}))
    nodes(child, `${path}.${key}`, out);
  if (node.items !== undefined) nodes(node.items, `${path}[]`, out);
  return out;
}

const STRUCTURAL_KEYS = new Set([
  'description',
  'type',
  'x-kubernetes-int-or-string',
  'anyOf',
  'enum',
  'format',
  'default',
  'minimum',
  'exclusiveMinimum',
  'maximum',
  'exclusiveMaximum',
  'minLength',
  'maxLength',
  'pattern',
  'minItems',
  'maxItems',
  'x-kubernetes-list-type',
  'x-kubernetes-list-map-keys',
  'items',
  'properties',
  'required',
  'x-kubernetes-validations',
]);

describe('the CustomResourceDefinition', () => {
  const crd: Any = inferencePoolCrd();
  const version = crd.spec.versions[0];

  it('names the resource as the API says', () => {
    assert.equal(crd.apiVersion, 'apiextensions.k8s.io/v1');
    assert.equal(crd.kind, 'CustomResourceDefinition');
    assert.equal(crd.metadata.name, CRD_NAME);
    assert.equal(CRD_NAME, 'inferencepools.switchyard.dev');
    assert.equal(crd.spec.group, 'switchyard.dev');
    assert.equal(crd.spec.scope, 'Namespaced');
    assert.deepEqual(crd.spec.names, {
      kind: 'InferencePool',
      listKind: 'InferencePoolList',
      plural: 'inferencepools',
      singular: 'inferencepool',
      shortNames: ['ipool'],
      categories: ['switchyard'],
    });
    assert.equal(crd.spec.versions.length, 1);
    assert.equal(version.name, 'v1alpha1');
    assert.equal(version.served, true);
    assert.equal(version.storage, true);
    assert.deepEqual(version.subresources, { status: {} });
  });

  it('has the printer columns', () => {
    assert.deepEqual(
      version.additionalPrinterColumns.map((c: Any) => [c.name, c.type, c.jsonPath]),
      [
        ['Mode', 'string', '.spec.mode'],
        ['Ready', 'integer', '.status.endpoints.ready'],
        ['Total', 'integer', '.status.endpoints.total'],
        ['In-Sync', 'integer', '.status.sidecars.inSync'],
        ['Age', 'date', '.metadata.creationTimestamp'],
      ],
    );
  });

  it('is a structural schema', () => {
    const schema = version.schema.openAPIV3Schema as JSONSchemaProps;
    for (const [path, node] of nodes(schema)) {
      for (const key of Object.keys(node)) {
        assert.ok(STRUCTURAL_KEYS.has(key), `${path}: ${key} does not belong in a CRD`);
      }
      if (node['x-kubernetes-int-or-string'] === true) {
        assert.equal(node.type, undefined, path);
        assert.deepEqual(node.anyOf, [{ type: 'integer' }, { type: 'string' }], path);
      } else {
        assert.ok(typeof node.type === 'string', `${path}: no type`);
        assert.equal(node.anyOf, undefined, path);
      }
      for (const key of node.required ?? []) {
        assert.ok(node.properties?.[key] !== undefined, `${path}: required ${key} is no property`);
        assert.equal(
          node.properties?.[key]?.default,
          undefined,
          `${path}.${key}: required with a default`,
        );
      }
      if (node.exclusiveMinimum !== undefined) assert.equal(node.exclusiveMinimum, true, path);
    }
  });

  it('describes every field of spec and status (kubectl explain)', () => {
    const schema = version.schema.openAPIV3Schema as JSONSchemaProps;
    for (const part of ['spec', 'status']) {
      const root = schema.properties?.[part];
      assert.ok(root !== undefined);
      for (const [path, node] of nodes(root, part)) {
        assert.ok((node.description ?? '').length >= 10, `${path}: no description`);
      }
    }
  });

  it('states every scalar default in its description', () => {
    const schema = version.schema.openAPIV3Schema as JSONSchemaProps;
    for (const [path, node] of nodes(schema)) {
      const value = node.default;
      if (typeof value !== 'string' && typeof value !== 'number' && typeof value !== 'boolean') {
        continue;
      }
      assert.ok(
        node.description?.includes(`Default: ${String(value)}.`),
        `${path}: description does not say "Default: ${String(value)}."`,
      );
    }
  });

  it('requires spec and, in spec, only backends', () => {
    const schema = version.schema.openAPIV3Schema as JSONSchemaProps;
    assert.deepEqual(schema.required, ['spec']);
    assert.deepEqual(schema.properties?.spec?.required, ['backends']);
    assert.deepEqual(schema.properties?.metadata, { type: 'object' });
  });

  it('renders the special shapes the Kubernetes way', () => {
    const spec = inferencePoolOpenApiSchema().properties?.spec as JSONSchemaProps;
    assert.deepEqual(spec.properties?.mode?.enum, ['Balance', 'Failover']);
    const cost = spec.properties?.costWeightPerMs;
    assert.equal(cost?.minimum, 0);
    assert.equal(cost?.exclusiveMinimum, true);
    const port = spec.properties?.backends?.items?.properties?.service?.properties?.port;
    assert.equal(port?.['x-kubernetes-int-or-string'], true);
    assert.equal(port?.minimum, 1);
    assert.equal(port?.maximum, 65535);
    assert.equal(port?.maxLength, 15);
    assert.equal(spec.properties?.backends?.['x-kubernetes-list-type'], 'atomic');
    assert.equal(spec.properties?.models?.['x-kubernetes-list-type'], 'set');
  });

  it('refuses to render what it does not know', () => {
    assert.throws(() => toCrdSchema({ [Kind]: 'Any' } as never), /cannot render a Any schema/);
    assert.throws(
      () =>
        toCrdSchema({
          [Kind]: 'Union',
          anyOf: [{ [Kind]: 'String' }, { [Kind]: 'Number' }],
        } as never),
      /a union must be/,
    );
  });

  it('renders deterministically, as YAML with the generated header', () => {
    const text = renderInferencePoolCrd();
    assert.equal(text, renderInferencePoolCrd());
    assert.ok(text.startsWith(`${GENERATED_HEADER}\n---\n`));
    assert.deepEqual(parse(text), crd);
    assert.ok(InferencePoolSchema.description !== undefined);
  });
});
