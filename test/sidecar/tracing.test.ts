/**
 * OpenTelemetry traces of a standalone sidecar, through real processes: two simulators, a sidecar
 * exporting to a test OTLP/HTTP receiver, and the official `openai` client. Checks what a
 * collector would get: the server span continues the caller's traceparent, one client span per
 * attempt is its child, the simulator received exactly the attempt span's context, the GenAI and
 * switchyard attributes, error status on failed attempts and error answers, and no prompt text.
 */
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import {
  SPAN_KIND_CLIENT,
  SPAN_KIND_SERVER,
  STATUS_ERROR,
  startOtlpReceiver,
  type OtlpReceiver,
  type ReceivedSpan,
} from '../../harness/otlp-receiver.ts';
import { scratchDir } from '../../harness/pool-file.ts';
import { startSidecar, startSim, stopAll, type RunningProcess } from '../../harness/processes.ts';
import { simConfig, simStats } from '../helpers.ts';

/** Words that must never appear in a span. */
const PROMPT_MARK = 'zebra-lantern-quartz';
const PROMPT = `Tell me about ${PROMPT_MARK}, in one short sentence please.`;

const CALLER_TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const CALLER_SPAN_ID = '00f067aa0ba902b7';

/** A caller's sampled traceparent with a fresh trace id per test. */
function callerTraceparent(traceId: string): string {
  return `00-${traceId}-${CALLER_SPAN_ID}-01`;
}

function traceIdOf(n: number): string {
  return CALLER_TRACE_ID.slice(0, -4) + n.toString(16).padStart(4, '0');
}

const serverSpan = (spans: ReceivedSpan[]): ReceivedSpan => {
  const found = spans.filter((s) => s.kind === SPAN_KIND_SERVER);
  assert.equal(found.length, 1, `one server span: ${JSON.stringify(spans, null, 1)}`);
  return found[0]!;
};

const attemptSpans = (spans: ReceivedSpan[]): ReceivedSpan[] =>
  spans
    .filter((s) => s.kind === SPAN_KIND_CLIENT)
    .sort(
      (a, b) =>
        Number(a.attributes['switchyard.attempt.number']) -
        Number(b.attributes['switchyard.attempt.number']),
    );

/** Spans of one request: its server span and `attempts` client spans. */
const complete =
  (attempts: number) =>
  (spans: ReceivedSpan[]): boolean =>
    spans.some((s) => s.kind === SPAN_KIND_SERVER) &&
    spans.filter((s) => s.kind === SPAN_KIND_CLIENT).length >= attempts;

function assertNoPromptText(spans: ReceivedSpan[]): void {
  for (const span of spans) {
    assert.ok(!span.name.includes(PROMPT_MARK), `span name ${span.name}`);
    for (const [key, value] of Object.entries(span.attributes))
      assert.ok(!String(value).includes(PROMPT_MARK), `prompt text in ${key}`);
  }
}

describe('tracing through a sidecar', () => {
  let receiver: OtlpReceiver;
  let flaky: RunningProcess;
  let good: RunningProcess;
  let sidecar: RunningProcess;
  let client: OpenAI;
  let cleanup: () => Promise<void> = () => Promise.resolve();

  before(async () => {
    receiver = await startOtlpReceiver();
    flaky = await startSim('flaky');
    good = await startSim('good');
    const scratch = await scratchDir();
    cleanup = scratch.cleanup;
    const poolFile = join(scratch.dir, 'pool.yaml');
    // Failover: every first attempt goes to `flaky` (tier 0), so a test that makes it fail knows
    // the retry goes to `good`.
    await writeFile(
      poolFile,
      `apiVersion: switchyard.dev/v1alpha1
kind: InferencePool
metadata: {name: traced}
spec:
  mode: Failover
  backends:
  - {name: flaky, url: '${flaky.url}/v1'}
  - {name: good, url: '${good.url}/v1'}
`,
    );
    sidecar = await startSidecar(poolFile, [], {
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      OTEL_SERVICE_NAME: 'traced-sidecar',
      // Export within tens of milliseconds instead of the default 5 s.
      OTEL_BSP_SCHEDULE_DELAY: '50',
    });
    client = new OpenAI({ baseURL: `${sidecar.url}/v1`, apiKey: 'client-key', maxRetries: 0 });
  });

  after(async () => {
    await stopAll([sidecar, flaky, good]);
    await receiver.close();
    await cleanup();
  });

  test('a streamed chat continues the caller’s trace: server span, one attempt span, propagated', async () => {
    const traceId = traceIdOf(1);
    const stream = await client.chat.completions.create(
      {
        model: 'sim-model',
        messages: [{ role: 'user', content: PROMPT }],
        stream: true,
        stream_options: { include_usage: true },
      },
      { headers: { traceparent: callerTraceparent(traceId) } },
    );
    for await (const _chunk of stream) {
      // read to the end
    }
    const spans = await receiver.waitForTrace(traceId, complete(1));
    const server = serverSpan(spans);
    assert.equal(server.parentSpanId, CALLER_SPAN_ID, 'the server span continues the caller’s');
    assert.equal(server.name, 'POST /v1/chat/completions');
    assert.equal(server.resource['service.name'], 'traced-sidecar');
    assert.equal(server.attributes['http.response.status_code'], 200);
    assert.equal(server.attributes['gen_ai.operation.name'], 'chat');
    assert.equal(server.attributes['gen_ai.request.model'], 'sim-model');
    assert.equal(server.attributes['switchyard.pool'], 'traced');
    assert.equal(server.attributes['switchyard.streamed'], true);
    assert.notEqual(server.statusCode, STATUS_ERROR);

    const [attempt, ...more] = attemptSpans(spans);
    assert.equal(more.length, 0, 'one attempt');
    assert.equal(attempt!.parentSpanId, server.spanId);
    assert.equal(attempt!.name, 'chat sim-model');
    const a = attempt!.attributes;
    assert.equal(a['switchyard.attempt.number'], 1);
    assert.match(String(a['switchyard.endpoint.id']), /^flaky\//);
    assert.equal(a['switchyard.backend'], 'flaky');
    assert.equal(a['switchyard.endpoint.tier'], 0);
    // Prefix affinity (the default): the prompt's home is the one endpoint of tier 0.
    assert.equal(a['switchyard.affinity.result'], 'hit');
    assert.equal(a['switchyard.breaker.state'], 'closed');
    assert.equal(typeof a['switchyard.endpoint.ewma_ttft_ms'], 'number');
    assert.equal(a['switchyard.attempt.outcome'], '2xx');
    assert.equal(a['http.response.status_code'], 200);
    assert.equal(a['server.port'], Number(new URL(flaky.url).port));
    assert.equal(typeof a['switchyard.attempt.first_byte_ms'], 'number');
    // The simulator streams a final usage chunk when asked; its numbers are on both spans.
    assert.ok(Number(a['gen_ai.usage.input_tokens']) > 0, 'input tokens');
    assert.ok(Number(a['gen_ai.usage.output_tokens']) > 0, 'output tokens');
    assert.equal(server.attributes['gen_ai.usage.output_tokens'], a['gen_ai.usage.output_tokens']);

    const seen = (await simStats(flaky)).lastTraceparent;
    assert.equal(seen, `00-${traceId}-${attempt!.spanId}-01`, 'the backend got the attempt span');
    assertNoPromptText(spans);
  });

  test('a request without traceparent starts a trace; a JSON answer’s usage is read', async () => {
    const completion = await client.chat.completions.create({
      model: 'sim-model',
      messages: [{ role: 'user', content: PROMPT }],
    });
    const seen = (await simStats(flaky)).lastTraceparent;
    assert.ok(seen !== null);
    const traceId = seen.split('-')[1]!;
    const spans = await receiver.waitForTrace(traceId, complete(1));
    const server = serverSpan(spans);
    assert.equal(server.parentSpanId, undefined, 'a root span');
    assert.equal(server.attributes['switchyard.streamed'], false);
    const [attempt] = attemptSpans(spans);
    assert.equal(seen, `00-${traceId}-${attempt!.spanId}-01`);
    assert.equal(attempt!.attributes['gen_ai.usage.input_tokens'], completion.usage?.prompt_tokens);
    assert.equal(
      attempt!.attributes['gen_ai.usage.output_tokens'],
      completion.usage?.completion_tokens,
    );
    assertNoPromptText(spans);
  });

  test('embeddings are named as such', async () => {
    const traceId = traceIdOf(3);
    await client.embeddings.create(
      { model: 'sim-model', input: PROMPT },
      { headers: { traceparent: callerTraceparent(traceId) } },
    );
    const spans = await receiver.waitForTrace(traceId, complete(1));
    assert.equal(serverSpan(spans).attributes['gen_ai.operation.name'], 'embeddings');
    const [attempt] = attemptSpans(spans);
    assert.equal(attempt!.name, 'embeddings sim-model');
    assert.ok(Number(attempt!.attributes['gen_ai.usage.input_tokens']) > 0);
    assertNoPromptText(spans);
  });

  test('a retried request shows two attempt spans, the failed one an error', async () => {
    await simConfig(flaky, { errorRate: 1 });
    try {
      const traceId = traceIdOf(4);
      await client.chat.completions.create(
        { model: 'sim-model', messages: [{ role: 'user', content: PROMPT }] },
        { headers: { traceparent: callerTraceparent(traceId) } },
      );
      const spans = await receiver.waitForTrace(traceId, complete(2));
      const server = serverSpan(spans);
      assert.equal(server.attributes['http.response.status_code'], 200);
      assert.notEqual(server.statusCode, STATUS_ERROR);
      const [first, second, ...more] = attemptSpans(spans);
      assert.equal(more.length, 0, 'two attempts');
      for (const attempt of [first!, second!]) assert.equal(attempt.parentSpanId, server.spanId);

      assert.equal(first!.attributes['switchyard.backend'], 'flaky');
      assert.equal(first!.attributes['http.response.status_code'], 500);
      assert.equal(first!.attributes['switchyard.attempt.outcome'], '5xx');
      assert.equal(first!.attributes['error.type'], '500');
      assert.equal(first!.statusCode, STATUS_ERROR);

      assert.equal(second!.attributes['switchyard.backend'], 'good');
      assert.equal(second!.attributes['switchyard.attempt.number'], 2);
      assert.equal(second!.attributes['switchyard.retry.verdict'], 'retry');
      assert.equal(second!.attributes['switchyard.endpoint.tier'], 1);
      assert.equal(second!.attributes['http.response.status_code'], 200);
      assert.notEqual(second!.statusCode, STATUS_ERROR);

      assert.equal((await simStats(flaky)).lastTraceparent, `00-${traceId}-${first!.spanId}-01`);
      assert.equal((await simStats(good)).lastTraceparent, `00-${traceId}-${second!.spanId}-01`);
      assertNoPromptText(spans);
    } finally {
      await simConfig(flaky, { errorRate: 0 });
    }
  });

  test('an error answer marks the server span, and says why no retry followed', async () => {
    await simConfig(flaky, { errorRate: 1 });
    await simConfig(good, { errorRate: 1 });
    try {
      const traceId = traceIdOf(5);
      await assert.rejects(
        client.chat.completions.create(
          { model: 'sim-model', messages: [{ role: 'user', content: PROMPT }] },
          { headers: { traceparent: callerTraceparent(traceId) } },
        ),
        (err: unknown) => err instanceof OpenAI.APIError && err.status === 500,
      );
      const spans = await receiver.waitForTrace(traceId, complete(2));
      const server = serverSpan(spans);
      assert.equal(server.attributes['http.response.status_code'], 500);
      assert.equal(server.statusCode, STATUS_ERROR);
      // Both endpoints were tried: the third pick found nothing left.
      assert.equal(server.attributes['switchyard.retry.verdict'], 'no-endpoint');
      for (const attempt of attemptSpans(spans)) assert.equal(attempt.statusCode, STATUS_ERROR);
    } finally {
      await simConfig(flaky, { errorRate: 0 });
      await simConfig(good, { errorRate: 0 });
    }
  });
});
