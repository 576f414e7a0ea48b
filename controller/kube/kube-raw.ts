import http from 'node:http';
import https from 'node:https';
import type { KubeConfig } from '@kubernetes/client-node';

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

/**
 * A few JSON requests straight to the API server, for the calls where the generated client's
 * serializer gets in the way: Lease times are MicroTime (exactly six fractional digits, which
 * `Date#toISOString` does not produce), and merge patches of a custom resource's status.
 */
export class KubeRaw {
  private readonly kubeConfig: KubeConfig;
  private readonly server: URL;
  private readonly agent: https.Agent | http.Agent;

  constructor(kubeConfig: KubeConfig) {
    this.kubeConfig = kubeConfig;
    const cluster = kubeConfig.getCurrentCluster();
    if (cluster === null) throw new Error('the kubeconfig has no current cluster');
    this.server = new URL(cluster.server);
    // A few kept-alive connections: bursts of status writes and TokenReviews queue here instead of
    // each opening a TLS connection of its own (~0.15 MB each on the controller).
    const agentOptions = { keepAlive: true, maxSockets: 8 };
    this.agent =
      this.server.protocol === 'https:'
        ? new https.Agent(agentOptions)
        : new http.Agent(agentOptions);
  }

  async request<T>(
    method: string,
    path: string,
    body?: unknown,
    contentType = 'application/json',
  ): Promise<T> {
    const options: https.RequestOptions = {
      method,
      hostname: this.server.hostname,
      port: this.server.port,
      path: this.server.pathname.replace(/\/$/, '') + path,
      headers: { accept: 'application/json' },
    };
    await this.kubeConfig.applyToHTTPSOptions(options);
    options.agent = this.agent;
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    if (payload !== undefined)
      options.headers = {
        ...options.headers,
        'content-type': contentType,
        'content-length': payload.length,
      };
    const transport = this.server.protocol === 'https:' ? https : http;
    return new Promise<T>((resolve, reject) => {
      const req = transport.request(options, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          const status = res.statusCode ?? 0;
          if (status < 200 || status >= 300) {
            reject(new KubeApiError(status, method, path, text));
            return;
          }
          resolve((text === '' ? undefined : JSON.parse(text)) as T);
        });
        res.on('error', reject);
      });
      req.setTimeout(15_000, () => req.destroy(new Error(`${method} ${path}: timed out`)));
      req.on('error', reject);
      req.end(payload);
    });
  }

  close(): void {
    this.agent.destroy();
  }
}

/** RFC 3339 with exactly six fractional digits, as MicroTime fields require. */
export function microTime(date: Date): string {
  return date.toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
}
