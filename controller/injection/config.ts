/**
 * The injection webhook's configuration (`--injection-config`): what the sidecar it adds to
 * application pods looks like. The Helm chart renders it from its `sidecar` and `injection`
 * values into a ConfigMap; docs/chart.md describes each value.
 */
import { Type, type Static } from '@sinclair/typebox';
import { Value, ValueErrorType } from '@sinclair/typebox/value';

const Quantity = Type.Union([Type.String({ minLength: 1 }), Type.Number({ minimum: 0 })]);

const ProbeTimingSchema = Type.Object(
  {
    initialDelaySeconds: Type.Optional(Type.Integer({ minimum: 0 })),
    periodSeconds: Type.Optional(Type.Integer({ minimum: 1 })),
    timeoutSeconds: Type.Optional(Type.Integer({ minimum: 1 })),
    failureThreshold: Type.Optional(Type.Integer({ minimum: 1 })),
    successThreshold: Type.Optional(Type.Integer({ minimum: 1 })),
  },
  { additionalProperties: false },
);

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

export const InjectionConfigSchema = Type.Object(
  {
    /** The controller's snapshot stream, as sidecars reach it (the chart's Service). */
    controllerUrl: Type.String({ pattern: '^https?://[^\\s/]+(/.*)?$' }),
    image: Type.String({ minLength: 1 }),
    imagePullPolicy: Type.Union(
      [Type.Literal('Always'), Type.Literal('IfNotPresent'), Type.Literal('Never')],
      { default: 'IfNotPresent' },
    ),
    resources: Type.Object(
      {
        requests: Type.Optional(Type.Record(Type.String(), Quantity)),
        limits: Type.Optional(Type.Record(Type.String(), Quantity)),
      },
      { additionalProperties: false, default: {} },
    ),
    /** Where the app reaches the proxy: 127.0.0.1:proxyPort. */
    proxyPort: Type.Integer({ minimum: 1, maximum: 65535, default: 8080 }),
    /**
     * Admin port (/metrics, /healthz, /readyz, /debug/backends) on the pod's addresses: the
     * kubelet's probes and Prometheus reach it there.
     */
    adminPort: Type.Integer({ minimum: 1, maximum: 65535, default: 9090 }),
    logLevel: Type.Union(
      LOG_LEVELS.map((l) => Type.Literal(l)),
      { default: 'info' },
    ),
    /** Lifetime of the projected token; the kubelet refreshes it at 80 %. The API server's minimum is 600. */
    tokenExpirationSeconds: Type.Integer({ minimum: 600, default: 3600 }),
    /** Set OPENAI_BASE_URL in the app containers (a pod opts out with an annotation). */
    setOpenaiBaseUrl: Type.Boolean({ default: true }),
    /** Namespaces whose pods are never injected (the webhook's namespaceSelector says the same). */
    excludeNamespaces: Type.Array(Type.String({ minLength: 1 }), { default: [] }),
    /**
     * OpenTelemetry for the injected sidecars: set as the standard OTEL_* variables in the
     * sidecar container. Absent: no tracing (the sidecar loads no OpenTelemetry code).
     */
    tracing: Type.Optional(
      Type.Object(
        {
          /** The collector's OTLP/HTTP base URL (OTEL_EXPORTER_OTLP_ENDPOINT). */
          otlpEndpoint: Type.String({ pattern: '^https?://[^\\s/]+(/.*)?$' }),
          /** OTEL_SERVICE_NAME of the sidecars. */
          serviceName: Type.String({ minLength: 1, default: 'switchyard-sidecar' }),
          /** OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (docs/tracing.md). */
          sampler: Type.String({ minLength: 1, default: 'parentbased_always_on' }),
          samplerArg: Type.Optional(Type.String({ minLength: 1 })),
        },
        { additionalProperties: false },
      ),
    ),
    probes: Type.Object(
      {
        startup: ProbeTimingSchema,
        readiness: ProbeTimingSchema,
        liveness: ProbeTimingSchema,
      },
      {
        additionalProperties: false,
        default: {
          startup: { periodSeconds: 1, failureThreshold: 60 },
          readiness: { periodSeconds: 5, failureThreshold: 3 },
          liveness: { periodSeconds: 10, failureThreshold: 3 },
        },
      },
    ),
  },
  { additionalProperties: false },
);

export type InjectionConfig = Static<typeof InjectionConfigSchema>;
export type ProbeTiming = Static<typeof ProbeTimingSchema>;

export type InjectionConfigResult =
  { ok: true; config: InjectionConfig } | { ok: false; errors: string[] };

/** `/probes/startup/periodSeconds` → `probes.startup.periodSeconds`. */
const pointerToPath = (pointer: string): string =>
  pointer === ''
    ? '<root>'
    : pointer
        .slice(1)
        .split('/')
        .join('.')
        .replace(/\.(\d+)(?=\.|$)/g, '[$1]');

/** Validates a parsed configuration, defaults applied; every problem names its field. */
export function parseInjectionConfig(input: unknown): InjectionConfigResult {
  if (input === null || typeof input !== 'object' || Array.isArray(input))
    return { ok: false, errors: ['<root>: must be a mapping of settings'] };
  const value: unknown = Value.Default(InjectionConfigSchema, structuredClone(input));
  const errors = [...Value.Errors(InjectionConfigSchema, value)];
  if (errors.length === 0) return { ok: true, config: value as InjectionConfig };
  const seen = new Set<string>();
  const messages: string[] = [];
  for (const e of errors) {
    const path = pointerToPath(e.path);
    if (seen.has(path)) continue; // a union's member errors repeat the same field
    seen.add(path);
    const message =
      e.type === ValueErrorType.ObjectAdditionalProperties
        ? 'unknown field'
        : e.type === ValueErrorType.ObjectRequiredProperty
          ? 'is required'
          : e.message.toLowerCase();
    messages.push(`${path}: ${message}`);
  }
  return { ok: false, errors: messages };
}
