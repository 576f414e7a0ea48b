/**
 * A stand-in for the controller's sidecar API, for tests of a real sidecar process fed by the
 * controller (`switchyard sidecar --controller …`) without a Kubernetes API server: it streams one
 * pool's snapshots as the controller does (`snapshot` events, protocol 1) and takes the sidecar's
 * reports. What a pool file cannot express is then possible, such as a pool with no endpoint.
 * The token is not checked. Loopback only.
 */
import type { AddressInfo } from 'node:net';
import {
  reportPath,
  snapshotStreamPath,
  type PoolSnapshot,
  type SidecarReport,
} from '../crds/snapshot.ts';
import { DualHttpServer, type AnyRequest, type AnyResponse } from '../lib/dual-http-server.ts';

export class SnapshotServer {
  readonly #server: DualHttpServer;
  readonly #open = new Set<AnyResponse>();
  readonly #namespace: string;
  readonly #pool: string;
  #current: PoolSnapshot | undefined;
  url = '';
  /** Every report received, oldest first. */
  readonly reports: SidecarReport[] = [];

  private constructor(namespace: string, pool: string) {
    this.#namespace = namespace;
    this.#pool = pool;
    // HTTP/2 and HTTP/1.1, as the controller's port (the sidecar speaks HTTP/2).
    this.#server = new DualHttpServer({}, (req, res) => this.#handle(req, res));
  }

  /** Listens on a free loopback port. */
  static async start(namespace: string, pool: string): Promise<SnapshotServer> {
    const server = new SnapshotServer(namespace, pool);
    await new Promise<void>((r) => server.#server.server.listen(0, '127.0.0.1', r));
    server.url = `http://127.0.0.1:${(server.#server.server.address() as AddressInfo).port}`;
    return server;
  }

  /** Makes `snapshot` the pool's snapshot: sent to every open stream now, and to new ones. */
  publish(snapshot: PoolSnapshot): void {
    this.#current = snapshot;
    for (const res of this.#open) res.write(event(snapshot));
  }

  /** Streams open now (a sidecar connected). */
  get streams(): number {
    return this.#open.size;
  }

  async close(): Promise<void> {
    this.#server.closeAllConnections();
    await new Promise<void>((r) => this.#server.close(() => r()));
  }

  #handle(req: AnyRequest, res: AnyResponse): void {
    const path = new URL(req.url ?? '/', 'http://x').pathname;
    if (req.method === 'GET' && path === snapshotStreamPath(this.#namespace, this.#pool)) {
      res.writeHead(200, {
        'content-type': 'text/event-stream',
        'cache-control': 'no-cache',
        'x-switchyard-protocol': '1',
      });
      res.write(': connected\n\n'); // the headers go now, as the controller's do
      this.#open.add(res);
      res.on('close', () => this.#open.delete(res));
      if (this.#current !== undefined) res.write(event(this.#current));
      return;
    }
    if (req.method === 'POST' && path === reportPath(this.#namespace, this.#pool)) {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        this.reports.push(JSON.parse(Buffer.concat(chunks).toString('utf8')) as SidecarReport);
        res.writeHead(204).end();
      });
      return;
    }
    res.writeHead(404, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: { code: 'pool_not_found', message: `no ${path}` } }));
  }
}

function event(snapshot: PoolSnapshot): string {
  return `event: snapshot\nid: ${snapshot.version}\ndata: ${JSON.stringify(snapshot)}\n\n`;
}
