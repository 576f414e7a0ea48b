/**
 * The endpoints of a `service` backend, from its Service and EndpointSlices.
 *
 * Port resolution follows how Kubernetes itself maps a Service port to pod ports: the backend
 * names a port of the Service (by its number or its name); that Service port's NAME is what the
 * EndpointSlice ports carry, each with the target port number on the pods of that slice (a named
 * `targetPort` may resolve to different numbers on different pods, so the number is read per
 * slice, never from the Service).
 *
 * Readiness follows the EndpointSlice API: an address is routable when its endpoint's
 * `conditions.ready` is true or unset ("nil should be interpreted as true") and it is not
 * terminating. Terminating endpoints are never routed to, even when they still serve: the sidecar
 * has no way to prefer them only as a last resort, and a pod that is going away should drain.
 */
import type { EndpointSpec } from '../../crds/policy-types.ts';
import {
  SERVICE_NAME_LABEL,
  type EndpointPort,
  type EndpointSlice,
  type Service,
  type ServicePort,
} from './objects.ts';
import { Reason, type Problem } from './problems.ts';
import { compareStrings } from './hash.ts';

/** What a `service` backend needs from the spec. */
export interface ServiceBackend {
  name: string;
  tier: number;
  service: { name: string; port: number | string };
  costPerMTok: number;
  model?: string | undefined;
}

export type ServiceEndpointsResult =
  | {
      ok: true;
      /** Routable endpoints, sorted by id. */
      endpoints: EndpointSpec[];
      /** Distinct addresses serving the port, routable or not. */
      total: number;
    }
  | { ok: false; problem: Problem };

/** Where the endpoints' port number comes from. */
type PortChoice =
  | { kind: 'named'; sliceName: string; targetPort: number | undefined; https: boolean }
  /** A Service without ports (headless): the backend's number is the pod port itself. */
  | { kind: 'direct'; port: number };

/** The path every endpoint URL ends in: the OpenAI-compatible API prefix. */
export const SERVICE_API_PATH = '/v1';

function isTcp(protocol: string | null | undefined): boolean {
  return (protocol ?? 'TCP') === 'TCP';
}

/**
 * An https port: `appProtocol: https` (the IANA service name, as Kubernetes documents for
 * un-prefixed values), or a port named `https` or `https-<suffix>` (the naming convention of
 * service meshes).
 */
export function isHttpsPort(
  name: string | null | undefined,
  appProtocol: string | null | undefined,
): boolean {
  if (appProtocol?.toLowerCase() === 'https') return true;
  return name === 'https' || name?.startsWith('https-') === true;
}

function describePorts(ports: readonly ServicePort[]): string {
  return ports
    .map((p) => {
      const proto = isTcp(p.protocol) ? '' : ` ${String(p.protocol)}`;
      return `${p.port}${proto}${p.name ? ` (${p.name})` : ''}`;
    })
    .join(', ');
}

function choosePort(
  serviceName: string,
  service: Service,
  wanted: number | string,
): PortChoice | Problem {
  const ports = service.spec?.ports ?? [];
  const shown = typeof wanted === 'number' ? `port ${wanted}` : `port named ${wanted}`;
  if (ports.length === 0) {
    if (typeof wanted === 'number') return { kind: 'direct', port: wanted };
    return {
      reason: Reason.ServicePortNotFound,
      message: `Service ${serviceName} has no ports, so no ${shown}`,
    };
  }
  const match = ports.find(
    (p) =>
      isTcp(p.protocol) && (typeof wanted === 'number' ? p.port === wanted : p.name === wanted),
  );
  if (match === undefined) {
    return {
      reason: Reason.ServicePortNotFound,
      message: `Service ${serviceName} has no TCP ${shown}; its ports are ${describePorts(ports)}`,
    };
  }
  return {
    kind: 'named',
    sliceName: match.name ?? '',
    targetPort: typeof match.targetPort === 'number' ? match.targetPort : undefined,
    https: isHttpsPort(match.name, match.appProtocol),
  };
}

/** The pod port and scheme of `slice` for the chosen Service port; undefined: the slice lacks it. */
function slicePort(
  slice: EndpointSlice,
  choice: PortChoice,
): { port: number; https: boolean } | undefined {
  if (choice.kind === 'direct') return { port: choice.port, https: false };
  const found: EndpointPort | undefined = (slice.ports ?? []).find(
    (p) => (p.name ?? '') === choice.sliceName && isTcp(p.protocol),
  );
  if (found === undefined) return undefined;
  // A port without a number means "all ports" (hand-made slices): the Service's numeric
  // targetPort is then the pod port, and without one there is no number to dial.
  const port = found.port ?? choice.targetPort;
  if (port === undefined) return undefined;
  return { port, https: choice.https || isHttpsPort(found.name, found.appProtocol) };
}

/**
 * The slices of this Service. The shell groups slices by their service-name label; a slice that
 * carries another Service's label is a grouping mistake and is ignored, one without a label (a
 * hand-made slice the shell chose to attach) is kept.
 */
function belongsTo(slice: EndpointSlice, serviceName: string): boolean {
  const label = slice.metadata?.labels?.[SERVICE_NAME_LABEL];
  return label === undefined || label === serviceName;
}

/**
 * The endpoints of one `service` backend. An address that shows up in several slices (while the
 * EndpointSlice controller moves it between slices) is one endpoint, routable when any copy says
 * so: a stale copy must not take a ready pod out of rotation.
 */
export function serviceEndpoints(
  backend: ServiceBackend,
  services: ReadonlyMap<string, Service>,
  slicesByService: ReadonlyMap<string, readonly EndpointSlice[]>,
): ServiceEndpointsResult {
  const serviceName = backend.service.name;
  const service = services.get(serviceName);
  if (service === undefined) {
    return {
      ok: false,
      problem: { reason: Reason.ServiceNotFound, message: `Service ${serviceName} not found` },
    };
  }
  if (service.spec?.type === 'ExternalName') {
    return {
      ok: false,
      problem: {
        reason: Reason.ServiceTypeUnsupported,
        message: `Service ${serviceName} is of type ExternalName, which has no endpoints: use url for an address outside the cluster`,
      },
    };
  }
  const choice = choosePort(serviceName, service, backend.service.port);
  if (!('kind' in choice)) return { ok: false, problem: choice };

  const seen = new Map<string, SeenEndpoint>();
  for (const slice of slicesByService.get(serviceName) ?? []) {
    if (!belongsTo(slice, serviceName)) continue;
    const port = slicePort(slice, choice);
    if (port === undefined) continue;
    const scheme = port.https ? 'https' : 'http';
    for (const endpoint of slice.endpoints ?? []) {
      const routable =
        endpoint.conditions?.ready !== false && endpoint.conditions?.terminating !== true;
      for (const address of endpoint.addresses ?? []) {
        if (address === '') continue;
        const host = address.includes(':') ? `[${address}]` : address;
        const id = `${backend.name}/${host}:${port.port}`;
        const known = seen.get(id);
        if (known !== undefined) {
          known.routable ||= routable;
          continue;
        }
        seen.set(id, { url: `${scheme}://${host}:${port.port}${SERVICE_API_PATH}`, routable });
      }
    }
  }

  const endpoints = routableEndpoints(seen, backend);
  return { ok: true, endpoints, total: seen.size };
}

/** An endpoint while a backend's addresses are collected, by id. */
export type SeenEndpoint = { url: string; routable: boolean };

/**
 * The routable endpoints of a backend (Service or GAIE pool) from its collected addresses, in id
 * order, with the backend's tier, price and model rewrite.
 */
export function routableEndpoints(
  seen: ReadonlyMap<string, SeenEndpoint>,
  backend: { name: string; tier: number; costPerMTok: number; model?: string | undefined },
): EndpointSpec[] {
  return [...seen]
    .filter(([, e]) => e.routable)
    .sort(([a], [b]) => compareStrings(a, b))
    .map(([id, e]) => ({
      id,
      backend: backend.name,
      tier: backend.tier,
      url: e.url,
      costPerMTok: backend.costPerMTok,
      ...(backend.model === undefined ? {} : { model: backend.model }),
    }));
}
