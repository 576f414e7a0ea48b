/**
 * fast-check arbitraries for pool documents, shared by the validator's fuzz test
 * (crds/fuzz.test.ts), the reconcile core's (controller/core/desired-snapshot.fuzz.test.ts) and
 * the controller's on a real API server (test/k8s/controller-fuzz.test.ts): mutations of valid
 * pools (set, delete, add a field anywhere) with values likely to matter.
 */
import fc from 'fast-check';
import { parse } from 'yaml';
import { BALANCE_EXAMPLE, FAILOVER_EXAMPLE, FLOW_CONTROL_EXAMPLE } from '../crds/examples.ts';

export type Json = unknown;

/** Every path into a JSON value, as key lists. */
export function pathsOf(
  value: Json,
  prefix: (string | number)[] = [],
  out: (string | number)[][] = [],
) {
  out.push(prefix);
  if (Array.isArray(value)) value.forEach((v, i) => pathsOf(v, [...prefix, i], out));
  else if (value !== null && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) pathsOf(v, [...prefix, k], out);
  }
  return out;
}

export type Mutation =
  | { op: 'set'; at: number; value: Json }
  | { op: 'delete'; at: number }
  | { op: 'add'; at: number; key: string; value: Json };

export function mutate(doc: Json, mutations: Mutation[]): Json {
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
export const interesting = fc.oneof(
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
    'x-team',
    'team',
    { serviceAccount: {} },
    { podLabel: 'team' },
    { header: 'x-team' },
    { requestsPerMinute: 60 },
    { workload: 'chat', tokensPerMinute: 1000 },
    [{ tokensPerMinute: 1000 }, { requestsPerMinute: 5 }],
  ),
);

export const mutation: fc.Arbitrary<Mutation> = fc.oneof(
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
        'flowControl',
        'workload',
        'budgets',
        'podLabel',
        'header',
        'serviceAccount',
        'requestsPerMinute',
        'tokensPerMinute',
      ),
    ),
    value: interesting,
  }),
);

/** A pool that references Services and Secrets, so that mutations reach those code paths too. */
export const SERVICE_POOL = {
  apiVersion: 'switchyard.dev/v1alpha1',
  kind: 'InferencePool',
  metadata: { name: 'chat', namespace: 'apps', generation: 3 },
  spec: {
    mode: 'Failover',
    backends: [
      { name: 'vllm', service: { name: 'vllm', port: 'http' } },
      { name: 'by-number', service: { name: 'tgi', port: 8000 }, model: 'x' },
      {
        name: 'provider',
        url: 'https://api.example.com/v1',
        apiKeySecretRef: { name: 'provider-key', key: 'apiKey' },
      },
    ],
  },
};

const BASES: Json[] = [
  parse(BALANCE_EXAMPLE) as Json,
  parse(FAILOVER_EXAMPLE) as Json,
  parse(FLOW_CONTROL_EXAMPLE) as Json,
  SERVICE_POOL,
];

/**
 * What a pool from the API may look like: SERVICE_POOL lightly mutated, an example mutated more,
 * or any spec at all.
 */
export const poolDocument: fc.Arbitrary<Json> = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.array(mutation, { maxLength: 2 }).map((ms) => mutate(SERVICE_POOL, ms)),
  },
  {
    weight: 3,
    arbitrary: fc
      .tuple(fc.nat(BASES.length - 1), fc.array(mutation, { maxLength: 5 }))
      .map(([i, ms]) => mutate(BASES[i], ms)),
  },
  fc.jsonValue().map((spec) => ({ ...SERVICE_POOL, spec })),
);
