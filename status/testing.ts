/**
 * Fixtures for the tests of `switchyard status`: an InferencePool as the API server answers it,
 * and endpoints of a sidecar's /debug/backends, built from as little as each test needs to say.
 */
import type { Condition, InferencePoolStatus } from '../crds/inference-pool.schema.ts';

export const T = '2026-01-31T12:00:00Z';

export const condition = (
  type: string,
  status: Condition['status'] = 'True',
  reason = 'Fine',
  message = '',
): Condition => ({ type, status, reason, message, lastTransitionTime: T });

export const HEALTHY_CONDITIONS = [
  condition('Accepted', 'True', 'Accepted'),
  condition('ResolvedRefs', 'True', 'BackendsResolved'),
  condition('Ready', 'True', 'EndpointsReady'),
];

/** An InferencePool `apps/chat` as the API server answers it, with this status. */
export function pool(status: Partial<InferencePoolStatus>, generation = 1): unknown {
  return {
    apiVersion: 'switchyard.dev/v1alpha1',
    kind: 'InferencePool',
    metadata: { name: 'chat', namespace: 'apps', generation },
    spec: { mode: 'Balance', backends: [{ name: 'a', url: 'http://a.example/v1' }] },
    status: { observedGeneration: 1, conditions: HEALTHY_CONDITIONS, ...status },
  };
}

/** Three endpoints, two probed alike, three sidecars in sync: healthy. */
export const HEALTHY_STATUS: Partial<InferencePoolStatus> = {
  endpoints: { ready: 3, total: 3, drifted: 0 },
  snapshot: { version: 4, hash: 'abcdef0123456789' },
  sidecars: { connected: 3, inSync: 3 },
  drift: {
    expected: 'llama/fp_a/0123456789ab',
    endpoints: [
      {
        id: 'a/10.0.0.1:8000',
        fingerprint: 'llama/fp_a/0123456789ab',
        drifted: false,
        probedAt: T,
      },
      {
        id: 'a/10.0.0.2:8000',
        fingerprint: 'llama/fp_a/0123456789ab',
        drifted: false,
        probedAt: T,
      },
    ],
  },
};

/** One endpoint of /debug/backends, as sidecar/admin/admin-server.ts describes it. */
export function debugEndpoint(
  id: string,
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    id,
    backend: id.split('/')[0],
    url: `http://${id.split('/')[1]}/v1`,
    tier: 0,
    inFlight: 0,
    ewmaTtftMs: 412.5,
    ewmaSeeded: false,
    breaker: 'closed',
    slow: false,
    drifted: false,
    fingerprint: 'llama/fp_a/0123456789ab',
    driftMismatches: 0,
    requests: 120,
    errors: 1,
    rateLimited: 0,
    window: { requests: 20, errors: 1, rateLimited: 0 },
    costPerMTok: 0,
    ...extra,
  };
}

/** /debug/backends of pool `chat` with these endpoints. */
export const debugBackends = (endpoints: unknown[]) => ({
  pool: 'chat',
  mode: 'Balance',
  snapshotVersion: 3,
  snapshotHash: '0123456789abcdef',
  endpoints,
});

/** /readyz of a ready sidecar. */
export const READY = {
  httpStatus: 200,
  body: { status: 'ready', pool: 'chat', snapshotVersion: 3 },
};
