import http from 'node:http';
import https from 'node:https';
import type { KubeClientConfig } from './kube-config.ts';

export class KubeApiError extends Error {
  readonly status: number;
  readonly body: string;
  constructor(status: number, method: string, path: string, body: string) {
    let message = body;
    try {
      message = (JSON.parse(body) as { message?: string }).message ?? body;
    } catch {
      // not a Status object
    }
    super(`${method} ${path}: ${status} ${message.slice(0, 500)}`);
    this.status = status;
    this.body = body;
  }
}

/** How long a request may go without a byte from the API server (a watch: until its headers). */
const REQUEST_IDLE_TIMEOUT_MS = 15_000;

/**
 * JSON requests straight to the API server over node:http(s): lists, writes, and watches
 * (`stream`). No generated client: the controller does not load @kubernetes/client-node
 * (kube-config.ts says why), and its serializer got in the way anyway: Lease times are MicroTime
 * (exactly six fractional digits, which `Date#toISOString` does not produce), and merge patches
 * of a custom resource's status.
 */
export class KubeRaw {
  private readonly config: KubeClientConfig;
  private readonly server: URL;
  private readonly transport: typeof http | typeof https;
  private readonly agent: https.Agent | http.Agent;
  /** Watches hold their connection for minutes: a pool of their own, so requests never wait on them. */
  private readonly watchAgent: https.Agent | http.Agent;

  constructor(config: KubeClientConfig) {
    this.config = config;
    this.server = config.server;
    const https_ = this.server.protocol === 'https:';
    this.transport = https_ ? https : http;
    // A few kept-alive connections: bursts of status writes and TokenReviews queue here instead of
    // each opening a TLS connection of its own (~0.15 MB each on the controller).
    const agentOptions = { keepAlive: true, maxSockets: 8 };
    this.agent = https_ ? new https.Agent(agentOptions) : new http.Agent(agentOptions);
    this.watchAgent = https_
      ? new https.Agent({ keepAlive: true })
      : new http.Agent({ keepAlive: true });
  }

  private async options(method: string, path: string, agent: http.Agent) {
    const options: https.RequestOptions = {
      method,
      // URL keeps an IPv6 address in brackets; the socket wants it bare.
      hostname: this.server.hostname.replace(/^\[(.*)\]$/, '$1'),
      port: this.server.port,
      path: this.server.pathname.replace(/\/$/, '') + path,
      headers: { accept: 'application/json' },
    };
    await this.config.apply(options);
    options.agent ??= agent;
    return options;
  }

  async request<T>(
    method: string,
    path: string,
    body?: unknown,
    contentType = 'application/json',
  ): Promise<T> {
    const options = await this.options(method, path, this.agent);
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    if (payload !== undefined)
      options.headers = {
        ...options.headers,
        'content-type': contentType,
        'content-length': payload.length,
      };
    return new Promise<T>((resolve, reject) => {
      const req = this.transport.request(options, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          const status = res.statusCode ?? 0;
          if (status < 200 || status >= 300) {
            reject(new KubeApiError(status, method, path, text));
            return;
          }
          try {
            resolve((text === '' ? undefined : JSON.parse(text)) as T);
          } catch {
            reject(new KubeApiError(status, method, path, `not JSON: ${text.slice(0, 200)}`));
          }
        });
        res.on('error', reject);
      });
      req.setTimeout(REQUEST_IDLE_TIMEOUT_MS, () =>
        req.destroy(new Error(`${method} ${path}: timed out`)),
      );
      req.on('error', reject);
      req.end(payload);
    });
  }

  /**
   * A streaming GET (a watch): resolves with the response once a 2xx status is in, its body not
   * yet read; any other status rejects with a KubeApiError. From then on the caller reads it, sees
   * to its idleness, and ends it with `response.destroy()`.
   */
  async stream(path: string): Promise<http.IncomingMessage> {
    const options = await this.options('GET', path, this.watchAgent);
    return new Promise((resolve, reject) => {
      const req = this.transport.request(options, (res) => {
        const status = res.statusCode ?? 0;
        if (status >= 200 && status < 300) {
          req.setTimeout(0);
          resolve(res);
          return;
        }
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          reject(new KubeApiError(status, 'GET', path, Buffer.concat(chunks).toString('utf8'))),
        );
        res.on('error', reject);
      });
      req.setTimeout(REQUEST_IDLE_TIMEOUT_MS, () =>
        req.destroy(new Error(`GET ${path}: no answer within ${REQUEST_IDLE_TIMEOUT_MS} ms`)),
      );
      req.on('error', reject);
      req.end();
    });
  }

  close(): void {
    this.agent.destroy();
    this.watchAgent.destroy();
  }
}

/** RFC 3339 with exactly six fractional digits, as MicroTime fields require. */
export function microTime(date: Date): string {
  return date.toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
}
