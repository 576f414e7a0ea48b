/** Test helpers: a stand-in API server on loopback and a client of it. */
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type { KubeClientConfig } from './kube-config.ts';
import { KubeRaw } from './kube-raw.ts';

/** A configuration without TLS or credentials, for a plain HTTP server. */
export function plainConfig(server: string): KubeClientConfig {
  return {
    server: new URL(server),
    source: 'test',
    fallback: undefined,
    apply: () => Promise.resolve(),
  };
}

export interface FakeApiServer {
  raw: KubeRaw;
  url: string;
  /** Every request's URL (path and query), in order. */
  requests: string[];
  /** Ends every open connection (as an API server going away does). */
  cutConnections(): void;
  close(): Promise<void>;
}

/** An HTTP server on 127.0.0.1 answering with `handler`, and a KubeRaw talking to it. */
export async function fakeApiServer(
  handler: (req: http.IncomingMessage, res: http.ServerResponse) => void,
): Promise<FakeApiServer> {
  const sockets = new Set<Socket>();
  const requests: string[] = [];
  const server = http.createServer((req, res) => {
    requests.push(req.url ?? '');
    handler(req, res);
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const raw = new KubeRaw(plainConfig(url));
  return {
    raw,
    url,
    requests,
    cutConnections: () => {
      for (const socket of sockets) socket.destroy();
    },
    close: async () => {
      raw.close();
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
