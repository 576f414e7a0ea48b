import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { Kind } from '@sinclair/typebox';
import { parse } from 'yaml';
import { BALANCE_EXAMPLE, FAILOVER_EXAMPLE, FLOW_CONTROL_EXAMPLE } from './examples.ts';
import { InferencePoolSpecSchema } from './inference-pool.schema.ts';
import { ALL_RULES } from './semantic.ts';
import { validatePool } from './validate.ts';

const docs = readFileSync(new URL('../docs/configuration.md', import.meta.url), 'utf8');
const yamlBlocks = [...docs.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => m[1] ?? '');

interface Node {
  [Kind]?: string;
  properties?: Record<string, Node>;
  items?: Node;
}

/** `spec.backends[].service.port` and so on: every field of the spec. */
function fieldPaths(node: Node, path: string, out: string[] = []): string[] {
  for (const [key, child] of Object.entries(node.properties ?? {})) {
    const at = `${path}.${key}`;
    out.push(at);
    fieldPaths(child, at, out);
    if (child[Kind] === 'Array' && child.items !== undefined)
      fieldPaths(child.items, `${at}[]`, out);
  }
  return out;
}

describe('docs/configuration.md', () => {
  it('shows the reference examples verbatim', () => {
    assert.ok(yamlBlocks.includes(BALANCE_EXAMPLE), 'the Balance example');
    assert.ok(yamlBlocks.includes(FAILOVER_EXAMPLE), 'the Failover example');
    assert.ok(yamlBlocks.includes(FLOW_CONTROL_EXAMPLE), 'the flow-control example');
  });

  it('shows only pools that validate', () => {
    const pools = yamlBlocks
      .map((b) => parse(b) as unknown)
      .filter((d) => (d as { kind?: string }).kind === 'InferencePool');
    assert.ok(pools.length >= 3);
    for (const pool of pools) assert.ok(validatePool(pool).ok, JSON.stringify(pool));
  });

  it('documents every field of the spec', () => {
    for (const path of fieldPaths(InferencePoolSpecSchema, 'spec')) {
      assert.ok(docs.includes(`\`${path}\``), `${path} is not documented`);
    }
  });

  it('lists every cross-field rule with its message', () => {
    for (const rule of ALL_RULES) {
      // A rule with a messageExpression names the offending value after its fixed message.
      const message = rule.messageExpression === undefined ? rule.message : `${rule.message}: `;
      assert.ok(docs.includes(message), `missing: ${message}`);
    }
  });

  it('shows real error messages', () => {
    const result = validatePool(
      parse(`
apiVersion: switchyard.dev/v1alpha1
kind: InferencePool
metadata: {name: chat}
spec:
  backends:
  - {name: a, url: http://127.0.0.1:9101/v1}
  - {name: b, url: http://127.0.0.1:9102/v1, service: {name: vllm, port: 8000}}
  helth: {window: 5s}
  health: {window: 5}
  retry: {maxAttempts: 0}
`),
    );
    assert.ok(!result.ok);
    assert.equal(result.errors.length, 4);
    for (const e of result.errors) {
      assert.ok(docs.includes(`  - ${e.path}: ${e.message}\n`), `${e.path}: ${e.message}`);
    }
  });
});
