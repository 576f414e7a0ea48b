/**
 * Tracing off must cost nothing measurable: a sidecar without OTLP configuration does not even
 * load OpenTelemetry (memory and start-up stay as they were). Checked by watching every module
 * this test process resolves, while a sidecar starts and serves a request in it.
 */
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { registerHooks } from 'node:module';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { pino } from 'pino';
import { startOtlpReceiver } from '../../harness/otlp-receiver.ts';
import { balancePool, scratchDir } from '../../harness/pool-file.ts';

const openTelemetryResolved: string[] = [];
registerHooks({
  resolve(specifier, context, nextResolve) {
    if (specifier.startsWith('@opentelemetry/')) openTelemetryResolved.push(specifier);
    return nextResolve(specifier, context);
  },
});

const { startSidecar } = await import('../../sidecar/sidecar.ts');
const scratch = await scratchDir();
const poolFile = join(scratch.dir, 'pool.yaml');
// Port 9 (discard) refuses connections: the request fails fast, after the whole request path ran.
await writeFile(poolFile, balancePool(['http://127.0.0.1:9']));

async function sidecarServingOneRequest(env: Record<string, string>): Promise<number> {
  const sidecar = await startSidecar({
    source: { kind: 'file', poolFile },
    listen: { host: '127.0.0.1', port: 0 },
    admin: { host: '127.0.0.1', port: 0 },
    logger: pino({ level: 'silent' }),
    maxBodyBytes: 1 << 20,
    shutdownGraceMs: 1_000,
    env,
  });
  try {
    const res = await fetch(`${sidecar.proxyUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
      },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }),
    });
    await res.text();
    return res.status;
  } finally {
    await sidecar.shutdown();
  }
}

describe('tracing off', () => {
  after(() => scratch.cleanup());

  test('a sidecar without OTLP configuration loads no OpenTelemetry module', async () => {
    const status = await sidecarServingOneRequest({ OTEL_SERVICE_NAME: 'not-enough-to-trace' });
    assert.equal(status, 502);
    // prom-client loads the small API package for its exemplars whether we trace or not.
    const ours = openTelemetryResolved.filter((s) => s !== '@opentelemetry/api');
    assert.deepEqual(ours, []);
  });

  test('(the check sees them once an endpoint is configured)', async () => {
    const receiver = await startOtlpReceiver();
    try {
      await sidecarServingOneRequest({ OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url });
    } finally {
      await receiver.close();
    }
    assert.ok(
      openTelemetryResolved.includes('@opentelemetry/sdk-trace'),
      String(openTelemetryResolved),
    );
  });
});
