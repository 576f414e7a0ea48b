/**
 * Fixtures for the reconcile core's tests: pools, Services, EndpointSlices and Secrets as the API
 * serves them, built from as little as each test needs to say.
 */
import type { InferencePool } from '../../crds/inference-pool.schema.ts';
import { validatePool } from '../../crds/validate.ts';
import { desiredSnapshot, type ReconcileInput } from './desired-snapshot.ts';
import type { ReconcileResult } from './reconcile-result.ts';
import type { GaieLookup } from './gaie-endpoints.ts';
import {
  SERVICE_NAME_LABEL,
  type Endpoint,
  type EndpointPort,
  type EndpointSlice,
  type Secret,
  type Service,
  type ServicePort,
} from './objects.ts';

export const NAMESPACE = 'apps';

/**
 * A pool `chat` in `apps` with the given spec fields (backends at least), defaulted as the API
 * server stores it. Throws when the spec is invalid: a fixture mistake.
 */
export function pool(spec: Record<string, unknown>, name = 'chat'): InferencePool {
  const result = validatePool({
    apiVersion: 'switchyard.dev/v1alpha1',
    kind: 'InferencePool',
    metadata: { name, namespace: NAMESPACE },
    spec,
  });
  if (!result.ok) throw new Error(`invalid fixture: ${JSON.stringify(result.errors)}`);
  return result.pool;
}

/** A ClusterIP Service with the given ports (one unnamed port 8000 by default). */
export function service(
  name: string,
  ports: ServicePort[] = [{ port: 8000, targetPort: 8000, protocol: 'TCP' }],
  type = 'ClusterIP',
): Service {
  return { metadata: { name, namespace: NAMESPACE }, spec: { type, ports } };
}

/** A ready endpoint (conditions as the EndpointSlice controller writes them). */
export function ready(...addresses: string[]): Endpoint {
  return { addresses, conditions: { ready: true, serving: true, terminating: false } };
}

/** An endpoint that is not ready (a starting pod, or a failing readiness probe). */
export function notReady(...addresses: string[]): Endpoint {
  return { addresses, conditions: { ready: false, serving: false, terminating: false } };
}

/** An endpoint being deleted but still serving. */
export function terminating(...addresses: string[]): Endpoint {
  return { addresses, conditions: { ready: false, serving: true, terminating: true } };
}

let sliceCount = 0;

/** An EndpointSlice of `serviceName`; ports: the Service's single unnamed port 8000 by default. */
export function slice(
  serviceName: string,
  endpoints: Endpoint[],
  options: {
    ports?: EndpointPort[] | null;
    addressType?: string;
    labels?: Record<string, string>;
  } = {},
): EndpointSlice {
  sliceCount += 1;
  return {
    metadata: {
      name: `${serviceName}-${sliceCount}`,
      namespace: NAMESPACE,
      labels: options.labels ?? { [SERVICE_NAME_LABEL]: serviceName },
    },
    addressType: options.addressType ?? 'IPv4',
    endpoints,
    ports:
      options.ports === undefined ? [{ name: '', port: 8000, protocol: 'TCP' }] : options.ports,
  };
}

/** A Secret with the given values, base64-encoded as the API serves them. */
export function secret(name: string, values: Record<string, string>): Secret {
  const data: Record<string, string> = {};
  for (const [key, value] of Object.entries(values)) {
    data[key] = base64(value);
  }
  return { metadata: { name, namespace: NAMESPACE }, data };
}

/** Base64 of the UTF-8 of `text`. */
export function base64(text: string): string {
  return btoa(String.fromCharCode(...new TextEncoder().encode(text)));
}

/** The world of one reconcile: objects by name (slices grouped by their Service). */
export interface World {
  services?: Service[];
  slices?: EndpointSlice[];
  secrets?: Secret[];
  /** What the shell found of each referenced GAIE pool, by name. */
  gaiePools?: ReadonlyMap<string, GaieLookup>;
}

export function inputOf(p: InferencePool, world: World = {}): ReconcileInput {
  const slicesByService = new Map<string, EndpointSlice[]>();
  for (const s of world.slices ?? []) {
    const owner = s.metadata?.labels?.[SERVICE_NAME_LABEL] ?? '';
    slicesByService.set(owner, [...(slicesByService.get(owner) ?? []), s]);
  }
  return {
    pool: p,
    services: new Map((world.services ?? []).map((s) => [s.metadata?.name ?? '', s])),
    slicesByService,
    secrets: new Map((world.secrets ?? []).map((s) => [s.metadata?.name ?? '', s])),
    gaiePools: world.gaiePools ?? new Map(),
  };
}

/** One reconcile of `p` in `world`, after `previous` if given. */
export function reconcile(
  p: InferencePool,
  world: World = {},
  previous?: ReconcileResult,
): ReconcileResult {
  return desiredSnapshot({ ...inputOf(p, world), previous });
}
