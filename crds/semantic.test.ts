import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Kind } from '@sinclair/typebox';
import { InferencePoolSchema } from './inference-pool.schema.ts';
import {
  ALL_RULES,
  type CelValidation,
  checkAliasesAgainstBackends,
  checkSemantics,
  checkUrl,
} from './semantic.ts';

interface Node {
  [Kind]?: string;
  properties?: Record<string, Node>;
  items?: Node;
  anyOf?: Node[];
  'x-kubernetes-validations'?: CelValidation[];
}

/** Every `x-kubernetes-validations` entry of the schema, with where it is. */
function celRulesOf(node: Node, path: string, out: { path: string; v: CelValidation }[] = []) {
  for (const v of node['x-kubernetes-validations'] ?? []) out.push({ path, v });
  for (const [key, child] of Object.entries(node.properties ?? {}))
    celRulesOf(child, `${path}.${key}`, out);
  if (node.items !== undefined) celRulesOf(node.items, `${path}[]`, out);
  for (const variant of node.anyOf ?? []) celRulesOf(variant, path, out);
  return out;
}

describe('semantic rules', () => {
  const inSchema = celRulesOf(InferencePoolSchema, '');

  it('every CEL rule of the schema has a TypeScript twin with the same message', () => {
    assert.ok(inSchema.length >= ALL_RULES.length);
    for (const { path, v } of inSchema) {
      const twin = ALL_RULES.find((r) => r.rule === v.rule);
      assert.ok(twin !== undefined, `${path}: no twin for ${v.rule}`);
      assert.equal(twin.message, v.message);
      assert.equal(twin.messageExpression, v.messageExpression);
      assert.equal(twin.fieldPath, v.fieldPath);
    }
  });

  it('every rule is in the schema exactly once', () => {
    for (const rule of ALL_RULES) {
      assert.equal(inSchema.filter(({ v }) => v.rule === rule.rule).length, 1, rule.rule);
    }
  });

  it('sit where they are meant to', () => {
    assert.deepEqual(
      [...new Set(inSchema.map(({ path }) => path))],
      [
        '.spec',
        '.spec.aliases',
        '.spec.backends',
        '.spec.backends[]',
        '.spec.backends[].tls',
        '.spec.health',
        '.spec.flowControl',
        '.spec.flowControl.workload',
        '.spec.flowControl.budgets',
        '.spec.flowControl.budgets[]',
      ],
    );
  });

  it('messages are sentences for a person: no trailing period, no CEL', () => {
    for (const rule of ALL_RULES) {
      assert.doesNotMatch(rule.message, /\.$|self\.|has\(/, rule.message);
    }
  });

  it('the twins never throw, whatever they are given', () => {
    const odd: unknown[] = [
      null,
      undefined,
      0,
      'x',
      [],
      {},
      [null, 1, 'a', { name: 1 }, { name: 'a' }, { name: 'a' }],
      { service: null, url: 5, urls: 'x', apiKeyEnv: 1, openFor: 5, maxOpenFor: [] },
      { urls: [1, null], apiKeyEnv: 'K' },
      { budgets: 'x', workload: null, header: 1, podLabel: [] },
      [{ workload: 1 }, null, { workload: 'a' }, { workload: 'a' }, 'b'],
    ];
    for (const rule of ALL_RULES) for (const value of odd) rule.check(value);
  });

  it('the walker only looks at values of the right JSON type', () => {
    assert.deepEqual(
      checkSemantics(InferencePoolSchema, { spec: { backends: 'x' } }, '<root>'),
      [],
    );
    assert.deepEqual(checkSemantics(InferencePoolSchema, { spec: [] }, '<root>'), []);
    assert.deepEqual(
      checkSemantics(InferencePoolSchema, { spec: { backends: [1, { name: 'a' }] } }, '<root>'),
      [
        {
          path: 'spec.backends[1]',
          message:
            'a backend needs one of service, inferencePoolRef, url or urls, and this one sets none',
        },
      ],
    );
  });
});

describe('checkUrl', () => {
  it('accepts http and https base URLs', () => {
    for (const url of [
      'http://127.0.0.1:9101/v1',
      'https://api.example.com/v1',
      'http://[::1]:8000',
      'https://example.com/openai/deployments/x',
    ]) {
      assert.equal(checkUrl(url), undefined, url);
    }
  });

  it('says what is wrong', () => {
    const help = 'must be an http or https URL like https://api.example.com/v1';
    assert.equal(checkUrl('nope'), `${help}: it does not parse as a URL`);
    assert.equal(checkUrl('ws://x/v1'), `${help}: the scheme must be http or https`);
    assert.equal(
      checkUrl('https://k@x/v1'),
      `${help}: put no user or password into it (use apiKeySecretRef or apiKeyEnv)`,
    );
    assert.equal(
      checkUrl('https://x/v1#frag'),
      `${help}: it is a base URL, without ?query or #fragment`,
    );
    assert.equal(
      checkUrl('https://x/v1?'),
      `${help}: it is a base URL, without ?query or #fragment`,
    );
  });
});

describe('list maps and the alias checks CEL cannot afford', () => {
  it('reports a repeated key of a list map at the later item, and skips odd items', () => {
    const spec = {
      backends: [{ name: 'a', url: 'https://x/v1' }],
      aliases: [{ name: 'x', model: 'm' }, 5, { name: 1 }, { name: 'x', model: 'n' }],
    };
    assert.deepEqual(checkSemantics(InferencePoolSchema, { spec }, '<root>'), [
      { path: 'spec.aliases[3]', message: 'duplicate name "x": already at spec.aliases[0]' },
    ]);
  });

  it('names the alias whose name a backend serves, at its index, whatever else is odd', () => {
    const spec = {
      backends: [null, { name: 'b', models: ['m', 3, 'lora'] }, { name: 'c', models: ['lora'] }],
      aliases: [null, { name: 'lora', model: 'm' }, { name: 7 }, { name: 'ok', model: 'm' }],
    };
    assert.deepEqual(checkAliasesAgainstBackends(spec, 'spec'), [
      {
        path: 'spec.aliases[1].name',
        message:
          '"lora" is a model a backend serves (spec.backends[1].models): as an alias it would be rewritten and that model never reached; give the alias another name',
      },
    ]);
    for (const odd of [null, 1, 'x', [], { backends: 'x', aliases: {} }])
      assert.deepEqual(checkAliasesAgainstBackends(odd, 'spec'), []);
  });
});
