/**
 * A model server that lies, in the caller's own process (the hostile-server tests, and
 * `npm run bench:hostile-scrape` as a process of its own): it answers chat completions (a short SSE
 * stream) after `answerDelayMs`, and serves whatever `/metrics` page and load header the test
 * gives it, which a simulator cannot be made to do. Loopback only; counts what it was sent.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

/** One OpenAI chat completion chunk of `content`, as an SSE event. */
function event(content: string): string {
  const choice = { index: 0, delta: { content }, finish_reason: null };
  const chunk = { id: 'chatcmpl-hostile', object: 'chat.completion.chunk', created: 0, model: 'm' };
  return `data: ${JSON.stringify({ ...chunk, choices: [choice] })}\n\n`;
}

export interface HostileBackendOptions {
  /** How long each answer waits before its first token (its real speed). */
  answerDelayMs: number;
  /**
   * Serves `GET /metrics`: `scrape` counts this server's scrapes so far (1 for the first).
   * Default: 404.
   */
  metrics?:
    ((req: http.IncomingMessage, res: http.ServerResponse, scrape: number) => void) | undefined;
  /** The ORCA `endpoint-load-metrics` header of each answer (garbage welcome), or none. */
  loadHeader?: (() => string) | undefined;
}

export interface HostileBackend {
  url: string;
  /** Chat completions it was sent. */
  readonly answered: number;
  /** `/metrics` requests it got. */
  readonly scrapes: number;
  stop(): Promise<void>;
}

export async function startHostileBackend(options: HostileBackendOptions): Promise<HostileBackend> {
  let answered = 0;
  let scrapes = 0;
  const server = http.createServer((req, res) => {
    if (req.method === 'GET' && req.url === '/metrics') {
      scrapes++;
      if (options.metrics === undefined) {
        res.writeHead(404).end();
        return;
      }
      options.metrics(req, res, scrapes);
      return;
    }
    req.resume();
    req.on('end', () => {
      answered++;
      const timer = setTimeout(() => {
        const header = options.loadHeader?.();
        res.writeHead(200, {
          'content-type': 'text/event-stream',
          ...(header === undefined ? {} : { 'endpoint-load-metrics': header }),
        });
        res.write(event('Hello'));
        res.end(`${event(' world')}data: [DONE]\n\n`);
      }, options.answerDelayMs);
      res.on('close', () => clearTimeout(timer));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    get answered() {
      return answered;
    },
    get scrapes() {
      return scrapes;
    },
    async stop() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/**
 * A vLLM `/metrics` page: an idle queue, and an inter-token latency histogram whose sum and count
 * grow by `tokensPerScrape` tokens of `itlSeconds` each per scrape (what the server claims).
 */
export function vllmPage(scrape: number, itlSeconds: number, tokensPerScrape = 100): string {
  const tokens = scrape * tokensPerScrape;
  return [
    '# TYPE vllm:num_requests_running gauge',
    'vllm:num_requests_running{model_name="m"} 0',
    'vllm:num_requests_waiting{model_name="m"} 0',
    'vllm:kv_cache_usage_perc{model_name="m"} 0.1',
    `vllm:inter_token_latency_seconds_sum{model_name="m"} ${tokens * itlSeconds}`,
    `vllm:inter_token_latency_seconds_count{model_name="m"} ${tokens}`,
    '',
  ].join('\n');
}

/** Serves `page(scrape)` as a Prometheus exposition. */
export const servePage =
  (page: (scrape: number) => string | Buffer) =>
  (_req: http.IncomingMessage, res: http.ServerResponse, scrape: number): void => {
    res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' });
    res.end(page(scrape));
  };
