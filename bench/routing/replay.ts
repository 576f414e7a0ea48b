/**
 * The load generator: replays trace requests at their (compressed) times, each to the router
 * instance of its client (by default request i to instance i mod R, so each instance serves 1/R
 * of the clients; scenarios.ts `routerInstances`), streaming, and measures what a client sees: time to the first body byte and to the
 * end, whether the stream completed, and which backend answered. The `conversations` scenario
 * runs closed-loop instead: a fixed number of conversations at a time, each turn sent when the
 * previous one ended.
 */
import http from 'node:http';
import { blockKeys } from '../../sim/engine/prefix-cache.ts';
import { promptText, turnMessages, type Conversation, type TurnRecord } from './conversations.ts';
import type { ClientResult } from './metrics.ts';
import type { Oracle } from './oracle.ts';
import { BENCH_CLIENT_KEY } from './policy-definition.ts';
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
  /**
   * What the oracle's shadow caches key each request by (default: the trace's hash ids): the
   * simulator's own block keys of the prompt when the prompt is not made of whole hash-id blocks.
   */
  oracleKeys?: readonly (readonly number[])[] | undefined;
  /** Wall ms per trace ms (0.02: fifty times faster than the trace). */
  timeScale: number;
  /** The simulators' speed: reported times are wall × speed (simulated ms). */
  speed: number;
  /** The simulators' names by port, to tell the backend from a response body. */
  backendsByPort?: ReadonlyMap<number, string> | undefined;
  onResult?: (done: number) => void;
  timeoutMs?: number;
  /** The router instance of each request (default: request i through instance i mod R). */
  instances?: readonly number[] | undefined;
}

const agents = new Map<string, http.Agent>();
/** One keep-alive agent per router URL, shared by the benches' clients; `closeReplayAgents` ends them. */
export function agentFor(url: string): http.Agent {
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

/**
 * Which backend answered: the simulator's `x-sim-backend` header as a proxy passes it on
 * (LiteLLM renames it `llm_provider-x-sim-backend`), else the port in the simulator's chunk id
 * (`chatcmpl-sim<port>-<n>`), which every proxy that streams the body through keeps.
 */
export function servedBy(
  headers: http.IncomingHttpHeaders,
  head: string,
  byPort: ReadonlyMap<number, string>,
): string | undefined {
  for (const name of ['x-sim-backend', 'llm_provider-x-sim-backend']) {
    const value = stringHeader(headers[name]);
    if (value !== undefined) return value;
  }
  const port = /"id":\s*"(?:chatcmpl|cmpl)-sim(\d+)-/.exec(head)?.[1];
  return port === undefined ? undefined : byPort.get(Number(port));
}

/** A header's value when it came once and is not empty. */
function stringHeader(value: string | string[] | undefined): string | undefined {
  return typeof value === 'string' && value !== '' ? value : undefined;
}

/** Bytes of the body kept to find the chunk id in. */
const HEAD_BYTES = 512;

interface Sent {
  ok: boolean;
  status: number;
  ttftWallMs: number | undefined;
  e2eWallMs: number;
  sentAtMs: number;
  endedAtMs: number;
  backend: string | undefined;
  affinity: string | undefined;
}

function send(
  baseUrl: string,
  payload: Buffer,
  timeoutMs: number,
  runStart: number,
  byPort: ReadonlyMap<number, string>,
): Promise<Sent> {
  const url = new URL(`${baseUrl}/v1/chat/completions`);
  const sent = performance.now();
  return new Promise((resolve) => {
    let first: number | undefined;
    let head = '';
    let tail = '';
    let headers: http.IncomingHttpHeaders = {};
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
        backend: servedBy(headers, head, byPort),
        affinity: stringHeader(headers['x-switchyard-affinity']),
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
        headers = res.headers;
        res.on('data', (chunk: Buffer) => {
          first ??= performance.now();
          const text = chunk.toString('latin1');
          if (head.length < HEAD_BYTES) head += text.slice(0, HEAD_BYTES - head.length);
          tail = (tail + text).slice(-32);
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

const toResult = (r: Sent, speed: number): ClientResult => ({
  ok: r.ok,
  status: r.status,
  ttftMs: r.ttftWallMs === undefined ? undefined : r.ttftWallMs * speed,
  e2eMs: r.e2eWallMs * speed,
  sentAtMs: r.sentAtMs,
  endedAtMs: r.endedAtMs,
  backend: r.backend,
  ...(r.affinity === undefined ? {} : { affinity: r.affinity }),
});

/** The body of one streaming chat request. */
export function chatPayload(
  model: string,
  maxTokens: number,
  messages: readonly { role: string; content: string }[],
  stream = true,
): Buffer {
  return Buffer.from(
    JSON.stringify({ model, stream, max_tokens: Math.max(1, maxTokens), messages }),
  );
}

/**
 * The streaming chat request of every trace request, built before the runs: building and
 * serialising 60 KB prompts while replaying would cost the load generator time in the middle of
 * the measurement, and the same bytes go to every policy. `messages[i]` is request i's messages
 * (conversations.ts) or, by default, its prompt as one user message.
 */
export function buildPayloads(
  requests: readonly TraceRequest[],
  model: string | ((i: number) => string),
  messages: (i: number) => readonly { role: string; content: string }[],
): Buffer[] {
  const modelOf = typeof model === 'string' ? () => model : model;
  return requests.map((request, i) => chatPayload(modelOf(i), request.outputTokens, messages(i)));
}

/** Replays every request; resolves with one result per request, in trace order. */
export async function replay(
  target: ReplayTarget,
  options: ReplayOptions,
): Promise<ClientResult[]> {
  const { requests, payloads, timeScale, speed } = options;
  const byPort = options.backendsByPort ?? new Map<number, string>();
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
          hashIds: options.oracleKeys?.[i] ?? request.hashIds ?? [],
          inputTokens: request.inputTokens,
          outputTokens: request.outputTokens,
        },
        performance.now(),
      );
      url = target.oracle.backends[choice.index]!;
      release = choice.done;
    } else {
      url = target.urls[(options.instances?.[i] ?? i) % target.urls.length]!;
    }
    pending.push(
      send(url, payload, options.timeoutMs ?? 300_000, runStart, byPort).then((r) => {
        release?.();
        results[i] = toResult(r, speed);
        options.onResult?.(++done);
      }),
    );
  }
  await Promise.all(pending);
  return results;
}

export interface ConversationReplayOptions {
  conversations: readonly Conversation[];
  /** Conversations in progress at once (a new one starts when one ends). */
  concurrency: number;
  model: string;
  speed: number;
  /** The simulators' prompt block size in characters (for the oracle's keys). */
  blockChars: number;
  charsPerToken: number;
  backendsByPort: ReadonlyMap<number, string>;
  onResult?: (done: number) => void;
  timeoutMs: number;
}

/**
 * Runs every conversation, `concurrency` at a time, each turn after the previous one ended (a
 * failed turn does not stop its conversation: the next repeats the stand-in answer anyway).
 * Turn t of conversation c goes to router instance (c + t) mod R: an application's replicas
 * behind a Service each see some turns of a conversation, not all of them.
 */
export async function replayConversations(
  target: ReplayTarget,
  options: ConversationReplayOptions,
): Promise<{ results: ClientResult[]; turns: TurnRecord[] }> {
  const { conversations, speed } = options;
  const results: ClientResult[] = [];
  const turns: TurnRecord[] = [];
  const runStart = performance.now();
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < conversations.length) {
      const conversation = conversations[next++]!;
      for (let t = 0; t < conversation.users.length; t++) {
        const messages = turnMessages(conversation, t);
        const maxTokens = conversation.answerTokens[t]!;
        const payload = chatPayload(options.model, maxTokens, messages);
        let url: string;
        let release: (() => void) | undefined;
        if (target.oracle !== undefined) {
          const text = promptText(messages);
          const choice = target.oracle.router.route(
            {
              hashIds: blockKeys(text, options.blockChars),
              inputTokens: Math.ceil(text.length / options.charsPerToken),
              outputTokens: maxTokens,
            },
            performance.now(),
          );
          url = target.oracle.backends[choice.index]!;
          release = choice.done;
        } else {
          url = target.urls[(conversation.index + t) % target.urls.length]!;
        }
        const r = await send(url, payload, options.timeoutMs, runStart, options.backendsByPort);
        release?.();
        const result = toResult(r, speed);
        results.push(result);
        turns.push({
          conversation: conversation.index,
          turn: t + 1,
          backend: result.backend,
          ok: result.ok,
        });
        options.onResult?.(results.length);
      }
    }
  };
  await Promise.all(
    Array.from({ length: Math.min(options.concurrency, conversations.length) }, lane),
  );
  return { results, turns };
}
