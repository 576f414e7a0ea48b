/**
 * The reconcile core on anything: pools mutated from valid ones (and arbitrary specs), with
 * Services, EndpointSlices, Secrets and GAIE pools with their pods of random shape, reconciled in
 * sequences that carry the previous result. It must never throw, and every result must be one the shell can write: three
 * conditions in order, bounded messages, a snapshot only with a hash, routable http(s) endpoints
 * with unique ids, counts that add up, and no Secret value anywhere but in the snapshot.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import type { InferencePool } from '../../crds/inference-pool.schema.ts';
import { mutate, mutation, poolDocument, SERVICE_POOL } from '../../harness/pool-arbitraries.ts';
import { CONDITION_MESSAGE_MAX_BYTES, desiredSnapshot } from './desired-snapshot.ts';
import type { GaieLookup } from './gaie-endpoints.ts';
import type { EndpointSlice, GaieInferencePool, Pod, Secret, Service } from './objects.ts';
import { SERVICE_NAME_LABEL } from './objects.ts';
import type { ReconcileResult } from './reconcile-result.ts';
import { poolStatus } from './status.ts';
import { base64, NAMESPACE } from './testing.ts';

const NAMES = ['vllm', 'tgi', 'provider-key', 'other', ''];
const SECRET_PREFIX = 'sk-fuzz-';

const maybe = <T>(a: fc.Arbitrary<T>): fc.Arbitrary<T | null | undefined> =>
  fc.oneof({ weight: 4, arbitrary: a }, fc.constant(null), fc.constant(undefined));

const address = fc.oneof(
  { weight: 6, arbitrary: fc.ipV4() },
  fc.ipV6(),
  fc.constantFrom('10.0.0.1', '127.0.0.1', '0.0.0.0', '::1', 'not-an-ip', '', 'a.b.svc'),
);

const portNumber = fc.oneof(
  fc.integer({ min: 1, max: 65535 }),
  fc.constantFrom(0, -1, 70000, 8000, 1.5, Number.NaN),
);

/** Mostly objects that match what SERVICE_POOL references, so that resolution gets far. */
const likely = <T>(usual: fc.Arbitrary<T>, other: fc.Arbitrary<T>): fc.Arbitrary<T> =>
  fc.oneof({ weight: 3, arbitrary: usual }, other);
const serviceName = likely(fc.constantFrom('vllm', 'tgi'), fc.constantFrom(...NAMES));
const portName = likely(fc.constant('http'), fc.constantFrom('grpc', '', 'metrics'));

const service: fc.Arbitrary<Service> = fc.record({
  metadata: fc.record({ name: serviceName, namespace: fc.constant(NAMESPACE) }),
  spec: maybe(
    fc.record({
      type: maybe(fc.constantFrom('ClusterIP', 'NodePort', 'ExternalName', 'Weird')),
      ports: maybe(
        fc.array(
          fc.record({
            name: maybe(portName),
            port: likely(fc.constantFrom(80, 8000), portNumber),
            targetPort: maybe(fc.oneof(portNumber, fc.constantFrom('http', 'web', ''))),
            protocol: maybe(fc.constantFrom('TCP', 'UDP', 'SCTP')),
            appProtocol: maybe(fc.constantFrom('https', 'http', 'kubernetes.io/h2c', 'x')),
          }),
          { maxLength: 4 },
        ),
      ),
    }),
  ),
});

const slice: fc.Arbitrary<EndpointSlice> = fc.record({
  metadata: fc.record({
    name: fc.string({ maxLength: 8 }),
    namespace: fc.constant(NAMESPACE),
    labels: maybe(
      fc.record({ [SERVICE_NAME_LABEL]: serviceName }) as fc.Arbitrary<Record<string, string>>,
    ),
  }),
  addressType: likely(fc.constant('IPv4'), fc.constantFrom('IPv6', 'FQDN', '')),
  endpoints: maybe(
    fc.array(
      fc.record({
        addresses: maybe(fc.array(address, { maxLength: 3 })),
        conditions: maybe(
          fc.record({
            ready: maybe(likely(fc.constant(true), fc.boolean())),
            serving: maybe(fc.boolean()),
            terminating: maybe(fc.boolean()),
          }),
        ),
      }),
      { maxLength: 6 },
    ),
  ),
  ports: maybe(
    fc.array(
      fc.record({
        name: maybe(portName),
        port: maybe(likely(fc.constant(8000), portNumber)),
        protocol: maybe(fc.constantFrom('TCP', 'UDP')),
        appProtocol: maybe(fc.constantFrom('https', 'http')),
      }),
      { maxLength: 3 },
    ),
  ),
});

const secret: fc.Arbitrary<Secret> = fc.record({
  metadata: fc.record({
    name: likely(fc.constant('provider-key'), fc.constantFrom(...NAMES)),
    namespace: fc.constant(NAMESPACE),
  }),
  data: maybe(
    fc.dictionary(
      likely(fc.constant('apiKey'), fc.constantFrom('key', 'other')),
      fc.oneof(
        fc.string({ minLength: 4, maxLength: 24 }).map((v) => base64(`${SECRET_PREFIX}${v}`)),
        fc.constantFrom('', '!!not base64!!', base64(''), base64(' \n'), 'AAAA'),
      ),
    ),
  ),
});

const randomWorld = fc.record({
  services: fc.array(service, { maxLength: 3 }),
  slices: fc.array(slice, { maxLength: 4 }),
  secrets: fc.array(secret, { maxLength: 2 }),
});

/** The objects SERVICE_POOL names, well formed, with random endpoints and conditions. */
const coherentWorld = fc
  .tuple(
    fc.array(
      fc.record({
        addresses: fc.array(address, { minLength: 1, maxLength: 2 }),
        conditions: fc.record({
          ready: maybe(fc.boolean()),
          serving: maybe(fc.boolean()),
          terminating: maybe(fc.boolean()),
        }),
      }),
      { maxLength: 8 },
    ),
    fc.array(secret, { maxLength: 1 }),
  )
  .map(([endpoints, secrets]) => {
    const services: Service[] = [
      {
        metadata: { name: 'vllm', namespace: NAMESPACE },
        spec: { ports: [{ name: 'http', port: 80, targetPort: 8000 }] },
      },
      { metadata: { name: 'tgi', namespace: NAMESPACE }, spec: { ports: [{ port: 8000 }] } },
    ];
    const slices: EndpointSlice[] = [
      {
        metadata: {
          name: 'vllm-1',
          namespace: NAMESPACE,
          labels: { [SERVICE_NAME_LABEL]: 'vllm' },
        },
        addressType: 'IPv4',
        endpoints: endpoints.slice(0, 5),
        ports: [{ name: 'http', port: 8000 }],
      },
      {
        metadata: { name: 'tgi-1', namespace: NAMESPACE, labels: { [SERVICE_NAME_LABEL]: 'tgi' } },
        addressType: 'IPv4',
        endpoints: endpoints.slice(5),
        ports: [{ name: '', port: 8000 }],
      },
    ];
    return { services, slices, secrets };
  });

const world = fc.oneof(randomWorld, coherentWorld);

/** A pool whose first tier is a GAIE pool, mutated a little in each step. */
const GAIE_POOL = {
  ...SERVICE_POOL,
  spec: {
    mode: 'Failover',
    backends: [
      { name: 'gaie', inferencePoolRef: { name: 'llama' } },
      { name: 'provider', url: 'https://api.example.com/v1' },
    ],
  },
};

const labels = maybe(
  fc.dictionary(fc.constantFrom('app', 'tier', ''), likely(fc.constant('llama'), fc.string())),
);

const gaiePod: fc.Arbitrary<Pod> = fc.record({
  metadata: maybe(
    fc.record({ labels, deletionTimestamp: maybe(fc.constantFrom('2026-01-01T00:00:00Z', '')) }),
  ),
  status: maybe(
    fc.record({
      podIP: maybe(address),
      conditions: maybe(
        fc.array(
          fc.record({
            type: likely(fc.constant('Ready'), fc.constantFrom('PodScheduled', '')),
            status: likely(fc.constant('True'), fc.constantFrom('False', 'Unknown', '')),
          }),
          { maxLength: 3 },
        ),
      ),
    }),
  ),
});

const gaiePool: fc.Arbitrary<GaieInferencePool> = fc.record({
  spec: maybe(
    fc.record({
      selector: maybe(fc.record({ matchLabels: labels })),
      targetPorts: maybe(
        fc.array(fc.record({ number: maybe(likely(fc.constant(8000), portNumber)) }), {
          maxLength: 3,
        }),
      ),
      appProtocol: maybe(fc.constantFrom('http', 'kubernetes.io/h2c', 'x')),
    }),
  ),
});

const gaieLookup: fc.Arbitrary<GaieLookup> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({
      kind: fc.constant('found' as const),
      pool: gaiePool,
      pods: fc.array(gaiePod, { maxLength: 6 }),
    }),
  },
  fc.record({
    kind: fc.constant('not-found' as const),
    why: fc.option(fc.string(), { nil: undefined }),
  }),
  fc.record({ kind: fc.constant('unreadable' as const), why: fc.string() }),
);

function secretValues(secrets: readonly Secret[]): string[] {
  const values: string[] = [];
  for (const s of secrets) {
    for (const v of Object.values(s.data ?? {})) {
      try {
        const text = atob(v);
        if (text.startsWith(SECRET_PREFIX)) values.push(text);
      } catch {
        // not base64: not a value anyone could leak
      }
    }
  }
  return values;
}

function checkResult(result: ReconcileResult, secrets: readonly string[]): void {
  assert.deepEqual(
    result.conditions.map((c) => c.type),
    ['Accepted', 'ResolvedRefs', 'Ready'],
  );
  for (const c of result.conditions) {
    assert.ok(['True', 'False', 'Unknown'].includes(c.status));
    assert.match(c.reason, /^[A-Za-z]+$/);
    assert.ok(c.message !== '' && Buffer.byteLength(c.message) <= CONDITION_MESSAGE_MAX_BYTES);
  }
  assert.equal(result.hash === '', result.snapshot === undefined, 'a hash exactly with a snapshot');
  assert.ok(result.endpoints.ready >= 0 && result.endpoints.ready <= result.endpoints.total);
  if (result.snapshot !== undefined) {
    const ids = result.snapshot.endpoints.map((e) => e.id);
    assert.equal(new Set(ids).size, ids.length, 'endpoint ids are unique');
    for (const e of result.snapshot.endpoints) assert.match(e.url, /^https?:\/\/[^/]+/);
  }
  const visible = JSON.stringify([result.conditions, result.events, result.backends]);
  for (const value of secrets) assert.ok(!visible.includes(value), 'a Secret value leaked');
}

describe('desiredSnapshot on anything', () => {
  test('never throws, and every result can be written and served', () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(poolDocument, world), { minLength: 1, maxLength: 4 }),
        (steps) => {
          let previous: ReconcileResult | undefined;
          for (const [doc, w] of steps) {
            const slicesByService = new Map<string, EndpointSlice[]>();
            for (const s of w.slices) {
              const owner = s.metadata?.labels?.[SERVICE_NAME_LABEL] ?? '';
              slicesByService.set(owner, [...(slicesByService.get(owner) ?? []), s]);
            }
            // The API server stores only objects with a valid name and namespace: whatever a
            // mutation did to metadata, the spec is what may be anything.
            const spec = (doc as { spec?: unknown } | null)?.spec;
            const pool = { ...SERVICE_POOL, spec } as unknown as InferencePool;
            const result = desiredSnapshot({
              pool,
              services: new Map(w.services.map((s) => [s.metadata?.name ?? '', s])),
              slicesByService,
              secrets: new Map(w.secrets.map((s) => [s.metadata?.name ?? '', s])),
              previous,
            });
            checkResult(result, secretValues(w.secrets));
            const status = poolStatus({
              generation: 3,
              result,
              snapshot:
                result.snapshot === undefined ? undefined : { version: 1, hash: result.hash },
              sidecars: { reports: new Map(), nowMs: 0, staleAfterMs: 1 },
              now: '2026-01-01T00:00:00Z',
            });
            assert.equal(status.conditions?.length, 3);
            previous = result;
          }
        },
      ),
      { numRuns: 1500 },
    );
  });

  test('never throws on GAIE pools and pods of any shape, and serves only what it can dial', () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.array(mutation, { maxLength: 2 }), maybe(gaieLookup)), {
          minLength: 1,
          maxLength: 4,
        }),
        (steps) => {
          let previous: ReconcileResult | undefined;
          for (const [mutations, lookup] of steps) {
            const spec = (mutate(GAIE_POOL, mutations) as { spec?: unknown } | null)?.spec;
            const pool = { ...SERVICE_POOL, spec } as unknown as InferencePool;
            const result = desiredSnapshot({
              pool,
              services: new Map(),
              slicesByService: new Map(),
              secrets: new Map(),
              gaiePools:
                lookup === null || lookup === undefined ? new Map() : new Map([['llama', lookup]]),
              previous,
            });
            checkResult(result, []);
            for (const e of result.snapshot?.endpoints ?? [])
              if (e.backend === 'gaie') assert.match(e.url, /^http:\/\/.+:\d+\/v1$/);
            previous = result;
          }
        },
      ),
      { numRuns: 1000 },
    );
  });
});
