/**
 * A small OTLP/HTTP trace receiver (`POST /v1/traces`), standing in for an OpenTelemetry
 * collector: the tracing tests decode and inspect what a sidecar exported, and the overhead
 * benchmark uses it as a sink that only counts. It takes OTLP's JSON encoding, which
 * @opentelemetry/exporter-trace-otlp-http sends; a protobuf body is answered 415.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export type AttributeValue = string | number | boolean;

/** One exported span, flattened. */
export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  /** Undefined for a span without a parent. */
  parentSpanId: string | undefined;
  name: string;
  /** OTLP's SpanKind: 1 internal, 2 server, 3 client, 4 producer, 5 consumer. */
  kind: number;
  attributes: Record<string, AttributeValue>;
  /** OTLP's status code: 0 unset, 1 ok, 2 error. */
  statusCode: number;
  statusMessage: string | undefined;
  /** The resource's attributes (`service.name`...). */
  resource: Record<string, AttributeValue>;
}

export const SPAN_KIND_SERVER = 2;
export const SPAN_KIND_CLIENT = 3;
export const STATUS_ERROR = 2;

export interface OtlpReceiver {
  /** The base URL, for OTEL_EXPORTER_OTLP_ENDPOINT (`/v1/traces` is appended by the exporter). */
  url: string;
  /** Every span received so far (empty when started with `keepSpans: false`). */
  spans: ReceivedSpan[];
  /** Export requests and spans received so far. */
  stats(): { requests: number; spans: number; bytes: number };
  /** Resolves with the spans of `traceId` once `done` says they are all there. */
  waitForTrace(
    traceId: string,
    done: (spans: ReceivedSpan[]) => boolean,
    timeoutMs?: number,
  ): Promise<ReceivedSpan[]>;
  close(): Promise<void>;
}

interface OtlpAnyValue {
  stringValue?: string;
  boolValue?: boolean;
  intValue?: number | string;
  doubleValue?: number;
}

interface OtlpKeyValue {
  key: string;
  value?: OtlpAnyValue;
}

interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes?: OtlpKeyValue[];
  status?: { code?: number; message?: string };
}

interface OtlpRequest {
  resourceSpans?: {
    resource?: { attributes?: OtlpKeyValue[] };
    scopeSpans?: { spans?: OtlpSpan[] }[];
  }[];
}

function valueOf(value: OtlpAnyValue | undefined): AttributeValue {
  if (value === undefined) return '';
  if (value.stringValue !== undefined) return value.stringValue;
  if (value.boolValue !== undefined) return value.boolValue;
  // OTLP/JSON may write a 64-bit integer as a string.
  if (value.intValue !== undefined) return Number(value.intValue);
  if (value.doubleValue !== undefined) return value.doubleValue;
  return JSON.stringify(value);
}

function attributesOf(list: OtlpKeyValue[] | undefined): Record<string, AttributeValue> {
  const out: Record<string, AttributeValue> = {};
  for (const { key, value } of list ?? []) out[key] = valueOf(value);
  return out;
}

/** The spans of one OTLP/JSON export request. */
export function decodeOtlpJson(body: string): ReceivedSpan[] {
  const request = JSON.parse(body) as OtlpRequest;
  const spans: ReceivedSpan[] = [];
  for (const rs of request.resourceSpans ?? []) {
    const resource = attributesOf(rs.resource?.attributes);
    for (const ss of rs.scopeSpans ?? []) {
      for (const s of ss.spans ?? []) {
        spans.push({
          traceId: s.traceId,
          spanId: s.spanId,
          parentSpanId:
            s.parentSpanId === undefined || s.parentSpanId === '' ? undefined : s.parentSpanId,
          name: s.name,
          kind: s.kind,
          attributes: attributesOf(s.attributes),
          statusCode: s.status?.code ?? 0,
          statusMessage: s.status?.message,
          resource,
        });
      }
    }
  }
  return spans;
}

function readAll(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

function answer(res: ServerResponse, status: number, body: string): void {
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
  });
  res.end(body);
}

/**
 * Starts a receiver on a free loopback port. With `keepSpans: false` (the benchmark's sink) it
 * only counts requests and bytes, so the sink costs the machine as little as possible.
 */
export async function startOtlpReceiver(
  options: { keepSpans?: boolean } = {},
): Promise<OtlpReceiver> {
  const keepSpans = options.keepSpans ?? true;
  const spans: ReceivedSpan[] = [];
  let requests = 0;
  let spanCount = 0;
  let bytes = 0;
  const waiters = new Set<() => void>();
  const server = createServer((req, res) => {
    if (req.method !== 'POST' || req.url !== '/v1/traces') {
      req.resume();
      answer(res, 404, '{}');
      return;
    }
    readAll(req).then(
      (body) => {
        requests++;
        bytes += body.length;
        if (!keepSpans) return answer(res, 200, '{}');
        if (!String(req.headers['content-type'] ?? '').startsWith('application/json'))
          return answer(res, 415, '{"message":"this receiver takes OTLP/JSON only"}');
        const received = decodeOtlpJson(body.toString('utf8'));
        spanCount += received.length;
        spans.push(...received);
        for (const wake of waiters) wake();
        answer(res, 200, '{}');
      },
      () => answer(res, 400, '{}'),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  const waitForTrace = (
    traceId: string,
    done: (spans: ReceivedSpan[]) => boolean,
    timeoutMs = 10_000,
  ): Promise<ReceivedSpan[]> =>
    new Promise((resolve, reject) => {
      const check = (): boolean => {
        const ofTrace = spans.filter((s) => s.traceId === traceId);
        if (!done(ofTrace)) return false;
        clearTimeout(timer);
        waiters.delete(wake);
        resolve(ofTrace);
        return true;
      };
      const wake = (): void => void check();
      const timer = setTimeout(() => {
        waiters.delete(wake);
        const ofTrace = spans.filter((s) => s.traceId === traceId);
        reject(
          new Error(
            `trace ${traceId} incomplete after ${timeoutMs} ms: ${JSON.stringify(ofTrace, null, 1)}`,
          ),
        );
      }, timeoutMs);
      waiters.add(wake);
      check();
    });

  return {
    url: `http://127.0.0.1:${port}`,
    spans,
    stats: () => ({ requests, spans: keepSpans ? spanCount : 0, bytes }),
    waitForTrace,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
