/**
 * The Kubernetes objects the reconcile core reads: only the fields it uses, as plain structural
 * interfaces. The shell passes the objects its informers hold (`V1Service`, `V1EndpointSlice`,
 * `V1Secret` of @kubernetes/client-node are assignable to these; `objects.test.ts` proves it), or
 * plain JSON from the API.
 *
 * Every field is optional or nullable where the API may leave it out or send `null` (Go fields
 * without `omitempty`, like `EndpointSlice.endpoints`, arrive as `null` when empty): the core
 * never trusts an informer cache to be tidier than the API.
 */

/** The label that ties an EndpointSlice to its Service (set by the EndpointSlice controller). */
export const SERVICE_NAME_LABEL = 'kubernetes.io/service-name';

export interface ObjectMeta {
  name?: string | null;
  namespace?: string | null;
  labels?: Readonly<Record<string, string>> | null;
}

/** `core/v1` ServicePort. */
export interface ServicePort {
  /** Unique among the Service's ports; optional when the Service has a single port. */
  name?: string | null;
  /** The port the Service exposes: what a backend's `service.port` number refers to. */
  port: number;
  /** The pod port (number or container port name); EndpointSlices carry it resolved. */
  targetPort?: number | string | null;
  /** TCP (default), UDP or SCTP. */
  protocol?: string | null;
  /** e.g. `https`, `kubernetes.io/h2c`: a hint of what the port speaks. */
  appProtocol?: string | null;
}

/** `core/v1` Service. */
export interface Service {
  metadata?: ObjectMeta | null;
  spec?: {
    /** ClusterIP (default), NodePort, LoadBalancer or ExternalName. */
    type?: string | null;
    ports?: readonly ServicePort[] | null;
  } | null;
}

/** `discovery.k8s.io/v1` EndpointConditions. */
export interface EndpointConditions {
  /** Ready to receive traffic. Unset means ready (API docs: "nil should be interpreted as true"). */
  ready?: boolean | null;
  /** Serving, regardless of termination. */
  serving?: boolean | null;
  /** Being deleted. */
  terminating?: boolean | null;
}

export interface ObjectReference {
  kind?: string | null;
  name?: string | null;
  namespace?: string | null;
}

/** `discovery.k8s.io/v1` Endpoint: one pod (or other target), with one or more addresses. */
export interface Endpoint {
  /** Required by the API (1 to 100); typed loosely all the same. */
  addresses?: readonly string[] | null;
  conditions?: EndpointConditions | null;
  targetRef?: ObjectReference | null;
  nodeName?: string | null;
}

/** `discovery.k8s.io/v1` EndpointPort: the Service port's name and the pod port it maps to. */
export interface EndpointPort {
  /** The Service port's name (`''` or unset for a Service's single unnamed port). */
  name?: string | null;
  /** The target port number on the pods of this slice. Unset means "all ports". */
  port?: number | null;
  protocol?: string | null;
  appProtocol?: string | null;
}

/** `discovery.k8s.io/v1` EndpointSlice. */
export interface EndpointSlice {
  metadata?: ObjectMeta | null;
  /** IPv4, IPv6 or FQDN (deprecated). */
  addressType: string;
  endpoints?: readonly Endpoint[] | null;
  ports?: readonly EndpointPort[] | null;
}

/** `core/v1` Secret. */
export interface Secret {
  metadata?: ObjectMeta | null;
  /** Values are base64, as the API serves them. */
  data?: Readonly<Record<string, string>> | null;
}

/** `core/v1` PodCondition: only the type and status are read. */
export interface PodCondition {
  type: string;
  status: string;
}

/** `core/v1` Pod, as a GAIE pool's member: its labels, IP and readiness. */
export interface Pod {
  metadata?:
    | (ObjectMeta & {
        /** Set once the pod is being deleted (it may still run its grace period). */
        deletionTimestamp?: unknown;
      })
    | null;
  status?: {
    /** The pod's primary IP; unset until the pod has a network. */
    podIP?: string | null;
    conditions?: readonly PodCondition[] | null;
  } | null;
}

/**
 * `inference.networking.k8s.io/v1` InferencePool of the Gateway API inference extension (GAIE):
 * the fields a switchyard backend reads. Its endpoint picker (`endpointPickerRef`) is not one of
 * them: switchyard's own policy picks among the pods.
 */
export interface GaieInferencePool {
  metadata?: ObjectMeta | null;
  spec?: {
    /** Pods of the pool's namespace with every one of these labels are its members. */
    selector?: { matchLabels?: Readonly<Record<string, string>> | null } | null;
    /** Ports each member serves on, 1 to 8: each pod is one endpoint per port. */
    targetPorts?: readonly { number?: number | null }[] | null;
    /** `http` (HTTP/1.1, the default) or `kubernetes.io/h2c` (HTTP/2 over cleartext). */
    appProtocol?: string | null;
  } | null;
}
