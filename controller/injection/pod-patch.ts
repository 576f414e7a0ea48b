/**
 * Sidecar injection, decided: given a pod at admission and the injection configuration, the JSON
 * patch that adds the switchyard sidecar (docs/injection.md). Pure: the webhook shell parses the
 * AdmissionReview and sends the answer.
 *
 * The sidecar is a native sidecar (an init container with `restartPolicy: Always`, Kubernetes
 * 1.29+): it starts before the app containers, the kubelet waits for its startup probe, and it
 * stops after them, so the app never calls 127.0.0.1:8080 while nothing listens there.
 */
import type { InjectionConfig, ProbeTiming } from './config.ts';
import { followedPools, POOL_LABEL } from './followed-pools.ts';

export { POOL_LABEL, POOLS_ANNOTATION } from './followed-pools.ts';
/** Set by the webhook on every pod it injected. */
export const INJECTED_ANNOTATION = 'switchyard.dev/injected';
/** Set when a labelled pod could not be injected; the value says why. */
export const SKIPPED_ANNOTATION = 'switchyard.dev/injection-skipped';
/** The controller's CA (a public certificate), which the sidecar reads through the downward API. */
export const CA_BUNDLE_ANNOTATION = 'switchyard.dev/ca-bundle';
/** `"false"` keeps OPENAI_BASE_URL out of the app containers. */
export const OPENAI_BASE_URL_ANNOTATION = 'switchyard.dev/inject-openai-base-url';
/**
 * The sidecar's `--model-discovery` (`auto`, `on`, `off`): `on` for a pod of one pool whose
 * backends declare no models but whose servers differ in what they serve (LoRA adapters).
 */
export const MODEL_DISCOVERY_ANNOTATION = 'switchyard.dev/model-discovery';
const MODEL_DISCOVERY_MODES: readonly string[] = ['auto', 'on', 'off'];
/**
 * The sidecar's `--priority` (flow control, issue 43): the priority of this pod's requests that
 * carry no `x-switchyard-priority` header; an integer, higher first, negative = sheddable.
 */
export const PRIORITY_ANNOTATION = 'switchyard.dev/priority';
const PRIORITY_PATTERN = /^[+-]?\d{1,7}$/;
/** The largest priority magnitude, as the pool's `flowControl.defaultPriority` allows. */
const MAX_PRIORITY = 1_000_000;

/** The annotation's priority, or undefined when it is absent or not an integer in range. */
function priorityOf(value: string | undefined): number | undefined {
  if (value === undefined || !PRIORITY_PATTERN.test(value.trim())) return undefined;
  const n = Number.parseInt(value, 10);
  return Math.abs(n) <= MAX_PRIORITY ? n : undefined;
}

export const SIDECAR_NAME = 'switchyard-sidecar';
export const TOKEN_VOLUME = 'switchyard-token';
export const CACHE_VOLUME = 'switchyard-cache';
export const TOKEN_DIR = '/var/run/secrets/switchyard';
export const CACHE_DIR = '/var/cache/switchyard';
/** The audience the controller's TokenReview demands (controller/stream/token-auth.ts says the same). */
export const TOKEN_AUDIENCE = 'switchyard';
/**
 * Non-root, as the restricted Pod Security Standard wants, and above 10000 so it matches no user
 * of the node (the Dockerfile's USER is the same).
 */
export const SIDECAR_UID = 65532;

/** The parts of a pod the webhook reads; everything else passes through untouched. */
export interface PodLike {
  metadata?: {
    name?: string;
    generateName?: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
  };
  spec?: {
    hostNetwork?: boolean;
    containers?: ContainerLike[];
    initContainers?: ContainerLike[];
    volumes?: { name: string }[];
  };
}

export interface ContainerLike {
  name: string;
  env?: { name: string }[];
  ports?: { containerPort: number; name?: string }[];
}

export type JsonPatchOp = { op: 'add' | 'replace'; path: string; value: unknown };

export type InjectionDecision =
  /** Not a pod for us (no label, excluded namespace): no patch at all. */
  | { kind: 'ignored'; reason: string }
  /** Sidecar added (or, on a re-invocation, env added to containers another webhook added). */
  | { kind: 'injected'; patch: JsonPatchOp[]; warnings: string[] }
  /** Already injected and complete: injecting again changes nothing. */
  | { kind: 'unchanged' }
  /** Labelled, but cannot be injected: the pod is admitted as it is, annotated with why. */
  | { kind: 'skipped'; reason: string; patch: JsonPatchOp[]; warnings: string[] };

export interface InjectionInput {
  pod: PodLike;
  /** The admission request's namespace (a new pod's own metadata may not have it yet). */
  namespace: string;
  config: InjectionConfig;
  /** PEM of the CA that signed the controller's certificate. */
  caBundle: string;
  /**
   * Whether a pool exists as far as the controller knows (undefined: not known, e.g. before its
   * cache has synced); unset: nothing is known.
   */
  poolExists?: ((pool: string) => boolean | undefined) | undefined;
}

/** RFC 6901: `~` and `/` in a key. */
const escapeKey = (key: string): string => key.replaceAll('~', '~0').replaceAll('/', '~1');

function probe(path: string, port: number, timing: ProbeTiming): Record<string, unknown> {
  return { httpGet: { path, port }, ...timing };
}

/** The sidecar container, as the webhook adds it, following `pools` (the first is the default). */
export function sidecarContainer(
  config: InjectionConfig,
  pools: readonly string[],
  modelDiscovery = 'auto',
  priority?: number,
): Record<string, unknown> {
  const { probes } = config;
  return {
    name: SIDECAR_NAME,
    image: config.image,
    imagePullPolicy: config.imagePullPolicy,
    // A native sidecar: runs beside the app for the pod's whole life.
    restartPolicy: 'Always',
    args: [
      'sidecar',
      '--controller',
      config.controllerUrl,
      ...pools.flatMap((pool) => ['--pool', pool]),
      '--token-file',
      `${TOKEN_DIR}/token`,
      '--ca-file',
      `${TOKEN_DIR}/ca.crt`,
      '--cache-file',
      `${CACHE_DIR}/snapshot.json`,
      '--listen',
      `127.0.0.1:${config.proxyPort}`,
      '--admin',
      `0.0.0.0:${config.adminPort}`,
      '--log-level',
      config.logLevel,
      ...(modelDiscovery === 'auto' ? [] : ['--model-discovery', modelDiscovery]),
      ...(priority === undefined ? [] : ['--priority', String(priority)]),
    ],
    env: [
      { name: 'POD_NAME', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
      { name: 'POD_NAMESPACE', valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } } },
      ...tracingEnv(config.tracing),
    ],
    ports: [{ name: 'sy-admin', containerPort: config.adminPort, protocol: 'TCP' }],
    resources: config.resources,
    // Started: a pool configuration is applied or the startup grace is over (the kubelet starts
    // the app containers only then). Ready: a pool configuration is applied. Alive: the process
    // answers.
    // /startupz, not /healthz: it passes once the sidecar has a configuration (or its startup
    // grace is over), so the app, started after it, can route from its first request.
    startupProbe: probe('/startupz', config.adminPort, probes.startup),
    readinessProbe: probe('/readyz', config.adminPort, probes.readiness),
    livenessProbe: probe('/healthz', config.adminPort, probes.liveness),
    securityContext: {
      runAsNonRoot: true,
      runAsUser: SIDECAR_UID,
      runAsGroup: SIDECAR_UID,
      readOnlyRootFilesystem: true,
      allowPrivilegeEscalation: false,
      capabilities: { drop: ['ALL'] },
      seccompProfile: { type: 'RuntimeDefault' },
    },
    volumeMounts: [
      { name: TOKEN_VOLUME, mountPath: TOKEN_DIR, readOnly: true },
      { name: CACHE_VOLUME, mountPath: CACHE_DIR },
    ],
  };
}

/** The sidecar's volumes: its token and CA (one projected volume), and its snapshot cache. */
export function sidecarVolumes(config: InjectionConfig): Record<string, unknown>[] {
  return [
    {
      name: TOKEN_VOLUME,
      projected: {
        // 0444: the sidecar runs as its own user; only it mounts this volume.
        defaultMode: 0o444,
        sources: [
          {
            serviceAccountToken: {
              audience: TOKEN_AUDIENCE,
              expirationSeconds: config.tokenExpirationSeconds,
              path: 'token',
            },
          },
          {
            downwardAPI: {
              items: [
                {
                  path: 'ca.crt',
                  fieldRef: { fieldPath: `metadata.annotations['${CA_BUNDLE_ANNOTATION}']` },
                },
              ],
            },
          },
        ],
      },
    },
    // The last snapshot, so a restarted sidecar routes even while the controller is down. In
    // memory: the snapshot holds the backends' API keys, which must not land on the node's disk.
    { name: CACHE_VOLUME, emptyDir: { medium: 'Memory', sizeLimit: '16Mi' } },
  ];
}

/** Why a labelled pod cannot take the sidecar, or undefined when it can. */
function blocker(
  pod: PodLike,
  poolProblem: string | undefined,
  config: InjectionConfig,
): string | undefined {
  if (poolProblem !== undefined) return poolProblem;
  const spec = pod.spec ?? {};
  if (spec.hostNetwork === true)
    return (
      'the pod uses hostNetwork: the sidecar would listen on the node’s 127.0.0.1:' +
      config.proxyPort
    );
  for (const c of [...(spec.initContainers ?? []), ...(spec.containers ?? [])]) {
    for (const p of c.ports ?? []) {
      if (p.containerPort === config.proxyPort || p.containerPort === config.adminPort)
        return `container ${c.name} uses port ${p.containerPort}, which the sidecar needs (set sidecar.ports in the chart to others)`;
    }
  }
  for (const v of spec.volumes ?? []) {
    if (v.name === TOKEN_VOLUME || v.name === CACHE_VOLUME)
      return `the pod already has a volume named ${v.name}`;
  }
  return undefined;
}

/** What to do with `input.pod`; never throws on any pod shape the API server admits. */
export function decideInjection(input: InjectionInput): InjectionDecision {
  const { pod, namespace, config } = input;
  const labels = pod.metadata?.labels ?? {};
  const annotations = pod.metadata?.annotations ?? {};
  if (labels[POOL_LABEL] === undefined)
    return { kind: 'ignored', reason: `no ${POOL_LABEL} label` };
  if (config.excludeNamespaces.includes(namespace))
    return { kind: 'ignored', reason: `namespace ${namespace} is excluded from injection` };

  const patch: JsonPatchOp[] = [];
  const warnings: string[] = [];
  const addAnnotations = (add: Record<string, string>): void => {
    const missing = Object.entries(add).filter(([k, v]) => annotations[k] !== v);
    if (missing.length === 0) return;
    if (pod.metadata?.annotations === undefined) {
      if (pod.metadata === undefined) patch.push({ op: 'add', path: '/metadata', value: {} });
      patch.push({ op: 'add', path: '/metadata/annotations', value: Object.fromEntries(missing) });
      return;
    }
    for (const [k, v] of missing)
      patch.push({ op: 'add', path: `/metadata/annotations/${escapeKey(k)}`, value: v });
  };

  const spec = pod.spec ?? {};
  const hasSidecar = [...(spec.initContainers ?? []), ...(spec.containers ?? [])].some(
    (c) => c.name === SIDECAR_NAME,
  );
  if (!hasSidecar) {
    const followed = followedPools(pod.metadata);
    const reason = blocker(pod, followed.problem, config);
    if (reason !== undefined) {
      addAnnotations({ [SKIPPED_ANNOTATION]: reason });
      return {
        kind: 'skipped',
        reason,
        patch,
        warnings: [`switchyard: sidecar not injected: ${reason}`],
      };
    }
    addAnnotations({ [INJECTED_ANNOTATION]: 'true', [CA_BUNDLE_ANNOTATION]: input.caBundle });
    if (pod.spec === undefined) patch.push({ op: 'add', path: '/spec', value: {} });
    // First among the init containers: the other init containers may use the proxy too.
    const discovery = annotations[MODEL_DISCOVERY_ANNOTATION] ?? 'auto';
    if (!MODEL_DISCOVERY_MODES.includes(discovery))
      warnings.push(
        `switchyard: annotation ${MODEL_DISCOVERY_ANNOTATION} is ${JSON.stringify(discovery.slice(0, 40))}; it must be auto, on or off (auto used)`,
      );
    const priorityValue = annotations[PRIORITY_ANNOTATION];
    const priority = priorityOf(priorityValue);
    if (priorityValue !== undefined && priority === undefined)
      warnings.push(
        `switchyard: annotation ${PRIORITY_ANNOTATION} is ${JSON.stringify(priorityValue.slice(0, 40))}; it must be an integer from -${MAX_PRIORITY} to ${MAX_PRIORITY}, like 10 or -1 (the pool's flowControl.defaultPriority used)`,
      );
    const sidecar = sidecarContainer(
      config,
      followed.pools,
      MODEL_DISCOVERY_MODES.includes(discovery) ? discovery : 'auto',
      priority,
    );
    if (spec.initContainers === undefined)
      patch.push({ op: 'add', path: '/spec/initContainers', value: [sidecar] });
    else patch.push({ op: 'add', path: '/spec/initContainers/0', value: sidecar });
    const volumes = sidecarVolumes(config);
    if (spec.volumes === undefined)
      patch.push({ op: 'add', path: '/spec/volumes', value: volumes });
    else for (const v of volumes) patch.push({ op: 'add', path: '/spec/volumes/-', value: v });
    for (const pool of followed.pools) {
      if (input.poolExists?.(pool) === false)
        warnings.push(
          `switchyard: InferencePool ${namespace}/${pool} does not exist yet; the sidecar answers 503 for its models until it does`,
        );
    }
  } else {
    addAnnotations({ [INJECTED_ANNOTATION]: 'true' });
  }

  // OPENAI_BASE_URL for every app container that has none yet (also those another webhook added
  // after a first injection: the webhook is re-invoked then). A container's own value wins.
  if (config.setOpenaiBaseUrl && annotations[OPENAI_BASE_URL_ANNOTATION] !== 'false') {
    const value = { name: 'OPENAI_BASE_URL', value: `http://127.0.0.1:${config.proxyPort}/v1` };
    (spec.containers ?? []).forEach((c, i) => {
      if (c.name === SIDECAR_NAME) return;
      if (c.env === undefined)
        patch.push({ op: 'add', path: `/spec/containers/${i}/env`, value: [value] });
      else if (!c.env.some((e) => e.name === 'OPENAI_BASE_URL'))
        patch.push({ op: 'add', path: `/spec/containers/${i}/env/-`, value });
    });
  }
  if (patch.length === 0) return { kind: 'unchanged' };
  return { kind: 'injected', patch, warnings };
}

/**
 * The OTEL_* variables that turn the sidecar's tracing on (docs/tracing.md); none without a
 * tracing configuration. The pod's name and namespace become resource attributes, so a trace
 * names the pod whose sidecar routed it.
 */
function tracingEnv(tracing: InjectionConfig['tracing']): { name: string; value: string }[] {
  if (tracing === undefined) return [];
  return [
    { name: 'OTEL_EXPORTER_OTLP_ENDPOINT', value: tracing.otlpEndpoint },
    { name: 'OTEL_SERVICE_NAME', value: tracing.serviceName },
    { name: 'OTEL_TRACES_SAMPLER', value: tracing.sampler },
    ...(tracing.samplerArg === undefined
      ? []
      : [{ name: 'OTEL_TRACES_SAMPLER_ARG', value: tracing.samplerArg }]),
    // $(VAR) expands variables defined earlier in the same env list (POD_NAME, POD_NAMESPACE).
    {
      name: 'OTEL_RESOURCE_ATTRIBUTES',
      value: 'k8s.pod.name=$(POD_NAME),k8s.namespace.name=$(POD_NAMESPACE)',
    },
  ];
}
