/**
 * The reconciler with fakes, the controller-runtime way: a fixture seeds the caches, one
 * reconcile runs, and the test asserts its outcome and the actions it took (what went to the
 * stream, to drift detection, to Events and to the status queue).
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { pino } from 'pino';
import type { InferencePoolStatus } from '../crds/inference-pool.schema.ts';
import type { GaieLookup } from './core/gaie-endpoints.ts';
import type { EndpointSlice, GaieInferencePool, Pod, Secret, Service } from './core/objects.ts';
import { objectKey, PoolIndex, type PoolKey } from './core/pool-index.ts';
import { NAMESPACE, pool, ready, secret, service, slice } from './core/testing.ts';
import type { CachedPool } from './kube/caches.ts';
import { PoolStates } from './pool-states.ts';
import {
  GAIE_SYNC_RETRY_MS,
  Reconciler,
  SECRET_SYNC_RETRY_MS,
  type ReconcileOutcome,
} from './reconciler.ts';

const KEY: PoolKey = `${NAMESPACE}/chat`;
const inCluster = { name: 'in-cluster', service: { name: 'vllm', port: 8000 } };
const provider = {
  name: 'provider',
  url: 'https://api.example.com/v1',
  apiKeySecretRef: { name: 'provider-key', key: 'apiKey' },
};

/** Everything the reconciler did, in order. */
type Action =
  | { kind: 'watch-secrets'; refs: string[] }
  | { kind: 'publish'; key: PoolKey; version: number; hash: string; sinceMs: number }
  | { kind: 'end-streams'; key: PoolKey }
  | { kind: 'drift-sync'; key: PoolKey; endpoints: string[] }
  | { kind: 'drift-remove'; key: PoolKey }
  | { kind: 'events'; key: PoolKey; reasons: string[] }
  | { kind: 'status-due'; key: PoolKey };

/** The world the reconciler reads (all in namespace `apps`); tests change it between reconciles. */
interface World {
  pools: Map<PoolKey, CachedPool>;
  services: Map<string, Service>;
  slices: EndpointSlice[];
  secrets: Map<string, Secret>;
  /** Object keys of the Secrets whose watch has synced. */
  syncedSecrets: Set<string>;
  /** What the GAIE cache answers for a GAIE pool, by name (absent: not found). */
  gaie: Map<string, GaieLookup | 'pending'>;
  /** The GAIE pools last asked to be watched. */
  gaieWatched: string[];
}

function cached(spec: Record<string, unknown>, status?: InferencePoolStatus): CachedPool {
  const p = pool(spec);
  return {
    ...p,
    metadata: { ...p.metadata, uid: 'uid-1', generation: 3 },
    ...(status === undefined ? {} : { status }),
  };
}

function fixture(seed: Partial<World> = {}) {
  const world: World = {
    pools: seed.pools ?? new Map<PoolKey, CachedPool>(),
    services: seed.services ?? new Map<string, Service>(),
    slices: seed.slices ?? [],
    secrets: seed.secrets ?? new Map<string, Secret>(),
    syncedSecrets: seed.syncedSecrets ?? new Set<string>(),
    gaie: seed.gaie ?? new Map<string, GaieLookup | 'pending'>(),
    gaieWatched: [],
  };
  const actions: Action[] = [];
  const states = new PoolStates();
  const reconciler = new Reconciler({
    caches: {
      pools: { get: (key) => world.pools.get(key) },
      services: { get: (_namespace, name) => world.services.get(name) },
      slices: {
        ofService: (_namespace, name) =>
          world.slices.filter((s) => s.metadata?.labels?.['kubernetes.io/service-name'] === name),
      },
      secrets: {
        watchOnly: (refs) => actions.push({ kind: 'watch-secrets', refs: [...refs] }),
        hasSynced: (namespace, name) => world.syncedSecrets.has(objectKey(namespace, name)),
        get: (_namespace, name) => world.secrets.get(name),
      },
      gaie: {
        watchOnly: (refs) => (world.gaieWatched = [...refs]),
        lookup: (_namespace, name) => world.gaie.get(name) ?? { kind: 'not-found' },
      },
    },
    index: new PoolIndex(),
    states,
    stream: {
      publish: (key, snapshot, sinceMs) =>
        actions.push({
          kind: 'publish',
          key,
          version: snapshot.version,
          hash: snapshot.hash,
          sinceMs,
        }),
      remove: (key) => actions.push({ kind: 'end-streams', key }),
    },
    drift: {
      sync: (key, _policy, endpoints) =>
        actions.push({ kind: 'drift-sync', key, endpoints: endpoints.map((e) => e.id) }),
      remove: (key) => actions.push({ kind: 'drift-remove', key }),
    },
    events: {
      record: (p, events) => {
        if (events.length > 0)
          actions.push({
            kind: 'events',
            key: objectKey(p.metadata?.namespace ?? '', p.metadata?.name ?? ''),
            reasons: events.map((e) => e.reason),
          });
      },
    },
    status: { addNow: (key) => actions.push({ kind: 'status-due', key }) },
    logger: pino({ level: 'silent' }),
  });
  /** One reconcile of `key`: its outcome and the actions it took. */
  const reconcile = (
    key: PoolKey = KEY,
    seenAtMs = 0,
  ): { outcome: ReconcileOutcome; actions: Action[] } => {
    actions.length = 0;
    const outcome = reconciler.reconcile(key, seenAtMs);
    return { outcome, actions: [...actions] };
  };
  return { world, states, reconcile, reconciler };
}

/** A world with pool `chat` routing to Service `vllm` and its ready endpoints. */
function serviceWorld(addresses: string[] = ['10.0.0.1'], status?: InferencePoolStatus) {
  return fixture({
    pools: new Map([[KEY, cached({ backends: [inCluster] }, status)]]),
    services: new Map([['vllm', service('vllm')]]),
    slices: [
      slice(
        'vllm',
        addresses.map((a) => ready(a)),
      ),
    ],
  });
}

const published = (actions: readonly Action[]) => actions.filter((a) => a.kind === 'publish');

describe('Reconciler: versions', () => {
  test('publishes a new pool as version 1, and nothing while nothing changes', () => {
    const f = serviceWorld();
    const first = f.reconcile(KEY, 42);
    assert.equal(first.outcome.kind, 'published');
    assert.ok(first.outcome.kind === 'published');
    const { hash } = first.outcome;
    assert.deepEqual(first.outcome, { kind: 'published', version: 1, hash });
    assert.deepEqual(first.actions, [
      { kind: 'watch-secrets', refs: [] },
      { kind: 'drift-sync', key: KEY, endpoints: ['in-cluster/10.0.0.1:8000'] },
      { kind: 'publish', key: KEY, version: 1, hash, sinceMs: 42 },
      { kind: 'status-due', key: KEY },
    ]);
    assert.deepEqual(
      { version: f.states.get(KEY)?.version, hash: f.states.get(KEY)?.hash },
      { version: 1, hash },
    );

    const again = f.reconcile();
    assert.deepEqual(again.outcome, { kind: 'unchanged', version: 1, hash });
    assert.deepEqual(published(again.actions), []);
    assert.ok(again.actions.some((a) => a.kind === 'status-due'));
  });

  test('numbers each change of content one higher, and records it as an Event', () => {
    const f = serviceWorld();
    f.reconcile();
    f.world.slices = [slice('vllm', [ready('10.0.0.1'), ready('10.0.0.2')])];
    const { outcome, actions } = f.reconcile();
    assert.equal(outcome.kind, 'published');
    assert.deepEqual(
      published(actions).map((a) => a.version),
      [2],
    );
    assert.deepEqual(
      actions.find((a) => a.kind === 'events'),
      { kind: 'events', key: KEY, reasons: ['EndpointsChanged'] },
    );
  });

  test('keeps the version that status records for the same content (a restart, another replica)', () => {
    const hash = hashOf(serviceWorld());
    const f = serviceWorld(['10.0.0.1'], { snapshot: { version: 7, hash } });
    assert.deepEqual(f.reconcile().outcome, { kind: 'published', version: 7, hash });
    f.world.slices = [slice('vllm', [ready('10.0.0.9')])];
    const next = f.reconcile().outcome;
    assert.ok(next.kind === 'published');
    assert.equal(next.version, 8);
  });

  test('follows the version status records for other content, never reusing it', () => {
    const f = serviceWorld(['10.0.0.1'], { snapshot: { version: 7, hash: 'other content' } });
    const outcome = f.reconcile().outcome;
    assert.ok(outcome.kind === 'published');
    assert.equal(outcome.version, 8);
  });

  test('counts on from its own last version when status lags behind it', () => {
    const f = serviceWorld(['10.0.0.1']);
    f.reconcile();
    f.world.slices = [slice('vllm', [ready('10.0.0.2')])];
    f.reconcile();
    f.world.slices = [slice('vllm', [ready('10.0.0.3')])];
    f.reconcile(); // version 3 served; status still says version 1
    const recorded = { version: 1, hash: 'the first content' };
    f.world.pools.set(KEY, cached({ backends: [inCluster] }, { snapshot: recorded }));
    f.world.slices = [slice('vllm', [ready('10.0.0.4')])];
    const outcome = f.reconcile().outcome;
    assert.ok(outcome.kind === 'published');
    assert.equal(outcome.version, 4);
  });

  test('withholds a snapshot while no backend resolves, and serves the same one unchanged after', () => {
    const f = serviceWorld();
    const first = f.reconcile().outcome;
    assert.ok(first.kind === 'published');
    f.world.services.delete('vllm');
    const withheld = f.reconcile();
    assert.deepEqual(withheld.outcome, { kind: 'withheld', reason: 'BackendsNotResolved' });
    assert.deepEqual(published(withheld.actions), []);
    assert.ok(!withheld.actions.some((a) => a.kind === 'drift-sync'), 'drift waits');
    assert.ok(
      withheld.actions.some((a) => a.kind === 'status-due'),
      'status says why',
    );
    assert.equal(f.states.get(KEY)?.version, 1, 'the last snapshot is still served');

    f.world.services.set('vllm', service('vllm'));
    assert.deepEqual(f.reconcile().outcome, { kind: 'unchanged', version: 1, hash: first.hash });
  });

  test('withholds a snapshot of a spec it does not accept', () => {
    const f = fixture({
      pools: new Map([
        [KEY, cached({ backends: [{ name: 'p', url: 'https://x.example/v1', apiKeyEnv: 'K' }] })],
      ]),
    });
    const { outcome, actions } = f.reconcile();
    assert.deepEqual(outcome, { kind: 'withheld', reason: 'NotAccepted' });
    assert.deepEqual(published(actions), []);
    assert.deepEqual(f.states.get(KEY)?.version, 0);
  });
});

describe('Reconciler: Secrets', () => {
  const providerWorld = (synced: boolean) =>
    fixture({
      pools: new Map([[KEY, cached({ backends: [provider] })]]),
      secrets: new Map([['provider-key', secret('provider-key', { apiKey: 'sk-test-1' })]]),
      syncedSecrets: new Set(synced ? [`${NAMESPACE}/provider-key`] : []),
    });

  test('requeues a pool whose Secret watch has not synced, and sends nothing without its key', () => {
    const f = providerWorld(false);
    const { outcome, actions } = f.reconcile();
    assert.deepEqual(outcome, {
      kind: 'requeue-after',
      delayMs: SECRET_SYNC_RETRY_MS,
      reason: 'secret-not-synced',
    });
    assert.deepEqual(actions, [{ kind: 'watch-secrets', refs: [`${NAMESPACE}/provider-key`] }]);
    assert.equal(f.states.get(KEY), undefined);
  });

  test('publishes with the key once the watch has synced', () => {
    const f = providerWorld(false);
    f.reconcile();
    f.world.syncedSecrets.add(`${NAMESPACE}/provider-key`);
    const { outcome } = f.reconcile();
    assert.ok(outcome.kind === 'published');
    assert.equal(outcome.version, 1);
    assert.equal(f.states.get(KEY)?.result.snapshot?.endpoints[0]?.apiKey, 'sk-test-1');
  });

  test('a deleted pool ends its streams and drift probes, and no Secret stays watched for it', () => {
    const f = providerWorld(true);
    f.reconcile();
    f.world.pools.delete(KEY);
    const { outcome, actions } = f.reconcile();
    assert.deepEqual(outcome, { kind: 'deleted' });
    assert.deepEqual(actions, [
      { kind: 'drift-remove', key: KEY },
      { kind: 'end-streams', key: KEY },
      { kind: 'watch-secrets', refs: [] },
    ]);
    assert.equal(f.states.get(KEY), undefined);
  });
});

describe('Reconciler: GAIE pools', () => {
  const llama: GaieInferencePool = {
    metadata: { name: 'llama', namespace: NAMESPACE },
    spec: { selector: { matchLabels: { app: 'llama' } }, targetPorts: [{ number: 8000 }] },
  };
  const pod = (ip: string): Pod => ({
    metadata: { name: `llama-${ip}`, namespace: NAMESPACE, labels: { app: 'llama' } },
    status: { podIP: ip, conditions: [{ type: 'Ready', status: 'True' }] },
  });
  const gaieWorld = (lookup: GaieLookup | 'pending') =>
    fixture({
      pools: new Map([
        [
          KEY,
          cached({
            mode: 'Failover',
            backends: [
              { name: 'gaie', inferencePoolRef: { name: 'llama' } },
              { name: 'spare', url: 'https://api.example.com/v1' },
            ],
          }),
        ],
      ]),
      gaie: new Map([['llama', lookup]]),
    });

  test('watches the GAIE pools its pools reference, and none once they are gone', () => {
    const f = gaieWorld({ kind: 'found', pool: llama, pods: [] });
    f.reconcile();
    assert.deepEqual(f.world.gaieWatched, [`${NAMESPACE}/llama`]);
    f.world.pools.delete(KEY);
    f.reconcile();
    assert.deepEqual(f.world.gaieWatched, []);
  });

  test('requeues a pool while its GAIE pool or pods are still listing, and sends nothing', () => {
    const f = gaieWorld('pending');
    const { outcome, actions } = f.reconcile();
    assert.deepEqual(outcome, {
      kind: 'requeue-after',
      delayMs: GAIE_SYNC_RETRY_MS,
      reason: 'gaie-not-synced',
    });
    assert.deepEqual(actions, [{ kind: 'watch-secrets', refs: [] }]);
  });

  test('publishes the ready pods as the first tier, the url tier after them', () => {
    const f = gaieWorld({ kind: 'found', pool: llama, pods: [pod('10.0.0.1')] });
    assert.equal(f.reconcile().outcome.kind, 'published');
    assert.deepEqual(
      f.states.get(KEY)?.result.snapshot?.endpoints.map((e) => [e.id, e.tier]),
      [
        ['gaie/10.0.0.1:8000', 0],
        ['spare/api.example.com:443', 1],
      ],
    );
  });

  test('a missing GAIE pool still publishes the other tiers, and says why in an Event', () => {
    const f = gaieWorld({ kind: 'not-found' });
    const { outcome, actions } = f.reconcile();
    assert.equal(outcome.kind, 'published');
    assert.deepEqual(
      actions.find((a) => a.kind === 'events'),
      { kind: 'events', key: KEY, reasons: ['InferencePoolNotFound'] },
    );
  });
});

describe('Reconciler: Events', () => {
  test('a replica that becomes leader announces the problems it reconciled before', () => {
    const f = fixture({ pools: new Map([[KEY, cached({ backends: [inCluster] })]]) });
    const nextEvents = () => f.reconcile().actions.find((a) => a.kind === 'events');
    const problems = {
      kind: 'events',
      key: KEY,
      reasons: ['ServiceNotFound', 'BackendsNotResolved'],
    };
    // Reconciled as a follower: its Events were not recorded (only the leader records them).
    assert.deepEqual(nextEvents(), problems);
    assert.equal(nextEvents(), undefined);
    // Leading now: the next reconcile says it again, once.
    f.reconciler.announceProblems([KEY]);
    assert.deepEqual(nextEvents(), problems);
    assert.equal(nextEvents(), undefined);
    // A healthy pool announces nothing.
    f.world.services.set('vllm', service('vllm'));
    f.world.slices = [slice('vllm', [ready('10.0.0.1')])];
    f.reconcile();
    f.reconciler.announceProblems([KEY]);
    assert.equal(nextEvents(), undefined);
  });

  test('a pool that starts broken says so; one that resolves later says that too', () => {
    const f = fixture({ pools: new Map([[KEY, cached({ backends: [inCluster] })]]) });
    assert.deepEqual(
      f.reconcile().actions.find((a) => a.kind === 'events'),
      { kind: 'events', key: KEY, reasons: ['ServiceNotFound', 'BackendsNotResolved'] },
    );
    f.world.services.set('vllm', service('vllm'));
    f.world.slices = [slice('vllm', [ready('10.0.0.1')])];
    assert.deepEqual(
      f.reconcile().actions.find((a) => a.kind === 'events'),
      { kind: 'events', key: KEY, reasons: ['BackendsResolved', 'EndpointsReady'] },
    );
  });
});

/** The hash the pool of `f` resolves to. */
function hashOf(f: ReturnType<typeof fixture>): string {
  const { outcome } = f.reconcile();
  assert.ok(outcome.kind === 'published');
  return outcome.hash;
}
