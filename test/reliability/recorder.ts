/**
 * A backend that records every request it gets (method, URL, headers, body size) and answers a
 * small chat completion, or a model list on /v1/models: for checking what the sidecar forwards.
 */
import http, { type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Seen {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  bytes: number;
  /** The body when under 4 KiB, else ''. */
  body: string;
}

export interface Recorder {
  url: string;
  /** `127.0.0.1:<port>`: the Host header a request to it carries. */
  host: string;
  seen: Seen[];
  close(): Promise<void>;
}

export async function recorder(): Promise<Recorder> {
  const seen: Seen[] = [];
  const server = http.createServer((req, res) => {
    if (req.method === 'GET' && req.url === '/metrics') {
      // The sidecar's load scrape, not a request a client sent: no metrics here, not recorded.
      res.writeHead(404).end();
      return;
    }
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      seen.push({
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        bytes: body.length,
        body: body.length < 4096 ? body.toString('utf8') : '',
      });
      const answer = JSON.stringify(
        req.url?.startsWith('/v1/models')
          ? { object: 'list', data: [{ id: 'm', object: 'model', created: 0, owned_by: 'r' }] }
          : {
              id: 'r',
              object: 'chat.completion',
              choices: [
                { index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' },
              ],
            },
      );
      res.writeHead(200, {
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(answer),
      });
      res.end(answer);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    host: `127.0.0.1:${port}`,
    seen,
    close: () => {
      server.closeAllConnections();
      return new Promise((r) => server.close(() => r()));
    },
  };
}
