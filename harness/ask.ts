/**
 * A raw HTTP client for the reliability tests and the soak: one request, the whole answer kept,
 * and how it ended (cleanly, broken, or aborted by us at a chosen point), with no client-side
 * retries.
 */
import http, { type IncomingHttpHeaders } from 'node:http';

export interface Answer {
  /** 0 when no response head arrived. */
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
  /** `end`: the response ended cleanly; `error`: the connection broke; `aborted`: we left. */
  ended: 'end' | 'error' | 'aborted';
  ms: number;
  error?: string | undefined;
}

export interface AskOptions {
  method?: string;
  path?: string;
  headers?: Record<string, string>;
  /** Leave (destroy the socket) once this many response body bytes arrived; 0: right after sending. */
  abortAfterBytes?: number | undefined;
  timeoutMs?: number;
  agent?: http.Agent | false;
}

export const STREAM_BODY = {
  model: 'm',
  stream: true,
  max_tokens: 8,
  messages: [{ role: 'user', content: 'hello there' }],
};

/** Sends one request (a chat completion unless `path` says otherwise) and collects the answer. */
export function ask(
  baseUrl: string,
  body: unknown = STREAM_BODY,
  options: AskOptions = {},
): Promise<Answer> {
  const payload = typeof body === 'string' ? body : JSON.stringify(body);
  const started = performance.now();
  return new Promise((resolve) => {
    let status = 0;
    let headers: IncomingHttpHeaders = {};
    let text = '';
    let done = false;
    const finish = (ended: Answer['ended'], error?: string): void => {
      if (done) return;
      done = true;
      resolve({ status, headers, body: text, ended, ms: performance.now() - started, error });
    };
    const req = http.request(`${baseUrl}${options.path ?? '/v1/chat/completions'}`, {
      method: options.method ?? 'POST',
      agent: options.agent ?? false,
      timeout: options.timeoutMs ?? 30_000,
      headers: {
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(payload),
        ...options.headers,
      },
    });
    const leave = (): void => {
      req.destroy();
      finish('aborted');
    };
    req.on('response', (res) => {
      status = res.statusCode ?? 0;
      headers = res.headers;
      res.setEncoding('utf8');
      res.on('data', (data: string) => {
        text += data;
        if (options.abortAfterBytes !== undefined && text.length >= options.abortAfterBytes)
          leave();
      });
      res.on('end', () => finish('end'));
      res.on('error', (err) => finish('error', err.message));
    });
    req.on('timeout', () => req.destroy(new Error('client timeout')));
    req.on('error', (err) => finish('error', err.message));
    req.on('close', () => finish('error', 'closed'));
    req.end(payload);
    if (options.abortAfterBytes === 0) setImmediate(leave);
  });
}

/** A complete stream: 200, ended cleanly, with `[DONE]`. */
export const completeStream = (a: Answer): boolean =>
  a.status === 200 && a.ended === 'end' && a.body.includes('data: [DONE]');
