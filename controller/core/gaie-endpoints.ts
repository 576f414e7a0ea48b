/**
 * The endpoints of an `inferencePoolRef` backend, from a Gateway API inference extension (GAIE)
 * InferencePool and the pods its selector matches.
 *
 * GAIE's own implementations (its endpoint picker, the gateways that read the pool) take a member
 * pod as routable when its Ready condition is True and it has an IP; a pod being deleted is left
 * out here as well, so that it drains, as `service-endpoints.ts` does with terminating endpoints.
 * Each routable pod is one endpoint per target port, `<backend>/<podIP>:<port>`, reached over
 * plain http like a Service's pods. The pool's endpoint picker is never called: switchyard's own
 * policy picks among these endpoints.
 */
import { GAIE_GROUP, GAIE_VERSION } from '../../crds/inference-pool.schema.ts';
import { compareStrings } from './hash.ts';
import type { GaieInferencePool, Pod } from './objects.ts';
import { Reason, type Problem } from './problems.ts';
import {
  routableEndpoints,
  SERVICE_API_PATH,
  type SeenEndpoint,
  type ServiceEndpointsResult,
} from './service-endpoints.ts';

/** What an `inferencePoolRef` backend needs from the spec. */
export interface GaieBackend {
  name: string;
  tier: number;
  inferencePoolRef: { name: string };
  costPerMTok: number;
  /** The model name each request is sent with (`backends[].model`), as for a Service backend. */
  model?: string | undefined;
}

/**
 * What the shell knows of one referenced GAIE pool: found (with the pods of its namespace that
 * its selector may match), not found, or unreadable (the API does not serve the kind, or refuses
 * the controller), with the shell's account of why.
 */
export type GaieLookup =
  | { kind: 'found'; pool: GaieInferencePool; pods: readonly Pod[] }
  | { kind: 'not-found'; why?: string | undefined }
  | { kind: 'unreadable'; why: string };

/** The one appProtocol the sidecar speaks to an endpoint: HTTP/1.1. */
const HTTP = 'http';

/** `InferencePool inference.networking.k8s.io/v1 <namespace>/<name>`: how messages name one. */
export function gaiePoolName(namespace: string, name: string): string {
  return `InferencePool ${GAIE_GROUP}/${GAIE_VERSION} ${namespace}/${name}`;
}

/**
 * The label selector of a GAIE pool (`k=v,k2=v2`, keys sorted) for a label-selected pod watch;
 * undefined when it has no `matchLabels`, which would select every pod of the namespace.
 */
export function gaieLabelSelector(pool: GaieInferencePool): string | undefined {
  const labels = pool.spec?.selector?.matchLabels;
  const keys = Object.keys(labels ?? {}).sort(compareStrings);
  if (labels === undefined || labels === null || keys.length === 0) return undefined;
  return keys.map((k) => `${k}=${labels[k]}`).join(',');
}

function matches(pod: Pod, labels: Readonly<Record<string, string>>): boolean {
  const own = pod.metadata?.labels ?? {};
  return Object.entries(labels).every(([k, v]) => own[k] === v);
}

function isRoutable(pod: Pod): boolean {
  if (pod.metadata?.deletionTimestamp !== undefined && pod.metadata.deletionTimestamp !== null)
    return false;
  const ip = pod.status?.podIP;
  if (ip === undefined || ip === null || ip === '') return false;
  return (pod.status?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True');
}

/** The endpoints of one `inferencePoolRef` backend of a pool in `namespace`. */
export function gaieEndpoints(
  backend: GaieBackend,
  namespace: string,
  lookup: GaieLookup | undefined,
): ServiceEndpointsResult {
  const shown = gaiePoolName(namespace, backend.inferencePoolRef.name);
  const fail = (reason: Problem['reason'], message: string): ServiceEndpointsResult => ({
    ok: false,
    problem: { reason, message },
  });
  if (lookup === undefined || lookup.kind === 'not-found') {
    const why = lookup?.why;
    return fail(Reason.InferencePoolNotFound, `${shown} not found${why ? `: ${why}` : ''}`);
  }
  if (lookup.kind === 'unreadable')
    return fail(Reason.InferencePoolNotReadable, `${shown} cannot be read: ${lookup.why}`);

  const { pool, pods } = lookup;
  const protocol = pool.spec?.appProtocol ?? HTTP;
  if (protocol !== HTTP) {
    return fail(
      Reason.InferencePoolUnsupported,
      `${shown} has appProtocol ${protocol}, and the sidecar speaks HTTP/1.1 to its endpoints: ` +
        `set the pool's appProtocol to http (its model servers must then accept HTTP/1.1)`,
    );
  }
  const labels = pool.spec?.selector?.matchLabels;
  if (gaieLabelSelector(pool) === undefined || labels === undefined || labels === null) {
    return fail(
      Reason.InferencePoolUnsupported,
      `${shown} has no spec.selector.matchLabels, so it selects no pods`,
    );
  }
  // The CRD allows 1 to 65535 only; anything else (a hand-made object) is no port to dial.
  const ports = [
    ...new Set(
      (pool.spec?.targetPorts ?? [])
        .map((p) => p.number ?? 0)
        .filter((n) => Number.isInteger(n) && n > 0 && n <= 65535),
    ),
  ];
  if (ports.length === 0) {
    return fail(Reason.InferencePoolUnsupported, `${shown} has no spec.targetPorts`);
  }

  const seen = new Map<string, SeenEndpoint>();
  let pending = 0;
  for (const pod of pods) {
    if (!matches(pod, labels)) continue;
    const ip = pod.status?.podIP;
    if (ip === undefined || ip === null || ip === '') {
      pending++;
      continue;
    }
    const routable = isRoutable(pod);
    const host = ip.includes(':') ? `[${ip}]` : ip;
    for (const port of ports) {
      const id = `${backend.name}/${host}:${port}`;
      const known = seen.get(id);
      // Two pods on one IP and port (a replaced pod whose IP was reused before the old one was
      // gone): one endpoint, routable when either is.
      if (known !== undefined) known.routable ||= routable;
      else seen.set(id, { url: `http://${host}:${port}${SERVICE_API_PATH}`, routable });
    }
  }

  const endpoints = routableEndpoints(seen, backend);
  // Members without an IP yet (pending) count too: "0 of 2 ready" says more than "no endpoints".
  return { ok: true, endpoints, total: seen.size + pending * ports.length };
}
