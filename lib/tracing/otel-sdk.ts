/**
 * The OpenTelemetry SDK, set up from `TracingSettings`: a tracer provider with the configured
 * sampler, a batch span processor, and the OTLP/HTTP exporter (JSON). Only start-tracing.ts
 * imports this file, dynamically, when tracing is on: a process that does not trace never loads
 * the SDK.
 *
 * Nothing is registered globally (no global tracer provider, context manager or propagator):
 * switchyard creates its spans itself and passes parent contexts explicitly, so no
 * AsyncLocalStorage bookkeeping runs on every callback, and no library's own instrumentation
 * starts tracing behind our back.
 */
import {
  ROOT_CONTEXT,
  defaultTextMapGetter,
  defaultTextMapSetter,
  diag,
  DiagLogLevel,
  type Context,
  type Tracer,
} from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import {
  detectResources,
  resourceAttributesEnvDetector,
  resourceFromAttributes,
} from '@opentelemetry/resources';
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BatchSpanProcessor,
  ParentBasedSampler,
  TraceIdRatioBasedSampler,
  TracerProvider,
  type Sampler,
} from '@opentelemetry/sdk-trace';
import type { RootSampler, SamplerSetting, TracingSettings } from './otel-env.ts';

/** The part of a pino logger tracing writes to. */
export interface TracingLogger {
  warn(obj: object, msg: string): void;
}

export type Headers = Record<string, string | string[] | number | undefined>;

/** What a switchyard process traces with. */
export interface OtelSdk {
  readonly tracer: Tracer;
  /** The context a request's `traceparent` / `tracestate` headers describe (root when none). */
  extract(headers: Readonly<Headers>): Context;
  /** Writes the `traceparent` (and `tracestate`) of `context`'s span into `headers`. */
  inject(context: Context, headers: Headers): void;
  /** Exports what is buffered and stops. */
  shutdown(): Promise<void>;
}

function rootSampler(root: RootSampler): Sampler {
  switch (root.kind) {
    case 'always_on':
      return new AlwaysOnSampler();
    case 'always_off':
      return new AlwaysOffSampler();
    case 'ratio':
      return new TraceIdRatioBasedSampler(root.ratio);
  }
}

function sampler(setting: SamplerSetting): Sampler {
  const root = rootSampler(setting.root);
  return setting.parentBased ? new ParentBasedSampler({ root }) : root;
}

export function startOtelSdk(
  settings: Extract<TracingSettings, { kind: 'on' }>,
  instrumentationName: string,
  logger: TracingLogger,
): OtelSdk {
  // The SDK reports export failures through its diagnostic logger, silent unless one is set.
  diag.setLogger(
    {
      error: (message: string) => logger.warn({ detail: message }, 'tracing: export problem'),
      warn: (message: string) => logger.warn({ detail: message }, 'tracing: export problem'),
      info: () => undefined,
      debug: () => undefined,
      verbose: () => undefined,
    },
    { logLevel: DiagLogLevel.WARN, suppressOverrideMessage: true },
  );
  // OTEL_RESOURCE_ATTRIBUTES (e.g. the pod's name and namespace, set by the injection webhook),
  // then service.name, which wins over one given there, as the spec says.
  const resource = detectResources({ detectors: [resourceAttributesEnvDetector] }).merge(
    resourceFromAttributes({ 'service.name': settings.serviceName }),
  );
  const exporter = new OTLPTraceExporter({ url: settings.tracesUrl });
  const provider = new TracerProvider({
    resource,
    sampler: sampler(settings.sampler),
    spanProcessors: [
      new BatchSpanProcessor({
        exporter,
        scheduledDelayMillis: settings.batch.scheduledDelayMs,
        maxQueueSize: settings.batch.maxQueueSize,
        maxExportBatchSize: settings.batch.maxExportBatchSize,
        exportTimeoutMillis: settings.batch.exportTimeoutMs,
      }),
    ],
  });
  const propagator = new W3CTraceContextPropagator();
  return {
    tracer: provider.getTracer(instrumentationName),
    extract: (headers) => propagator.extract(ROOT_CONTEXT, headers, defaultTextMapGetter),
    inject: (context, headers) => propagator.inject(context, headers, defaultTextMapSetter),
    shutdown: () => provider.shutdown(),
  };
}
