/**
 * The load generator: replays trace requests at their (compressed) times, each to the router
 * instance of its client (request i to instance i mod R, so each instance serves 1/R of the
 * clients), streaming, and measures what a client sees: time to the first body byte and to the
 * end, and whether the stream completed.
 */
import http from 'node:http';
import type { ClientResult } from './metrics.ts';
import { BENCH_CLIENT_KEY } from './routers.ts';
import type { Oracle } from './oracle.ts';
import type { PromptBuilder } from './prompt.ts';
import type { TraceRequest } from './trace.ts';

export interface ReplayTarget {
  /** Router instances' base URLs (without /v1); empty for the oracle. */
  urls: readonly string[];
  /** With the oracle: the simulators' base URLs, and the oracle that picks among them. */
  oracle?: { backends: readonly string[]; router: Oracle } | undefined;
}

export interface ReplayOptions {
  requests: readonly TraceRequest[];
  /** The request bodies, built once before any run (see buildPayloads). */
  payloads: readonly Buffer[];
  /** Wall ms per trace ms (0.02: fifty times faster than the trace). */
  timeScale: number;
  /** The simulators' speed: reported times are wall × speed (simulated ms). */
  speed: number;
  onResult?: (done: number) => void;
  timeoutMs?: number;
}

const agents = new Map<string, http.Agent>();
function agentFor(url: string): http.Agent {
  let agent = agents.get(url);
  if (agent === undefined) {
    agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });
    agents.set(url, agent);
  }
  return agent;
}

export function closeReplayAgents(): void {
  for (const a of agents.values()) a.destroy();
  agents.clear();
}

function send(
  baseUrl: string,
  payload: Buffer,
  timeoutMs: number,
  runStart: number,
): Promise<Omit<ClientResult, 'ttftMs' | 'e2eMs'> & { ttftWallMs?: number; e2eWallMs: number }> {
  const url = new URL(`${baseUrl}/v1/chat/completions`);
  const sent = performance.now();
  return new Promise((resolve) => {
    let first: number | undefined;
    let tail = '';
    let settled = false;
    const finish = (status: number, ok: boolean): void => {
      if (settled) return;
      settled = true;
      const end = performance.now();
      resolve({
        ok,
        status,
        ttftWallMs: first === undefined ? undefined : first - sent,
        e2eWallMs: end - sent,
        sentAtMs: sent - runStart,
        endedAtMs: end - runStart,
      });
    };
    const req = http.request(
      {
        host: url.hostname,
        port: url.port,
        path: url.pathname,
        method: 'POST',
        agent: agentFor(baseUrl),
        headers: {
          'content-type': 'application/json',
          'content-length': payload.length,
          authorization: `Bearer ${BENCH_CLIENT_KEY}`,
        },
        timeout: timeoutMs,
      },
      (res) => {
        const status = res.statusCode ?? 0;
        res.on('data', (chunk: Buffer) => {
          first ??= performance.now();
          tail = (tail + chunk.toString('latin1')).slice(-32);
        });
        res.on('end', () =>
          finish(status, status >= 200 && status < 300 && tail.includes('[DONE]')),
        );
        res.on('error', () => finish(status, false));
        res.on('aborted', () => finish(status, false));
      },
    );
    req.on('timeout', () => req.destroy(new Error('client timeout')));
    req.on('error', () => finish(0, false));
    req.end(payload);
  });
}

/**
 * The streaming chat request of every trace request, built before the runs: building and
 * serialising 60 KB prompts while replaying would cost the load generator time in the middle of
 * the measurement, and the same bytes go to every policy.
 */
export function buildPayloads(
  requests: readonly TraceRequest[],
  prompts: PromptBuilder,
  model: string,
): Buffer[] {
  return requests.map((request, i) =>
    Buffer.from(
      JSON.stringify({
        model,
        stream: true,
        max_tokens: Math.max(1, request.outputTokens),
        messages: [{ role: 'user', content: prompts.prompt(request, i) }],
      }),
    ),
  );
}

/** Replays every request; resolves with one result per request, in trace order. */
export async function replay(
  target: ReplayTarget,
  options: ReplayOptions,
): Promise<ClientResult[]> {
  const { requests, payloads, timeScale, speed } = options;
  const results = new Array<ClientResult>(requests.length);
  const pending: Promise<void>[] = [];
  const runStart = performance.now();
  let done = 0;
  for (let i = 0; i < requests.length; i++) {
    const request = requests[i]!;
    const dueAt = runStart + request.atMs * timeScale;
    const wait = dueAt - performance.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    const payload = payloads[i]!;
    let url: string;
    let release: (() => void) | undefined;
    if (target.oracle !== undefined) {
      const choice = target.oracle.router.route(
        {
          hashIds: request.hashIds ?? [],
          inputTokens: request.inputTokens,
          outputTokens: request.outputTokens,
        },
        performance.now(),
      );
      url = target.oracle.backends[choice.index]!;
      release = choice.done;
    } else {
      url = target.urls[i % target.urls.length]!;
    }
    pending.push(
      send(url, payload, options.timeoutMs ?? 300_000, runStart).then((r) => {
        release?.();
        results[i] = {
          ok: r.ok,
          status: r.status,
          ttftMs: r.ttftWallMs === undefined ? undefined : r.ttftWallMs * speed,
          e2eMs: r.e2eWallMs * speed,
          sentAtMs: r.sentAtMs,
          endedAtMs: r.endedAtMs,
        };
        options.onResult?.(++done);
      }),
    );
  }
  await Promise.all(pending);
  return results;
}
