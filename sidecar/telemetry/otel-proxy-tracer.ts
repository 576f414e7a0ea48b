/**
 * The proxy's spans, with OpenTelemetry: one SERVER span per client request, continuing its
 * `traceparent`, and one CLIENT span per attempt, its child, whose context the upstream request
 * carries. Attributes follow the HTTP and GenAI semantic conventions, plus `switchyard.*` ones
 * saying why the endpoint was chosen. Loaded only when tracing is on (start-proxy-tracing.ts).
 *
 * Never in a span: prompt or answer text, API keys, client headers. The model name is the
 * client's own string (a span attribute, not a metric label, so its cardinality is harmless),
 * cut to a bounded length.
 */
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http';
import {
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Span,
} from '@opentelemetry/api';
import type { OtelSdk } from '../../lib/tracing/otel-sdk.ts';
import { BodyTail, genAiOperation, tokenUsage } from './gen-ai.ts';
import type {
  FlowOutcome,
  AttemptPick,
  AttemptTrace,
  ProxyTracer,
  RequestTrace,
  RetryVerdict,
} from './types.ts';

/** Longest model name kept in a span (a client could send megabytes in that field). */
const MAX_MODEL_CHARS = 256;

/** Code classes of attempts that failed: the span's status is an error. */
const FAILED_CODES: ReadonlySet<string> = new Set(['429', '4xx', '5xx', 'error', 'timeout']);
/** Code classes that stand for the upstream's status. */
const STATUS_CODES: ReadonlySet<string> = new Set(['429', '4xx', '5xx']);

export class OtelProxyTracer implements ProxyTracer {
  readonly #sdk: OtelSdk;
  readonly #pool: string;

  constructor(sdk: OtelSdk, pool: string) {
    this.#sdk = sdk;
    this.#pool = pool;
  }

  startRequest(
    method: string,
    path: string,
    route: string | undefined,
    headers: IncomingHttpHeaders,
  ): RequestTrace {
    const parent = this.#sdk.extract(headers);
    const span = this.#sdk.tracer.startSpan(
      route === undefined ? method : `${method} ${route}`,
      {
        kind: SpanKind.SERVER,
        attributes: {
          'http.request.method': method,
          'url.path': path.slice(0, 200),
          ...(route === undefined ? {} : { 'http.route': route }),
          'switchyard.pool': this.#pool,
        },
      },
      parent,
    );
    return new OtelRequestTrace(this.#sdk, span, trace.setSpan(parent, span), method, route);
  }

  shutdown(): Promise<void> {
    return this.#sdk.shutdown();
  }
}

class OtelRequestTrace implements RequestTrace {
  readonly #sdk: OtelSdk;
  readonly #span: Span;
  /** The server span's context: every attempt span is its child. */
  readonly #context: Context;
  readonly #method: string;
  readonly #route: string | undefined;
  #operation: string | undefined;
  #model: string | undefined;
  /** The verdict that let the next attempt go (`retry`), recorded on that attempt's span. */
  #lastVerdict: RetryVerdict | undefined;
  /** An attempt that reached the client then failed (a stream broken off): the request failed. */
  #servedThenFailed = false;

  constructor(
    sdk: OtelSdk,
    span: Span,
    context: Context,
    method: string,
    route: string | undefined,
  ) {
    this.#sdk = sdk;
    this.#span = span;
    this.#context = context;
    this.#method = method;
    this.#route = route;
  }

  generation(model: unknown, streamed: boolean): void {
    this.#operation = this.#route === undefined ? undefined : genAiOperation(this.#route);
    this.#model = typeof model === 'string' ? model.slice(0, MAX_MODEL_CHARS) : undefined;
    if (!this.#span.isRecording()) return;
    const attributes: Attributes = { 'switchyard.streamed': streamed };
    if (this.#operation !== undefined) attributes['gen_ai.operation.name'] = this.#operation;
    if (this.#model !== undefined) attributes['gen_ai.request.model'] = this.#model;
    this.#span.setAttributes(attributes);
  }

  routed(pool: string, requested: string | undefined, resolved: string | undefined): void {
    if (!this.#span.isRecording()) return;
    const attributes: Attributes = { 'switchyard.pool': pool };
    if (requested !== undefined)
      attributes['switchyard.model.requested'] = requested.slice(0, MAX_MODEL_CHARS);
    if (resolved !== undefined)
      attributes['switchyard.model.resolved'] = resolved.slice(0, MAX_MODEL_CHARS);
    this.#span.setAttributes(attributes);
  }

  startAttempt(pick: AttemptPick, headers: OutgoingHttpHeaders): AttemptTrace | undefined {
    const { attempt } = pick;
    const endpoint = attempt.endpoint;
    const name =
      this.#operation === undefined
        ? `${this.#method} ${this.#route ?? ''}`.trimEnd()
        : `${this.#operation}${this.#model === undefined ? '' : ` ${this.#model}`}`;
    const span = this.#sdk.tracer.startSpan(name, { kind: SpanKind.CLIENT }, this.#context);
    // Sampled or not, the backend continues this trace (an unsampled one as unsampled).
    this.#sdk.inject(trace.setSpan(this.#context, span), headers);
    if (!span.isRecording()) return undefined;
    const reading = pick.balancer.endpointReading(endpoint.id);
    const attributes: Attributes = {
      'http.request.method': this.#method,
      'server.address': pick.host,
      'server.port': pick.port,
      'switchyard.attempt.number': pick.number,
      'switchyard.endpoint.id': endpoint.id,
      'switchyard.backend': endpoint.backend,
      'switchyard.endpoint.tier': endpoint.tier,
      'switchyard.affinity.result': pick.affinity,
      'switchyard.breaker.half_open_probe': attempt.halfOpenProbe,
    };
    if (reading !== undefined) {
      attributes['switchyard.breaker.state'] = reading.breaker;
      attributes['switchyard.endpoint.ewma_ttft_ms'] = reading.ewmaTtftMs;
      attributes['switchyard.endpoint.ewma_seeded'] = reading.ewmaSeeded;
      attributes['switchyard.endpoint.load'] = reading.load;
      attributes['switchyard.endpoint.in_flight'] = reading.inFlight;
    }
    if (pick.number > 1 && this.#lastVerdict !== undefined)
      attributes['switchyard.retry.verdict'] = this.#lastVerdict;
    if (this.#operation !== undefined) attributes['gen_ai.operation.name'] = this.#operation;
    if (this.#model !== undefined) attributes['gen_ai.request.model'] = this.#model;
    if (endpoint.model !== undefined) attributes['switchyard.backend.model'] = endpoint.model;
    span.setAttributes(attributes);
    return new OtelAttemptTrace(this, span);
  }

  retryVerdict(verdict: RetryVerdict): void {
    this.#lastVerdict = verdict;
    // A refusal is the request's last word on retries; a `retry` shows on the next attempt.
    if (verdict !== 'retry') this.#span.setAttribute('switchyard.retry.verdict', verdict);
  }

  shed(): void {
    this.#span.setAttribute('switchyard.shed', true);
  }

  flow(outcome: FlowOutcome): void {
    const span = this.#span;
    span.setAttribute('switchyard.flow.priority', outcome.priority);
    if (outcome.waitedMs !== undefined)
      span.setAttribute('switchyard.flow.queue_wait_ms', Math.round(outcome.waitedMs));
    if (outcome.refused !== undefined)
      span.setAttribute('switchyard.flow.refused', outcome.refused);
  }

  held(heldMs: number, outcome: 'released' | 'timeout' | 'gone' | 'shutdown' | 'full'): void {
    this.#span.setAttribute('switchyard.scale_from_zero.held_ms', Math.round(heldMs));
    this.#span.setAttribute('switchyard.scale_from_zero.outcome', outcome);
  }

  /** From an attempt span: the usage the answer reported. */
  usage(inputTokens: number | undefined, outputTokens: number | undefined): void {
    if (inputTokens !== undefined)
      this.#span.setAttribute('gen_ai.usage.input_tokens', inputTokens);
    if (outputTokens !== undefined)
      this.#span.setAttribute('gen_ai.usage.output_tokens', outputTokens);
  }

  servedThenFailed(): void {
    this.#servedThenFailed = true;
  }

  end(status: number, completed: boolean): void {
    const span = this.#span;
    if (span.isRecording()) {
      span.setAttribute('http.response.status_code', status);
      if (!completed) span.setAttribute('switchyard.response.completed', false);
      // The server-span rule of the HTTP conventions: 5xx is an error, 4xx the client's.
      if (status >= 500) {
        span.setAttribute('error.type', String(status));
        span.setStatus({ code: SpanStatusCode.ERROR });
      } else if (this.#servedThenFailed) {
        span.setAttribute('error.type', 'upstream_stream_broken');
        span.setStatus({
          code: SpanStatusCode.ERROR,
          message: 'the upstream broke off the response',
        });
      }
    }
    span.end();
  }
}

class OtelAttemptTrace implements AttemptTrace {
  readonly #request: OtelRequestTrace;
  readonly #span: Span;
  readonly #startedAtMs = performance.now();
  #tail: BodyTail | undefined;
  #servedAt: number | undefined;
  #errorCode: string | undefined;
  #codeClass: string | undefined;

  constructor(request: OtelRequestTrace, span: Span) {
    this.#request = request;
    this.#span = span;
  }

  firstByte(): void {
    this.#servedAt = performance.now();
    this.#span.setAttribute(
      'switchyard.attempt.first_byte_ms',
      Math.round((this.#servedAt - this.#startedAtMs) * 1000) / 1000,
    );
  }

  data(chunk: Buffer): void {
    (this.#tail ??= new BodyTail()).push(chunk);
  }

  upstreamError(code: string): void {
    this.#errorCode = code;
  }

  report(codeClass: string, status: number): void {
    this.#codeClass = codeClass;
    const span = this.#span;
    span.setAttribute('switchyard.attempt.outcome', codeClass);
    if (status > 0) span.setAttribute('http.response.status_code', status);
    if (FAILED_CODES.has(codeClass)) {
      // A transport code (ECONNREFUSED) when there is one, the status for an error answer,
      // else the class (`timeout`: a head may have come, but no body byte in time).
      const errorType =
        this.#errorCode ?? (STATUS_CODES.has(codeClass) ? String(status) : codeClass);
      span.setAttribute('error.type', errorType);
      span.setStatus({ code: SpanStatusCode.ERROR, message: errorType });
      if (this.#servedAt !== undefined) this.#request.servedThenFailed();
    }
  }

  end(): void {
    if (this.#codeClass === '2xx' && this.#tail !== undefined) {
      const usage = tokenUsage(this.#tail.text());
      if (usage.inputTokens !== undefined)
        this.#span.setAttribute('gen_ai.usage.input_tokens', usage.inputTokens);
      if (usage.outputTokens !== undefined)
        this.#span.setAttribute('gen_ai.usage.output_tokens', usage.outputTokens);
      this.#request.usage(usage.inputTokens, usage.outputTokens);
    }
    this.#tail = undefined;
    this.#span.end();
  }
}
