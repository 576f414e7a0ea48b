import http from 'node:http';

/** What one request looked like from the client's side. */
export interface RequestResult {
  status: number;
  /** ms from sending to the first response body byte (undefined when none arrived). */
  ttftMs: number | undefined;
  /** ms from sending to the end of the response. */
  e2eMs: number;
  /** The endpoint that answered (`x-switchyard-backend`), or the target for direct requests. */
  backend: string | undefined;
  attempts: number;
  /** True when the response was a complete 2xx (a streamed one ended with [DONE]). */
  ok: boolean;
  error?: string | undefined;
}

const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });

/**
 * Sends one chat completion (streaming when `body.stream`) and measures it. A small raw HTTP
 * client rather than the `openai` package: load generators need precise first-byte times and
 * no client-side retries.
 */
export function sendChat(
  baseUrl: string,
  body: unknown,
  options: { timeoutMs?: number; backendLabel?: string } = {},
): Promise<RequestResult> {
  const payload = Buffer.from(JSON.stringify(body));
  const url = new URL(baseUrl.replace(/\/$/, '') + '/chat/completions');
  const started = performance.now();
  return new Promise((resolve) => {
    let ttftMs: number | undefined;
    let tail = '';
    let settled = false;
    const finish = (result: Omit<RequestResult, 'e2eMs'>): void => {
      if (settled) return;
      settled = true;
      resolve({ ...result, e2eMs: performance.now() - started });
    };
    const req = http.request(
      {
        host: url.hostname,
        port: url.port,
        path: url.pathname,
        method: 'POST',
        agent,
        headers: { 'content-type': 'application/json', 'content-length': payload.length },
        timeout: options.timeoutMs ?? 120_000,
      },
      (res) => {
        const status = res.statusCode ?? 0;
        const backend =
          (res.headers['x-switchyard-backend'] as string | undefined) ?? options.backendLabel;
        const attempts = Number(res.headers['x-switchyard-attempts'] ?? 1);
        res.on('data', (chunk: Buffer) => {
          ttftMs ??= performance.now() - started;
          tail = (tail + chunk.toString('utf8')).slice(-64);
        });
        res.on('end', () => {
          const complete =
            status >= 200 &&
            status < 300 &&
            (!(body as { stream?: boolean }).stream || tail.includes('[DONE]'));
          finish({
            status,
            ttftMs,
            backend,
            attempts,
            ok: complete,
            error: complete ? undefined : `status ${status}`,
          });
        });
        res.on('error', (err) =>
          finish({ status, ttftMs, backend, attempts, ok: false, error: err.message }),
        );
      },
    );
    req.on('timeout', () => req.destroy(new Error('client timeout')));
    req.on('error', (err) =>
      finish({
        status: 0,
        ttftMs,
        backend: options.backendLabel,
        attempts: 0,
        ok: false,
        error: err.message,
      }),
    );
    req.end(payload);
  });
}

export function closeClientAgent(): void {
  agent.destroy();
}

export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank]!;
}

export interface Summary {
  requests: number;
  errors: number;
  errorRate: number;
  ttftMs: { p50: number; p90: number; p99: number };
  e2eMs: { p50: number; p90: number; p99: number };
  share: Record<string, number>;
}

export function summarise(results: readonly RequestResult[]): Summary {
  const ttft = results
    .filter((r) => r.ok && r.ttftMs !== undefined)
    .map((r) => r.ttftMs!)
    .sort((a, b) => a - b);
  const e2e = results
    .filter((r) => r.ok)
    .map((r) => r.e2eMs)
    .sort((a, b) => a - b);
  const errors = results.filter((r) => !r.ok).length;
  const counts: Record<string, number> = {};
  for (const r of results)
    if (r.backend !== undefined) counts[r.backend] = (counts[r.backend] ?? 0) + 1;
  const share = Object.fromEntries(
    Object.entries(counts).map(([k, v]) => [k, v / Math.max(1, results.length)]),
  );
  const q = (xs: number[]) => ({
    p50: percentile(xs, 50),
    p90: percentile(xs, 90),
    p99: percentile(xs, 99),
  });
  return {
    requests: results.length,
    errors,
    errorRate: errors / Math.max(1, results.length),
    ttftMs: q(ttft),
    e2eMs: q(e2e),
    share,
  };
}
