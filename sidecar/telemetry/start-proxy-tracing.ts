/**
 * The proxy's tracer when the OTEL_* environment turns tracing on, else undefined. Both the SDK
 * and the span code are imported here, dynamically, only in the first case: a sidecar that does
 * not trace loads no OpenTelemetry module (tested by test/unit/tracing-off.test.ts).
 */
import { startTracing, type TracingStartLogger } from '../../lib/tracing/start-tracing.ts';
import type { ProxyTracer } from './types.ts';

export type { ProxyTracer };

export async function startProxyTracing(
  env: Readonly<Record<string, string | undefined>>,
  pool: string,
  logger: TracingStartLogger,
): Promise<ProxyTracer | undefined> {
  const sdk = await startTracing(
    env,
    { defaultServiceName: 'switchyard-sidecar', instrumentationName: 'switchyard/sidecar' },
    logger,
  );
  if (sdk === undefined) return undefined;
  const { OtelProxyTracer } = await import('./otel-proxy-tracer.ts');
  return new OtelProxyTracer(sdk, pool);
}
