/**
 * Starts tracing when the OTEL_* environment asks for it. The SDK is imported here, dynamically,
 * and only then: with tracing off a process loads no OpenTelemetry module at all, so its memory,
 * start-up and request path stay exactly as without tracing.
 */
import type { OtelSdk } from './otel-sdk.ts';
import { tracingSettings } from './otel-env.ts';

export type { OtelSdk };

/** The part of a pino logger tracing writes to. */
export interface TracingStartLogger {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

/**
 * The SDK, or undefined when tracing is off. `defaultServiceName` is the `service.name` when
 * OTEL_SERVICE_NAME is unset; `instrumentationName` names the tracer (the span's scope).
 */
export async function startTracing(
  env: Readonly<Record<string, string | undefined>>,
  names: { defaultServiceName: string; instrumentationName: string },
  logger: TracingStartLogger,
): Promise<OtelSdk | undefined> {
  const settings = tracingSettings(env, names.defaultServiceName);
  if (settings.kind === 'off') return undefined;
  for (const warning of settings.warnings)
    logger.warn({ detail: warning }, 'tracing: setting not honoured');
  const { startOtelSdk } = await import('./otel-sdk.ts');
  const sdk = startOtelSdk(settings, names.instrumentationName, logger);
  logger.info(
    {
      // Origin and path only: a query or user info may hold a collector's credentials.
      tracesUrl: withoutCredentials(settings.tracesUrl),
      serviceName: settings.serviceName,
      sampler: settings.sampler,
    },
    'tracing on: exporting spans over OTLP/HTTP',
  );
  return sdk;
}

function withoutCredentials(url: string): string {
  const parsed = new URL(url);
  return parsed.origin + parsed.pathname;
}
