/**
 * Whether and how to trace, from the standard OpenTelemetry environment variables
 * (https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/). Pure: it
 * reads the `env` object it is given and imports nothing of OpenTelemetry, so deciding "off" costs
 * the sidecar and the controller no module load at all (the SDK is imported only when this says
 * "on", see start-tracing.ts).
 *
 * Tracing is on only when an OTLP endpoint is configured: an SDK exporting to the spec's default
 * `localhost:4318` would, in a pod without a collector, fail every few seconds forever.
 */

/** How a trace's first span is sampled (the `root` of a parent-based sampler). */
export type RootSampler =
  | { readonly kind: 'always_on' }
  | { readonly kind: 'always_off' }
  /** `ratio` in [0, 1] of trace ids. */
  | { readonly kind: 'ratio'; readonly ratio: number };

export interface SamplerSetting {
  /**
   * Follow the caller's sampled flag when a request carries a `traceparent` (the spec's
   * `parentbased_*` samplers, its default); `root` decides only for requests without one.
   */
  readonly parentBased: boolean;
  readonly root: RootSampler;
}

/** The `OTEL_BSP_*` batch span processor settings. */
export interface BatchSetting {
  readonly scheduledDelayMs: number;
  readonly maxQueueSize: number;
  readonly maxExportBatchSize: number;
  readonly exportTimeoutMs: number;
}

export type TracingSettings =
  | { readonly kind: 'off'; readonly reason: string }
  | {
      readonly kind: 'on';
      readonly serviceName: string;
      /** Where spans are POSTed (OTLP/HTTP, JSON), `/v1/traces` included. */
      readonly tracesUrl: string;
      readonly sampler: SamplerSetting;
      readonly batch: BatchSetting;
      /** Variables that were set but could not be honoured, each with what was done instead. */
      readonly warnings: readonly string[];
    };

type Env = Readonly<Record<string, string | undefined>>;

/** The spec's defaults for the batch span processor. */
export const DEFAULT_BATCH: BatchSetting = {
  scheduledDelayMs: 5_000,
  maxQueueSize: 2_048,
  maxExportBatchSize: 512,
  exportTimeoutMs: 30_000,
};

const DEFAULT_SAMPLER: SamplerSetting = { parentBased: true, root: { kind: 'always_on' } };

/** An empty value counts as unset, as the spec says. */
function read(env: Env, name: string): string | undefined {
  const value = env[name]?.trim();
  return value === undefined || value === '' ? undefined : value;
}

/** Where spans go: the signal's own endpoint as given, else the generic one plus `v1/traces`. */
function tracesUrlFrom(env: Env): string | undefined {
  const own = read(env, 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT');
  if (own !== undefined) return own;
  const base = read(env, 'OTEL_EXPORTER_OTLP_ENDPOINT');
  if (base === undefined) return undefined;
  return `${base.replace(/\/+$/, '')}/v1/traces`;
}

function isHttpUrl(text: string): boolean {
  try {
    const { protocol } = new URL(text);
    return protocol === 'http:' || protocol === 'https:';
  } catch {
    return false;
  }
}

function samplerFrom(env: Env, warnings: string[]): SamplerSetting {
  const name = read(env, 'OTEL_TRACES_SAMPLER')?.toLowerCase();
  const arg = read(env, 'OTEL_TRACES_SAMPLER_ARG');
  const ratio = (): number => {
    if (arg === undefined) return 1;
    const value = Number(arg);
    if (Number.isFinite(value) && value >= 0 && value <= 1) return value;
    warnings.push(`OTEL_TRACES_SAMPLER_ARG=${arg} is not a ratio in [0, 1]; sampling 1.0`);
    return 1;
  };
  switch (name) {
    case undefined:
      return DEFAULT_SAMPLER;
    case 'always_on':
      return { parentBased: false, root: { kind: 'always_on' } };
    case 'always_off':
      return { parentBased: false, root: { kind: 'always_off' } };
    case 'traceidratio':
      return { parentBased: false, root: { kind: 'ratio', ratio: ratio() } };
    case 'parentbased_always_on':
      return DEFAULT_SAMPLER;
    case 'parentbased_always_off':
      return { parentBased: true, root: { kind: 'always_off' } };
    case 'parentbased_traceidratio':
      return { parentBased: true, root: { kind: 'ratio', ratio: ratio() } };
    default:
      warnings.push(
        `OTEL_TRACES_SAMPLER=${name} is not supported (always_on, always_off, traceidratio and their parentbased_ forms are); using parentbased_always_on`,
      );
      return DEFAULT_SAMPLER;
  }
}

function positiveInteger(env: Env, name: string, fallback: number, warnings: string[]): number {
  const raw = read(env, name);
  if (raw === undefined) return fallback;
  const value = Number(raw);
  if (Number.isInteger(value) && value > 0) return value;
  warnings.push(`${name}=${raw} is not a positive integer; using ${fallback}`);
  return fallback;
}

function batchFrom(env: Env, warnings: string[]): BatchSetting {
  const maxQueueSize = positiveInteger(
    env,
    'OTEL_BSP_MAX_QUEUE_SIZE',
    DEFAULT_BATCH.maxQueueSize,
    warnings,
  );
  const batchSize = positiveInteger(
    env,
    'OTEL_BSP_MAX_EXPORT_BATCH_SIZE',
    DEFAULT_BATCH.maxExportBatchSize,
    warnings,
  );
  return {
    scheduledDelayMs: positiveInteger(
      env,
      'OTEL_BSP_SCHEDULE_DELAY',
      DEFAULT_BATCH.scheduledDelayMs,
      warnings,
    ),
    maxQueueSize,
    // The SDK requires a batch no larger than the queue.
    maxExportBatchSize: Math.min(batchSize, maxQueueSize),
    exportTimeoutMs: positiveInteger(
      env,
      'OTEL_BSP_EXPORT_TIMEOUT',
      DEFAULT_BATCH.exportTimeoutMs,
      warnings,
    ),
  };
}

/**
 * Reads the tracing configuration from `env`. `defaultServiceName` is the `service.name` when
 * `OTEL_SERVICE_NAME` is unset (`switchyard-sidecar`, `switchyard-controller`).
 */
export function tracingSettings(env: Env, defaultServiceName: string): TracingSettings {
  if (read(env, 'OTEL_SDK_DISABLED')?.toLowerCase() === 'true')
    return { kind: 'off', reason: 'OTEL_SDK_DISABLED=true' };
  const exporter = read(env, 'OTEL_TRACES_EXPORTER')?.toLowerCase();
  if (exporter === 'none') return { kind: 'off', reason: 'OTEL_TRACES_EXPORTER=none' };
  const tracesUrl = tracesUrlFrom(env);
  if (tracesUrl === undefined)
    return {
      kind: 'off',
      reason: 'neither OTEL_EXPORTER_OTLP_TRACES_ENDPOINT nor OTEL_EXPORTER_OTLP_ENDPOINT is set',
    };
  if (!isHttpUrl(tracesUrl))
    return { kind: 'off', reason: `the OTLP endpoint ${tracesUrl} is not an http(s) URL` };
  const protocol =
    read(env, 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL') ?? read(env, 'OTEL_EXPORTER_OTLP_PROTOCOL');
  // gRPC listens on another port (4317) and speaks another wire format: exporting there would
  // fail on every batch, so say so once instead.
  if (protocol === 'grpc')
    return {
      kind: 'off',
      reason:
        'OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported: switchyard exports OTLP over HTTP (port 4318)',
    };
  const warnings: string[] = [];
  if (exporter !== undefined && exporter !== 'otlp')
    warnings.push(`OTEL_TRACES_EXPORTER=${exporter} is not supported; exporting OTLP`);
  if (protocol !== undefined && protocol !== 'http/json')
    warnings.push(
      `OTEL_EXPORTER_OTLP_PROTOCOL=${protocol}: spans are sent as http/json, which every OTLP/HTTP receiver accepts`,
    );
  return {
    kind: 'on',
    serviceName: read(env, 'OTEL_SERVICE_NAME') ?? defaultServiceName,
    tracesUrl,
    sampler: samplerFrom(env, warnings),
    batch: batchFrom(env, warnings),
    warnings,
  };
}
